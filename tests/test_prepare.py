"""custom_op.prepare_jpeg and seekable: the lossless rewrite of one file.

prepare_jpeg copies the DCT coefficients, so every pixel of the result must
equal the input's, in every mode, for every file of the corpus: every
sampling, gray, CMYK, YCCK, RGB, progressive and arithmetic-coded inputs, and
sizes that are not multiples of the MCU. The result must be one baseline scan
whose restart interval divides the MCUs per row (seekable), and keep the
metadata segments.
"""

from __future__ import annotations

import io
import pathlib
import statistics
from typing import TYPE_CHECKING

import pytest
import torch
from PIL import Image

import custom_op
from custom_op import _C
from custom_op._decode._prepared import prepare_jpeg_with_info
from custom_op.prepare import layout
from synthetic import make_photo
from jpegenc import encode

if TYPE_CHECKING:
    from conftest import JpegCase

MODES = ("rgb", "gray", "unchanged")


def full_decode(data: bytes, mode: str) -> torch.Tensor:
    height, width, _ = custom_op.jpeg_size(data)
    return custom_op.decode_and_crop_jpeg(data, 0, 0, height, width, mode=mode, seek=False)


def frame_marker(data: bytes) -> int:
    """The SOFn marker byte of a file (0xC0 baseline, 0xC2 progressive, ...)."""
    pos = 2
    while pos + 4 <= len(data):
        marker = data[pos + 1]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return marker
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    raise AssertionError("no frame header")


@pytest.mark.parametrize("mode", MODES)
def test_prepared_file_decodes_to_the_same_pixels(corpus_case: JpegCase, mode: str) -> None:
    prepared = custom_op.prepare_jpeg(corpus_case.data)
    assert torch.equal(full_decode(prepared, mode), full_decode(corpus_case.data, mode))


def test_prepared_file_is_one_seekable_baseline_scan(corpus_case: JpegCase) -> None:
    result = prepare_jpeg_with_info(corpus_case.data)
    assert frame_marker(result.data) in (0xC0, 0xC1), "the output is not sequential Huffman"
    assert result.was_progressive == (frame_marker(corpus_case.data) in (0xC2, 0xC6, 0xCA))
    geometry = _C.restart_geometry(result.data)
    assert geometry is not None, "prepare_jpeg wrote a file decode cannot seek in"
    interval, mcus_per_row, _, _, _ = geometry
    assert interval == result.restart_interval
    assert mcus_per_row % interval == 0
    assert custom_op.seekable(result.data)


def test_preparing_twice_changes_nothing_more(corpus_by_id) -> None:
    once = custom_op.prepare_jpeg(corpus_by_id["420-prog-q85-120x200-noise"].data)
    assert custom_op.prepare_jpeg(once) == once


def test_photos_do_not_grow() -> None:
    """The issue's target: prepared photos no larger than their inputs (median)."""
    ratios = []
    for seed in range(6):
        buffer = io.BytesIO()
        Image.fromarray(make_photo(375, 500, seed)).save(buffer, format="JPEG", quality=90)
        data = buffer.getvalue()
        ratios.append(len(custom_op.prepare_jpeg(data)) / len(data))
    assert statistics.median(ratios) <= 1.0, f"size ratios {ratios}"


def test_metadata_segments_are_kept() -> None:
    buffer = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 degrees.
    icc = b"\0" * 128 + b"an ICC profile stand-in"
    Image.fromarray(make_photo(64, 80, 1)).save(buffer, format="JPEG", exif=exif, icc_profile=icc,
                                                comment=b"hello")
    prepared = Image.open(io.BytesIO(custom_op.prepare_jpeg(buffer.getvalue())))
    assert prepared.getexif()[0x0112] == 6
    assert prepared.info.get("icc_profile") == icc
    assert prepared.info.get("comment") == b"hello"


def test_non_seekable_files_are_reported_so() -> None:
    pixels = make_photo(48, 64, 3)
    assert not custom_op.seekable(encode(pixels, sampling="4:2:0"))  # no markers
    assert not custom_op.seekable(encode(pixels, sampling="4:2:0", progressive=True,
                                         restart_rows=1))
    # 64 px / 16 = 4 MCUs per row: an interval of 3 does not divide it.
    assert not custom_op.seekable(encode(pixels, sampling="4:2:0", restart_interval=3))
    assert custom_op.seekable(encode(pixels, sampling="4:2:0", restart_interval=2))
    assert custom_op.seekable(encode(pixels, sampling="4:2:0", restart_rows=1))


@pytest.mark.parametrize("data, message", [
    (b"", "Empty input file"),
    (b"\x89PNG\r\n\x1a\n" + b"\0" * 64, "Not a JPEG"),
])
def test_unreadable_input_raises_decode_error(data: bytes, message: str) -> None:
    with pytest.raises(custom_op.JpegDecodeError, match=message):
        custom_op.prepare_jpeg(data)


def test_damaged_input_is_refused_not_baked_in(corpus_by_id) -> None:
    data = corpus_by_id["420-base-q90-120x200"].data
    with pytest.raises(custom_op.JpegDecodeError, match="prepare refuses damaged data") as error:
        custom_op.prepare_jpeg(data[: len(data) // 2])
    assert "strict" not in str(error.value), "prepare_jpeg has no strict argument to suggest"


def test_limits_are_enforced(corpus_by_id) -> None:
    data = corpus_by_id["420-prog-q85-120x200-noise"].data
    with pytest.raises(custom_op.JpegDecodeError, match="max_pixels"):
        custom_op.prepare_jpeg(data, max_pixels=120 * 200 - 1)
    with pytest.raises(custom_op.JpegDecodeError, match="max_scans"):
        custom_op.prepare_jpeg(data, max_scans=2)
    with pytest.raises(ValueError, match="max_scans"):
        custom_op.prepare_jpeg(data, max_scans=0)
    assert custom_op.prepare_jpeg(data, max_pixels=120 * 200)


def first_scans_only(data: bytes, scans: int) -> bytes:
    """A progressive file ended (validly, with EOI) after its first `scans` scans."""
    starts, pos = [], 2
    while pos + 4 <= len(data):
        marker = data[pos + 1]
        if marker == 0xDA:
            starts.append(pos)
            pos = data.find(b"\xff", pos + 2)
            while data[pos + 1] == 0x00 or 0xD0 <= data[pos + 1] <= 0xD7:
                pos = data.find(b"\xff", pos + 2)
            continue
        if marker == 0xD9:
            break
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    assert len(starts) > scans
    return data[:starts[scans]] + b"\xff\xd9"


def test_unfinished_progressive_file_is_refused() -> None:
    """libjpeg smooths blocks whose coefficients never arrived; a baseline copy would not.

    Found by fuzz/core_test.cc on fuzz/regressions/progressive-4-of-10-scans-*:
    the copy's pixels differed. Such files are refused (and the CLI copies them).
    """
    data = first_scans_only(encode(make_photo(64, 96, 4), sampling="4:2:0", progressive=True), 4)
    full_decode(data, "rgb")  # a valid file that decodes
    with pytest.raises(custom_op.JpegDecodeError, match="smooths such blocks"):
        custom_op.prepare_jpeg(data)


def test_segment_width_sets_the_restart_interval() -> None:
    data = encode(make_photo(64, 640, 8), sampling="4:2:0")  # 40 MCUs of 16 px per row
    narrow = prepare_jpeg_with_info(data, segment_width=32)
    wide = prepare_jpeg_with_info(data, segment_width=640)
    assert (narrow.restart_interval, wide.restart_interval) == (2, 40)
    assert torch.equal(full_decode(narrow.data, "rgb"), full_decode(wide.data, "rgb"))
    with pytest.raises(ValueError, match="segment_width"):
        custom_op.prepare_jpeg(data, segment_width=0)


def test_seekable_raises_for_what_is_not_a_jpeg() -> None:
    with pytest.raises(custom_op.JpegDecodeError, match=r"^seekable\(\): Not a JPEG"):
        custom_op.seekable(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)


def test_wrong_input_type_raises_type_error() -> None:
    with pytest.raises(TypeError, match="data"):
        custom_op.prepare_jpeg("not bytes")


def test_a_colour_marker_between_the_scans_is_refused() -> None:
    """A JFIF marker after the first scan can go neither into the copy nor away (fuzzer finding).

    The file is RGB (Adobe marker, transform 0); libjpeg chose that at the
    header, before the JFIF marker between the scans. In the copy's header the
    JFIF marker would make every decoder read the samples as YCbCr; it used to
    be left out, which lost it (and --verify now compares metadata).
    """
    data = (pathlib.Path(__file__).resolve().parent.parent / "fuzz" / "regressions" /
            "late-jfif-marker-changes-colour-space.jpg").read_bytes()
    with pytest.raises(custom_op.JpegDecodeError, match="a JFIF or Adobe marker after the first"):
        custom_op.prepare_jpeg(data)


def test_a_jfif_thumbnail_is_kept() -> None:
    """The source's JFIF marker is copied as it is; libjpeg's own has no thumbnail."""
    buffer = io.BytesIO()
    Image.fromarray(make_photo(32, 48, 1)).save(buffer, format="JPEG")
    data = buffer.getvalue()
    assert data[2:4] == b"\xff\xe0" and data[6:11] == b"JFIF\0"
    end = 4 + int.from_bytes(data[4:6], "big")
    jfif = data[6:18] + bytes([1, 1]) + b"\x10\x20\x30"  # a 1 x 1 RGB thumbnail
    data = data[:2] + b"\xff\xe0" + (len(jfif) + 2).to_bytes(2, "big") + jfif + data[end:]
    prepared = custom_op.prepare_jpeg(data)
    assert prepared[:4 + len(jfif) + 2] == data[:4 + len(jfif) + 2]
    assert layout.compare(data, prepared) is None
    assert torch.equal(full_decode(prepared, "rgb"), full_decode(data, "rgb"))


def multi_picture_file(first: bytes, second: bytes) -> bytes:
    """A primary JPEG followed by a second one and a trailer, as MPF files, gain maps and motion
    photos are laid out (their offsets point past the first image's end-of-image marker)."""
    return first + second + b"MotionPhoto_Data" + bytes(range(256)) * 4


@pytest.mark.parametrize("tail", ["second-image-and-bytes", "two-zero-bytes", "one-byte"])
def test_data_after_the_end_of_image_is_refused(tail: str) -> None:
    """It was dropped: 93,883 -> 60,899 bytes, reported prepared. A rewrite of another length
    cannot keep it either (MPF offsets would point at the wrong bytes), so it is refused."""
    first, second = encode(make_photo(48, 64, 1)), encode(make_photo(32, 40, 2))
    data = {"second-image-and-bytes": multi_picture_file(first, second),
            "two-zero-bytes": first + b"\0\0", "one-byte": first + b"x"}[tail]
    with pytest.raises(custom_op.JpegDecodeError,
                       match=r"^prepare_jpeg\(\): data follows the end-of-image marker"):
        custom_op.prepare_jpeg(data)
    assert custom_op.prepare_jpeg(first)  # the image alone is prepared


def test_layout_check_accepts_every_prepared_corpus_file(corpus_case: JpegCase) -> None:
    """--verify's comparison of metadata and trailer passes for what prepare_jpeg writes."""
    prepared = custom_op.prepare_jpeg(corpus_case.data)
    assert layout.read_layout(corpus_case.data).trailer == b""
    assert layout.compare(corpus_case.data, prepared) is None


def test_layout_check_finds_dropped_trailer_and_metadata() -> None:
    buffer = io.BytesIO()
    Image.fromarray(make_photo(40, 56, 5)).save(buffer, format="JPEG", comment=b"keep me")
    first = buffer.getvalue()
    prepared = custom_op.prepare_jpeg(first)
    assert layout.compare(first, prepared) is None
    data = multi_picture_file(first, encode(make_photo(16, 16, 6)))
    assert layout.read_layout(data).trailer == data[len(first):]
    assert "bytes after its end-of-image marker" in layout.compare(data, prepared)
    without_comment = custom_op.prepare_jpeg(first.replace(b"keep me", b"KEEP ME"))
    assert "metadata segments" in layout.compare(first, without_comment)
    assert "cannot be followed" in layout.compare(first, prepared[:len(prepared) // 2])
