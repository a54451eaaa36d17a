"""The MCU-row index (issue 35): decoding with ``index=`` gives the pixels of decoding without,
bit for bit, for every sampling, Huffman table kind, mode, DCT scale and resized crop, on
generated and real photos; the index is small; files it cannot serve, and damaged, stale,
foreign or hostile indexes, fall back to the ordinary decode (counted) with the same pixels;
bad arguments raise naming the value."""

from __future__ import annotations

import glob
import importlib.util
import io
import pathlib
import random

import numpy as np
import pytest
import torch
from PIL import Image

import custom_op
from custom_op._core import _native
from jpegenc import encode
from synthetic import make_photo

SAMPLINGS = ["4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "gray"]
MODES = ["rgb", "gray", "unchanged"]
#: Odd sizes, so that the last MCU row and column are partial.
SIZES = [(203, 157), (97, 261)]
#: The index is this small a share of its file, at most (the issue: about 1% or less).
MAX_INDEX_SHARE = 0.02


def _generated(sampling: str, optimize: bool, size: tuple[int, int], seed: int) -> bytes:
    return encode(make_photo(*size, seed), sampling=sampling, quality=85, optimize=optimize)


GENERATED = {f"{sampling.replace(':', '')}-{'opt' if optimize else 'std'}-{h}x{w}":
             (sampling, optimize, (h, w))
             for sampling in SAMPLINGS for optimize in (False, True) for h, w in SIZES}


@pytest.fixture(scope="module")
def generated() -> dict[str, bytes]:
    return {key: _generated(*recipe, seed=n) for n, (key, recipe) in enumerate(GENERATED.items())}


def _real_photo_paths() -> list[str]:
    """Camera photos on this machine: Debian's wallpapers, scikit-learn's and matplotlib's
    sample images, whichever are installed."""
    paths = sorted(glob.glob("/usr/share/backgrounds/*.jpg"))
    for package, folder, names in (("sklearn", "datasets/images", ("china.jpg", "flower.jpg")),
                                   ("matplotlib", "mpl-data/sample_data", ("grace_hopper.jpg",))):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin is not None:
            root = pathlib.Path(spec.origin).parent / folder
            paths += [str(root / name) for name in names if (root / name).is_file()]
    return paths


def _pillow_photo() -> bytes:
    """A photo-like image written by Pillow (its own Huffman tables, 4:2:0), always present."""
    buffer = io.BytesIO()
    Image.fromarray(make_photo(533, 800, seed=35)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


REAL = {pathlib.Path(path).stem: path for path in _real_photo_paths()}
REAL["pillow-800x533"] = None


def _real(key: str) -> bytes:
    path = REAL[key]
    return _pillow_photo() if path is None else pathlib.Path(path).read_bytes()


def _windows(height: int, width: int, seed: int, count: int = 6) -> list[tuple[int, int, int, int]]:
    """A window at the top (which the index does not need), one at the bottom right, one
    pixel high, ones at the left edge, in the middle (one pixel wide) and over the last,
    partial MCU column, and random ones."""
    rng = random.Random(seed)
    half = height // 2
    windows = [(0, 0, min(height, 20), min(width, 30)), (height - 17, width - 23, 17, 23),
               (half, 0, 1, width), (half, 0, height // 4, width // 5),
               (half, width // 2 + 3, height // 4, 1), (half, width - 5, height // 4, 5)]
    for _ in range(count):
        y, x = rng.randrange(height), rng.randrange(width)
        windows.append((y, x, rng.randint(1, height - y), rng.randint(1, width - x)))
    return windows


def _indexed_count() -> int:
    return custom_op.index_stats()["indexed"]


def _check_exact(data: bytes, index: bytes, seed: int, modes=MODES) -> None:
    """Crops and resized crops with the index equal those without it, bit for bit; a window
    below the first rows is served from the index."""
    height, width, _ = custom_op.jpeg_size(data)
    for mode in modes:
        for window in _windows(height, width, seed):
            expected = custom_op.decode_and_crop_jpeg(data, *window, mode=mode)
            got = custom_op.decode_and_crop_jpeg(data, *window, mode=mode, index=index)
            assert torch.equal(got, expected), (mode, window)
    deep = (height * 3 // 5, width // 4, height // 4, width // 2)
    narrow = (height // 3, width * 2 // 5, height // 3, width // 5)
    for window in (deep, narrow):
        before = _indexed_count()
        custom_op.decode_and_crop_jpeg(data, *window, index=index)
        assert _indexed_count() == before + 1, f"the index did not serve {window}"
    for scale_num in range(1, 9):
        for y, x, h, w in (deep, (height // 3, 0, height - height // 3, width)):
            out = (max(1, h * scale_num // 10), max(1, w * scale_num // 9))
            arguments = (y, x, h, w, *out, scale_num, True, 0, True, 1 << 28, 256)
            expected = _native.decode_and_resized_crop_jpeg(data, *arguments)
            got = _native.decode_and_resized_crop_jpeg(data, *arguments, index=_native.as_tensor(index))
            assert torch.equal(got, expected), (scale_num, (y, x, h, w), out)


@pytest.mark.parametrize("key", list(GENERATED))
def test_generated_files_decode_the_same_with_the_index(generated, key):
    data = generated[key]
    index = custom_op.jpeg_index(data)
    assert index is not None
    assert custom_op.jpeg_index(data) == index
    _check_exact(data, index, seed=len(data))


@pytest.mark.parametrize("key", list(REAL))
def test_real_photos_decode_the_same_with_the_index(key):
    data = _real(key)
    index = custom_op.jpeg_index(data)
    if index is None:  # A camera file may be progressive or carry restart markers.
        assert custom_op.seekable(data) or _is_progressive(data), key
        return
    height, width, _ = custom_op.jpeg_size(data)
    share = len(index) / len(data)
    # The report: bytes of index per file, and per MCU row (the entries).
    print(f"{key}: {width}x{height}, file {len(data)} B, index {len(index)} B ({share:.2%})")
    assert share < MAX_INDEX_SHARE, (len(index), len(data))
    _check_exact(data, index, seed=7, modes=["rgb"])
    # RandomResizedCrop's calls, with the public function and its automatic scale.
    rng = random.Random(3)
    for _ in range(8):
        h, w = rng.randint(height // 4, height), rng.randint(width // 4, width)
        y, x = rng.randint(0, height - h), rng.randint(0, width - w)
        expected = custom_op.decode_and_resized_crop_jpeg(data, y, x, h, w, 224)
        got = custom_op.decode_and_resized_crop_jpeg(data, y, x, h, w, 224, index=index)
        assert torch.equal(got, expected), (y, x, h, w)


def _is_progressive(data: bytes) -> bool:
    return b"\xff\xc2" in data[:data.find(b"\xff\xda")]


def test_the_index_is_small(generated):
    """At most a hundredth of a 500 x 375 photo (the finest spacing within it), not far below."""
    data = encode(make_photo(375, 500, 5), sampling="4:2:0", quality=90)
    index = custom_op.jpeg_index(data)
    assert len(data) // 200 < len(index) <= len(data) // 100
    assert len(index) < MAX_INDEX_SHARE * len(data)


@pytest.mark.parametrize("options", [dict(progressive=True), dict(arithmetic=True),
                                     dict(restart_interval=2), dict(restart_rows=1)],
                         ids=["progressive", "arithmetic", "restart-interval", "restart-rows"])
def test_files_the_index_cannot_serve(generated, options):
    data = encode(make_photo(120, 160, 9), sampling="4:2:0", **options)
    assert custom_op.jpeg_index(data) is None
    # Handed another file's index, the decode refuses it (or has no use for it) and the pixels
    # are those of the ordinary decode.
    other = custom_op.jpeg_index(generated["420-std-203x157"])
    before = custom_op.index_stats()
    got = custom_op.decode_and_crop_jpeg(data, 70, 10, 40, 100, index=other)
    assert torch.equal(got, custom_op.decode_and_crop_jpeg(data, 70, 10, 40, 100))
    after = custom_op.index_stats()
    assert after["indexed"] == before["indexed"]
    assert sum(after.values()) == sum(before.values()) + (0 if options.get("restart_interval") or
                                                          options.get("restart_rows") else 1)


def _refused(data: bytes, index, window=(120, 20, 50, 100)) -> None:
    """The decode with ``index`` is not served from it and equals the ordinary decode."""
    before = _indexed_count()
    got = custom_op.decode_and_crop_jpeg(data, *window, index=index)
    assert _indexed_count() == before
    assert torch.equal(got, custom_op.decode_and_crop_jpeg(data, *window))


def test_damaged_indexes_are_refused(generated):
    data = generated["420-opt-203x157"]
    index = custom_op.jpeg_index(data)
    refused = custom_op.index_stats()["refused"]
    for position in range(len(index)):
        damaged = bytearray(index)
        damaged[position] ^= 1 << (position % 8)
        _refused(data, bytes(damaged))
    for length in (1, 4, 5, 13, len(index) // 2, len(index) - 8, len(index) - 1):
        _refused(data, index[:length])
    _refused(data, index + b"\x00")
    assert custom_op.index_stats()["refused"] == refused + len(index) + 8


def test_a_stale_or_foreign_index_is_refused(generated):
    data = generated["422-std-97x261"]
    index = custom_op.jpeg_index(data)
    # The same image re-encoded at another quality, and the same file with one data byte
    # changed: same geometry, other data.
    requantized = encode(make_photo(97, 261, 0), sampling="4:2:2", quality=80)
    _refused(requantized, index, window=(60, 10, 30, 100))
    edited = bytearray(data)
    edited[len(data) * 2 // 3] ^= 0x10
    before = _indexed_count()
    custom_op.decode_and_crop_jpeg(bytes(edited), 60, 10, 30, 100, index=index, strict=False)
    assert _indexed_count() == before
    _refused(generated["444-std-203x157"], custom_op.jpeg_index(generated["440-std-203x157"]))


def test_hostile_indexes_never_crash(generated):
    """Random bytes, a valid header with random entries, and huge varints: each decode either
    takes the ordinary path with its pixels or (for a forged, well-sealed index) succeeds."""
    data = generated["411-std-203x157"]
    index = custom_op.jpeg_index(data)
    rng = random.Random(35)
    for _ in range(40):
        _refused(data, bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))))
        _refused(data, index[:24] + bytes(rng.randrange(256) for _ in range(len(index) - 24)))
    _refused(data, b"CJMI\x01" + b"\xff" * 200)
    _refused(data, b"CJMI\x02" + index[5:])  # the previous format's version: its checksum fails


@pytest.mark.parametrize("index, error, message", [
    ("CJMI", TypeError, "index must be bytes"),
    (17, TypeError, "index must be a 1-D uint8"),
    (b"", ValueError, "index is empty"),
    (torch.zeros(8, dtype=torch.float32), TypeError, "index must be a uint8 tensor"),
    (torch.zeros(2, 4, dtype=torch.uint8), ValueError, "index must be a 1-D tensor"),
    (np.zeros(4, dtype=np.int32), TypeError, "index must hold uint8 bytes"),
], ids=["str", "int", "empty", "float-tensor", "2d-tensor", "int32-array"])
def test_bad_index_arguments_raise_naming_it(generated, index, error, message):
    data = generated["420-std-97x261"]
    with pytest.raises(error, match=message):
        custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 8, index=index)
    with pytest.raises(error, match=message):
        custom_op.decode_and_resized_crop_jpeg(data, 0, 0, 64, 64, 16, index=index)


def test_every_buffer_kind_serves_as_index(generated):
    data = generated["420-std-203x157"]
    index = custom_op.jpeg_index(data)
    expected = custom_op.decode_and_crop_jpeg(data, 150, 9, 40, 60)
    for kind in (bytes, bytearray, memoryview, lambda b: np.frombuffer(b, dtype=np.uint8),
                 lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8)):
        before = _indexed_count()
        got = custom_op.decode_and_crop_jpeg(data, 150, 9, 40, 60, index=kind(index))
        assert torch.equal(got, expected) and _indexed_count() == before + 1


def test_the_operators_take_the_index(generated):
    """The public torch.ops operators (what torch.compile traces) pass the index on."""
    data = torch.frombuffer(bytearray(generated["444-opt-203x157"]), dtype=torch.uint8)
    index = torch.frombuffer(bytearray(custom_op.jpeg_index(data)), dtype=torch.uint8)
    ops = torch.ops.custom_op_jpeg
    before = _indexed_count()
    got = ops.decode_and_crop_jpeg(data, 130, 5, 50, 90, 0, True, 1 << 28, 256, True, False,
                                   256 << 20, index=index)
    assert torch.equal(got, custom_op.decode_and_crop_jpeg(data, 130, 5, 50, 90))
    resized = ops.decode_and_resized_crop_jpeg(data, 100, 0, 100, 157, 25, 40, 0, True, 0, True,
                                               1 << 28, 256, True, False, 256 << 20, index=index)
    assert torch.equal(resized, custom_op.decode_and_resized_crop_jpeg(data, 100, 0, 100, 157,
                                                                       (25, 40)))
    assert _indexed_count() == before + 2


def test_index_stats_names_every_outcome():
    stats = custom_op.index_stats()
    assert list(stats) == ["indexed", "unneeded", "not_indexable", "refused", "cut_failed",
                           "cut_decode_failed"]
    assert all(isinstance(count, int) and count >= 0 for count in stats.values())


def test_jpeg_index_of_a_broken_file_raises():
    with pytest.raises(custom_op.JpegDecodeError, match="jpeg_index"):
        custom_op.jpeg_index(b"\xff\xd8\xff\xe0garbage")
    # A truncated scan cannot be indexed (its rows cannot be found).
    data = encode(make_photo(64, 64, 1), sampling="4:2:0")
    assert custom_op.jpeg_index(data[: len(data) * 2 // 3]) is None
