"""timm's create_transform and torchvision v1 pipelines on encoded JPEGs (ComposeJPEG, JpegFolder).

The reference is what the pipeline gives on ImageFolder's image (Pillow's
full decode, converted to RGB), with the same seeds for Python's random,
numpy's and torch's generators: with ``exact=True`` the output must be equal
bit for bit and every generator must end in the same state (the same draws);
with the default (ATen's resize instead of Pillow's) the draws must be the
same and the pixels close.
"""

from __future__ import annotations

import io
import pathlib
import random

import numpy as np
import pytest
import timm.data as timm_data  # installed by requirements-dev.txt: no skip when it is missing
import torch
import torchvision
from PIL import Image
from torchvision import transforms as v1

import custom_op
from custom_op.datasets import JpegFolder
from custom_op.transforms import ComposeJPEG, NormalizeBatch
from synthetic import make_photo, write_jpeg_folder
from _closeness import psnr as _psnr

TIMM_RECIPES = {
    "train": dict(is_training=True),
    "train-randaugment-erasing-random-interpolation": dict(
        is_training=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.5, interpolation="random"),
    "train-autoaugment-bicubic": dict(is_training=True, auto_augment="original", interpolation="bicubic"),
    "train-uint8": dict(is_training=True, use_prefetcher=True),
    "eval": dict(is_training=False),
    "eval-squash": dict(is_training=False, crop_mode="squash"),
    "eval-border": dict(is_training=False, crop_mode="border"),
    "eval-uint8": dict(is_training=False, use_prefetcher=True),
}
SIZE = 96


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """An ImageFolder tree: baseline 4:2:0, progressive, 4:4:4 and a PNG named .jpg."""
    root = tmp_path_factory.mktemp("timm")
    write_jpeg_folder(root, 2, 150, 200, classes=("a", "b"), seed=5)
    extra = tmp_path_factory.mktemp("timm-extra")
    write_jpeg_folder(extra / "prog", 1, 161, 117, classes=("c",), seed=6, progressive=True)
    write_jpeg_folder(extra / "full", 1, 120, 160, classes=("d",), seed=7, subsampling="4:4:4")
    for nested in ("prog", "full"):
        for path in (extra / nested).glob("*/*.jpg"):
            path.rename(root / "a" / f"{nested}-{path.name}")
    Image.fromarray(make_photo(100, 130, seed=8)).save(root / "b" / "png.jpg", format="PNG")
    return root


def _jpeg_paths(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted(path for path in root.glob("*/*.jpg") if path.read_bytes()[:2] == b"\xff\xd8")


def _seeded(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _generator_states() -> tuple:
    return random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state()


def _reference(transform, path: pathlib.Path, seed: int):
    """The pipeline on ImageFolder's image, and the generators' states after it."""
    _seeded(seed)
    with Image.open(path) as image:
        output = transform(image.convert("RGB"))
    return output, _generator_states()


def _ours(transform, data, seed: int):
    _seeded(seed)
    output = ComposeJPEG(transform)(data)
    return output, _generator_states()


@pytest.mark.parametrize("recipe", TIMM_RECIPES, ids=list(TIMM_RECIPES))
def test_exact_equals_timm_on_imagefolder_images(folder: pathlib.Path, recipe: str) -> None:
    transform = timm_data.create_transform(SIZE, **TIMM_RECIPES[recipe])
    for seed, path in enumerate(_jpeg_paths(folder)):
        expected, expected_states = _reference(transform, path, seed)
        got, states = _ours(transform, custom_op.EncodedJpeg(path.read_bytes(), exact=True), seed)
        assert got.dtype == expected.dtype and got.shape == expected.shape, path.name
        assert torch.equal(got, expected), f"{recipe}: {path.name}"
        assert states[0] == expected_states[0] and states[1] == expected_states[1], "Python/numpy draws"
        assert torch.equal(states[2], expected_states[2]), "torch draws"


@pytest.mark.parametrize("recipe", ["train-uint8", "eval-uint8"])
def test_default_draws_the_same_and_resizes_within_two_levels(folder: pathlib.Path, recipe: str) -> None:
    # ATen's antialiased bilinear resize differs from Pillow's by rounding (1 level); ColorJitter's
    # blends can scale that by up to its factor 1.4, so 2 levels. A different window would differ
    # by far more on these textured images.
    transform = timm_data.create_transform(SIZE, **TIMM_RECIPES[recipe])
    for seed, path in enumerate(_jpeg_paths(folder)):
        expected, expected_states = _reference(transform, path, seed)
        got, states = _ours(transform, path.read_bytes(), seed)
        assert got.dtype == torch.uint8 and got.shape == expected.shape
        assert (got.int() - expected.int()).abs().max().item() <= 2, path.name
        assert states[0] == expected_states[0] and torch.equal(states[2], expected_states[2])


@pytest.mark.parametrize("recipe", ["train", "eval", "eval-border"])
def test_first_transform_decodes_a_window_not_the_whole_image(folder: pathlib.Path, recipe: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    windows = []
    original = custom_op.EncodedJpeg.decode_window

    def recording(self, top, left, height, width):
        windows.append((height, width))
        return original(self, top, left, height, width)

    monkeypatch.setattr(custom_op.EncodedJpeg, "decode_window", recording)
    resized = []
    monkeypatch.setattr("custom_op._torchvision._tv_kernels.decode_and_resized_crop_jpeg",
                        lambda *args, **kwargs: resized.append(args[1:5]) or
                        custom_op.decode_and_resized_crop_jpeg(*args, **kwargs))
    monkeypatch.setattr(custom_op.EncodedJpeg, "decode", lambda self: pytest.fail("full decode"))
    transform = ComposeJPEG(timm_data.create_transform(SIZE, **TIMM_RECIPES[recipe]))
    path = _jpeg_paths(folder)[0]
    assert transform(path.read_bytes()).shape == (3, SIZE, SIZE)
    assert len(windows) + len(resized) == 1  # one decode, by the first transform


def test_routes_follow_the_rest_of_the_pipeline() -> None:
    assert "on PIL images" in repr(ComposeJPEG(timm_data.create_transform(SIZE, is_training=True)))
    assert "on uint8 tensors" in repr(ComposeJPEG(timm_data.create_transform(SIZE, is_training=False)))


V1_PIPELINES = {
    "random-resized-crop": lambda: v1.Compose([v1.RandomResizedCrop(64), v1.RandomHorizontalFlip(),
                                               v1.ToTensor(), v1.Normalize([0.5] * 3, [0.2] * 3)]),
    "resize-center-crop": lambda: v1.Compose([v1.Resize(80), v1.CenterCrop(64), v1.PILToTensor()]),
    "center-crop": lambda: v1.Compose([v1.CenterCrop((70, 90)), v1.ColorJitter(0.3, 0.3, 0.3),
                                       v1.ToTensor()]),
    "random-crop": lambda: v1.Compose([v1.RandomCrop(64), v1.RandomVerticalFlip(), v1.ToTensor(),
                                       v1.RandomErasing(p=1.0)]),
    "padded-random-crop": lambda: v1.Compose([v1.RandomCrop(64, padding=4), v1.ToTensor()]),
    "flip-first": lambda: v1.Compose([v1.RandomHorizontalFlip(), v1.RandomResizedCrop(64),
                                      v1.PILToTensor()]),
    "flip-first-then-tensors": lambda: v1.Compose([v1.RandomHorizontalFlip(), v1.ToTensor()]),
    "single-transform": lambda: v1.RandomResizedCrop(64),
}


@pytest.mark.parametrize("name", V1_PIPELINES)
def test_torchvision_v1_pipelines_exactly(folder: pathlib.Path, name: str) -> None:
    transform = V1_PIPELINES[name]()
    for seed, path in enumerate(_jpeg_paths(folder)):
        expected, expected_states = _reference(transform, path, seed)
        got, states = _ours(transform, custom_op.EncodedJpeg(path.read_bytes(), exact=True), seed)
        if isinstance(expected, Image.Image):
            expected, got = np.asarray(expected), np.asarray(got)
            assert np.array_equal(got, expected), path.name
        else:
            assert torch.equal(got, expected), f"{name}: {path.name}"
        assert torch.equal(states[2], expected_states[2])


def test_jpegfolder_takes_timm_transform_as_imagefolder_does(folder: pathlib.Path) -> None:
    transform = timm_data.create_transform(SIZE, is_training=True, re_prob=0.5)
    expected_set = torchvision.datasets.ImageFolder(str(folder), transform=transform)
    dataset = JpegFolder(folder, transform=transform, exact=True)
    assert isinstance(dataset.transform, ComposeJPEG)
    assert dataset.classes == expected_set.classes
    for index in range(len(dataset)):  # the PNG named .jpg included: decoded by Pillow
        _seeded(index)
        expected, expected_label = expected_set[index]
        _seeded(index)
        got, label = dataset[index]
        assert label == expected_label and torch.equal(got, expected), dataset.samples[index][0]


def test_jpegfolder_leaves_v2_transforms_and_functions_alone(folder: pathlib.Path) -> None:
    from torchvision.transforms import v2

    for transform in (v2.RandomResizedCrop(SIZE), lambda image: image, None,
                      v1.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip()])):
        assert JpegFolder(folder, transform=transform).transform is transform


def test_jpegfolder_wraps_any_single_v1_transform(folder: pathlib.Path) -> None:
    dataset = JpegFolder(folder, transform=v1.ToTensor())  # raised "not a torch image" before
    assert isinstance(dataset.transform, ComposeJPEG) and "decodes in full" in repr(dataset.transform)
    image, _ = dataset[0]
    with Image.open(dataset.samples[0][0]) as expected:
        assert torch.equal(image, v1.ToTensor()(expected.convert("RGB")))


def test_dataloader_with_timm_fast_collate_mixup_and_normalize_batch(folder: pathlib.Path) -> None:
    from timm.data import FastCollateMixup

    dataset = JpegFolder(folder, transform=timm_data.create_transform(
        SIZE, is_training=True, use_prefetcher=True, auto_augment="rand-m9-mstd0.5"))
    mixup = FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=2)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2,
                                         collate_fn=mixup, drop_last=True)
    normalize = NormalizeBatch(timm_data.IMAGENET_DEFAULT_MEAN, timm_data.IMAGENET_DEFAULT_STD)
    batches = list(loader)
    assert batches
    for images, targets in batches:
        assert images.dtype == torch.uint8 and images.shape == (4, 3, SIZE, SIZE)
        assert targets.shape == (4, 2) and torch.allclose(targets.sum(1), torch.ones(4))
        assert normalize(images).dtype == torch.float32


def test_float_pipeline_in_dataloader_with_mixup(folder: pathlib.Path) -> None:
    from timm.data import Mixup

    dataset = JpegFolder(folder, transform=timm_data.create_transform(SIZE, is_training=True))
    loader = torch.utils.data.DataLoader(dataset, batch_size=2, num_workers=1, drop_last=True)
    mixup = Mixup(mixup_alpha=0.8, num_classes=2)
    images, labels = next(iter(loader))
    mixed, targets = mixup(images, labels)
    assert mixed.shape == (2, 3, SIZE, SIZE) and mixed.dtype == torch.float32
    assert targets.shape == (2, 2)


def test_bad_bytes_raise_jpeg_decode_error() -> None:
    transform = ComposeJPEG(timm_data.create_transform(SIZE, is_training=True))
    buffer = io.BytesIO()
    Image.fromarray(make_photo(64, 64, seed=1)).save(buffer, format="JPEG")
    with pytest.raises(custom_op.JpegDecodeError):
        transform(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    with pytest.raises(custom_op.JpegDecodeError):
        transform(b"\xff\xd8\xff" + b"garbage" * 10)


def test_construction_errors() -> None:
    transform = ComposeJPEG(v1.Compose([v1.CenterCrop(8)]))
    with pytest.raises(TypeError, match="ComposeJPEG"):
        ComposeJPEG(transform)
    with pytest.raises(TypeError, match="int"):
        ComposeJPEG(5)
    with pytest.raises(TypeError, match="unknown decode option"):
        ComposeJPEG(v1.Compose([]), colour="rgb")


def test_cmyk_like_channels_refused_for_pil() -> None:
    transform = ComposeJPEG(v1.Compose([v1.CenterCrop(8)]))
    with pytest.raises(ValueError, match="1 or 3 channels"):
        transform(torch.zeros(4, 16, 16, dtype=torch.uint8))


@pytest.mark.parametrize("name", ["flip-first-then-tensors", "random-crop", "padded-random-crop"])
def test_pipelines_without_resize_are_exact_by_default(folder: pathlib.Path, name: str) -> None:
    # No resize, no PIL kernel: the default route (on uint8 tensors where it can) gives the same.
    transform = V1_PIPELINES[name]()
    assert "on uint8 tensors" in repr(ComposeJPEG(transform))
    for seed, path in enumerate(_jpeg_paths(folder)):
        expected, expected_states = _reference(transform, path, seed)
        got, states = _ours(transform, path.read_bytes(), seed)
        assert torch.equal(got, expected), f"{name}: {path.name}"
        assert torch.equal(states[2], expected_states[2])


@pytest.mark.parametrize("recipe", ["train", "train-uint8"])
@pytest.mark.parametrize("exact", [False, True])
def test_a_one_pixel_jpeg_gives_what_timm_gives(recipe: str, exact: bool) -> None:
    """Issue 24 item 7: timm draws a 0 x 0 window for a 1 x 1 image (seed 1); Pillow crops an
    empty image and resizes it to black. Before, custom_op raised a bare RuntimeError."""
    buffer = io.BytesIO()
    Image.fromarray(np.full((1, 1, 3), 120, dtype=np.uint8)).save(buffer, format="JPEG")
    data = buffer.getvalue()
    transform = timm_data.create_transform(SIZE, **TIMM_RECIPES[recipe])
    empty_windows = 0
    for seed in range(6):
        _seeded(seed)
        first = transform.transforms[0]
        empty_windows += 0 in first.get_params(Image.new("RGB", (1, 1)), first.scale,
                                               first.ratio)[2:]
        with Image.open(io.BytesIO(data)) as image:
            expected, expected_states = _reference(transform, io.BytesIO(data), seed)
        got, states = _ours(transform, custom_op.EncodedJpeg(data, exact=exact), seed)
        assert got.shape == expected.shape and got.dtype == expected.dtype
        assert torch.equal(got, expected), f"seed {seed}"
        assert states[0] == expected_states[0] and torch.equal(states[2], expected_states[2])
    assert empty_windows > 0  # the case this test is about was drawn



#: The default (DCT-scaled) train path against timm on Pillow, uint8 (use_prefetcher), on a
#: 400 x 600 photo-like file: measured 34.98 dB at worst over these seeds, less 0.5 dB.
SCALED_PSNR_FLOOR_DB = 34.4


def test_default_train_path_reaches_dct_scaling_and_stays_close(monkeypatch) -> None:
    """The windows here are at least twice SIZE, so the default decodes at a reduced DCT scale
    (the test counts it): same draws, pixels above the floor and closer to timm's than timm's
    own image moved by one pixel."""
    buffer = io.BytesIO()
    Image.fromarray(make_photo(400, 600, seed=12)).save(buffer, format="JPEG", quality=90)
    data = buffer.getvalue()
    scales = []
    original = custom_op._decode._single._C.decode_and_resized_crop_jpeg

    def counting(data, y, x, height, width, out_height, out_width, scale_num, antialias, *rest,
                 **options):
        # The kernel applies the rule itself (SCALE_AUTO): ask the same rule what it chose.
        scales.append(custom_op._decode._single.choose_scale(height, width, (out_height, out_width),
                                                     antialias)
                      if scale_num == custom_op._decode._single.SCALE_AUTO else scale_num)
        return original(data, y, x, height, width, out_height, out_width, scale_num, antialias,
                        *rest, **options)

    monkeypatch.setattr(custom_op._decode._single._C, "decode_and_resized_crop_jpeg", counting)
    transform = timm_data.create_transform(SIZE, **TIMM_RECIPES["train-uint8"])
    for seed in range(6):
        expected, expected_states = _reference(transform, io.BytesIO(data), seed)
        got, states = _ours(transform, data, seed)
        assert states[0] == expected_states[0] and torch.equal(states[2], expected_states[2])
        measured = _psnr(got, expected)
        assert measured >= SCALED_PSNR_FLOOR_DB, f"seed {seed}: {measured:.2f} dB"
        for dim in (-1, -2):
            moved = torch.cat([expected.narrow(dim, 0, 1),
                               expected.narrow(dim, 0, expected.shape[dim] - 1)], dim=dim)
            assert measured > _psnr(moved, expected), f"seed {seed}"
    assert any(scale < 8 for scale in scales), scales  # the scaled path ran
