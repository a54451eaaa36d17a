"""What each lane source reads is what the per-sample pipeline of its kind reads.

Channel counts: a JpegFolder's non-JPEG files (a PNG, decoded by Pillow in the
folder's mode) give the per-sample pipeline's channels in the lane, also in a
batch without any JPEG. EXIF orientation: one default per source kind, the
same per sample and batched: a folder and tar shards show the image as
stored (ImageFolder, webdataset's decoders), Hugging Face rows turned
(``datasets``' Image()). The per-sample pipelines are JpegFolder,
``EncodedJpeg(member)`` and HfImageTransform, each with the same transform, and for each
sample the global generator seeded as the lane's stream for that sample
(``BatchLane.sample_seed``), as docs/batch_lane.md promises.
"""

from __future__ import annotations

import pathlib

import pytest
import torch
from PIL import Image
from torch.utils.data import default_collate
from torchvision.transforms import v2

from custom_op import EncodedJpeg, JpegFolder
from custom_op.datasets import HfImageTransform
from custom_op.lane import BatchLane, HfRows
from synthetic import make_photo, make_smooth_noise
from test_orientation import encode, exif_segment, with_exif

SIZE = 16
TRANSFORMS = {
    "fused": lambda: v2.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip()]),
    # A tail that draws nothing: in the training process a drawing tail takes the global
    # generators as it finds them (docs/batch_lane.md), so only a tail without draws is the
    # per-sample pipeline's bit for bit here.
    "tail": lambda: v2.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip(),
                                v2.Lambda(lambda image: 255 - image)]),
    "per-sample": lambda: v2.Compose([v2.CenterCrop(SIZE)]),
}


def _png(path: pathlib.Path, seed: int) -> None:
    Image.fromarray(make_smooth_noise(40, 30, seed)).save(path, format="PNG")


def _seeded(lane: BatchLane, key, make):
    """``make()`` with the global generator seeded as sample ``key``'s stream in the lane."""
    with torch.random.fork_rng():
        torch.manual_seed(lane.sample_seed(key))
        return make()


def _per_sample_batch(lane: BatchLane, dataset: JpegFolder, indices: list[int]):
    return default_collate([_seeded(lane, index, lambda i=index: dataset[i]) for index in indices])


@pytest.fixture(scope="module")
def png_folder(tmp_path_factory) -> pathlib.Path:
    """Two classes of PNGs (one named .jpg) and, last, one JPEG."""
    root = tmp_path_factory.mktemp("pngs")
    for name in ("a", "b"):
        (root / name).mkdir()
    _png(root / "a" / "one.png", 1)
    _png(root / "a" / "two.jpg", 2)
    _png(root / "b" / "three.png", 3)
    (root / "b" / "zz.jpg").write_bytes(encode(make_photo(40, 30, seed=4)))
    return root


@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("mode", ["gray", "rgb", "unchanged"])
def test_non_jpeg_files_have_the_per_sample_channels(png_folder, mode: str,
                                                     transform: str) -> None:
    dataset = JpegFolder(png_folder, transform=TRANSFORMS[transform](), mode=mode)
    for indices, seed in (([0, 1], 3), ([0, 1, 2, 3], 4), ([3, 0], 5)):
        lane = BatchLane(JpegFolder(png_folder, mode=mode), TRANSFORMS[transform](), seed=seed)
        expected, labels = _per_sample_batch(lane, dataset, indices)
        images, lane_labels = lane(indices)
        assert images.shape == expected.shape == (len(indices), 1 if mode == "gray" else 3,
                                                  SIZE, SIZE)
        assert torch.equal(images, expected) and torch.equal(lane_labels, labels), indices


def test_channel_counts_that_cannot_stack_are_refused(tmp_path) -> None:
    """mode="unchanged" over a gray JPEG and colour files: the per-sample batch cannot be
    collated; the lane says which file, where it would broadcast 1 channel into 3."""
    (tmp_path / "a").mkdir()
    _png(tmp_path / "a" / "colour.png", 1)
    gray = encode(make_photo(40, 30, seed=2)[:, :, 0])
    (tmp_path / "a" / "gray.jpg").write_bytes(gray)
    lane = BatchLane(JpegFolder(tmp_path, mode="unchanged"), TRANSFORMS["fused"]())
    with pytest.raises(ValueError, match=r"gray\.jpg gives 1 channels, the batch's first "
                                         r"image 3: .* use mode='rgb' or 'gray'"):
        lane([0, 1])


ORIENTATION = 6  # turned 90 degrees, as phones store portrait photos


@pytest.fixture(scope="module")
def turned_jpeg() -> bytes:
    return with_exif(encode(make_photo(30, 44, seed=9)), exif_segment(ORIENTATION))


@pytest.mark.parametrize("transform", ["fused", "per-sample"])
def test_folder_lane_shows_what_jpeg_folder_shows(tmp_path, turned_jpeg, transform) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "phone.jpg").write_bytes(turned_jpeg)
    (tmp_path / "a" / "phone2.jpg").write_bytes(turned_jpeg)
    dataset = JpegFolder(tmp_path, transform=TRANSFORMS[transform]())
    lane = BatchLane(JpegFolder(tmp_path), TRANSFORMS[transform](), seed=7)
    expected, _ = _per_sample_batch(lane, dataset, [0, 1])
    images, _ = lane([0, 1])
    assert torch.equal(images, expected)
    assert JpegFolder(tmp_path)[0][0].canvas_size == (30, 44)  # as stored, as ImageFolder


def _tar_sample(data: bytes, key: str) -> dict:
    return {"__key__": key, "__url__": "shard.tar", "jpg": data, "cls": b"0"}


@pytest.mark.parametrize("transform", ["fused", "per-sample"])
def test_tar_lane_shows_what_a_member_shows(turned_jpeg, transform) -> None:
    samples = [_tar_sample(turned_jpeg, "0"), _tar_sample(turned_jpeg, "1")]
    per_sample = TRANSFORMS[transform]()
    lane = BatchLane(None, TRANSFORMS[transform](), seed=8)
    expected = torch.stack([
        _seeded(lane, f"shard.tar/{sample['__key__']}",
                lambda s=sample: per_sample(EncodedJpeg(s["jpg"]))) for sample in samples])
    images, _ = lane.collate_samples(samples)
    assert torch.equal(images, expected)


class _Rows:
    """What HfRows reads of a ``datasets.Dataset``: columns, length, rows by a list of indices."""

    column_names = ["image", "label"]

    def __init__(self, data: bytes, count: int) -> None:
        self.rows = [{"image": {"bytes": data, "path": f"phone{i}.jpg"}, "label": i}
                     for i in range(count)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, indices):
        if isinstance(indices, slice):
            indices = range(len(self.rows))[indices]
        picked = [self.rows[index] for index in indices]
        return {name: [row[name] for row in picked] for name in self.column_names}


@pytest.mark.parametrize("exif", [None, False], ids=["default", "off"])
@pytest.mark.parametrize("transform", ["fused", "per-sample"])
def test_hugging_face_lane_shows_what_hf_image_transform_shows(turned_jpeg, transform,
                                                               exif) -> None:
    rows = _Rows(turned_jpeg, 2)
    options = {} if exif is None else {"apply_exif_orientation": exif}
    lane = BatchLane(HfRows(rows, **options), TRANSFORMS[transform](), seed=9)
    per_sample = HfImageTransform(TRANSFORMS[transform](), **options)
    expected = torch.stack([_seeded(lane, index, lambda i=index: per_sample(rows[[i]])["image"][0])
                            for index in (0, 1)])
    images, labels = lane([0, 1])
    assert torch.equal(images, expected) and labels.tolist() == [0, 1]
    turned = exif is None
    assert HfRows(rows, **options).options.apply_exif_orientation is turned
