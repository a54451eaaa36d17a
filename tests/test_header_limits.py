"""The caller's max_pixels decides at header time, for every way a file's header is read.

EncodedJpeg, JpegFolder (its per-sample loader and the batch lane's batched
header read) and hf_image read the header before anything is decoded: a
header over the caller's limit must be refused there, naming that limit, and
a header under it must pass even when it is over the default limit.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import torch
from torchvision.transforms import v2

import custom_op
from custom_op import EncodedJpeg, JpegDecodeError
from custom_op.datasets import JpegFolder, hf_image
from custom_op.lane import BatchLane
from custom_op._decode._options import DecodeOptions
from jpegenc import encode
from synthetic import make_photo

HEIGHT, WIDTH = 20, 30
PIXELS = HEIGHT * WIDTH


@pytest.fixture(scope="module")
def jpeg() -> bytes:
    return encode(make_photo(HEIGHT, WIDTH, seed=1))


def _with_header_size(data: bytes, height: int, width: int) -> bytes:
    """``data`` whose SOF0 segment claims ``height`` x ``width`` (only the header changes)."""
    sof = data.index(b"\xff\xc0")
    return data[:sof + 5] + struct.pack(">HH", height, width) + data[sof + 9:]


def _over(limit: int) -> str:
    return rf"= {PIXELS} pixels, more than max_pixels={limit}$"


@pytest.mark.parametrize("exif", [False, True])
def test_encoded_jpeg_refuses_a_header_over_the_callers_limit(jpeg, exif: bool) -> None:
    with pytest.raises(JpegDecodeError, match=r"^cat\.jpg: jpeg_size\(\): the image is 20 x 30 "
                                              r"\(height x width\) " + _over(PIXELS - 1)):
        EncodedJpeg(jpeg, max_pixels=PIXELS - 1, source="cat.jpg", apply_exif_orientation=exif)
    assert EncodedJpeg(jpeg, max_pixels=PIXELS).canvas_size == (HEIGHT, WIDTH)
    # New options on an EncodedJpeg (what the *JPEG transforms do) read the header again.
    named = r"^cat\.jpg: jpeg_size\(\): .*" + _over(PIXELS - 1)
    with pytest.raises(JpegDecodeError, match=named):
        EncodedJpeg(EncodedJpeg(jpeg, source="cat.jpg", apply_exif_orientation=exif),
                    max_pixels=PIXELS - 1, apply_exif_orientation=exif)


def test_a_header_over_the_default_passes_under_the_callers_limit(jpeg) -> None:
    huge = _with_header_size(jpeg, 20000, 20000)  # 4e8 pixels: over the default 2**28
    with pytest.raises(JpegDecodeError, match=r"more than max_pixels=268435456$"):
        EncodedJpeg(huge)
    assert EncodedJpeg(huge, max_pixels=1 << 30).canvas_size == (20000, 20000)
    row = {"bytes": huge, "path": "huge.jpg"}
    assert hf_image(row, DecodeOptions(max_pixels=1 << 30)).canvas_size == (20000, 20000)


def test_hf_image_refuses_by_the_callers_limit(jpeg) -> None:
    with pytest.raises(JpegDecodeError, match=r"^row\.jpg: jpeg_size\(\): .*" + _over(100)):
        hf_image({"bytes": jpeg, "path": "row.jpg"}, DecodeOptions(max_pixels=100))


@pytest.fixture
def folder(tmp_path: Path, jpeg) -> Path:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.jpg").write_bytes(jpeg)
    (tmp_path / "a" / "two.jpg").write_bytes(jpeg)
    return tmp_path


def test_jpeg_folder_refuses_by_the_callers_limit_per_sample_and_in_the_lane(folder) -> None:
    dataset = JpegFolder(folder, max_pixels=PIXELS - 1)
    with pytest.raises(JpegDecodeError, match=r"one\.jpg: jpeg_size\(\): .*" + _over(PIXELS - 1)):
        dataset[0]
    lane = BatchLane(dataset, v2.Compose([v2.RandomResizedCrop(8)]))
    with pytest.raises(JpegDecodeError, match=r"one\.jpg: jpeg_size\(\): .*" + _over(PIXELS - 1)):
        lane([0, 1])
    images, _ = BatchLane(JpegFolder(folder, max_pixels=PIXELS),
                          v2.Compose([v2.RandomResizedCrop(8)]))([0, 1])
    assert images.shape == (2, 3, 8, 8)


def test_the_batched_header_read_takes_the_limit(jpeg) -> None:
    from custom_op._core import _native

    assert _native.jpeg_sizes([jpeg, jpeg], PIXELS - 1) == [None, None]
    assert _native.jpeg_sizes([jpeg], PIXELS) == [(HEIGHT, WIDTH, 3)]
    huge = _with_header_size(jpeg, 20000, 20000)
    assert _native.jpeg_sizes([huge], 1 << 30) == [(20000, 20000, 3)]
    with pytest.raises(ValueError, match="max_pixels must be positive, got 0"):
        _native.jpeg_size(torch.frombuffer(bytearray(jpeg), dtype=torch.uint8), 0)
    assert custom_op.jpeg_size(jpeg) == (HEIGHT, WIDTH, 3)
