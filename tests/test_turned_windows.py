"""Narrow windows of EXIF-turned files: the same pixels on every call, equal to torchvision's.

A window one or two pixels wide or high of a transposed file turns into a
tensor with sides of 1, whose strides along those sides are whatever the turn
left. ATen's uint8 resize reads its input by those strides, so such a tensor
reads memory outside the window (different on every call), and contiguous
3-channel planes resized to 1 x 1 hit an ATen internal assert. Here every
orientation x file kind (1, 3 and 4 channels), each in a (mode, layout, size)
chosen so that every pair of values meets (tests/_speeds.py: every orientation
and every kind with every mode, layout and size, every mode with every layout
and size), and every window of 1 to 3 pixels a side, decoded alone and in a
batch, six times over, must give the reference: the full decode, turned by
Pillow (each channel as its own "L" image), cropped, and resized by
torchvision in decode_jpeg's layout. The C++ core test (fuzz/core_test.cc,
check_narrow_windows, under ASan/UBSan and under valgrind with a 1-channel file
in .ci/run) decodes and resizes the windows of 1 to 3 pixels a side in every
mode and both layouts: the exhaustive set, HWC equal to CHW, deterministic.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps
from torchvision.transforms.v2 import functional as F

import _speeds
import custom_op
from custom_op._decode._single import choose_scale
from jpegenc import encode
from synthetic import make_photo
from test_orientation import exif_segment, with_exif

HEIGHT, WIDTH = 13, 11
SIDES = (1, 2, 3)
REPEATS = 6
#: (size, antialias): outputs for which every window of SIDES decodes at full scale, where the
#: result is torchvision's bit for bit. (1, 1) is the output that hit ATen's assert.
SIZES = {"up": ((4, 5), True), "one": ((1, 1), False), "tall": ((2, 1), True)}


def _file(kind: str) -> bytes:
    photo = make_photo(HEIGHT, WIDTH, seed=5)
    if kind == "gray":
        return encode(photo, sampling="gray")
    if kind == "cmyk":
        return encode(np.concatenate([photo, photo[:, :, :1]], axis=2), colorspace="cmyk")
    return encode(photo, sampling="4:2:0")


@pytest.fixture(scope="module")
def files() -> dict[tuple[str, int], bytes]:
    return {(kind, orientation): with_exif(_file(kind), exif_segment(orientation))
            for kind in ("gray", "ycbcr", "cmyk") for orientation in range(1, 9)}


def _turned_reference(data: bytes, orientation: int, mode: str) -> torch.Tensor:
    """The full decode turned by Pillow, as a CHW view of fresh HWC memory (decode_jpeg's)."""
    full = custom_op.decode_and_crop_jpeg(data, 0, 0, HEIGHT, WIDTH, mode=mode)
    planes = []
    for plane in full:
        image = Image.fromarray(plane.contiguous().numpy())
        image.getexif()[0x0112] = orientation
        planes.append(np.array(ImageOps.exif_transpose(image)))
    return torch.from_numpy(np.stack(planes, axis=2)).permute(2, 0, 1)


def _windows(height: int, width: int) -> list[tuple[int, int, int, int]]:
    """Every window of SIDES x SIDES, at the displayed image's far corner and inside it."""
    return [window for h, w in itertools.product(SIDES, SIDES)
            for window in ((height - h, width - w, h, w), (height // 2, 1, h, w))]


def _in_decode_layout(image: torch.Tensor) -> torch.Tensor:
    return image.permute(1, 2, 0).contiguous().permute(2, 0, 1)


def _check_repeats(results: list[torch.Tensor], reference: torch.Tensor, contiguous: bool,
                   what: str) -> None:
    for call, result in enumerate(results):
        assert torch.equal(result, reference), f"{what}, call {call}"
        layout = result if contiguous else result.permute(1, 2, 0)
        assert layout.is_contiguous(), f"{what}: strides {result.stride()}"


KINDS = ("gray", "ycbcr", "cmyk")
MODES = ("rgb", "gray", "unchanged")
#: The files by id ("o6-cmyk"), with what a pairwise choice pairs with.
FILES = {f"o{orientation}-{kind}": {"orientation": orientation, "kind": kind}
         for orientation in range(1, 9) for kind in KINDS}
LAYOUT_IDS = {"contiguous": lambda contiguous: "planes" if contiguous else "hwc"}


@pytest.mark.parametrize("file_id, mode, contiguous, size_id", _speeds.covering_params(
    FILES, {"mode": MODES, "contiguous": (False, True), "size_id": tuple(SIZES)}, LAYOUT_IDS))
def test_resized_narrow_windows_are_torchvisions_on_every_call(
        files, file_id: str, mode: str, contiguous: bool, size_id: str) -> None:
    orientation, kind = FILES[file_id]["orientation"], FILES[file_id]["kind"]
    data = files[kind, orientation]
    size, antialias = SIZES[size_id]
    reference = _turned_reference(data, orientation, mode)
    options = dict(mode=mode, contiguous=contiguous, apply_exif_orientation=True)
    for y, x, h, w in _windows(*reference.shape[1:]):
        assert choose_scale(h, w, size, antialias) == 8  # full scale: equal, not close
        expected = F.resize(_in_decode_layout(reference[:, y:y + h, x:x + w]), list(size),
                            antialias=antialias)
        singles = [custom_op.decode_and_resized_crop_jpeg(data, y, x, h, w, size,
                                                          antialias=antialias, **options)
                   for _ in range(REPEATS)]
        _check_repeats(singles, expected, contiguous, f"single {(y, x, h, w)}")
        batch = custom_op.decode_and_crop_jpeg_batch([data] * REPEATS, [(y, x, h, w)] * REPEATS,
                                                     size=size, antialias=antialias, **options)
        _check_repeats(list(batch), expected, contiguous, f"batch {(y, x, h, w)}")


@pytest.mark.parametrize("file_id, mode, contiguous", _speeds.covering_params(
    FILES, {"mode": MODES, "contiguous": (False, True)}, LAYOUT_IDS))
def test_narrow_crops_have_the_layouts_strides(files, file_id: str, mode: str,
                                               contiguous: bool) -> None:
    """The crops themselves (what a user then resizes with torchvision): the pixels of the
    reference and the strides a fresh tensor of their layout has, so that ATen reads them
    right."""
    orientation, kind = FILES[file_id]["orientation"], FILES[file_id]["kind"]
    data = files[kind, orientation]
    reference = _turned_reference(data, orientation, mode)
    options = dict(mode=mode, contiguous=contiguous, apply_exif_orientation=True)
    for y, x, h, w in _windows(*reference.shape[1:]):
        expected = reference[:, y:y + h, x:x + w]
        channels = expected.shape[0]
        fresh = (h * w, w, 1) if contiguous else (1, w * channels, channels)
        singles = [custom_op.decode_and_crop_jpeg(data, y, x, h, w, **options)
                   for _ in range(2)]
        batch = custom_op.decode_and_crop_jpeg_batch([data] * 2, [(y, x, h, w)] * 2, **options)
        for result in singles + batch:
            assert torch.equal(result, expected), (y, x, h, w)
            assert result.stride() == fresh, (y, x, h, w)
