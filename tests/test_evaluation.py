"""The evaluation recipe on EncodedJpeg: Resize(N) then a crop, decoded as one window.

A resize of an EncodedJpeg stays pending and a crop after it decodes only the
window its rectangle of the resized image reads (custom_op/_torchvision/_fused_resize.py,
csrc/grid_resample.h). Everything here is compared with torchvision's own
transforms on the decoded image: bit for bit with ``exact=True`` (and wherever
no DCT scale applies), above a stated PSNR floor otherwise; sizes the native
core cannot take fall back to torchvision and must agree exactly too.
"""

from __future__ import annotations

import io
import pickle
import random

import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import custom_op
from custom_op import EncodedJpeg
from custom_op.transforms import CenterCropJPEG, ResizeJPEG, evaluation_transform
from synthetic import make_photo
from _closeness import psnr

#: With DCT scaling allowed, a pending resize decodes at 1/2, 1/4 or 1/8 scale when the window is
#: at least twice, four or eight times the output. On the dense generated photos below, 1/4 and
#: 1/8 stay above 32 dB (measured 35-39 dB; real photos 46-49 dB, bench/eval_bench.py) and 1/2,
#: whose scaled IDCT is the stronger departure from the resize's own filter, above 28 dB
#: (measured 30.0-31.3 dB; real 800 x 533 photos 34-41 dB); a wrong or shifted window scores
#: far below either (under 20 dB).
SCALED_PSNR_FLOOR_DB = 32.0
HALF_SCALE_PSNR_FLOOR_DB = 28.0
INTERPOLATIONS = [v2.InterpolationMode.BILINEAR, v2.InterpolationMode.NEAREST,
                  v2.InterpolationMode.NEAREST_EXACT, v2.InterpolationMode.BICUBIC]


def _jpeg(height: int, width: int, *, subsampling: int = 2, seed: int = 0) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(make_photo(height, width, seed=seed)).save(
        buffer, format="JPEG", quality=90, subsampling=subsampling)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def photos(corpus_by_id) -> dict[str, bytes]:
    """Photo-like files of the recipe's sizes and of degenerate ones, and corpus oddities."""
    made = {
        "375x500-420": _jpeg(375, 500),
        "533x800-444": _jpeg(533, 800, subsampling=0, seed=1),
        "61x97-422": _jpeg(61, 97, subsampling=1, seed=2),
        "1x300": _jpeg(1, 300, seed=3),
        "300x1": _jpeg(300, 1, seed=4),
        "1x1": _jpeg(1, 1, seed=5),
        "2x3": _jpeg(2, 3, seed=6),
    }
    made["gray-7x13"] = corpus_by_id["gray-base-q50-7x13"].data
    made["prog-257x256"] = corpus_by_id["420-prog-q100-257x256"].data
    made["cmyk-57x91"] = corpus_by_id["cmyk-444-base-q75-57x91"].data
    return made


@pytest.fixture(scope="module")
def large_photo() -> bytes:
    """Large enough that the recipe's window is four times its output: DCT scaling applies."""
    return _jpeg(1200, 1800, seed=7)


def reference(data: bytes, transform, mode: str = "rgb") -> torch.Tensor:
    """torchvision's transform on the decoded image (custom_op's full decode, libjpeg's pixels)."""
    return transform(EncodedJpeg(data, mode=mode).decode())



RECIPES = [(256, 224), (32, 30), ([40, 70], 24), (96, [50, 20]), (7, 9)]


@pytest.mark.parametrize("contiguous", [True, False], ids=["planes", "hwc"])
@pytest.mark.parametrize("resize, crop", RECIPES, ids=[f"{r}-{c}" for r, c in RECIPES])
@pytest.mark.parametrize("file_id", ["375x500-420", "533x800-444", "61x97-422", "1x300",
                                     "300x1", "gray-7x13", "cmyk-57x91", "prog-257x256"])
def test_exact_recipe_equals_torchvision(photos, file_id, resize, crop, contiguous) -> None:
    recipe = v2.Compose([v2.Resize(resize), v2.CenterCrop(crop)])
    got = recipe(EncodedJpeg(photos[file_id], exact=True, contiguous=contiguous))
    expected = reference(photos[file_id], recipe)
    assert type(got) is tv_tensors.Image
    assert torch.equal(got, expected), f"{psnr(got, expected):.1f} dB"


@pytest.mark.parametrize("mode", ["gray", "unchanged"])
@pytest.mark.parametrize("file_id", ["375x500-420", "cmyk-57x91"])
def test_exact_recipe_in_other_modes(photos, file_id, mode) -> None:
    recipe = v2.Compose([v2.Resize(40), v2.CenterCrop([30, 36])])
    got = recipe(EncodedJpeg(photos[file_id], exact=True, mode=mode))
    assert torch.equal(got, reference(photos[file_id], recipe, mode))


def test_rectangles_of_the_resize_grid_are_exact(photos) -> None:
    """Any rectangle (not only the centre) of any resize, shrinking or enlarging, with and
    without antialias: the grid resampler against torchvision's resize then crop."""
    rng = random.Random(0)
    for file_id in ("375x500-420", "61x97-422", "2x3"):
        encoded = EncodedJpeg(photos[file_id], exact=True)
        full = encoded.decode()
        for size, antialias in [([128, 171], True), ([128, 171], False), ([300, 33], True),
                                ([5, 800], False), ([61, 50], True)]:
            resized = F.resize(full, size, antialias=antialias)
            pending = F.resize(encoded, size, antialias=antialias)
            assert isinstance(pending, EncodedJpeg) and pending.canvas_size == tuple(size)
            for _ in range(4):
                height, width = rng.randint(1, size[0]), rng.randint(1, size[1])
                top, left = rng.randint(0, size[0] - height), rng.randint(0, size[1] - width)
                got = F.crop(pending, top, left, height, width)
                assert torch.equal(got, resized[:, top:top + height, left:left + width]), \
                    (file_id, size, antialias, top, left, height, width)


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "scaled"])
@pytest.mark.parametrize("contiguous", [True, False], ids=["planes", "hwc"])
@pytest.mark.parametrize("file_id, floor", [("1200x1800", SCALED_PSNR_FLOOR_DB),
                                            ("533x800-444", HALF_SCALE_PSNR_FLOOR_DB)],
                         ids=["quarter", "half"])
def test_default_recipe_where_dct_scaling_applies(photos, large_photo, file_id, floor, exact,
                                                  contiguous) -> None:
    """Resize(256) -> CenterCrop(224): the window of a 1200x1800 file is 4.7x the output, of a
    533x800 file 2.1x, so without exact they decode at 1/4 and 1/2 scale and stay close; with
    exact they equal torchvision."""
    data = large_photo if file_id == "1200x1800" else photos[file_id]
    recipe = v2.Compose([v2.Resize(256), v2.CenterCrop(224)])
    got = recipe(EncodedJpeg(data, exact=exact, contiguous=contiguous))
    expected = reference(data, recipe)
    assert got.shape == expected.shape == (3, 224, 224)
    assert got.is_contiguous() == contiguous  # HWC memory as decode_jpeg's, or planes
    if exact:
        assert torch.equal(got, expected)
    else:
        assert not torch.equal(got, expected)  # the scaled path ran
        assert psnr(got, expected) >= floor


def test_recipe_without_exact_is_exact_when_no_half_scale_fits(photos) -> None:
    """A window under twice the output (375x500: 328 -> 224) decodes at full scale: exact by
    default too."""
    recipe = v2.Compose([v2.Resize(256), v2.CenterCrop(224)])
    data = photos["375x500-420"]
    assert torch.equal(recipe(EncodedJpeg(data)), reference(data, recipe))


def test_issue_17_resize_of_a_one_pixel_row_then_center_crop(photos) -> None:
    """Resize(256) of a 1 x 300 file is 256 x 76800, beyond the native core's 65535: it raised
    'size=(76800, 256) is larger than 65535'; torchvision's result is expected."""
    recipe = v2.Compose([v2.Resize(256), v2.CenterCrop(224)])
    for file_id in ("1x300", "300x1"):
        got = recipe(EncodedJpeg(photos[file_id]))
        assert torch.equal(got, reference(photos[file_id], recipe))


DEGENERATE = [
    ("int", lambda: v2.Resize(256)),
    ("tuple", lambda: v2.Resize((3, 700))),
    ("max_size", lambda: v2.Resize(20, max_size=40)),
    ("none-max_size", lambda: v2.Resize(None, max_size=64)),
    ("antialias-false", lambda: v2.Resize(50, antialias=False)),
    ("antialias-none", lambda: v2.Resize([9, 4], antialias=None)),
    *[(f"{mode.value}", lambda mode=mode: v2.Resize(33, interpolation=mode))
      for mode in INTERPOLATIONS[1:]],
]


@pytest.mark.parametrize("crop", [None, 5, (2, 40), 400], ids=["no-crop", "crop5", "crop2x40",
                                                                "crop-padded"])
@pytest.mark.parametrize("name, make", DEGENERATE, ids=[name for name, _ in DEGENERATE])
@pytest.mark.parametrize("file_id", ["1x300", "300x1", "1x1", "2x3", "61x97-422"])
@pytest.mark.parametrize("exact", [True, False], ids=["exact", "scaled"])
def test_degenerate_sizes_match_torchvision(photos, file_id, name, make, crop, exact) -> None:
    """Whatever torchvision does with the decoded image, the encoded path does the same: bit
    for bit with exact, within the half scale's floor without (Resize(20, max_size=40) of the
    61x97 file shrinks 3x: it decodes at 1/2 scale)."""
    steps = [make()] + ([] if crop is None else [v2.CenterCrop(crop)])
    recipe = v2.Compose(steps)

    def encoded_run():
        got = recipe(EncodedJpeg(photos[file_id], exact=exact))
        # A resize last in the pipeline stays pending: the image is computed when used.
        return got.decode() if isinstance(got, EncodedJpeg) else got

    try:
        expected = reference(photos[file_id], recipe)
    except RuntimeError as error:  # e.g. a side of 0 that max_size asks for: torchvision refuses
        with pytest.raises(RuntimeError, match=str(error)[:40]):
            encoded_run()
        return
    got = encoded_run()
    if exact:
        assert torch.equal(got, expected)
    else:
        assert got.shape == expected.shape and psnr(got, expected) >= HALF_SCALE_PSNR_FLOOR_DB


def test_pending_resize_acts_as_the_resized_image(photos) -> None:
    """Exact, so that every use of the pending resize is compared bit for bit (without it,
    Resize(100) of 375x500 decodes at 1/2 scale)."""
    data = photos["375x500-420"]
    resized = reference(data, v2.Resize(100))
    pending = v2.Resize(100)(EncodedJpeg(data, exact=True))
    assert isinstance(pending, EncodedJpeg) and pending.pending_resize is not None
    assert F.get_size(pending) == [100, 133] and pending.file_size == (375, 500)
    assert pending.size() == resized.shape and pending.numel() == resized.numel()
    assert torch.equal(torch.stack([pending, pending]), torch.stack([resized, resized]))
    assert torch.equal(pending.float(), resized.float())
    assert torch.equal(F.horizontal_flip(pending), F.horizontal_flip(resized))
    assert torch.equal(F.resized_crop(pending, 3, 4, 50, 60, [20, 20]),
                       F.resized_crop(resized, 3, 4, 50, 60, [20, 20]))
    assert torch.equal(F.resize(pending, 40), F.resize(resized, 40))
    # Unwrapped (a collate function stacking images), it is the resized image, not the bytes;
    # its shape is the resized image's without decoding, and encoded_bytes() gives the file.
    assert pending.shape == resized.shape and pending.ndim == 3
    assert torch.equal(pending.as_subclass(torch.Tensor), resized.as_subclass(torch.Tensor))
    assert bytes(pending.encoded_bytes().numpy()) == data
    # Pickled (out of a DataLoader worker), it is the resized image: decoded where it was made.
    copy = pickle.loads(pickle.dumps(v2.Resize(100)(EncodedJpeg(data, exact=True))))
    assert type(copy) is tv_tensors.Image and torch.equal(copy, resized)
    assert vars(pending.clone())["pending_resize"] == pending.pending_resize
    torch.manual_seed(3)
    got = v2.RandomCrop(64)(pending)
    torch.manual_seed(3)
    assert torch.equal(got, v2.RandomCrop(64)(resized))


def test_center_crop_after_resize_decodes_only_the_window(photos, monkeypatch) -> None:
    """The fused path never computes the whole resize."""
    from custom_op._torchvision import _encoded_jpeg

    def whole_resize(_encoded):
        raise AssertionError("the whole image was resized")

    monkeypatch.setattr(_encoded_jpeg, "resized_whole", whole_resize)
    recipe = v2.Compose([v2.Resize(256), v2.CenterCrop(224)])
    assert recipe(EncodedJpeg(photos["375x500-420"])).shape == (3, 224, 224)
    with pytest.raises(AssertionError, match="whole image"):
        v2.Resize(256)(EncodedJpeg(photos["375x500-420"])).decode()


@pytest.mark.parametrize("exact_on", ["resize", "crop"])
def test_resize_jpeg_then_center_crop_jpeg(photos, exact_on) -> None:
    """The *JPEG transforms fuse too, from raw bytes; exact on either transform holds."""
    data = photos["533x800-444"]
    recipe = v2.Compose([ResizeJPEG(256, exact=exact_on == "resize"),
                         CenterCropJPEG(224, exact=exact_on == "crop")])
    got = recipe(data)
    assert type(got) is tv_tensors.Image
    assert torch.equal(got, reference(data, v2.Compose([v2.Resize(256), v2.CenterCrop(224)])))


def test_evaluation_transform_of_a_torchvision_preset(photos) -> None:
    """ResNet50_Weights.DEFAULT.transforms(): the preset resizes uint8 images in float (v1
    functionals), v2 natively in uint8; the helper equals the v2 steps bit for bit and the
    preset within one level of the uint8 image."""
    from torchvision.models import ResNet50_Weights
    from torchvision.transforms import functional as F1

    preset = ResNet50_Weights.DEFAULT.transforms()
    data = photos["533x800-444"]
    full = EncodedJpeg(data).decode().as_subclass(torch.Tensor)
    v2_steps = v2.Compose([v2.Resize(preset.resize_size), v2.CenterCrop(preset.crop_size)])(full)
    expected = F1.normalize(F1.convert_image_dtype(v2_steps, torch.float), preset.mean, preset.std)
    got = evaluation_transform(preset, exact=True)(data)
    assert got.dtype == torch.float32 and torch.equal(got, expected)
    one_level = 1 / 255 / min(preset.std)
    assert (got - preset(full)).abs().max().item() <= one_level + 1e-6
    with pytest.raises(TypeError, match="ImageClassification"):
        evaluation_transform(v2.Resize(256))
