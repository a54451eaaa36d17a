"""Resized crops of JPEGs with every luma sampling factor pair libjpeg accepts.

libjpeg-turbo before 3.0.0 miscounts jpeg_crop_scanline()'s chroma width for
4x2 and 2x4 luma factors at a reduced DCT scale (its ChangeLog, 3.0.0 item
4): the upsampler leaves part of each row unwritten and the crop comes out as
stripes of garbage. custom_op probes the loaded library once and, when it has
the fault, decodes every column at that scale for such files
(custom_op/csrc/crop_quirk.h).

The reference is exact. The image's sides and the window's edges are
multiples of 8, so at every scale s/8 the window covers whole scaled pixels,
and resizing it to its own scaled size is the identity (one tap of weight 1).
The window's result must then equal, bit for bit, the same pixels of the
whole image decoded at s/8 (every column: libjpeg crops nothing). Two calls
must also be bit-equal (nothing read from memory libjpeg did not write).
fuzz/core_test.cc checks the same files with arbitrary windows against a
decode of every column, and `make valgrind` runs it under memcheck.
"""

from __future__ import annotations

import pytest
import torch
from torchvision.transforms import v2

import custom_op
from jpegenc import _call_encoder
from synthetic.images import make_smooth_noise

HEIGHT, WIDTH = 48, 160
# Multiples of 8, off the iMCU grid (32 pixels wide at 4x, 16 at 2x) and
# narrower than the image, so that libjpeg crops the columns at every scale.
WINDOW = (8, 40, 32, 96)  # y, x, height, width
# (h, v) of the luma with 1x1 chroma; libjpeg refuses MCUs of over 10 blocks.
PAIRS = [(h, v) for h in range(1, 5) for v in range(1, 5) if h * v + 2 <= 10]
# Every pair baseline; the two the fault touches also progressive (libjpeg's
# multi-scan path finds the columns to decode its own way).
CASES = [(h, v, False) for h, v in PAIRS] + [(4, 2, True), (2, 4, True)]
MODES = {"rgb": 0, "gray": 1}


def _encode(h: int, v: int, progressive: bool = False) -> bytes:
    pixels = make_smooth_noise(HEIGHT, WIDTH, seed=h * 10 + v)
    return _call_encoder(pixels, "rgb", "ycbcr", [h, 1, 1], [v, 1, 1], quality=92,
                         progressive=progressive)


@pytest.fixture(scope="module")
def files() -> dict[tuple[int, int, bool], bytes]:
    return {(h, v, progressive): _encode(h, v, progressive) for h, v, progressive in CASES}


def _scaled(box: tuple[int, int, int, int], scale_num: int) -> tuple[int, ...]:
    return tuple(side * scale_num // 8 for side in box)


def _resized(data: bytes, box: tuple[int, int, int, int], scale_num: int, mode: str) -> torch.Tensor:
    """`box` decoded at scale_num / 8 and resized to its own size there."""
    size = _scaled(box, scale_num)[2:]
    return custom_op._C.decode_and_resized_crop_jpeg(
        data, *box, *size, scale_num, True, MODES[mode], True, 1 << 28, 256)


@pytest.mark.parametrize("h, v, progressive", CASES,
                         ids=[f"{h}x{v}{'-prog' if p else ''}" for h, v, p in CASES])
def test_every_scale_equals_the_whole_image_decoded_at_that_scale(files, h: int, v: int,
                                                                  progressive: bool) -> None:
    data = files[(h, v, progressive)]
    for mode in MODES:
        for scale_num in range(1, 9):
            whole = _resized(data, (0, 0, HEIGHT, WIDTH), scale_num, mode)
            ours = _resized(data, WINDOW, scale_num, mode)
            again = _resized(data, WINDOW, scale_num, mode)
            assert torch.equal(ours, again), f"{mode} at {scale_num}/8 differs between two calls"
            y, x, height, width = _scaled(WINDOW, scale_num)
            expected = whole[:, y:y + height, x:x + width]
            wrong = (ours.int() - expected.int()).abs()
            assert torch.equal(ours, expected), (
                f"{mode} at {scale_num}/8: {int((wrong > 0).sum())} samples differ, "
                f"by up to {int(wrong.max())}")


@pytest.mark.parametrize("h, v", [(4, 2), (2, 4)])
def test_public_paths_resize_such_files_right(files, h: int, v: int) -> None:
    """The public function (which picks the scale), the batch call and
    torchvision's RandomResizedCrop on an EncodedJpeg."""
    data = files[(h, v, False)]
    size = _scaled(WINDOW, 2)[2:]
    whole = _resized(data, (0, 0, HEIGHT, WIDTH), 2, "rgb")
    y, x, height, width = _scaled(WINDOW, 2)
    single = custom_op.decode_and_resized_crop_jpeg(data, *WINDOW, size)
    assert torch.equal(single, whole[:, y:y + height, x:x + width])
    batch = custom_op.decode_and_crop_jpeg_batch([data, data], [WINDOW, WINDOW], size=size)
    assert all(torch.equal(image, single) for image in batch)
    transform = v2.RandomResizedCrop(size, antialias=True)
    params = dict(top=WINDOW[0], left=WINDOW[1], height=WINDOW[2], width=WINDOW[3])
    crop = transform.transform(custom_op.EncodedJpeg(data), params)
    assert torch.equal(torch.as_tensor(crop), single)
