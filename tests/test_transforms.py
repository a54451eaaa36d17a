"""custom_op.transforms: the same windows as torchvision's crops, decoded from the bytes.

RandomCropJPEG draws its window as torchvision.transforms.v2.RandomCrop does
(top, then left, each with torch.randint on the global generator, and only for
a side larger than the crop), so with the same torch.manual_seed it picks the
window torchvision would, and its pixels equal that window of a full decode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.functional as v1_functional
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as v2_functional

import custom_op
from custom_op.transforms import CenterCropJPEG, RandomCropJPEG

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
    torch.manual_seed(seed)
    ours = RandomCropJPEG(size)(data)
    ours_next = torch.rand(1)
    torch.manual_seed(seed)
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
        torch.manual_seed(seed)
        y, x, h, w = transform.get_params(data)
        after_params = torch.rand(1)
        torch.manual_seed(seed)
        crop = transform(data)
        assert torch.equal(crop, full[:, y:y + h, x:x + w])
        torch.manual_seed(seed)
        reference = v2.RandomCrop(size)(full)
        assert torch.equal(crop, reference), f"seed {seed}"
        assert torch.equal(torch.rand(1), after_params), f"seed {seed}: different number of draws"


def test_random_crop_equals_v1_when_both_sides_are_smaller(corpus_by_id) -> None:
    """v1's RandomCrop.get_params agrees whenever both sides need a draw."""
    data = corpus_by_id["420-base-q90-120x200"].data
    full = full_decode(data)
    for seed in SEEDS:
        torch.manual_seed(seed)
        window = RandomCropJPEG((50, 70)).get_params(data)
        torch.manual_seed(seed)
        assert window == tuple(v1.RandomCrop.get_params(full, (50, 70)))


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


@pytest.mark.parametrize("transform_class", [RandomCropJPEG, CenterCropJPEG])
@pytest.mark.parametrize("size", [121, (121, 10), (10, 201), (121, 201)], ids=_size_id)
def test_image_smaller_than_size_raises_value_error(corpus_by_id, transform_class, size) -> None:
    data = corpus_by_id["420-base-q90-120x200"].data
    height, width = as_pair(size)
    message = (rf"{transform_class.__name__}: crop size {height} x {width} \(height x width\) "
               rf"is larger than the 120 x 200 image")
    with pytest.raises(ValueError, match=message):
        transform_class(size)(data)


@pytest.mark.parametrize("size", [0, (0, 5), (5, -1)], ids=_size_id)
def test_non_positive_size_raises_value_error(size) -> None:
    for transform_class in (RandomCropJPEG, CenterCropJPEG):
        with pytest.raises(ValueError, match="size must be positive"):
            transform_class(size)


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
    torch.manual_seed(seed)
    got = ours(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    torch.manual_seed(seed)
    expected = reference(full_decode(data))
    assert got.dtype == torch.float32 and got.shape == (3, 100, 150)
    assert torch.equal(got, expected)


def test_center_crop_in_a_v2_compose(corpus_by_id) -> None:
    data = corpus_by_id["420-base-q90-120x200"].data
    pipeline = v2.Compose([CenterCropJPEG(64), v2.RandomHorizontalFlip(p=1.0)])
    expected = v2_functional.center_crop(full_decode(data), [64, 64]).flip(-1)
    assert torch.equal(pipeline(data), expected)
