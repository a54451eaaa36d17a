"""decode_and_crop_jpeg_batch(hflips=...): each chosen result mirrored left to right, as torch's
flip(-1) (v2.RandomHorizontalFlip) would mirror it, in every layout, size and mode; EXIF-turned
files included; bad hflips refused with the value named."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

import custom_op
from synthetic import make_photo
from test_orientation import exif_segment, with_exif

# Widths off the 8-byte words the flip swaps (and one short row), heights off the MCU grid.
SHAPES = [(75, 118), (40, 61), (33, 7), (96, 160)]
FLIPS = [True, False, True, True]


def _jpeg(height: int, width: int, seed: int, gray: bool = False) -> bytes:
    pixels = make_photo(height, width, seed=seed)
    image = Image.fromarray(pixels).convert("L") if gray else Image.fromarray(pixels)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def datas() -> list[bytes]:
    return [_jpeg(h, w, seed=i, gray=i == 2) for i, (h, w) in enumerate(SHAPES)]


def _boxes() -> list[list[int]]:
    return [[3, 1, h - 5, w - 2] for h, w in SHAPES]


def _mirrored(results, flips):
    return [result.flip(-1) if flip else result for result, flip in zip(results, flips)]


@pytest.mark.parametrize("contiguous", [True, False], ids=["CHW", "HWC"])
@pytest.mark.parametrize("mode", ["rgb", "gray", "unchanged"])
def test_crops_are_mirrored_as_torch_flips(datas, contiguous, mode) -> None:
    plain = custom_op.decode_and_crop_jpeg_batch(datas, _boxes(), mode=mode, contiguous=contiguous)
    flipped = custom_op.decode_and_crop_jpeg_batch(datas, _boxes(), mode=mode,
                                                   contiguous=contiguous, hflips=FLIPS)
    for result, expected in zip(flipped, _mirrored(plain, FLIPS)):
        assert torch.equal(result, expected)
    assert not torch.equal(flipped[0], plain[0])  # the flag was not ignored


@pytest.mark.parametrize("contiguous", [True, False], ids=["CHW", "HWC"])
@pytest.mark.parametrize("size", [24, (17, 45)])
def test_resized_windows_are_mirrored_in_the_stacked_batch(datas, contiguous, size) -> None:
    plain = custom_op.decode_and_crop_jpeg_batch(datas, _boxes(), size=size, contiguous=contiguous,
                                                 num_threads=2)
    flips = torch.tensor(FLIPS)
    out = torch.empty_like(plain)
    flipped = custom_op.decode_and_crop_jpeg_batch(datas, _boxes(), size=size,
                                                   contiguous=contiguous, num_threads=2,
                                                   hflips=flips, out=out)
    assert flipped is out
    assert torch.equal(flipped, torch.stack(_mirrored(plain, FLIPS)))
    assert flipped.stride() == plain.stride()


def test_turned_files_are_mirrored_after_turning(datas) -> None:
    turned = [with_exif(data, exif_segment(6)) if i % 2 else data for i, data in enumerate(datas)]
    boxes = [[0, 0, 5, 7]] * len(turned)
    plain = custom_op.decode_and_crop_jpeg_batch(turned, boxes, size=5,
                                                 apply_exif_orientation=True)
    flipped = custom_op.decode_and_crop_jpeg_batch(turned, boxes, size=5, hflips=FLIPS,
                                                   apply_exif_orientation=True)
    assert torch.equal(flipped, torch.stack(_mirrored(plain, FLIPS)))


@pytest.mark.parametrize("hflips, error, named", [
    ([True, False], ValueError, "got 2"),
    ([True, 1, False, True], TypeError, "got 1"),
    ([True, False, np.bool_(True), True], TypeError, "True_"),
    ([None, True, False, True], TypeError, "got None (NoneType) at hflips[0]"),
    (torch.ones(4), TypeError, "torch.float32"),
    (torch.ones(2, 2, dtype=torch.bool), TypeError, "(2, 2)"),
])
def test_bad_hflips_are_refused(datas, hflips, error, named) -> None:
    with pytest.raises(error, match=r"hflips") as raised:
        custom_op.decode_and_crop_jpeg_batch(datas, _boxes(), hflips=hflips)
    assert named in str(raised.value)
