"""decode_and_resized_crop_jpeg and decode_and_crop_jpeg_batch.

The resized decode is compared with torchvision's resized_crop of a full
decode (antialiased bilinear), by PSNR: it decodes at a reduced DCT scale
(libjpeg's scaled IDCT is a different low-pass filter than the resize's) and
resamples the scaled pixels, so it is close to, not equal to, the reference.
The floors below are what the right code measures on each file, less 0.5 dB;
a one-pixel shift of the right image scores below every one of them.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch
from torchvision.transforms.v2 import functional as F

import custom_op
from custom_op._decode._single import choose_scale
from synthetic import make_photo
from jpegenc import encode
from _closeness import psnr, shifted_by_one_pixel

MODE_CODES = {"rgb": 0, "gray": 1, "unchanged": 2}
HEIGHT, WIDTH = 240, 320
WINDOW = (13, 21, 200, 280)  # y, x, height, width: off the block grid on every side
OUT = (48, 64)
# PSNR floors in dB by file and DCT scale (numerator 1 to 7 over 8), for outputs as large as
# the window decoded at that scale (the case where the scale is the one chosen). At 8/8 (a real
# downscale, OUT) the result must equal torchvision's bit for bit: it is the exact crop resized
# by the same ATen kernel. At reduced scales the core's own resampler runs, and libjpeg's scaled
# IDCT, with its box-upsampled chroma, replaces the resize's antialiasing filter. Each floor is
# what the right code measures on this corpus (libjpeg-turbo 2.1.5), rounded down, less 0.5 dB:
# the reference itself shifted by one output pixel scores 17.7-25.7 dB, below every floor of
# its file (test_a_one_pixel_shift_fails_every_floor).
PSNR_FLOOR = {
    "rgb": {
        "444": (27.6, 29.6, 31.2, 28.4, 31.1, 31.5, 29.2),
        "422": (25.1, 25.0, 26.4, 26.5, 29.0, 30.5, 30.2),
        "420": (28.0, 30.4, 28.4, 30.7, 26.8, 28.6, 28.4),
        "440": (25.0, 25.0, 26.1, 26.4, 28.9, 30.4, 30.2),
        "411": (21.4, 22.1, 21.9, 23.3, 22.6, 23.6, 24.0),
        "420-prog": (28.0, 30.4, 28.4, 30.7, 26.8, 28.6, 28.4),
        "gray": (30.4, 32.5, 34.4, 31.6, 34.4, 35.3, 33.1),
        "cmyk": (28.9, 31.7, 29.7, 33.2, 28.2, 30.2, 30.1),
        "ycck": (28.5, 30.4, 32.0, 29.2, 31.9, 32.3, 30.0),
    },
    "gray": {
        "444": (30.4, 32.5, 34.4, 31.6, 34.4, 35.3, 33.1),
        "422": (30.4, 32.5, 34.4, 31.6, 34.4, 35.3, 33.1),
        "420": (30.4, 32.5, 34.4, 31.6, 34.4, 35.3, 33.1),
        "440": (30.4, 32.5, 34.4, 31.6, 34.4, 35.3, 33.1),
        "411": (30.4, 32.5, 34.4, 31.6, 34.4, 35.3, 33.1),
        "420-prog": (30.4, 32.5, 34.4, 31.6, 34.4, 35.3, 33.1),
        "gray": (30.4, 32.5, 34.4, 31.6, 34.4, 35.3, 33.1),
        "cmyk": (31.9, 35.1, 32.4, 38.1, 31.1, 33.2, 33.5),
        "ycck": (31.4, 33.5, 35.4, 32.6, 35.5, 35.8, 33.4),
    },
}

FILES = {
    "444": {"sampling": "4:4:4"},
    "422": {"sampling": "4:2:2"},
    "420": {"sampling": "4:2:0"},
    "440": {"sampling": "4:4:0"},
    "411": {"sampling": "4:1:1"},
    "420-prog": {"sampling": "4:2:0", "progressive": True},
    "gray": {"sampling": "gray"},
    "cmyk": {"sampling": "4:2:0", "colorspace": "cmyk"},
    "ycck": {"sampling": "4:4:4", "colorspace": "ycck"},
}


def _encode(name: str) -> bytes:
    options = dict(FILES[name])
    pixels = make_photo(HEIGHT, WIDTH, seed=7)
    if options.get("colorspace") in ("cmyk", "ycck"):
        ink = np.full((HEIGHT, WIDTH, 1), 200, dtype=np.uint8)
        ink[: HEIGHT // 2] = 255
        pixels = np.dstack([pixels, ink])
    return encode(pixels, quality=90, **options)


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return {name: _encode(name) for name in FILES}



def full_decode(data: bytes, mode: str = "rgb") -> torch.Tensor:
    return custom_op.decode_and_crop_jpeg(data, 0, 0, HEIGHT, WIDTH, mode=mode)


def resized_at_scale(data: bytes, scale_num: int, mode: str = "rgb", window=WINDOW, out=OUT,
                     antialias: bool = True) -> torch.Tensor:
    return custom_op._C.decode_and_resized_crop_jpeg(
        data, *window, *out, scale_num, antialias, MODE_CODES[mode], True, 1 << 28, 256)


def output_for_scale(scale_num: int) -> tuple[int, int]:
    """The window's size at scale_num / 8: the largest output that scale serves."""
    if scale_num == 8:
        return OUT
    return WINDOW[2] * scale_num // 8, WINDOW[3] * scale_num // 8


@pytest.mark.parametrize("mode", ["rgb", "gray"])
@pytest.mark.parametrize("scale_num", range(1, 9))
@pytest.mark.parametrize("name", list(FILES))
def test_psnr_against_torchvision_resized_crop(files, name: str, scale_num: int, mode: str) -> None:
    data = files[name]
    out = output_for_scale(scale_num)
    reference = F.resized_crop(full_decode(data, mode), *WINDOW, list(out), antialias=True)
    ours = resized_at_scale(data, scale_num, mode, out=out)
    assert ours.shape == reference.shape
    if scale_num == 8:  # The exact crop, resized by torchvision's own kernel.
        assert torch.equal(ours, reference)
    else:
        assert psnr(ours, reference) >= PSNR_FLOOR[mode][name][scale_num - 1]



@pytest.mark.parametrize("mode", ["rgb", "gray"])
@pytest.mark.parametrize("scale_num", range(1, 8))
@pytest.mark.parametrize("name", list(FILES))
def test_a_one_pixel_shift_fails_every_floor(files, name: str, scale_num: int, mode: str) -> None:
    """The floors can fail: the right image moved by one pixel either way scores below them."""
    out = output_for_scale(scale_num)
    reference = F.resized_crop(full_decode(files[name], mode), *WINDOW, list(out), antialias=True)
    for dim in (-1, -2):
        assert psnr(shifted_by_one_pixel(reference, dim), reference) < \
            PSNR_FLOOR[mode][name][scale_num - 1]


def test_a_shifted_window_falls_far_below_the_floor(files) -> None:
    """The floors can fail: a window 8 pixels (2 output pixels) off scores below all of them."""
    data = files["420"]
    reference = F.resized_crop(full_decode(data), *WINDOW, list(OUT), antialias=True)
    y, x, h, w = WINDOW
    shifted = resized_at_scale(data, 8, window=(y + 8, x + 8, h, w))
    assert psnr(shifted, reference) < 20.0


def test_upscaling_identity_and_no_antialias_equal_torchvision(files) -> None:
    data = files["444"]
    window, out = (30, 40, 20, 30), (60, 90)  # 3x larger
    reference = F.resized_crop(full_decode(data), *window, list(out), antialias=True)
    assert torch.equal(resized_at_scale(data, 8, window=window, out=out), reference)
    window, out = (0, 0, 200, 300), (100, 150)
    reference = F.resized_crop(full_decode(data), *window, list(out), antialias=False)
    assert torch.equal(resized_at_scale(data, 8, window=window, out=out, antialias=False), reference)
    window, out = (0, 0, 200, 300), (200, 300)  # the identity: the crop itself
    assert torch.equal(resized_at_scale(data, 8, window=window, out=out), full_decode(data)[:, :200, :300])


def test_batch_resize_without_scaling_equals_torchvision(files) -> None:
    """The batch takes the same path as the single call: exact crop, torchvision's kernel."""
    data = files["420"]
    reference = F.resized_crop(full_decode(data), *WINDOW, list(OUT), antialias=True)
    ours = custom_op._C.decode_batch([data], list(WINDOW), [8], *OUT, 0, True, True, 1 << 28, 256, 1)
    assert torch.equal(ours[0], reference)


@pytest.mark.parametrize("window, size, expected", [
    ((0, 0, 240, 320), (30, 40), 1),
    ((0, 0, 240, 320), (31, 40), 2),
    ((0, 0, 240, 320), (60, 80), 2),
    ((0, 0, 240, 320), (61, 80), 4),
    ((0, 0, 240, 320), (120, 160), 4),
    ((0, 0, 240, 320), (121, 160), 8),
    ((0, 0, 100, 100), (224, 224), 8),  # upscaling
])
def test_scale_choice(window, size, expected: int) -> None:
    assert choose_scale(window[2], window[3], size, True) == expected
    assert choose_scale(window[2], window[3], size, False) == 8  # only antialiased resizes scale


@pytest.mark.parametrize("mode, channels", [("rgb", 3), ("gray", 1), ("unchanged", 4)])
def test_public_function_uses_the_chosen_scale(files, mode: str, channels: int) -> None:
    data = files["cmyk"]
    ours = custom_op.decode_and_resized_crop_jpeg(data, *WINDOW, OUT, mode=mode)
    assert ours.shape == (channels, *OUT) and ours.dtype == torch.uint8
    assert ours.permute(1, 2, 0).is_contiguous(), ours.stride()  # a view of HWC memory
    scale = choose_scale(WINDOW[2], WINDOW[3], OUT, True)
    assert scale == 2
    assert torch.equal(ours, resized_at_scale(data, scale, mode))


# Windows that take each path: DCT scales 1/8 .. 1/2 (core resampler), full
# scale through ATen (RGBX rows for colour, planes for gray and CMYK), and the
# identity resize.
LAYOUT_WINDOWS = [((0, 0, 240, 320), (30, 40)), ((8, 4, 200, 300), (60, 80)),
                  ((8, 4, 200, 300), (120, 160)), ((3, 5, 100, 90), (70, 60)),
                  ((3, 5, 100, 90), (150, 140)), ((3, 5, 24, 32), (24, 32))]


@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("window, size", LAYOUT_WINDOWS)
@pytest.mark.parametrize("mode", ["rgb", "gray", "unchanged"])
@pytest.mark.parametrize("kind", ["420", "cmyk"])
def test_both_layouts_hold_the_same_pixels(files, kind: str, mode: str, window, size,
                                           antialias: bool) -> None:
    data = files[kind]
    view = custom_op.decode_and_resized_crop_jpeg(data, *window, size, mode=mode, antialias=antialias)
    planes = custom_op.decode_and_resized_crop_jpeg(data, *window, size, mode=mode,
                                                    antialias=antialias, contiguous=True)
    assert planes.is_contiguous()
    assert view.permute(1, 2, 0).is_contiguous()
    assert torch.equal(view, planes)


def test_square_size_from_an_int(files) -> None:
    assert custom_op.decode_and_resized_crop_jpeg(files["420"], 0, 0, 100, 100, 17).shape == (3, 17, 17)


@pytest.mark.parametrize("size, error", [(0, ValueError), ((10, 0), ValueError), (2.5, TypeError),
                                         ((1, 2, 3), TypeError), (70000, ValueError)])
def test_bad_sizes(files, size, error) -> None:
    with pytest.raises(error, match="size"):
        custom_op.decode_and_resized_crop_jpeg(files["420"], 0, 0, 10, 10, size)


def test_window_outside_the_image(files) -> None:
    with pytest.raises(ValueError, match=r"does not fit in the 240 x 320"):
        custom_op.decode_and_resized_crop_jpeg(files["420"], 100, 0, 141, 10, 8)


# --- decode_and_crop_jpeg_batch ----------------------------------------------------------------

@pytest.fixture(scope="module")
def mixed() -> list[bytes]:
    """Files of different sizes, samplings and colour spaces."""
    shapes = [(64, 96, {}), (80, 60, {"sampling": "4:2:2"}), (33, 47, {"sampling": "gray"}),
              (70, 90, {"progressive": True}), (50, 50, {"sampling": "4:4:4"})]
    out = []
    for index, (h, w, options) in enumerate(shapes):
        out.append(encode(make_photo(h, w, seed=index), quality=85, **options))
    out.append(_encode("cmyk"))
    return out


BOXES = [(3, 5, 40, 50), (0, 0, 80, 60), (10, 7, 20, 30), (69, 89, 1, 1), (1, 2, 47, 45),
         (13, 21, 200, 280)]


@pytest.mark.parametrize("num_threads", [1, 2, 4])
@pytest.mark.parametrize("mode", ["rgb", "gray", "unchanged"])
def test_batch_equals_single_calls(mixed, mode: str, num_threads: int) -> None:
    results = custom_op.decode_and_crop_jpeg_batch(mixed, BOXES, mode=mode, num_threads=num_threads)
    assert len(results) == len(mixed)
    for data, box, result in zip(mixed, BOXES, results):
        assert torch.equal(result, custom_op.decode_and_crop_jpeg(data, *box, mode=mode))


# The third box is the output size itself: the identity resize, which returns the crop.
STACK_BOXES = BOXES[:2] + [(5, 7, 24, 32)] + BOXES[3:]


@pytest.mark.parametrize("contiguous", [False, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize("mode, channels", [("rgb", 3), ("gray", 1)])
def test_resized_batch_is_stacked_and_equals_single_calls(mixed, mode: str, channels: int,
                                                          num_threads: int, contiguous: bool) -> None:
    stacked = custom_op.decode_and_crop_jpeg_batch(mixed, torch.tensor(STACK_BOXES), size=(24, 32),
                                                   mode=mode, num_threads=num_threads,
                                                   contiguous=contiguous)
    assert stacked.shape == (len(mixed), channels, 24, 32)
    memory_format = torch.contiguous_format if contiguous else torch.channels_last
    assert stacked.is_contiguous(memory_format=memory_format)
    for index, (data, box) in enumerate(zip(mixed, STACK_BOXES)):
        single = custom_op.decode_and_resized_crop_jpeg(data, *box, (24, 32), mode=mode)
        assert torch.equal(stacked[index], single)


def test_resized_batch_stacks_unchanged_mode_of_equal_channels(mixed) -> None:
    colour = [0, 1, 3, 4]  # the 3-channel files
    datas, boxes = [mixed[i] for i in colour], [STACK_BOXES[i] for i in colour]
    stacked = custom_op.decode_and_crop_jpeg_batch(datas, boxes, size=(24, 32), mode="unchanged")
    assert stacked.shape == (len(datas), 3, 24, 32)
    assert stacked.is_contiguous(memory_format=torch.channels_last)
    for index, (data, box) in enumerate(zip(datas, boxes)):
        single = custom_op.decode_and_resized_crop_jpeg(data, *box, (24, 32), mode="unchanged")
        assert torch.equal(stacked[index], single)


@pytest.mark.parametrize("strict", [True, False])
def test_batch_with_a_corrupt_member_names_its_index(mixed, strict: bool) -> None:
    datas = list(mixed)
    datas[2] = b"\x89PNG\r\n\x1a\n" + bytes(100)
    with pytest.raises(custom_op.JpegDecodeError,
                       match=r"^decode_and_crop_jpeg_batch\(\): image 2: Not a JPEG file"):
        custom_op.decode_and_crop_jpeg_batch(datas, BOXES, strict=strict, num_threads=2)


def test_batch_window_outside_an_image_names_its_index(mixed) -> None:
    boxes = list(BOXES)
    boxes[4] = (0, 0, 51, 50)
    with pytest.raises(ValueError, match=r"image 4: crop window .* does not fit in the 50 x 50"):
        custom_op.decode_and_crop_jpeg_batch(mixed, boxes)


def test_batch_cannot_stack_mixed_channel_counts(mixed) -> None:
    with pytest.raises(ValueError, match="cannot be stacked"):
        custom_op.decode_and_crop_jpeg_batch(mixed, BOXES, size=8, mode="unchanged")


def test_batch_accepts_every_input_kind(mixed) -> None:
    data = mixed[0]
    kinds = [data, bytearray(data), memoryview(data), np.frombuffer(data, dtype=np.uint8),
             torch.frombuffer(bytearray(data), dtype=torch.uint8)]
    results = custom_op.decode_and_crop_jpeg_batch(kinds, [BOXES[0]] * len(kinds))
    for result in results:
        assert torch.equal(result, results[0])


@pytest.mark.parametrize("boxes, error, pattern", [
    ([(0, 0, 1, 1)], ValueError, "got 6 images but 1 boxes"),
    (torch.zeros(6, 3, dtype=torch.int64), TypeError, "N x 4 integer tensor"),
    (torch.zeros(6, 4), TypeError, "N x 4 integer tensor"),
    ([(0, 0, 0, 1)] * 6, ValueError, r"boxes\[0\].crop_height must be >= 1"),
])
def test_batch_bad_boxes(mixed, boxes, error, pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        custom_op.decode_and_crop_jpeg_batch(mixed, boxes)


def test_empty_batch(mixed) -> None:
    assert custom_op.decode_and_crop_jpeg_batch([], []) == []
    assert custom_op.decode_and_crop_jpeg_batch([], [], size=4).shape == (0, 3, 4, 4)


@pytest.mark.parametrize("window, size", [((13, 21, 200, 280), (48, 64)), ((0, 0, 240, 320), (30, 40))])
def test_no_antialias_never_scales_and_equals_torchvision(files, window, size) -> None:
    """Issue 24 item 5: only antialiased resizes may decode at a reduced DCT scale. Plain
    bilinear picks two samples out of many; a scaled decode averaged them (21 dB before)."""
    data = files["420"]
    reference = F.resized_crop(full_decode(data), *window, list(size), antialias=False)
    ours = custom_op.decode_and_resized_crop_jpeg(data, *window, size, antialias=False)
    assert torch.equal(ours, reference), f"{psnr(ours, reference):.1f} dB"
    batch = custom_op.decode_and_crop_jpeg_batch([data], [window], size=size, antialias=False)
    assert torch.equal(batch[0], reference)
