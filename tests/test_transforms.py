"""custom_op.transforms: torchvision's crops, with their own decode options, on encoded bytes.

RandomCropJPEG, CenterCropJPEG, RandomResizedCropJPEG and ResizeJPEG are
torchvision's v2 transforms (same draws, same windows, same padding, same
sample structures) that also take raw encoded bytes and decode only the
window, with their own options. The reference for every test is the
torchvision transform on the full decode: pixels equal wherever no DCT
scaling applies (and always with exact=True), within the resized call's PSNR
floor where it does. They also take a decoded [C, H, W] tensor, and then equal
torchvision's result, given the channels of ``mode``.
"""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING

import pytest
import torch
from PIL import Image
import torchvision.transforms.functional as v1_functional
from torchvision import tv_tensors
from torchvision.io import ImageReadMode
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as v2_functional

import custom_op
from custom_op._decode._single import choose_scale
from synthetic import make_smooth_noise
from custom_op.transforms import (CenterCropJPEG, DecodeJPEG, NormalizeBatch, RandomCropJPEG,
                                  RandomResizedCropJPEG, ResizeJPEG)
from _closeness import assert_close
from _cpu_seed import seed_cpu

if TYPE_CHECKING:
    from conftest import JpegCase

MODES = ("rgb", "gray", "unchanged")
SEEDS = range(8)
# (corpus file, crop size): sizes strictly smaller than the image on both sides.
SMALLER = [
    ("420-base-q90-120x200", 64),
    ("420-base-q90-120x200", (33, 117)),
    ("422-prog-q60-120x200", (119, 1)),
    ("411-base-q60-120x200", (1, 199)),
    ("cmyk-444-base-q75-57x91", (17, 30)),
    ("gray-rst-q75-41x75", (40, 74)),
    ("420-prog-q100-257x256", 224),
]


#: Where DCT scaling applies: the lowest PSNR the right code measures over this file's cases
#: (29.33 dB), less 0.5 dB; each case must also beat the reference moved by one pixel.
RESIZED_PSNR_FLOOR_DB = 28.8
#: The same for the evaluation recipe's scaled cases (Resize + CenterCrop): 22.61 dB, less 0.5.
RECIPE_PSNR_FLOOR_DB = 22.1





def full_decode(data: bytes, mode: str = "rgb") -> torch.Tensor:
    height, width, _ = custom_op.jpeg_size(data)
    return custom_op.decode_and_crop_jpeg(data, 0, 0, height, width, mode=mode)


def as_pair(size) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else tuple(size)


def _size_id(value) -> str:
    if isinstance(value, int):
        return str(value)
    if isinstance(value, tuple):
        return "x".join(map(str, value))
    return value


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("case_id, size", SMALLER, ids=[f"{c}-{_size_id(s)}" for c, s in SMALLER])
def test_random_crop_equals_v2_random_crop(corpus_by_id, case_id: str, size, seed: int) -> None:
    data = corpus_by_id[case_id].data
    full = full_decode(data)
    seed_cpu(seed)
    ours = RandomCropJPEG(size)(data)
    ours_next = torch.rand(1)
    seed_cpu(seed)
    reference = v2.RandomCrop(size)(full)
    reference_next = torch.rand(1)
    assert ours.shape == (3, *as_pair(size))
    assert torch.equal(ours, reference)
    # Both drew the same amount from the generator, so later transforms agree too.
    assert torch.equal(ours_next, reference_next)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case_id, size", [
    ("420-base-q90-120x200", (50, 70)),
    ("420-base-q90-120x200", (120, 200)),  # the whole image: no draw at all
    ("420-base-q90-120x200", (120, 31)),  # the height fits exactly: only left is drawn
    ("ycck-420-rst-q100-41x75", (9, 75)),  # the width fits exactly: only top is drawn
    ("440-arith-q95-41x75-noise", (1, 1)),
], ids=["50x70", "whole", "full_height", "full_width", "1x1"])
def test_random_crop_equals_v2_at_the_edges(corpus_by_id, case_id: str, size, mode: str) -> None:
    """The window is v2.RandomCrop's, also when a side fits exactly, and the pixels are its crop."""
    data = corpus_by_id[case_id].data
    full = full_decode(data, mode)
    transform = RandomCropJPEG(size, mode=mode)
    for seed in SEEDS:
        seed_cpu(seed)
        crop = transform(data)
        after = torch.rand(1)
        seed_cpu(seed)
        reference = v2.RandomCrop(size)(full)
        assert type(crop) is tv_tensors.Image
        assert torch.equal(crop, reference), f"seed {seed}"
        assert torch.equal(torch.rand(1), after), f"seed {seed}: different number of draws"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case_id, size", [
    ("420-base-q90-120x200", 64),  # even margins
    ("420-base-q90-120x200", (33, 117)),  # odd margins: 43.5 and 41.5 round to even
    ("420-rstrow-q85-57x91", (10, 20)),  # 23.5 -> 24, 35.5 -> 36
    ("420-rstrow-q85-57x91", (12, 22)),  # 22.5 -> 22, 34.5 -> 34
    ("cmyk-420-prog-q90-17x33", (17, 33)),  # the whole image
    ("411-base-q75-7x13", (1, 1)),
    ("gray-base-q50-7x13", (6, 12)),
], ids=lambda value: _size_id(value))
def test_center_crop_equals_torchvision(corpus_by_id, case_id: str, size, mode: str) -> None:
    data = corpus_by_id[case_id].data
    full = full_decode(data, mode)
    ours = CenterCropJPEG(size, mode=mode)(data)
    pair = list(as_pair(size))
    assert torch.equal(ours, v2_functional.center_crop(full, pair))
    assert torch.equal(ours, v1_functional.center_crop(full, pair))
    assert torch.equal(ours, v2.CenterCrop(size)(full))


@pytest.mark.parametrize("size", [121, (121, 10), (10, 201), (121, 201)], ids=_size_id)
def test_image_smaller_than_size_fails_or_pads_as_torchvision(corpus_by_id, size) -> None:
    """RandomCrop raises torchvision's ValueError; CenterCrop and pad_if_needed pad with zeros."""
    data = corpus_by_id["420-base-q90-120x200"].data
    full = full_decode(data)
    with pytest.raises(ValueError, match=r"Required crop size .* is larger than input image size"):
        RandomCropJPEG(size)(data)
    assert torch.equal(CenterCropJPEG(size)(data), v2.CenterCrop(size)(full))
    for seed in SEEDS:
        seed_cpu(seed)
        ours = RandomCropJPEG(size, pad_if_needed=True, fill=7)(data)
        seed_cpu(seed)
        assert torch.equal(ours, v2.RandomCrop(size, pad_if_needed=True, fill=7)(full))


def test_strict_is_passed_on(corpus_by_id) -> None:
    case = corpus_by_id["422-prog-q60-120x200"]
    truncated = case.data[:len(case.data) // 2]
    for transform_class in (RandomCropJPEG, CenterCropJPEG):
        with pytest.raises(custom_op.JpegDecodeError, match="Premature end"):
            transform_class(32)(truncated)
        assert transform_class(32, strict=False)(truncated).shape == (3, 32, 32)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_crop_in_a_v2_compose(corpus_by_id, seed: int) -> None:
    """RandomCropJPEG then v2 transforms equals v2.RandomCrop then the same, on the full decode."""
    data = corpus_by_id["420-prog-q100-257x256"].data
    ours = v2.Compose([RandomCropJPEG((100, 150)), v2.RandomHorizontalFlip(),
                       v2.ToDtype(torch.float32, scale=True)])
    reference = v2.Compose([v2.RandomCrop((100, 150)), v2.RandomHorizontalFlip(),
                            v2.ToDtype(torch.float32, scale=True)])
    seed_cpu(seed)
    got = ours(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    seed_cpu(seed)
    expected = reference(full_decode(data))
    assert got.dtype == torch.float32 and got.shape == (3, 100, 150)
    assert torch.equal(got, expected)


def test_center_crop_in_a_v2_compose(corpus_by_id) -> None:
    data = corpus_by_id["420-base-q90-120x200"].data
    pipeline = v2.Compose([CenterCropJPEG(64), v2.RandomHorizontalFlip(p=1.0)])
    expected = v2_functional.center_crop(full_decode(data), [64, 64]).flip(-1)
    assert torch.equal(pipeline(data), expected)


# RandomResizedCropJPEG, and decoded [C, H, W] tensors as input to all three transforms.

RRC_SEEDS = range(64)
# (scale, ratio): torchvision's default; settings that force the central fallback on most or all
# images (the whole area at a fixed aspect, a window far too small to round to a pixel, aspect
# ratios no image here has); integer bounds; a narrow square-ish range.
RRC_SETTINGS = {
    "default": ((0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0)),
    "whole-area": ((1.0, 1.0), (3.0 / 4.0, 4.0 / 3.0)),
    "tiny-area": ((1e-5, 1e-4), (3.0 / 4.0, 4.0 / 3.0)),
    "very-wide-ratio": ((0.5, 1.0), (4.0, 9.0)),
    "very-tall-ratio": ((0.9, 1.0), (0.1, 0.2)),
    "int-bounds": ((0, 1), (1, 2)),
    "square": ((0.25, 0.5), (0.99, 1.01)),
}
# Extra files, generated here: very wide and very tall images whose every attempt fails with the
# default settings, and single rows and columns.
EXTREME_SIZES = [(8, 600), (600, 8), (1, 300), (300, 1), (40, 41)]
RRC_CORPUS = ["420-base-q90-120x200", "420-prog-q100-257x256", "gray-base-q50-7x13",
              "420-base-q85-1x1", "cmyk-444-base-q75-57x91"]


def _encode_with_pillow(pixels, **options) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90, **options)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def rrc_files(corpus_by_id) -> dict[str, bytes]:
    """Encoded files by short id: a few corpus files and the extreme sizes."""
    files = {case_id: corpus_by_id[case_id].data for case_id in RRC_CORPUS}
    for height, width in EXTREME_SIZES:
        files[f"{height}x{width}"] = _encode_with_pillow(make_smooth_noise(height, width, seed=5))
    return files


@pytest.mark.parametrize("setting", RRC_SETTINGS)
@pytest.mark.parametrize("file_id", RRC_CORPUS + [f"{h}x{w}" for h, w in EXTREME_SIZES])
def test_random_resized_crop_equals_v2(rrc_files, file_id: str, setting: str) -> None:
    """v2's window and generator state for every seed; v2's pixels where no DCT scaling applies.

    With exact=True always; by default whenever the window is less than twice
    the output on a side (then the window is resized at full scale by the
    same ATen kernel), and within the resized call's PSNR floor otherwise.
    """
    data = rrc_files[file_id]
    full = full_decode(data)
    scale, ratio = RRC_SETTINGS[setting]
    size = (16, 24)
    theirs = v2.RandomResizedCrop(size, scale=scale, ratio=ratio)
    for exact in (True, False):
        ours = RandomResizedCropJPEG(size, scale=scale, ratio=ratio, exact=exact)
        for seed in RRC_SEEDS:
            seed_cpu(seed)
            params = theirs.make_params([full])
            state = torch.get_rng_state()
            seed_cpu(seed)
            try:
                expected = theirs(full)
            except RuntimeError as error:  # an empty fallback window, which torchvision refuses
                seed_cpu(seed)
                with pytest.raises(type(error)):
                    ours(data)
                continue
            seed_cpu(seed)
            got = ours(data)
            assert torch.equal(state, torch.get_rng_state()), f"seed {seed}"
            scaled = choose_scale(params["height"], params["width"], size, True) < 8
            if exact or not scaled:
                assert torch.equal(got, expected), f"exact={exact} seed {seed}: {params}"
            else:
                assert_close(got, expected, RESIZED_PSNR_FLOOR_DB, f"seed {seed}: {params}")


@pytest.mark.parametrize("interpolation", [v2.InterpolationMode.BICUBIC,
                                           v2.InterpolationMode.NEAREST,
                                           v2.InterpolationMode.NEAREST_EXACT])
@pytest.mark.parametrize("file_id", ["420-prog-q100-257x256", "cmyk-444-base-q75-57x91"])
def test_random_resized_crop_other_interpolations_equal_v2(rrc_files, file_id: str,
                                                           interpolation) -> None:
    """Bicubic and nearest decode the window at full scale: torchvision's pixels exactly."""
    data = rrc_files[file_id]
    full = full_decode(data)
    for seed in range(16):
        seed_cpu(seed)
        got = RandomResizedCropJPEG(24, interpolation=interpolation)(data)
        seed_cpu(seed)
        assert torch.equal(got, v2.RandomResizedCrop(24, interpolation=interpolation)(full))


@pytest.mark.parametrize("mode, channels", [("rgb", 3), ("gray", 1), ("unchanged", 4)])
@pytest.mark.parametrize("size", [64, (24, 40), 1, (300, 10)], ids=_size_id)
def test_random_resized_crop_output_shape(corpus_by_id, size, mode: str,
                                          channels: int) -> None:
    data = corpus_by_id["cmyk-444-base-q75-57x91"].data
    for seed in range(4):
        seed_cpu(seed)
        out = RandomResizedCropJPEG(size, mode=mode)(data)
        assert out.dtype == torch.uint8 and out.shape == (channels, *as_pair(size))


def test_random_resized_crop_output_shape_on_rgb_and_gray(rrc_files) -> None:
    for file_id, data in rrc_files.items():
        seed_cpu(0)
        assert RandomResizedCropJPEG((20, 30))(data).shape == (3, 20, 30), file_id


def test_random_resized_crop_passes_window_and_options_on(corpus_by_id, monkeypatch) -> None:
    """The op receives torchvision's window, the size as (height, width) and every option."""
    data = corpus_by_id["420-base-q90-120x200"].data
    calls = []

    def record(*args, **kwargs):
        calls.append((args[1:], kwargs))
        return torch.zeros(1, 7, 9, dtype=torch.uint8)

    monkeypatch.setattr(custom_op._torchvision._tv_kernels, "decode_and_resized_crop_jpeg", record)
    transform = RandomResizedCropJPEG((7, 9), mode="gray", antialias=False, strict=False,
                                      seek=False, contiguous=False, max_pixels=10**6,
                                      max_scans=9, max_memory=5 << 20,
                                      apply_exif_orientation=True)
    seed_cpu(3)
    params = transform.make_params([custom_op.EncodedJpeg(data)])
    seed_cpu(3)
    transform(data)
    window = (params["top"], params["left"], params["height"], params["width"])
    # index: None, as no dataset named this file for the index cache (custom_op/_index/_cache.py).
    # contiguous: the layout torchvision's pipeline has, planes for a window narrower than the
    # image (_tv_kernels._in_decoded_pipeline_layout), asked of the kernel.
    assert calls == [((*window, (7, 9)), {"antialias": False, "index": None, "mode": "gray",
                                          "strict": False,
                                          "seek": False, "contiguous": params["width"] != 200,
                                          "max_pixels": 10**6, "max_scans": 9,
                                          "max_memory": 5 << 20,
                                          "apply_exif_orientation": True})]
    with pytest.raises(TypeError, match=r"RandomResizedCropJPEG\(\): unknown decode option\(s\) "
                                        r"max_bytes; the options are mode, strict"):
        RandomResizedCropJPEG(8, max_bytes=1)


@pytest.mark.parametrize("size", [224, 64, (96, 48)], ids=_size_id)
def test_random_resized_crop_is_close_to_v2(corpus_by_id, size) -> None:
    """Near torchvision's output for the same seed.

    Not bit for bit: the op may decode at a reduced DCT scale before resizing,
    which on this file's fine gratings moves the mean by up to about 5 levels
    of 255 (0.2 at full scale). A bound of 10 allows that and still catches a
    wrong window or a transposed size (about 60 levels between unrelated
    windows of this file).
    """
    data = corpus_by_id["420-prog-q100-257x256"].data
    full = full_decode(data)
    for seed in range(4):
        seed_cpu(seed)
        ours = RandomResizedCropJPEG(size)(data)
        seed_cpu(seed)
        theirs = v2.RandomResizedCrop(size)(full)
        difference = (ours.float() - theirs.float()).abs().mean().item()
        assert difference < 10.0, f"seed {seed}: mean difference {difference:.2f}"


@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("setting", ["default", "whole-area", "int-bounds"])
@pytest.mark.parametrize("size", [64, (17, 300), 1], ids=_size_id)
def test_random_resized_crop_on_a_decoded_image_equals_v2(rrc_files, size, setting: str,
                                                          antialias: bool) -> None:
    scale, ratio = RRC_SETTINGS[setting]
    for file_id in ("420-base-q90-120x200", "8x600"):
        full = full_decode(rrc_files[file_id])
        for seed in range(4):
            seed_cpu(seed)
            ours = RandomResizedCropJPEG(size, scale, ratio, antialias=antialias)(full)
            state = torch.get_rng_state()
            seed_cpu(seed)
            theirs = v2.RandomResizedCrop(size, scale, ratio, antialias=antialias)(full)
            assert ours.shape == (3, *as_pair(size))
            assert torch.equal(ours, theirs), f"{file_id} seed {seed}"
            assert torch.equal(state, torch.get_rng_state())


@pytest.mark.parametrize("case_id, size", SMALLER, ids=[f"{c}-{_size_id(s)}" for c, s in SMALLER])
def test_crops_on_a_decoded_image_equal_torchvision(corpus_by_id, case_id: str, size) -> None:
    full = full_decode(corpus_by_id[case_id].data, "unchanged")
    for seed in range(4):
        seed_cpu(seed)
        ours = RandomCropJPEG(size, mode="unchanged")(full)
        state = torch.get_rng_state()
        seed_cpu(seed)
        assert torch.equal(ours, v2.RandomCrop(size)(full)), f"seed {seed}"
        assert torch.equal(state, torch.get_rng_state())
    center = CenterCropJPEG(size, mode="unchanged")(full)
    assert torch.equal(center, v2_functional.center_crop(full, list(as_pair(size))))


@pytest.mark.parametrize("case_id", ["420-base-q90-120x200", "cmyk-444-base-q75-57x91",
                                     "gray-rst-q75-41x75"])
def test_decoded_and_encoded_inputs_agree_for_crops(corpus_by_id, case_id: str) -> None:
    """The same seed cuts the same window from the bytes and from their full decode."""
    data = corpus_by_id[case_id].data
    full = full_decode(data)
    for transform in (RandomCropJPEG((17, 30)), CenterCropJPEG((17, 30))):
        for seed in range(4):
            seed_cpu(seed)
            from_bytes = transform(data)
            seed_cpu(seed)
            assert torch.equal(transform(full), from_bytes), f"{transform} seed {seed}"


def test_decoded_input_gets_the_channels_of_mode(corpus_by_id) -> None:
    rgb = full_decode(corpus_by_id["420-base-q90-120x200"].data)
    gray = full_decode(corpus_by_id["gray-rst-q75-41x75"].data, "unchanged")
    assert gray.shape[0] == 1
    window = v2_functional.center_crop(gray, [20, 30])
    assert torch.equal(CenterCropJPEG((20, 30))(gray), window.repeat(3, 1, 1))
    assert torch.equal(CenterCropJPEG((20, 30), mode="GRAY")(gray), window)
    expected = v2_functional.rgb_to_grayscale(v2_functional.center_crop(rgb, [20, 30]))
    assert torch.equal(CenterCropJPEG((20, 30), mode="gray")(rgb), expected)
    seed_cpu(0)
    assert RandomResizedCropJPEG(16, mode="gray")(rgb).shape == (1, 16, 16)
    four = torch.zeros(4, 30, 40, dtype=torch.uint8)
    assert RandomCropJPEG(10, mode="unchanged")(four).shape == (4, 10, 10)
    with pytest.raises(ValueError, match=r"RandomCropJPEG: mode='rgb' needs .* got 4 channels"):
        RandomCropJPEG(10)(four)
    with pytest.raises(ValueError, match="mode must be one of"):
        RandomCropJPEG(10, mode="cmyk")(rgb)


@pytest.mark.parametrize("transform_class", [RandomCropJPEG, CenterCropJPEG, RandomResizedCropJPEG])
def test_inputs_of_neither_kind_are_refused(transform_class) -> None:
    transform = transform_class(4)
    name = transform_class.__name__
    with pytest.raises(TypeError, match=rf"{name}: a decoded \[C, H, W\] image must be uint8, "
                                        r"got dtype torch.float32"):
        transform(torch.zeros(3, 8, 8))
    with pytest.raises(TypeError, match=rf"{name}: a 1-D tensor must hold encoded JPEG bytes as "
                                        r"uint8, got dtype torch.int64"):
        transform(torch.zeros(100, dtype=torch.int64))
    for shape in [(8, 8), (1, 3, 8, 8), ()]:
        with pytest.raises(ValueError, match=rf"{name}: expected .* got a {len(shape)}-D tensor "
                                             rf"of shape {re.escape(str(shape))}"):
            transform(torch.zeros(shape, dtype=torch.uint8))
    with pytest.raises(TypeError, match="got str"):
        transform("cat.jpg")


def test_decoded_image_smaller_than_size_behaves_as_torchvision() -> None:
    image = torch.zeros(3, 20, 30, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"Required crop size \(21, 21\) is larger"):
        RandomCropJPEG(21)(image)
    assert CenterCropJPEG(21)(image).shape == (3, 21, 21)


@pytest.mark.parametrize("scale, ratio", [(0.5, (0.75, 1.33)), ((0.1, 1.0), 1.0),
                                          ((0.1, 0.5, 1.0), (0.75, 1.33)), ((0.1, 1.0), [1.0])])
def test_random_resized_crop_refuses_what_v2_refuses(scale, ratio) -> None:
    with pytest.raises(TypeError):
        v2.RandomResizedCrop(32, scale=scale, ratio=ratio)
    with pytest.raises(TypeError):
        RandomResizedCropJPEG(32, scale=scale, ratio=ratio)


@pytest.mark.parametrize("scale, ratio", [((1.0, 0.5), (0.75, 1.33)), ((0.5, 1.0), (2.0, 1.0))])
def test_random_resized_crop_warns_and_fails_as_v2_does(scale, ratio) -> None:
    message = r"Scale and ratio should be of kind \(min, max\)"
    with pytest.warns(UserWarning, match=message):
        theirs = v2.RandomResizedCrop(32, scale=scale, ratio=ratio)
    with pytest.warns(UserWarning, match=message):
        ours = RandomResizedCropJPEG(32, scale=scale, ratio=ratio)
    image = torch.zeros(3, 40, 50, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="uniform_ expects") as expected:
        theirs.make_params([image])
    with pytest.raises(RuntimeError) as got:
        ours.make_params([image])
    assert str(got.value) == str(expected.value)


def test_random_resized_crop_in_a_v2_compose(corpus_by_id) -> None:
    data = corpus_by_id["420-prog-q100-257x256"].data
    pipeline = v2.Compose([RandomResizedCropJPEG(48), v2.RandomHorizontalFlip(),
                           v2.ToDtype(torch.float32, scale=True)])
    seed_cpu(0)
    out = pipeline(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    assert out.dtype == torch.float32 and out.shape == (3, 48, 48)
    assert "RandomResizedCropJPEG(size=(48, 48), scale=(0.08, 1.0)" in repr(pipeline)


@pytest.mark.parametrize("mode, channels", [(ImageReadMode.RGB, 3), (ImageReadMode.GRAY, 1),
                                            (ImageReadMode.UNCHANGED, 4)])
def test_image_read_modes_are_accepted(corpus_by_id, mode, channels: int) -> None:
    data = corpus_by_id["cmyk-444-base-q75-57x91"].data
    assert CenterCropJPEG(20, mode=mode)(data).shape == (channels, 20, 20)
    with pytest.raises(ValueError, match="RandomCropJPEG.*mode"):
        RandomCropJPEG(20, mode=ImageReadMode.RGB_ALPHA)


def test_samples_with_labels_and_boxes_follow_torchvision(corpus_by_id) -> None:
    """(bytes, label) and (bytes, target dict): the label passes, the boxes follow the window."""
    data = corpus_by_id["420-prog-q100-257x256"].data
    full = tv_tensors.Image(full_decode(data))
    boxes = tv_tensors.BoundingBoxes([[10, 20, 200, 180], [0, 0, 40, 40]], format="XYXY",
                                     canvas_size=(257, 256))
    pipeline = [RandomResizedCropJPEG(64, exact=True), v2.RandomHorizontalFlip()]
    reference = [v2.RandomResizedCrop(64), v2.RandomHorizontalFlip()]
    for seed in range(8):
        seed_cpu(seed)
        image, label = v2.Compose(pipeline)(data, 5)
        seed_cpu(seed)
        assert torch.equal(image, v2.Compose(reference)(full)) and label == 5
        target = {"boxes": boxes, "labels": torch.tensor([1, 2])}
        seed_cpu(seed)
        image, got = v2.Compose(pipeline)(data, target)
        seed_cpu(seed)
        expected_image, expected = v2.Compose(reference)(full, target)
        assert torch.equal(image, expected_image)
        assert torch.equal(got["boxes"], expected["boxes"])
        assert got["boxes"].canvas_size == expected["boxes"].canvas_size == (64, 64)


@pytest.mark.parametrize("case_id", ["420-prog-q100-257x256", "420-base-q90-120x200"])
def test_evaluation_recipe_equals_torchvision_where_no_scaling_applies(corpus_by_id,
                                                                       case_id: str) -> None:
    """ResizeJPEG(short side) + CenterCrop: exact below 2x, within the PSNR floor above."""
    data = corpus_by_id[case_id].data
    full = full_decode(data)
    height, width = full.shape[-2:]
    for short_side, crop in [(min(height, width) * 3 // 4, 40), (min(height, width) // 2, 32),
                             (min(height, width) // 4, 24)]:
        ours = v2.Compose([ResizeJPEG(short_side), v2.CenterCrop(crop)])(data)
        expected = v2.Compose([v2.Resize(short_side), v2.CenterCrop(crop)])(full)
        exact = v2.Compose([ResizeJPEG(short_side, exact=True), v2.CenterCrop(crop)])(data)
        assert torch.equal(exact, expected)
        if min(height, width) < 2 * short_side:
            assert torch.equal(ours, expected), short_side
        else:
            assert_close(ours, expected, RECIPE_PSNR_FLOOR_DB, str(short_side))


def test_output_never_holds_an_encoded_jpeg(corpus_by_id) -> None:
    """A crop the size of the image draws nothing and crops nothing; the output is still decoded."""
    data = corpus_by_id["420-base-q90-120x200"].data
    out = RandomCropJPEG((120, 200))(data)
    assert type(out) is tv_tensors.Image and torch.equal(out, full_decode(data))
    assert type(DecodeJPEG()(custom_op.EncodedJpeg(data))) is tv_tensors.Image


@pytest.mark.parametrize("shape", [(4, 3, 10, 12), (3, 10, 12)])
def test_normalize_batch_equals_to_dtype_and_normalize(shape) -> None:
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    batch = torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    expected = v2.Normalize(mean, std)(v2.ToDtype(torch.float32, scale=True)(batch))
    got = NormalizeBatch(mean, std)(batch)
    assert got.dtype == torch.float32 and torch.equal(got, expected)
    assert NormalizeBatch(mean, std, dtype=torch.float64)(batch).dtype == torch.float64


def test_normalize_batch_refuses_what_it_cannot_normalise() -> None:
    normalize = NormalizeBatch([0.5] * 3, [0.5] * 3)
    with pytest.raises(TypeError, match="expected a uint8 batch, got torch.float32"):
        normalize(torch.zeros(2, 3, 4, 4))
    with pytest.raises(ValueError, match=r"got shape \(3, 4\)"):
        normalize(torch.zeros(3, 4, dtype=torch.uint8))
    with pytest.raises(TypeError, match="floating-point"):
        NormalizeBatch([0.5], [0.5], dtype=torch.int32)
