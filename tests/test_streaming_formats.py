"""MosaicML Streaming (MDS) and LitData datasets read with their JPEG column encoded.

Each is written here with its library's own writer (MDSWriter, litdata's
BinaryWriter, the writer litdata.optimize runs) from generated JPEG files.
Full decodes are compared with what the library's own reader returns, crops
with the per-sample path (an EncodedJpeg of the same file), and the batch lane
with the per-sample pipeline seeded from each sample's stream.
"""

from __future__ import annotations

import importlib.util
import pathlib

import litdata  # requirements-formats.txt installs both: a missing one fails the run, no skip
import pytest
import streaming
import torch
from litdata.streaming.writer import BinaryWriter
from PIL import Image
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from custom_op import EncodedJpeg, JpegDecodeError
from custom_op.datasets import LitJpegs, MdsJpegs
from custom_op.lane import BatchLane
from custom_op.transforms import decode_remaining
from synthetic import make_photo, make_smooth_noise
from test_orientation import encode, exif_segment, with_exif

#: (height, width) and encoder options of each good file: 4:2:0 odd sizes, 4:4:4, gray,
#: and a file turned by EXIF (LitData's reader turns it, MDS's does not).
GOOD = [((37, 51), {}), ((48, 40), {"subsampling": 0}), ((33, 30), {"gray": True}),
        ((30, 44), {"exif": 6})]
CORRUPT = len(GOOD)  # the last sample: a JPEG signature, then nothing a decoder can read


def _jpeg(size, options, seed: int) -> bytes:
    pixels = make_photo(*size, seed=seed)
    if options.get("gray"):
        pixels = pixels[:, :, 0]
    data = encode(pixels, **({"subsampling": options["subsampling"]}
                             if "subsampling" in options else {}))
    return with_exif(data, exif_segment(options["exif"])) if "exif" in options else data


def _opened(path: pathlib.Path, data: bytes, header: bytes) -> Image.Image:
    """A PIL image opened from ``path`` (reading ``header``'s header), whose file then holds
    ``data``: the writers store the file's bytes as they find them when they write."""
    path.write_bytes(header)
    image = Image.open(path)
    path.write_bytes(data)
    return image


def _opened_files(root: pathlib.Path, files: list[bytes]) -> list[Image.Image]:
    return [_opened(root / f"{index}.jpg", data, files[0] if index == CORRUPT else data)
            for index, data in enumerate(files)]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("formats")
    files = [_jpeg(size, options, seed) for seed, (size, options) in enumerate(GOOD)]
    files.append(b"\xff\xd8\xff")
    mds = root / "mds"
    with streaming.MDSWriter(out=str(mds), columns={"image": "jpeg", "label": "int"}) as writer:
        for index, image in enumerate(_opened_files(root, files)):
            writer.write({"image": image, "label": index})
    lit = root / "lit"
    writer = BinaryWriter(str(lit), chunk_bytes="1MB")
    for index, image in enumerate(_opened_files(root, files)):
        writer.add_item(index, {"image": image, "label": index})
    writer.done()
    writer.merge()
    return {"files": files, "mds": str(mds), "lit": str(lit), "root": root}


def _theirs(kind: str, written, index: int) -> torch.Tensor:
    """What the library's own reader returns for ``index``, as a uint8 RGB tensor."""
    if kind == "mds":
        image = streaming.LocalDataset(written["mds"])[index]["image"]
        return F.pil_to_tensor(image.convert("RGB"))
    return litdata.StreamingDataset(written["lit"])[index]["image"]


def _ours(kind: str, written, **options):
    return (MdsJpegs if kind == "mds" else LitJpegs)(written[kind], **options)


@pytest.mark.parametrize("kind", ["mds", "lit"])
def test_a_full_decode_is_their_readers(kind, written) -> None:
    """Both readers decode with libjpeg-turbo's default (islow) IDCT and fancy upsampling, as
    custom_op does (MDS through Pillow, LitData through torchvision, or Pillow for a file with
    EXIF), so the pixels are equal, not close; a file turned by EXIF is turned by LitData only."""
    dataset = _ours(kind, written)
    for index in range(len(GOOD)):
        image, label = dataset[index]
        assert isinstance(image, EncodedJpeg) and int(label) == index
        assert torch.equal(decode_remaining(image), _theirs(kind, written, index)), index
    assert dataset[3][0].canvas_size == ((44, 30) if kind == "lit" else (30, 44))


@pytest.mark.parametrize("kind", ["mds", "lit"])
def test_a_crop_is_the_per_sample_paths(kind, written) -> None:
    crop = v2.RandomResizedCrop(24)
    dataset = _ours(kind, written, transform=crop)
    for index in range(len(GOOD)):
        torch.manual_seed(index)
        image, _ = dataset[index]
        torch.manual_seed(index)
        expected = crop(EncodedJpeg(written["files"][index],
                                    apply_exif_orientation=kind == "lit"))
        assert torch.equal(image, decode_remaining(expected)), index


@pytest.mark.parametrize("kind", ["mds", "lit"])
def test_the_lane_is_the_per_sample_pipeline(kind, written) -> None:
    make = lambda: v2.Compose([v2.RandomResizedCrop(16), v2.RandomHorizontalFlip()])  # noqa: E731
    lane = BatchLane(_ours(kind, written), make(), seed=3)
    per_sample = _ours(kind, written, transform=make())
    indices = [2, 0, 3, 1]
    expected = []
    for index in indices:
        with torch.random.fork_rng():
            torch.manual_seed(lane.sample_seed(index))
            expected.append(per_sample[index][0])
    images, labels = lane(indices)
    assert torch.equal(images, torch.stack(expected))
    assert [int(label) for label in labels] == indices


@pytest.mark.parametrize("kind", ["mds", "lit"])
def test_a_corrupt_sample_is_named(kind, written) -> None:
    named = rf"{kind}: (sample|item) {CORRUPT}\b"
    with pytest.raises(JpegDecodeError, match=named):
        _ours(kind, written)[CORRUPT]
    with pytest.raises(JpegDecodeError, match=named):
        BatchLane(_ours(kind, written), v2.RandomResizedCrop(16))([0, CORRUPT])


def test_an_mds_streaming_dataset_is_read_as_its_folder(written) -> None:
    dataset = MdsJpegs(streaming.StreamingDataset(local=written["mds"], batch_size=2))
    assert len(dataset) == len(written["files"])
    for index in range(len(GOOD)):
        assert dataset.record(index) == MdsJpegs(written["mds"]).record(index)
        assert bytes(dataset.record(index)[0]) == written["files"][index]


def test_an_mds_png_column_decodes_and_a_pixel_column_is_refused(tmp_path) -> None:
    """A ``png`` column is decoded in full (lossless: MDS's reader gives the same pixels); a
    ``pil`` column holds pixels, not a file, and is refused when the dataset is made."""
    pixels = make_smooth_noise(20, 30, seed=1)
    for encoding in ("png", "pil"):
        with streaming.MDSWriter(out=str(tmp_path / encoding),
                                 columns={"image": encoding, "label": "int"}) as writer:
            writer.write({"image": Image.fromarray(pixels), "label": 0})
    image, _ = MdsJpegs(tmp_path / "png")[0]
    assert torch.equal(image, torch.from_numpy(pixels).permute(2, 0, 1))
    with pytest.raises(ValueError, match=r"column 'image' has the MDS encoding 'pil'"):
        MdsJpegs(tmp_path / "pil")
    with pytest.raises(ValueError, match=r"no column 'cls'"):
        MdsJpegs(tmp_path / "png", label_column="cls")


def test_a_litdata_pixel_column_is_refused_naming_the_item(tmp_path) -> None:
    """litdata stores a PIL image not opened from a JPEG file as pixels ('pil')."""
    writer = BinaryWriter(str(tmp_path), chunk_bytes="1MB")
    writer.add_item(0, {"image": Image.fromarray(make_smooth_noise(20, 30, seed=2)), "label": 0})
    writer.done()
    writer.merge()
    with pytest.raises(TypeError, match=r"item 0: 'image' holds a .*'pil'"):
        LitJpegs(tmp_path)[0]


@pytest.mark.parametrize("kind, module", [("mds", "streaming"), ("litdata", "litdata")])
def test_a_missing_library_names_the_extra(monkeypatch, tmp_path, kind, module) -> None:
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == module else found(name, *a))
    with pytest.raises(ImportError, match=rf"pip install 'custom_op\[{kind}\]'"):
        (MdsJpegs if kind == "mds" else LitJpegs)(str(tmp_path))


@pytest.mark.parametrize("kind", ["mds", "lit"])
def test_bad_arguments_are_refused(kind, written) -> None:
    with pytest.raises(ValueError, match="on_error must be one of"):
        _ours(kind, written, on_error="skip")
    with pytest.raises(TypeError, match="colour"):
        _ours(kind, written, colour="rgb")
    with pytest.raises(TypeError, match="transform must be callable"):
        _ours(kind, written, transform="crop")
    if kind == "lit":
        with pytest.raises(ValueError, match="cannot set serializers"):
            _ours(kind, written, dataset_options={"serializers": {}})
    else:
        with pytest.raises(TypeError, match="expected a folder of MDS shards"):
            MdsJpegs(object())
