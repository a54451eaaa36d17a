"""Seeking with restart markers: decoding only the segments that cover a window.

The seek path must give exactly the pixels of the ordinary path (the same
window of a full decode) for every window, including every image edge, MCU
and segment boundary, in every mode, for prepared copies of every corpus file
(every sampling, gray, CMYK, YCCK, RGB, progressive inputs, odd sizes), and
through the resized and batched calls. Files whose markers are damaged
(a marker flipped to another number, one missing, all renumbered, the data
cut between two segments) must never give pixels that differ from the ordinary
path: seeking falls back to it.

Which cases: the prepared copy of every corpus file is compared in one mode, chosen so that
every mode meets every sampling, coding, colour space and content (tests/_speeds.py,
corpus_pairs); the other tests take every mode. The C++ core test (fuzz/core_test.cc, under
ASan/UBSan in .ci/run) decodes the prepared copy of every seed file in every mode, through its
windows with and without seeking, and copies with damaged markers: the exhaustive set.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch

import custom_op
from _windows import mismatches, report, windows_for
from synthetic import make_photo
from jpegenc import encode

if TYPE_CHECKING:
    from conftest import JpegCase

MODES = ("rgb", "gray", "unchanged")


def full_decode(data: bytes, mode: str = "rgb") -> torch.Tensor:
    height, width, _ = custom_op.jpeg_size(data)
    return custom_op.decode_and_crop_jpeg(data, 0, 0, height, width, mode=mode, seek=False)


def scan_data_offset(data: bytes) -> int:
    """The offset of the first entropy-coded byte: just after the SOS segment."""
    pos = 2
    while data[pos + 1] != 0xDA:
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    return pos + 2 + int.from_bytes(data[pos + 2:pos + 4], "big")


def restart_marker_offsets(data: bytes) -> list[int]:
    """Offsets of the RSTn markers in the entropy-coded data of a one-scan file."""
    pos = scan_data_offset(data)
    offsets = []
    while pos + 1 < len(data):
        if data[pos] == 0xFF and 0xD0 <= data[pos + 1] <= 0xD7:
            offsets.append(pos)
        pos += 1
    return offsets


@pytest.fixture(scope="module")
def photo() -> bytes:
    """A prepared 4:2:0 photo of 6 x 10 segments (4 MCUs each)."""
    data = custom_op.prepare_jpeg(encode(make_photo(96, 640, seed=5), sampling="4:2:0",
                                         quality=90))
    assert custom_op._C.restart_geometry(data)[:3] == (4, 40, 6)
    return data


# ------------------------------------------------------------------ exactness


@pytest.mark.corpus_pairs(mode=MODES)
def test_seek_equals_window_of_full_decode(corpus_case: JpegCase, mode: str) -> None:
    data = custom_op.prepare_jpeg(corpus_case.data)
    full = full_decode(data, mode)

    def decode(data, y, x, h, w):
        return custom_op.decode_and_crop_jpeg(data, y, x, h, w, mode=mode)

    windows = windows_for(corpus_case.id, corpus_case.height, corpus_case.width)
    failures = mismatches(data, windows, full, decode)
    assert not failures, report(failures, len(windows))


def segment_windows(height: int, width: int, segment_width: int, mcu_height: int):
    """Windows whose edges sit on, and one pixel beside, segment and MCU-row edges."""
    xs = sorted({max(0, min(width - 1, k * segment_width + d))
                 for k in range(width // segment_width + 1) for d in (-2, -1, 0, 1)})
    ys = sorted({max(0, min(height - 1, k * mcu_height + d))
                 for k in range(height // mcu_height + 1) for d in (-1, 0, 1)})
    for y in ys:
        for x in xs:
            for h, w in ((1, 1), (2, 3), (mcu_height + 1, segment_width + 2)):
                yield y, x, min(h, height - y), min(w, width - x)
            yield y, x, height - y, width - x


@pytest.mark.parametrize("mode", MODES)
def test_seek_at_every_segment_edge(photo: bytes, mode: str) -> None:
    full = full_decode(photo, mode)
    windows = list(segment_windows(96, 640, segment_width=64, mcu_height=16))

    def decode(data, y, x, h, w):
        return custom_op.decode_and_crop_jpeg(data, y, x, h, w, mode=mode)

    failures = mismatches(photo, windows, full, decode)
    assert not failures, report(failures, len(windows))


@pytest.mark.parametrize("sampling", ["4:4:4", "4:2:2", "4:4:0", "4:1:1", "gray"])
def test_seek_at_segment_edges_for_every_sampling(sampling: str) -> None:
    data = encode(make_photo(75, 333, seed=9), sampling=sampling, quality=85)
    data = custom_op.prepare_jpeg(data)
    interval, _, _, mcu_height, mcu_width = custom_op._C.restart_geometry(data)
    full = full_decode(data)
    windows = list(segment_windows(75, 333, interval * mcu_width, mcu_height))
    failures = mismatches(data, windows, full, custom_op.decode_and_crop_jpeg)
    assert not failures, report(failures, len(windows))


def test_seek_equals_ordinary_path_on_random_windows(photo: bytes) -> None:
    rng = np.random.default_rng(zlib.crc32(b"seek"))
    for _ in range(300):
        h, w = int(rng.integers(1, 97)), int(rng.integers(1, 641))
        y, x = int(rng.integers(0, 97 - h)), int(rng.integers(0, 641 - w))
        sought = custom_op.decode_and_crop_jpeg(photo, y, x, h, w)
        ordinary = custom_op.decode_and_crop_jpeg(photo, y, x, h, w, seek=False)
        assert torch.equal(sought, ordinary), (y, x, h, w)


@pytest.mark.parametrize("size", [(24, 32), (64, 64), (200, 300)])
def test_resized_seek_equals_ordinary_path(photo: bytes, size: tuple[int, int]) -> None:
    rng = np.random.default_rng(size[0])
    for _ in range(40):
        h, w = int(rng.integers(8, 97)), int(rng.integers(8, 641))
        y, x = int(rng.integers(0, 97 - h)), int(rng.integers(0, 641 - w))
        for mode in MODES:
            sought = custom_op.decode_and_resized_crop_jpeg(photo, y, x, h, w, size, mode=mode)
            ordinary = custom_op.decode_and_resized_crop_jpeg(photo, y, x, h, w, size, mode=mode,
                                                              seek=False)
            assert torch.equal(sought, ordinary), (y, x, h, w, mode)


@pytest.mark.corpus(lambda recipe: recipe["height"] >= 33 and recipe["width"] >= 47)
def test_resized_seek_on_corpus(corpus_case: JpegCase) -> None:
    data = custom_op.prepare_jpeg(corpus_case.data)
    h, w = corpus_case.height, corpus_case.width
    for y, x, ch, cw in [(1, 1, h - 2, w - 2), (h // 3, w // 4, h // 2, w // 2), (0, w // 2, h, w - w // 2)]:
        for size in [(8, 8), (ch // 2 or 1, cw // 2 or 1), (ch, cw)]:
            sought = custom_op.decode_and_resized_crop_jpeg(data, y, x, ch, cw, size)
            ordinary = custom_op.decode_and_resized_crop_jpeg(data, y, x, ch, cw, size, seek=False)
            assert torch.equal(sought, ordinary), (y, x, ch, cw, size)


def test_batch_seek_equals_single_calls(photo: bytes, corpus_by_id) -> None:
    other = custom_op.prepare_jpeg(corpus_by_id["422-prog-q60-120x200"].data)
    datas = [photo, other, photo, other]
    boxes = [(17, 100, 60, 200), (30, 40, 50, 60), (0, 0, 96, 640), (119, 199, 1, 1)]
    singles = [custom_op.decode_and_crop_jpeg(d, *b, seek=False) for d, b in zip(datas, boxes)]
    batch = custom_op.decode_and_crop_jpeg_batch(datas, boxes, num_threads=2)
    assert all(torch.equal(a, b) for a, b in zip(batch, singles))
    resized = custom_op.decode_and_crop_jpeg_batch(datas, boxes, size=32, num_threads=2)
    for data, box, result in zip(datas, boxes, resized):
        assert torch.equal(result, custom_op.decode_and_resized_crop_jpeg(data, *box, 32, seek=False))


# ------------------------------------------- seeking skips what it does not read


def shorten_first_segment(data: bytes) -> bytes:
    """The file with the second half of its first segment's data cut out.

    The markers are intact, but libjpeg runs out of data in that segment,
    warns, and (strict) raises.
    """
    first_marker = restart_marker_offsets(data)[0]
    half = (first_marker - scan_data_offset(data)) // 2
    return data[:first_marker - half] + data[first_marker:]


def test_seeking_reads_only_the_covering_segments(photo: bytes) -> None:
    """Damage in the top-left segment: the ordinary path reads it, seeking does not.

    In strict mode the ordinary path raises on the damaged data above the
    window, while the seek path, which never reads that segment, returns the
    window's pixels, equal to those of the undamaged file.
    """
    damaged = shorten_first_segment(photo)
    window = (48, 300, 40, 200)
    with pytest.raises(custom_op.JpegDecodeError):
        custom_op.decode_and_crop_jpeg(damaged, *window, seek=False)
    sought = custom_op.decode_and_crop_jpeg(damaged, *window)
    assert torch.equal(sought, custom_op.decode_and_crop_jpeg(photo, *window, seek=False))


# ------------------------------------------------------------ damaged markers


def flip_one_marker(data: bytes) -> bytes:
    offsets = restart_marker_offsets(data)
    damaged = bytearray(data)
    target = offsets[len(offsets) // 3]
    damaged[target + 1] = 0xD0 + (damaged[target + 1] - 0xD0 + 3) % 8
    return bytes(damaged)


def drop_one_marker(data: bytes) -> bytes:
    target = restart_marker_offsets(data)[len(restart_marker_offsets(data)) // 2]
    return data[:target] + data[target + 2:]


def renumber_all_markers(data: bytes) -> bytes:
    damaged = bytearray(data)
    for offset in restart_marker_offsets(data):
        damaged[offset + 1] = 0xD0 + (damaged[offset + 1] - 0xD0 + 1) % 8
    return bytes(damaged)


def truncate_between_segments(data: bytes) -> bytes:
    offsets = restart_marker_offsets(data)
    return data[:offsets[len(offsets) // 2] + 2]


def truncate_between_segments_with_eoi(data: bytes) -> bytes:
    return truncate_between_segments(data) + b"\xff\xd9"


DAMAGE = {
    "flipped": flip_one_marker,
    "missing": drop_one_marker,
    "renumbered": renumber_all_markers,
    "truncated": truncate_between_segments,
    "truncated-eoi": truncate_between_segments_with_eoi,
}


def damage_windows() -> list[tuple[int, int, int, int]]:
    """Windows above, across and below the damage, left and right of it."""
    windows = [(y, x, h, w) for y in (0, 17, 40, 63, 80) for x in (0, 130, 300, 577)
               for h, w in ((1, 1), (16, 63), (96 - y, 640 - x))]
    return [(y, x, min(h, 96 - y), min(w, 640 - x)) for y, x, h, w in windows]


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_markers_give_the_ordinary_pixels(photo: bytes, damage: str) -> None:
    damaged = DAMAGE[damage](photo)
    for window in damage_windows():
        ordinary = custom_op.decode_and_crop_jpeg(damaged, *window, strict=False, seek=False)
        sought = custom_op.decode_and_crop_jpeg(damaged, *window, strict=False)
        assert torch.equal(sought, ordinary), window


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_markers_never_give_wrong_pixels_in_strict_mode(photo: bytes, damage: str) -> None:
    """Strict seeking either raises or returns the undamaged file's pixels."""
    damaged = DAMAGE[damage](photo)
    for window in damage_windows():
        try:
            sought = custom_op.decode_and_crop_jpeg(damaged, *window)
        except custom_op.JpegDecodeError:
            continue
        assert torch.equal(sought, custom_op.decode_and_crop_jpeg(photo, *window, seek=False)), window


def test_seek_flag_must_be_a_bool(photo: bytes) -> None:
    with pytest.raises(TypeError, match="seek"):
        custom_op.decode_and_crop_jpeg(photo, 0, 0, 8, 8, seek="yes")
