"""Where MCU-row indexes live (issue 35, item 3): the process's index cache (built once a
sample's cropped decodes would have saved a build, bounded, counted), the batch operator's ``indexes``, the
sidecars of ``python -m custom_op.prepare --index-only`` (JPEGs untouched, atomic,
resumable; stale and damaged ones fall back with the same pixels), and a Hugging Face
dataset's index column. Every decode with an index is compared with the decode without."""

from __future__ import annotations

import hashlib
import io
import logging
import math
import os
import pathlib
import shutil
import tarfile
import zlib

import pytest
import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import custom_op
from custom_op._index._cache import ENTRY_OVERHEAD, saving_of
from custom_op._index._sidecar import FOLDER_SIDECAR, decode_sidecar, sidecar_of_source
from custom_op.datasets import JpegFolder
from custom_op.lane import BatchLane
from custom_op.prepare import index_only
from custom_op.prepare.cli import main as prepare_main
from synthetic import photo_jpeg

COUNT = 6
SIZE = (320, 240)
#: Windows at most half the image's height, which build indexes.
LANE = v2.Compose([v2.RandomResizedCrop(48, scale=(0.05, 0.2)), v2.RandomHorizontalFlip()])


def _low_window(image):
    """A crop below the top, which an index serves (the rows above it are skipped)."""
    return F.crop(image, 200, 16, 96, 160)


#: Most tests are about what a cached index serves: they build on a sample's first crop.
FIRST_TOUCH = {"build_on_touch": 1}


@pytest.fixture(autouse=True)
def fresh_cache():
    custom_op.configure_index_cache(**FIRST_TOUCH)
    yield
    custom_op.configure_index_cache()


@pytest.fixture(scope="module")
def jpegs() -> list[bytes]:
    return [photo_jpeg(*SIZE, seed=35, index=i) for i in range(COUNT)]


@pytest.fixture
def folder(tmp_path, jpegs) -> pathlib.Path:
    root = tmp_path / "train"
    for i, data in enumerate(jpegs):
        (root / f"class_{i % 2}").mkdir(parents=True, exist_ok=True)
        (root / f"class_{i % 2}" / f"{i:03d}.jpg").write_bytes(data)
    return root


def _hashes(root: pathlib.Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*.jpg"))}


def _crops(root: pathlib.Path) -> list[torch.Tensor]:
    dataset = JpegFolder(root, _low_window)
    return [dataset[i][0] for i in range(len(dataset))]


def _uncached(function):
    """What ``function()`` gives with the cache off (no index anywhere)."""
    custom_op.configure_index_cache(max_bytes=0)
    try:
        return function()
    finally:
        custom_op.configure_index_cache(**FIRST_TOUCH)


def _indexed() -> int:
    return custom_op.index_stats()["indexed"]


def test_the_batch_operator_with_indexes_equals_without(jpegs) -> None:
    boxes = [(180, 8, 120, 200)] * COUNT
    indexes = [custom_op.jpeg_index(data) for data in jpegs]
    indexes[1] = None  # an image without one
    indexes[2] = indexes[3]  # another file's: refused, the ordinary decode
    before = custom_op.index_stats()
    for size in (None, (40, 56)):
        plain = custom_op.decode_and_crop_jpeg_batch(jpegs, boxes, size=size)
        indexed = custom_op.decode_and_crop_jpeg_batch(jpegs, boxes, size=size, indexes=indexes)
        assert all(torch.equal(a, b) for a, b in zip(plain, indexed))
    after = custom_op.index_stats()
    assert after["indexed"] - before["indexed"] == 2 * (COUNT - 2)
    assert after["refused"] - before["refused"] == 2
    with pytest.raises(ValueError, match="one index .or None. per image .6., got 2"):
        custom_op.decode_and_crop_jpeg_batch(jpegs, boxes, indexes=indexes[:2])
    with pytest.raises(TypeError, match="indexes must be a sequence"):
        custom_op.decode_and_crop_jpeg_batch(jpegs, boxes, indexes=indexes[0])


def test_epoch_two_uses_the_indexes_built_in_epoch_one(folder) -> None:
    dataset = JpegFolder(folder)
    lane = BatchLane(dataset, LANE, seed=7)
    indices = list(range(COUNT))
    expected = _uncached(lambda: [lane(indices, epoch=epoch)[0] for epoch in (0, 1)])
    expected_crops = _uncached(lambda: _crops(folder))
    first = lane(indices, epoch=0)[0]
    stats = custom_op.index_cache_stats()
    assert (stats["builds"], stats["misses"], stats["hits"]) == (COUNT, COUNT, 0)
    indexed = _indexed()
    second = lane(indices, epoch=1)[0]
    stats = custom_op.index_cache_stats()
    assert (stats["builds"], stats["hits"]) == (COUNT, COUNT)
    assert _indexed() > indexed
    assert torch.equal(first, expected[0]) and torch.equal(second, expected[1])
    # The per-sample pipeline shares the cache: its crops hit, with the same pixels.
    assert all(torch.equal(a, b) for a, b in zip(_crops(folder), expected_crops))
    stats = custom_op.index_cache_stats()
    assert (stats["builds"], stats["hits"]) == (COUNT, 2 * COUNT)


def test_the_cache_stays_within_its_budget_and_says_so(folder) -> None:
    one_entry = len(custom_op.jpeg_index((folder / "class_0" / "000.jpg").read_bytes()))
    budget = 2 * (one_entry + ENTRY_OVERHEAD) + ENTRY_OVERHEAD // 2  # two entries, not three
    custom_op.configure_index_cache(max_bytes=budget, **FIRST_TOUCH)
    first = _crops(folder)
    stats = custom_op.index_cache_stats()
    assert stats["entries"] == 2 and stats["builds"] == 2
    assert stats["bytes"] <= stats["max_bytes"] == budget
    assert stats["full"] == COUNT - 2
    second = _crops(folder)
    stats = custom_op.index_cache_stats()
    assert stats["hits"] == 2 and stats["entries"] == 2  # no eviction: the same two serve
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_by_default_a_sample_builds_once_its_decodes_would_have_saved_a_build(folder) -> None:
    custom_op.configure_index_cache()
    dataset = JpegFolder(folder, _low_window)
    decodes = math.ceil(1 / saving_of(96, SIZE[0]))  # _low_window keeps 96 of the rows
    assert decodes > 1
    for _ in range(decodes - 1):
        dataset[0]
    assert custom_op.index_cache_stats()["builds"] == 0
    dataset[0]
    assert custom_op.index_cache_stats()["builds"] == 1
    every_row = JpegFolder(folder, v2.CenterCrop((SIZE[0], 100)))
    for _ in range(20):  # no rows outside the window: an index would save nothing
        every_row[1]
    assert custom_op.index_cache_stats()["builds"] == 1


def test_build_on_second_touch(folder) -> None:
    custom_op.configure_index_cache(build_on_touch=2)
    _crops(folder)
    assert custom_op.index_cache_stats()["builds"] == 0
    _crops(folder)
    assert custom_op.index_cache_stats()["builds"] == COUNT
    with pytest.raises(ValueError, match="build_on_touch must be at least 1, got 0"):
        custom_op.configure_index_cache(build_on_touch=0)
    with pytest.raises(TypeError, match="max_bytes must be an int, got float"):
        custom_op.configure_index_cache(max_bytes=1.5)


class _TwoTouches(torch.utils.data.Dataset):
    """Each item: a sample cropped twice, with the worker's builds after each crop."""

    def __init__(self, root: pathlib.Path) -> None:
        self.folder = JpegFolder(root, _low_window)

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> list[int]:
        builds = []
        for _ in range(2):
            self.folder[index]
            builds.append(custom_op.index_cache_stats()["builds"])
        return builds


def _second_touch_builds(worker_id: int) -> None:
    custom_op.configure_index_cache(build_on_touch=2)


def test_a_dataloader_worker_builds_by_the_same_rule(folder) -> None:
    custom_op.configure_index_cache()  # the default rule, in the workers forked from here
    # Two crops of a sample save less than a build by default: a worker that sees each
    # sample once or twice builds nothing.
    loader = torch.utils.data.DataLoader(_TwoTouches(folder), batch_size=None, num_workers=1)
    assert [[int(n) for n in builds] for builds in loader] == [[0, 0], [0, 0]]
    loader = torch.utils.data.DataLoader(_TwoTouches(folder), batch_size=None, num_workers=1,
                                         worker_init_fn=_second_touch_builds)
    assert [[int(n) for n in builds] for builds in loader] == [[0, 1], [1, 2]]


def test_index_only_writes_sidecars_and_leaves_the_jpegs(folder) -> None:
    before = _hashes(folder)
    expected = _uncached(lambda: _crops(folder))
    assert prepare_main([str(folder), "--index-only", "--quiet"]) == 0
    assert _hashes(folder) == before
    for class_folder in ("class_0", "class_1"):
        _, entries = decode_sidecar((folder / class_folder / FOLDER_SIDECAR).read_bytes())
        assert len(entries) == COUNT // 2
        assert all(entry.index is not None for entry in entries.values())
    indexed = _indexed()
    crops = _crops(folder)
    stats = custom_op.index_cache_stats()
    assert (stats["sidecar_entries"], stats["builds"]) == (COUNT, 0)
    assert _indexed() - indexed == COUNT
    assert all(torch.equal(a, b) for a, b in zip(crops, expected))


def test_a_stale_sidecar_falls_back_with_the_same_pixels(folder, jpegs) -> None:
    index_only.index_tree(str(folder))
    changed, resized = folder / "class_0" / "000.jpg", folder / "class_0" / "002.jpg"
    # Other bytes under the same size and mtime: the sidecar's entry is used, and refused.
    stat = changed.stat()
    other = bytearray(changed.read_bytes())
    assert other[6:11] == b"JFIF\0"
    other[15] ^= 0x01  # the JFIF header's horizontal density: other bytes, the same pixels
    changed.write_bytes(bytes(other))
    os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    # Another file altogether: its size (and mtime) differ, its index is built afresh.
    resized.write_bytes(photo_jpeg(SIZE[0], SIZE[1] + 16, seed=36, index=0))
    expected = _uncached(lambda: _crops(folder))
    refused = custom_op.index_stats()["refused"]
    crops = _crops(folder)
    assert custom_op.index_stats()["refused"] - refused == 1
    assert custom_op.index_cache_stats()["builds"] == 1
    assert all(torch.equal(a, b) for a, b in zip(crops, expected))


def test_a_damaged_sidecar_is_refused_whole_and_logged(folder, caplog) -> None:
    index_only.index_tree(str(folder))
    sidecar = folder / "class_1" / FOLDER_SIDECAR
    damaged = bytearray(sidecar.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    sidecar.write_bytes(bytes(damaged))
    _assert_refused_whole_and_built(folder, caplog, "checksum")


def _assert_refused_whole_and_built(folder, caplog, logged: str) -> None:
    """One of the two sidecars refused whole (``logged`` in the log): its files' indexes are
    built, the other's read, and the crops are the uncached ones."""
    expected = _uncached(lambda: _crops(folder))
    with caplog.at_level(logging.WARNING, logger="custom_op"):
        crops = _crops(folder)
    stats = custom_op.index_cache_stats()
    assert stats["sidecars_refused"] == 1 and logged in caplog.text
    assert (stats["sidecar_entries"], stats["builds"]) == (COUNT // 2, COUNT // 2)
    assert all(torch.equal(a, b) for a, b in zip(crops, expected))


def test_a_sidecar_of_the_previous_version_falls_back_and_is_rewritten(folder, caplog) -> None:
    """A sidecar written before the index format changed: the cache refuses it whole (logged)
    and builds the indexes; prepare --index-only takes it for stale and rewrites it."""
    index_only.index_tree(str(folder))
    sidecar = folder / "class_1" / FOLDER_SIDECAR
    body = bytearray(sidecar.read_bytes()[:-4])
    body[8:12] = (1).to_bytes(4, "little")
    sidecar.write_bytes(bytes(body) + zlib.crc32(body).to_bytes(4, "little"))
    _assert_refused_whole_and_built(folder, caplog, "sidecar version 1")
    summary = index_only.index_tree(str(folder))
    assert (summary.written, summary.current) == (1, 1)
    assert len(decode_sidecar(sidecar.read_bytes())[1]) == COUNT // 2


def test_index_only_is_atomic_and_resumes(folder, monkeypatch) -> None:
    replace = os.replace
    calls = []

    def killed_at_the_second_rename(source, destination):
        calls.append(destination)
        if len(calls) == 2:
            raise KeyboardInterrupt
        replace(source, destination)

    monkeypatch.setattr(index_only.os, "replace", killed_at_the_second_rename)
    with pytest.raises(KeyboardInterrupt):
        index_only.index_tree(str(folder))
    monkeypatch.setattr(index_only.os, "replace", replace)
    sidecars = sorted(folder.rglob("*.cjmi"))
    assert len(sidecars) == 1  # the other one only as a hidden temporary
    decode_sidecar(sidecars[0].read_bytes())
    assert len(list(folder.rglob("*.cjmi.*.tmp"))) == 1
    summary = index_only.index_tree(str(folder))
    assert (summary.written, summary.current) == (1, 1)
    assert not list(folder.rglob("*.tmp")) and len(list(folder.rglob("*.cjmi"))) == 2


def test_tar_shards_get_a_sidecar_that_the_lane_reads(folder, tmp_path, jpegs) -> None:
    shard = tmp_path / "shards" / "train-000.tar"
    shard.parent.mkdir()
    with tarfile.open(shard, "w") as tar:
        for i, data in enumerate(jpegs):
            for name, payload in ((f"{i:03d}.JPG", data), (f"{i:03d}.cls", b"%d" % (i % 2))):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    before = hashlib.sha256(shard.read_bytes()).hexdigest()
    assert index_only.index_tree(str(shard.parent)).written == 1
    assert hashlib.sha256(shard.read_bytes()).hexdigest() == before
    samples = [{"__key__": f"{i:03d}", "__url__": str(shard), "jpg": data, "cls": b"0"}
               for i, data in enumerate(jpegs)]
    lane = BatchLane(None, LANE, seed=3)
    expected = _uncached(lambda: lane.collate_samples(samples)[0])
    assert torch.equal(lane.collate_samples(samples)[0], expected)
    stats = custom_op.index_cache_stats()
    assert (stats["sidecar_entries"], stats["builds"], stats["hits"]) == (COUNT, 0, COUNT)
    assert sidecar_of_source(str(shard)) == str(shard) + ".cjmi"
    # The shard rewritten: its sidecar describes another version and is not read.
    shutil.copyfile(shard, str(shard) + ".copy")
    os.replace(str(shard) + ".copy", shard)
    custom_op.configure_index_cache()
    assert torch.equal(lane.collate_samples(samples)[0], expected)
    assert custom_op.index_cache_stats()["sidecar_entries"] == 0


def test_hugging_face_index_column(jpegs, tmp_path) -> None:
    datasets = pytest.importorskip("datasets")
    from custom_op.datasets import HfImageTransform, add_index_column
    from custom_op.lane import HfRows

    rows = datasets.Dataset.from_dict(
        {"image": [{"bytes": data, "path": None} for data in jpegs], "label": [0] * COUNT},
        features=datasets.Features({"image": datasets.Image(decode=False),
                                    "label": datasets.Value("int64")}))
    indexed_rows = add_index_column(rows)
    assert indexed_rows["image"] == rows["image"]  # the images as they were
    assert indexed_rows["jpeg_index"] == [custom_op.jpeg_index(data) for data in jpegs]
    plain = rows.with_transform(HfImageTransform(_low_window))
    with_index = indexed_rows.with_transform(HfImageTransform(_low_window,
                                                              index_column="jpeg_index"))
    indexed = _indexed()
    assert all(torch.equal(a, b) for a, b in zip(with_index[:]["image"], plain[:]["image"]))
    assert _indexed() - indexed == COUNT
    lane = BatchLane(HfRows(indexed_rows, index_column="jpeg_index"), LANE, seed=1)
    expected = BatchLane(HfRows(rows), LANE, seed=1)(list(range(COUNT)))[0]
    indexed = _indexed()
    assert torch.equal(lane(list(range(COUNT)))[0], expected)
    assert _indexed() > indexed
    # From the sidecar of the parquet file the rows were written to: the same column.
    parquet = tmp_path / "rows.parquet"
    rows.to_parquet(str(parquet))
    assert index_only.index_tree(str(tmp_path)).written == 1
    from_sidecar = add_index_column(rows, parquet_files=[str(parquet)])
    assert from_sidecar["jpeg_index"] == indexed_rows["jpeg_index"]
    with pytest.raises(ValueError, match="already"):
        add_index_column(indexed_rows)


def test_a_worker_loader_reports_its_workers_index_counts(folder) -> None:
    """The training process's own counts never see a worker's decodes; the loader gathers them."""
    from custom_op.lane import LaneBatchSampler, lane_dataloader

    assert prepare_main([str(folder), "--index-only", "--quiet"]) == 0
    lane = BatchLane(JpegFolder(folder), LANE, seed=3)
    loader = lane_dataloader(lane, LaneBatchSampler(COUNT, 2, seed=3), num_workers=2)
    before = (custom_op.index_stats(), custom_op.index_cache_stats())
    batches = [batch for batch in loader]
    assert len(batches) == COUNT // 2 and all(len(batch) == 2 for batch in batches)
    stats = loader.index_stats()
    assert stats["hits"] == COUNT and stats["misses"] == 0 and stats["builds"] == 0
    assert stats["indexed"] + stats["unneeded"] == COUNT
    assert (custom_op.index_stats(), custom_op.index_cache_stats()) == before
    list(loader)  # the counts go on adding up over epochs
    assert loader.index_stats()["hits"] == 2 * COUNT
    with_indices = lane_dataloader(lane, LaneBatchSampler(COUNT, 2, seed=3), num_workers=0,
                                   with_indices=True)
    assert all(len(batch) == 3 for batch in with_indices)
    assert with_indices.index_stats()["hits"] == COUNT
