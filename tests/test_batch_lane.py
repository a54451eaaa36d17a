"""The batch lane: the same windows, flips and pixels as the per-sample pipeline for the same seed.

Every dataset kind (a JpegFolder with a PNG among its JPEGs, tar shards read by
webdataset, Hugging Face parquet rows), every loader (a call per batch, a
DataLoader's worker processes, torchdata.nodes threads), DistributedSampler
ranks, and on_error. The per-sample pipeline is JpegFolder (or
HfImageTransform, or EncodedJpeg + the transform) in a plain DataLoader.
"""

from __future__ import annotations

import logging
import os
import pathlib

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from PIL import Image as PILImage
from torch.utils.data import (BatchSampler, DataLoader, DistributedSampler, SequentialSampler,
                              default_collate)
from torchvision.transforms import v2

import custom_op
from custom_op.datasets import BatchLane, HfImageTransform, HfRows, hf_image, lane_dataloader, lane_threads
from synthetic import folder_samples, make_smooth_noise, write_jpeg_folder, write_shards

SIZE = 48
BATCH = 4
BAD_JPEG = b"\xff\xd8\xff\xe0" + bytes(100)  # a JPEG signature, nothing readable after it


def recipe(*tail) -> v2.Compose:
    return v2.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip(), *tail])


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("lane") / "train"
    write_jpeg_folder(root, 12, 120, 160, classes=("cat", "dog"), seed=7)
    # A PNG named .jpg: decoded in full by the loader, cropped per sample in the lane.
    PILImage.fromarray(make_smooth_noise(100, 90, 3)).save(root / "dog" / "zz_png.jpg", format="PNG")
    return root


def per_sample(root, transform, seed: int, batches: int, **loader) -> list:
    """The per-sample pipeline's first batches: items called in this process, or (with
    ``loader`` options) a DataLoader's, whose iterator draws its workers' base seed first."""
    dataset = custom_op.JpegFolder(root, transform=transform)
    torch.manual_seed(seed)
    if not loader:
        return [default_collate([dataset[index] for index in batch])
                for batch in list(sequential_batches(dataset))[:batches]]
    return list(DataLoader(dataset, batch_size=BATCH, shuffle=False, **loader))[:batches]


def assert_same(lane_batches, reference) -> None:
    assert len(lane_batches) == len(reference)
    for (images, labels), (expected, expected_labels) in zip(lane_batches, reference):
        assert images.dtype == expected.dtype and images.shape == expected.shape
        assert torch.equal(labels, expected_labels)
        assert torch.equal(images, expected)


def sequential_batches(dataset) -> BatchSampler:
    return BatchSampler(SequentialSampler(range(len(dataset))), BATCH, drop_last=False)


@pytest.mark.parametrize("tail", [(), (v2.ToDtype(torch.float32, scale=True),),
                                  (v2.ColorJitter(0.4, 0.4, 0.4), v2.RandomGrayscale(0.5))],
                         ids=["crop-flip", "deterministic-tail", "random-tail"])
def test_lane_calls_equal_the_per_sample_pipeline(folder, tail) -> None:
    reference = per_sample(folder, recipe(*tail), seed=11, batches=4)
    lane = BatchLane(custom_op.JpegFolder(folder), recipe(*tail))
    torch.manual_seed(11)
    assert_same([lane(batch) for batch in sequential_batches(lane)], reference)


def test_timm_pipeline_runs_per_sample_as_jpeg_folder_runs_it(folder) -> None:
    """Not fused: timm's train transform (v1, PIL) runs per sample in ComposeJPEG, the same
    images as JpegFolder(transform=...) for the same seeds (timm draws from Python's random)."""
    import random

    timm_data = pytest.importorskip("timm.data")
    transform = timm_data.create_transform(SIZE, is_training=True, no_aug=False)
    transform.transforms = [step for step in transform.transforms
                            if type(step).__name__ not in ("ToTensor", "MaybeToTensor", "Normalize")]
    transform.transforms.append(v2.PILToTensor())
    reference_folder = custom_op.JpegFolder(folder, transform=transform)
    random.seed(1)
    torch.manual_seed(1)
    expected = torch.stack([reference_folder[index][0] for index in range(4)])
    lane = BatchLane(custom_op.JpegFolder(folder), transform)
    random.seed(1)
    torch.manual_seed(1)
    assert torch.equal(lane(range(4))[0], expected)


def test_jpeg_windows_go_through_one_batch_call(folder, monkeypatch) -> None:
    """Every JPEG of a batch is decoded by the batched call; only the PNG by the v2 kernel."""
    import custom_op.datasets._batch_lane as lane_module

    calls, per_sample_crops = [], []
    batch_call = lane_module.decode_and_crop_jpeg_batch
    monkeypatch.setattr(lane_module, "decode_and_crop_jpeg_batch",
                        lambda datas, *a, **k: calls.append(len(datas)) or batch_call(datas, *a, **k))
    lane = BatchLane(custom_op.JpegFolder(folder), recipe())
    crop_transform = lane.crop.transform
    monkeypatch.setattr(lane.crop, "transform",
                        lambda image, params: per_sample_crops.append(type(image).__name__)
                        or crop_transform(image, params))
    lane(range(len(lane)))
    assert calls == [len(lane) - 1] and per_sample_crops == ["Image"]


def test_windows_and_flips_are_those_of_the_per_sample_draws(folder) -> None:
    """The fused draws are v2's own: a flipped window compared with a direct decode."""
    lane = BatchLane(custom_op.JpegFolder(folder), recipe())
    torch.manual_seed(5)
    plan = lane.draw(lane.load(range(8)))
    torch.manual_seed(5)
    for sample, window, flip in zip(plan.samples, plan.windows, plan.flips):
        assert window == lane.crop.make_params([sample.image])
        assert flip == bool(torch.rand(1) < 0.5)
    assert any(plan.flips) and not all(plan.flips)


def test_workers_equal_the_per_sample_workers(folder) -> None:
    reference = per_sample(folder, recipe(), seed=3, batches=4, num_workers=2)
    lane = BatchLane(custom_op.JpegFolder(folder), recipe())
    torch.manual_seed(3)
    loader = lane_dataloader(lane, sequential_batches(lane), num_workers=2,
                             persistent_workers=True)
    assert_same(list(loader), reference)
    second = list(loader)  # persistent workers: a second epoch runs, with new draws
    assert len(second) == len(reference)
    assert not torch.equal(second[0][0], reference[0][0])


def test_threads_equal_calls_in_order(folder) -> None:
    lane = BatchLane(custom_op.JpegFolder(folder), recipe(v2.ColorJitter(0.5)))
    torch.manual_seed(8)
    expected = [lane(batch) for batch in sequential_batches(lane)]
    torch.manual_seed(8)
    assert_same(list(lane_threads(lane, sequential_batches(lane), threads=2)), expected)


def test_ranks_are_disjoint_and_epochs_reshuffle(folder) -> None:
    lane = BatchLane(custom_op.JpegFolder(folder), recipe())
    seen = {}
    for rank in (0, 1):
        sampler = DistributedSampler(range(len(lane)), num_replicas=2, rank=rank, seed=4,
                                     drop_last=True)
        batches = BatchSampler(sampler, BATCH, drop_last=False)
        loader = lane_dataloader(lane, batches, num_workers=1)
        orders = []
        for epoch in (0, 1):
            sampler.set_epoch(epoch)
            orders.append([index for batch in batches for index in batch])
            assert sum(len(labels) for _, labels in loader) == len(orders[-1])
        assert orders[0] != orders[1]
        seen[rank] = orders[0]
    assert not set(seen[0]) & set(seen[1])
    # drop_last: 13 samples give each rank 6, all distinct.
    assert len(seen[0]) == len(seen[1]) == 6 and set(seen[0] + seen[1]) <= set(range(len(lane)))


def test_tar_shards_equal_per_sample(folder, tmp_path) -> None:
    wds = pytest.importorskip("webdataset")
    from custom_op.datasets import TarSamples

    write_shards(folder_samples(folder)[1], tmp_path, 5)
    urls = sorted(str(path) for path in tmp_path.glob("*.tar"))
    lane = BatchLane(None, recipe())

    def batches(collate):
        return list(wds.DataPipeline(wds.SimpleShardList(urls), TarSamples(),
                                     wds.batched(BATCH, collation_fn=collate, partial=True)))

    torch.manual_seed(2)
    got = batches(lane.collate_samples)

    def per_sample_collate(samples):
        images = [recipe()(hf_image(sample["jpg"])) for sample in samples]
        return torch.stack(images), torch.tensor([int(sample["cls"]) for sample in samples])

    torch.manual_seed(2)
    assert_same(got, batches(per_sample_collate))


def test_tar_member_errors_name_shard_and_member() -> None:
    lane = BatchLane(None, recipe())
    sample = {"__key__": "000000042", "__url__": "/data/train-000003.tar", "jpg": BAD_JPEG,
              "cls": b"1"}
    with pytest.raises(custom_op.JpegDecodeError,
                       match=r"^/data/train-000003\.tar: member 000000042\.jpg: "):
        lane.collate_samples([sample])


@pytest.fixture(scope="module")
def parquet_rows(folder, tmp_path_factory):
    datasets = pytest.importorskip("datasets")
    from synthetic.hub import write_hub_dataset

    root = tmp_path_factory.mktemp("hub")
    samples = [(pathlib.Path(path).read_bytes(), pathlib.Path(path).name, label)
               for path, label in custom_op.JpegFolder(folder).samples]
    write_hub_dataset(root, samples,
                      class_names=["cat", "dog"], files=2, rows_per_group=3)
    loaded = datasets.load_dataset("parquet", data_dir=str(root), split="train",
                                   cache_dir=str(root / "cache"))
    return loaded.cast_column("image", datasets.Image(decode=False))


def test_huggingface_rows_equal_per_sample(parquet_rows) -> None:
    transform = HfImageTransform(recipe())
    torch.manual_seed(6)
    expected = []
    for start in range(0, 8, BATCH):
        rows = transform(parquet_rows[start:start + BATCH])
        expected.append((torch.stack(rows["image"]), torch.tensor(rows["label"])))
    lane = BatchLane(HfRows(parquet_rows), recipe())
    torch.manual_seed(6)
    assert_same([lane(range(start, start + BATCH)) for start in range(0, 8, BATCH)], expected)


@pytest.fixture()
def damaged_folder(tmp_path) -> pathlib.Path:
    root = tmp_path / "train"
    write_jpeg_folder(root, 6, 96, 128, classes=("a", "b"), seed=1)
    data = (root / "a" / sorted(os.listdir(root / "a"))[1]).read_bytes()
    (root / "a" / sorted(os.listdir(root / "a"))[1]).write_bytes(data[:len(data) // 3])
    (root / "b" / "bad_header.jpg").write_bytes(BAD_JPEG)
    return root


@pytest.mark.parametrize("kind", ["truncated", "bad-header"])
def test_on_error_raise_names_the_file(damaged_folder, kind) -> None:
    lane = BatchLane(custom_op.JpegFolder(damaged_folder, strict=True), recipe())
    paths = [path for path, _ in lane.source.folder.samples]
    bad = next(i for i, path in enumerate(paths)
               if ("bad_header" in path) == (kind == "bad-header") and
               (kind == "bad-header" or path.endswith(sorted(os.listdir(damaged_folder / "a"))[1])))
    with pytest.raises(custom_op.JpegDecodeError, match=f"^{paths[bad]}: "):
        lane([bad, (bad + 1) % len(paths)])


def test_on_error_substitute_replaces_and_logs(damaged_folder, caplog) -> None:
    lane = BatchLane(custom_op.JpegFolder(damaged_folder, on_error="substitute"), recipe())
    caplog.set_level(logging.WARNING, logger="custom_op.datasets")
    images, labels = lane(range(len(lane)))
    assert images.shape[0] == len(lane) and lane.substitutions == 2
    assert sum("bad_header.jpg replaced by" in record.message for record in caplog.records) == 1


def test_bad_arguments_are_refused(folder) -> None:
    with pytest.raises(ValueError, match="on_error must be"):
        BatchLane(custom_op.JpegFolder(folder), recipe(), on_error="skip")
    with pytest.raises(TypeError, match="source must be"):
        BatchLane([1, 2], recipe())
    with pytest.raises(ValueError, match="batch_size"):
        lane_dataloader(BatchLane(custom_op.JpegFolder(folder), recipe()), [[0]], batch_size=4)
    with pytest.raises(ValueError, match="threads must be"):
        lane_threads(BatchLane(custom_op.JpegFolder(folder), recipe()), [[0]], threads=0)


def test_batch_call_decodes_into_out_and_checks_it(folder) -> None:
    """decode_and_crop_jpeg_batch(out=): the lane's buffer is written and returned, the same
    pixels as without it; a buffer of the wrong shape, layout or dtype is refused by name."""
    paths = sorted(folder.glob("cat/*.jpg"))[:3]
    datas = [path.read_bytes() for path in paths]
    boxes = [(10, 20, 80, 100)] * 3
    expected = custom_op.decode_and_crop_jpeg_batch(datas, boxes, size=SIZE, contiguous=True)
    out = torch.zeros((3, 3, SIZE, SIZE), dtype=torch.uint8)
    assert custom_op.decode_and_crop_jpeg_batch(datas, boxes, size=SIZE, contiguous=True,
                                                out=out) is out
    assert torch.equal(out, expected)
    with pytest.raises(ValueError, match=r"out must be \[3, 3, 48, 48\] in torch.channels_last"):
        custom_op.decode_and_crop_jpeg_batch(datas, boxes, size=SIZE, out=out)
    with pytest.raises(ValueError, match=r"out must be \[3, 3, 48, 48\]"):
        custom_op.decode_and_crop_jpeg_batch(datas, boxes, size=SIZE, contiguous=True, out=out[:2])
    with pytest.raises(TypeError, match="out must be a uint8 CPU tensor"):
        custom_op.decode_and_crop_jpeg_batch(datas, boxes, size=SIZE, out=out.float())
    with pytest.raises(ValueError, match="out needs size"):
        custom_op.decode_and_crop_jpeg_batch(datas, boxes, out=out)


@pytest.mark.parametrize("on_error", ["raise", "substitute"])
def test_a_bad_file_costs_only_itself(damaged_folder, on_error, monkeypatch) -> None:
    """Issue 31 item 8: one file that failed in the batch call sent every sample of the batch
    through the per-sample decode again. Now only the batch call decodes, once, and the failed
    sample goes to on_error (raised naming the file, or replaced)."""
    lane = BatchLane(custom_op.JpegFolder(damaged_folder, strict=True, on_error=on_error),
                     recipe())
    paths = [path for path, _ in lane.source.folder.samples]
    truncated = sorted(os.listdir(damaged_folder / "a"))[1]
    bad = next(i for i, path in enumerate(paths) if path.endswith(truncated))
    indices = [bad, (bad + 1) % len(paths), (bad + 2) % len(paths)]
    per_sample = []
    crop_transform = lane.crop.transform
    monkeypatch.setattr(lane.crop, "transform", lambda image, params: per_sample.append(image)
                        or crop_transform(image, params))
    if on_error == "raise":
        with pytest.raises(custom_op.JpegDecodeError, match=f"^{paths[bad]}: "):
            lane(indices)
    else:
        images, labels = lane(indices)
        assert images.shape == (3, 3, SIZE, SIZE) and lane.substitutions == 1
        assert torch.equal(images[0], images[1]) and labels[0] == labels[1]
    assert per_sample == []
