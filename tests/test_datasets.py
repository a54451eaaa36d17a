"""custom_op.datasets: JpegFolder (ImageFolder's files and labels, JPEGs left undecoded) and
CocoJpegDetection (CocoDetection's targets, JPEGs left undecoded).

The tree mixes what a real folder holds: photo-like JPEGs from
synthetic (the generator at the repository root), a PNG under a .JPEG name (as in ImageNet), a CMYK and a
grayscale JPEG, an RGBA PNG, a BMP (which torchvision cannot decode, so
Pillow does), a file in a nested folder, names in upper case, and files that
must be ignored. Listing must equal torchvision's ImageFolder; every file must
come out of RandomResizedCropJPEG at the requested size; bad files must raise
JpegDecodeError naming the file.
"""

from __future__ import annotations

import pathlib
import re
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision.datasets import DatasetFolder, ImageFolder
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as v2_functional

import custom_op
from custom_op.datasets import JpegFolder, load_sample
from synthetic import make_smooth_noise, write_jpeg_folder
from custom_op.transforms import CenterCropJPEG, RandomResizedCropJPEG

CLASSES = ("cat", "dog", "eel")
GENERATED = [f"{CLASSES[index % 3]}/{index:05d}.jpg" for index in range(6)]
# Relative path -> (Pillow mode, Pillow format, size (height, width), save options).
EXTRA = {
    "cat/nested/deeper/photo.jpeg": ("RGB", "JPEG", (50, 70), {"quality": 85}),
    "dog/n02105855_2933.JPEG": ("RGB", "PNG", (61, 83), {}),  # a PNG under a JPEG name
    "dog/cmyk.jpg": ("CMYK", "JPEG", (45, 66), {"quality": 90}),
    "eel/gray.JPG": ("L", "JPEG", (70, 40), {"quality": 90}),
    "eel/rgba.png": ("RGBA", "PNG", (33, 47), {}),
    "eel/picture.bmp": ("RGB", "BMP", (30, 90), {}),
    "eel/progressive.jpg": ("RGB", "JPEG", (65, 96), {"progressive": True}),
}
NOT_LISTED = ["eel/notes.txt", "loose.jpg", "eel/archive.jpg.gz"]
NOT_JPEG = {"dog/n02105855_2933.JPEG", "eel/rgba.png", "eel/picture.bmp"}

# torchvision 0.29 deprecates torchvision.io's decoders (for TorchCodec); JpegFolder still uses
# decode_image for files that are not JPEGs, as asked, and this says so on every call.
pytestmark = pytest.mark.filterwarnings(
    "ignore:The image decoding and encoding capabilities of TorchVision are deprecated"
    ":DeprecationWarning")


def _pixels(mode: str, height: int, width: int, seed: int) -> Image.Image:
    image = Image.fromarray(make_smooth_noise(height, width, seed=seed))
    if mode == "RGBA":
        image.putalpha(Image.fromarray(make_smooth_noise(height, width, seed=seed + 1)[..., 0]))
        return image
    return image.convert(mode)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("tree")
    write_jpeg_folder(root, len(GENERATED), 48, 64, classes=CLASSES, seed=1)
    for seed, (relative, (mode, file_format, (height, width), options)) in enumerate(EXTRA.items()):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        _pixels(mode, height, width, seed).save(path, format=file_format, **options)
    for relative in NOT_LISTED:
        (root / relative).write_bytes(b"not an image")
    return root


@pytest.fixture(scope="module")
def bad_tree(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """One good JPEG and four bad files, each of which ImageFolder with Pillow fails on too."""
    root = tmp_path_factory.mktemp("bad")
    (root / "a").mkdir()
    _pixels("RGB", 64, 96, seed=9).save(root / "a" / "good.jpg", quality=90)
    # Progressive, so that every window needs the missing scans, whatever the crop.
    _pixels("RGB", 64, 96, seed=9).save(root / "a" / "truncated.jpg", quality=90, progressive=True)
    data = (root / "a" / "truncated.jpg").read_bytes()
    (root / "a" / "truncated.jpg").write_bytes(data[:len(data) // 2])
    (root / "a" / "garbage.jpg").write_bytes(b"\xff\xd8\xff\xe0" + bytes(range(256)) * 4)
    (root / "a" / "text.jpg").write_bytes(b"this is not an image at all")
    (root / "a" / "empty.jpg").write_bytes(b"")
    return root


def _index(dataset: JpegFolder, root: pathlib.Path, relative: str) -> int:
    return [path for path, _ in dataset.samples].index(str(root / relative))


@pytest.mark.parametrize("as_str", [True, False], ids=["str", "path"])
def test_listing_equals_image_folder(tree: pathlib.Path, as_str: bool) -> None:
    root = str(tree) if as_str else tree
    ours, theirs = JpegFolder(root), ImageFolder(root)
    assert ours.classes == theirs.classes == list(CLASSES)
    assert ours.class_to_idx == theirs.class_to_idx
    assert ours.samples == theirs.samples
    assert ours.imgs == theirs.imgs
    assert ours.targets == theirs.targets
    assert len(ours) == len(theirs) == len(GENERATED) + len(EXTRA)
    assert all(isinstance(path, str) for path, _ in ours.samples)


@pytest.mark.parametrize("extensions", [(".png",), ".jpg", (".bmp", ".jpeg")])
def test_listing_with_extensions_equals_dataset_folder(tree: pathlib.Path, extensions) -> None:
    ours = JpegFolder(tree, extensions=extensions, allow_empty=True)
    theirs = DatasetFolder(str(tree), loader=lambda path: path, extensions=extensions,
                           allow_empty=True)
    assert ours.samples == theirs.samples and ours.classes == theirs.classes


def test_extensions_ignore_case_on_both_sides(tree: pathlib.Path) -> None:
    """(".JPG",) lists .jpg and .JPG files; ImageFolder would need (".jpg",)."""
    upper = JpegFolder(tree, extensions=(".JPG",), allow_empty=True)
    lower = JpegFolder(tree, extensions=(".jpg",), allow_empty=True)
    assert upper.samples == lower.samples
    assert str(tree / "eel/gray.JPG") in [path for path, _ in upper.samples]


@pytest.mark.parametrize("relative", GENERATED + list(EXTRA))
def test_every_file_goes_through_random_resized_crop(tree: pathlib.Path, relative: str) -> None:
    dataset = JpegFolder(tree, transform=RandomResizedCropJPEG(64))
    index = _index(dataset, tree, relative)
    for seed in range(3):
        torch.manual_seed(seed)
        image, target = dataset[index]
        assert image.dtype == torch.uint8 and image.shape == (3, 64, 64)
        assert target == CLASSES.index(relative.split("/")[0])


@pytest.mark.parametrize("relative", GENERATED[:1] + list(EXTRA))
def test_without_transform_jpegs_stay_encoded_and_others_are_decoded(tree: pathlib.Path,
                                                                     relative: str) -> None:
    dataset = JpegFolder(tree)
    data, _ = dataset[_index(dataset, tree, relative)]
    path = tree / relative
    if relative in NOT_JPEG:
        with Image.open(path) as image:  # what ImageFolder's loader gives
            expected = torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1)
        assert data.shape == expected.shape and data.is_contiguous()
        assert torch.equal(data, expected)
    else:
        assert isinstance(data, custom_op.EncodedJpeg) and data.dtype == torch.uint8
        assert data.nbytes == path.stat().st_size
        assert bytes(data.as_subclass(torch.Tensor).numpy()) == path.read_bytes()


def test_decoded_files_take_the_same_window(tree: pathlib.Path) -> None:
    """A PNG's decoded tensor gets the crop torchvision would cut from it."""
    dataset = JpegFolder(tree, transform=CenterCropJPEG((21, 37)))
    index = _index(dataset, tree, "dog/n02105855_2933.JPEG")
    image, _ = dataset[index]
    full = load_sample(dataset.samples[index][0])
    assert torch.equal(image, v2_functional.center_crop(full, [21, 37]))


@pytest.mark.parametrize("relative", sorted(NOT_JPEG))
def test_without_torchvision_pillow_decodes(tree: pathlib.Path, monkeypatch,
                                            relative: str) -> None:
    expected = load_sample(str(tree / relative))
    monkeypatch.setitem(sys.modules, "torchvision.io", None)  # makes the import fail
    assert torch.equal(load_sample(str(tree / relative)), expected)


def test_gray_and_cmyk_jpegs_come_out_rgb(tree: pathlib.Path) -> None:
    """Compared with Pillow's decode, which ImageFolder gives (same libjpeg, same CMYK rule)."""
    dataset = JpegFolder(tree, transform=CenterCropJPEG((30, 30)))
    for relative in ("eel/gray.JPG", "dog/cmyk.jpg"):
        image, _ = dataset[_index(dataset, tree, relative)]
        with Image.open(tree / relative) as pillow:
            full = torch.from_numpy(np.array(pillow.convert("RGB"))).permute(2, 0, 1)
        difference = (image.int() - v2_functional.center_crop(full, [30, 30]).int()).abs().max()
        # Same IDCT (islow), same upsampling, same CMYK rule: equal, as the project promises.
        assert difference == 0, relative


@pytest.mark.parametrize("name, message", [
    ("truncated.jpg", "Premature end of JPEG file"),
    ("garbage.jpg", "JPEG"),  # a JPEG signature, then no image: libjpeg's message
    ("text.jpg", r"not a JPEG \(it starts with 74 68 69 73\), and it could not be decoded"),
    ("empty.jpg", r"not a JPEG \(the file is empty\)"),
])
def test_bad_files_raise_jpeg_decode_error_naming_the_path(bad_tree: pathlib.Path, name: str,
                                                          message: str) -> None:
    path = str(bad_tree / "a" / name)
    for transform in (RandomResizedCropJPEG(32), CenterCropJPEG(16)):
        dataset = JpegFolder(bad_tree, transform=transform)
        index = _index(dataset, bad_tree, f"a/{name}")
        with pytest.raises(custom_op.JpegDecodeError, match=rf"^{re.escape(path)}: .*{message}"):
            dataset[index]
    with pytest.raises(OSError):  # ImageFolder with Pillow fails on the same file
        ImageFolder(bad_tree)[index]


def test_good_file_next_to_bad_ones_decodes(bad_tree: pathlib.Path) -> None:
    dataset = JpegFolder(bad_tree, transform=RandomResizedCropJPEG(32))
    image, target = dataset[_index(dataset, bad_tree, "a/good.jpg")]
    assert image.shape == (3, 32, 32) and target == 0


def _error(factory, *args, **kwargs) -> tuple[type, str]:
    with pytest.raises(Exception) as info:
        factory(*args, **kwargs)
    return type(info.value), str(info.value)


def test_empty_roots_fail_as_image_folder_does(tmp_path: pathlib.Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    error = _error(JpegFolder, empty)
    assert error == _error(ImageFolder, empty)
    assert error[0] is FileNotFoundError and error[1].startswith("Couldn't find any class folder")

    missing = tmp_path / "missing"
    assert _error(JpegFolder, missing)[0] is _error(ImageFolder, missing)[0] is FileNotFoundError

    (empty / "b_empty").mkdir()
    (empty / "a_full").mkdir()
    (empty / "c_text").mkdir()
    (empty / "c_text" / "notes.txt").write_text("no image here")
    _pixels("RGB", 8, 8, seed=0).save(empty / "a_full" / "x.png")
    error = _error(JpegFolder, empty)
    assert error == _error(ImageFolder, empty)
    assert error[0] is FileNotFoundError
    assert error[1].startswith("Found no valid file for the classes b_empty, c_text. ")

    ours, theirs = JpegFolder(empty, allow_empty=True), ImageFolder(empty, allow_empty=True)
    assert ours.classes == theirs.classes == ["a_full", "b_empty", "c_text"]
    assert ours.samples == theirs.samples and ours.targets == theirs.targets == [0]


def test_target_transform_and_repr(tree: pathlib.Path) -> None:
    dataset = JpegFolder(tree, transform=CenterCropJPEG(8), target_transform=CLASSES.__getitem__)
    image, label = dataset[0]
    assert image.shape == (3, 8, 8) and label == "cat"
    text = repr(dataset)
    assert text.startswith("Dataset JpegFolder\n    Number of datapoints: 13\n")
    assert "CenterCropJPEG(size=(8, 8)" in text


@pytest.mark.timeout(180)
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_data_loader_workers(tree: pathlib.Path, context: str) -> None:
    dataset = JpegFolder(tree, transform=RandomResizedCropJPEG(32))
    loader = DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2,
                        multiprocessing_context=context, timeout=60,
                        generator=torch.Generator().manual_seed(0))
    labels = []
    batches = list(loader)
    for images, targets in batches:
        assert images.dtype == torch.uint8 and images.shape == (len(targets), 3, 32, 32)
        labels += targets.tolist()
    assert [len(targets) for _, targets in batches] == [4, 4, 4, 1]
    assert sorted(labels) == sorted(dataset.targets)


def test_is_valid_file_comes_from_torchvision(tree: pathlib.Path) -> None:
    def only_gray(path: str) -> bool:
        return "gray" in path

    ours = JpegFolder(tree, is_valid_file=only_gray, allow_empty=True)
    theirs = DatasetFolder(str(tree), loader=lambda path: path, is_valid_file=only_gray,
                           allow_empty=True)
    assert ours.samples == theirs.samples == [(str(tree / "eel/gray.JPG"), 2)]
    with pytest.raises(ValueError, match="Both extensions and is_valid_file cannot be None "
                                         "or not None at the same time"):
        JpegFolder(tree, extensions=(".jpg",), is_valid_file=only_gray)


@pytest.mark.parametrize("relative", GENERATED[:2] + list(EXTRA))
def test_torchvision_transforms_work_on_the_items(tree: pathlib.Path, relative: str) -> None:
    """Keeping v2.RandomResizedCrop while switching from ImageFolder just works."""
    transform = v2.Compose([v2.RandomResizedCrop(24), v2.RandomHorizontalFlip()])
    dataset = JpegFolder(tree, transform=transform, exact=True)
    index = _index(dataset, tree, relative)
    image_folder = ImageFolder(tree, transform=v2.Compose([v2.ToImage(), transform]))
    for seed in range(3):
        torch.manual_seed(seed)
        image, target = dataset[index]
        torch.manual_seed(seed)
        expected, expected_target = image_folder[index]
        assert type(image) is tv_tensors.Image and image.shape == expected.shape == (3, 24, 24)
        assert target == expected_target
        if relative in NOT_JPEG:  # Pillow's pixels on both sides
            assert torch.equal(image, expected)


def test_items_of_a_folder_are_encoded_jpegs_with_the_options(tree: pathlib.Path) -> None:
    dataset = JpegFolder(tree, mode="gray", strict=False, seek=False)
    image, _ = dataset[_index(dataset, tree, GENERATED[0])]
    assert isinstance(image, custom_op.EncodedJpeg) and image.num_channels == 1
    assert (image.options.strict, image.options.seek) == (False, False)
    assert image.source == str(tree / GENERATED[0])
    png, _ = dataset[_index(dataset, tree, "eel/rgba.png")]
    assert type(png) is tv_tensors.Image and png.shape == (1, 33, 47)


def test_on_error_substitute_replaces_and_logs_each_bad_file(bad_tree: pathlib.Path,
                                                             caplog) -> None:
    dataset = JpegFolder(bad_tree, transform=v2.CenterCrop(16), on_error="substitute")
    good = _index(dataset, bad_tree, "a/good.jpg")
    expected, _ = dataset[good]
    with caplog.at_level("WARNING", logger="custom_op.datasets"):
        items = [dataset[index] for index in range(len(dataset))]
    for image, _ in items:
        assert torch.equal(image, expected)  # every bad file was replaced by the good one
    assert dataset.substitutions == len(dataset) - 1
    named = [name for name in ("truncated.jpg", "garbage.jpg", "text.jpg", "empty.jpg")
             if any(name in record.getMessage() for record in caplog.records)]
    assert named == ["truncated.jpg", "garbage.jpg", "text.jpg", "empty.jpg"]
    assert "4 replacements so far" in caplog.records[-1].getMessage()


def test_on_error_substitute_gives_up_when_nothing_decodes(bad_tree: pathlib.Path,
                                                           tmp_path: pathlib.Path) -> None:
    (tmp_path / "a").mkdir()
    for name in ("x.jpg", "y.jpg"):
        (tmp_path / "a" / name).write_bytes(b"\xff\xd8\xff\xe0 broken")
    dataset = JpegFolder(tmp_path, on_error="substitute")
    with pytest.raises(custom_op.JpegDecodeError, match=r"x\.jpg: .*none of the next"):
        dataset[0]
    with pytest.raises(ValueError, match="on_error must be one of"):
        JpegFolder(tmp_path, on_error="skip")
