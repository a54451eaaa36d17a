"""Windows and files 1 to 3 pixels a side resized to 1 or 2 pixels, through every resize path.

ATen's uint8 resize kernel fails an internal assert when handed contiguous
3-channel planes to resize to 1 x 1; a CMYK file decoded in "rgb" mode with
``contiguous=True`` (what the batch lane asks for) handed it exactly that.
torchvision resizes decode_jpeg's output (HWC memory), which works: every
path must give torchvision's pixels, in either layout, for every channel count.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import custom_op
from custom_op import EncodedJpeg
from jpegenc import encode
from synthetic import make_photo

SIDES = (1, 2, 3)
SIZES = ((1, 1), (1, 2), (2, 1))
KINDS = ("gray", "ycbcr", "cmyk")
MODES = ("rgb", "gray", "unchanged")


def _file(kind: str, height: int, width: int) -> bytes:
    photo = make_photo(height, width, seed=height * 10 + width)
    if kind == "gray":
        return encode(photo, sampling="gray")
    if kind == "cmyk":
        return encode(np.concatenate([photo, photo[:, :, 1:2]], axis=2), colorspace="cmyk")
    return encode(photo, sampling="4:2:0")


def _decoded(data: bytes, mode: str) -> torch.Tensor:
    """The full decode as decode_jpeg lays it out (a CHW view of HWC memory)."""
    height, width, _ = custom_op.jpeg_size(data)
    return custom_op.decode_and_crop_jpeg(data, 0, 0, height, width, mode=mode)


@pytest.mark.parametrize("contiguous", [False, True], ids=["hwc", "planes"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_narrow_windows_to_one_pixel(kind: str, mode: str, contiguous: bool) -> None:
    """Windows of a 9 x 7 file, by the single call, the batch call and EncodedJpeg's
    resized_crop (exact or not: full scale either way for these sizes without antialias)."""
    data = _file(kind, 9, 7)
    full = _decoded(data, mode)
    options = dict(mode=mode, contiguous=contiguous)
    for (h, w), size, exact in itertools.product(itertools.product(SIDES, SIDES), SIZES,
                                                 (False, True)):
        y, x = 9 - h, 7 - w
        expected = F.resized_crop(full, y, x, h, w, list(size), antialias=False)
        what = f"window {(y, x, h, w)} to {size}"
        single = custom_op.decode_and_resized_crop_jpeg(data, y, x, h, w, size,
                                                        antialias=False, **options)
        assert torch.equal(single, expected), what
        batch = custom_op.decode_and_crop_jpeg_batch([data, data], [(y, x, h, w)] * 2,
                                                     size=size, antialias=False, **options)
        assert torch.equal(batch[0], expected) and torch.equal(batch[1], expected), what
        encoded = EncodedJpeg(data, exact=exact, **options)
        ours = F.resized_crop(encoded, y, x, h, w, list(size), antialias=False)
        assert torch.equal(ours, expected), f"EncodedJpeg(exact={exact}) {what}"


@pytest.mark.parametrize("contiguous", [False, True], ids=["hwc", "planes"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_tiny_files_resized_whole(kind: str, mode: str, contiguous: bool) -> None:
    """v2.Resize of whole files 1 to 3 pixels a side (the resize pending on the EncodedJpeg,
    then computed), with each interpolation path: bilinear (custom_op's) and nearest
    (torchvision's on the decoded window)."""
    for (height, width), size, exact in itertools.product(
            itertools.product(SIDES, SIDES), SIZES, (False, True)):
        data = _file(kind, height, width)
        full = _decoded(data, mode)
        for interpolation in (v2.InterpolationMode.BILINEAR, v2.InterpolationMode.NEAREST):
            resize = v2.Resize(size, interpolation=interpolation, antialias=False)
            expected = resize(full)
            ours = resize(EncodedJpeg(data, mode=mode, contiguous=contiguous, exact=exact))
            assert torch.equal(ours.as_subclass(torch.Tensor), expected), \
                (height, width, size, exact, interpolation)


@pytest.mark.parametrize("mode", ["rgb", "gray"])
def test_the_lane_takes_one_pixel_wide_cmyk_windows(mode: str) -> None:
    """The batch lane's call: size=, out= and contiguous=True over a CMYK file."""
    data = _file("cmyk", 9, 7)
    expected = F.resized_crop(_decoded(data, mode), 2, 3, 5, 1, [1, 1], antialias=True)
    out = torch.empty((2, expected.shape[0], 1, 1), dtype=torch.uint8)
    custom_op.decode_and_crop_jpeg_batch([data, data], [(2, 3, 5, 1)] * 2, size=(1, 1),
                                         mode=mode, contiguous=True, out=out)
    assert torch.equal(out[0], expected) and torch.equal(out[1], expected)
