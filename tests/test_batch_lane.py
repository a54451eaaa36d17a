"""The batch lane: the same windows, flips and pixels as the per-sample pipeline seeded per sample.

Every dataset kind (a JpegFolder with a PNG among its JPEGs, tar shards read by
webdataset, Hugging Face parquet rows), every loader (a call per batch, a
DataLoader's worker processes, torchdata.nodes threads), DistributedSampler
ranks, and on_error. The per-sample pipeline is JpegFolder (or
HfImageTransform, or EncodedJpeg + the transform) called for each sample with
the process-wide generators seeded as ``lane.sample_seed(key, epoch)`` says.
"""

from __future__ import annotations

import logging
import os
import pathlib
import random

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from PIL import Image as PILImage
from torch.utils.data import (BatchSampler, DataLoader, DistributedSampler, SequentialSampler,
                              default_collate)
from torchvision.transforms import v2

import custom_op
from custom_op.datasets import HfImageTransform, hf_image
from custom_op.lane import BatchLane, HfRows, lane_dataloader, lane_threads
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


def seed_everything(seed: int) -> None:
    """The process-wide generators as a lane's worker seeds them before a sample's tail."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed((seed ^ (seed >> 32)) & 0xFFFFFFFF)


def per_sample(lane, root, transform, batches: int, epoch: int = 0) -> list:
    """The per-sample pipeline's first batches, each sample's item called with the generators
    seeded from the lane's stream for that sample."""
    dataset = custom_op.JpegFolder(root, transform=transform)
    reference = []
    for batch in list(sequential_batches(dataset))[:batches]:
        items = []
        for index in batch:
            seed_everything(lane.sample_seed(index, epoch))
            items.append(dataset[index])
        reference.append(default_collate(items))
    return reference


def assert_same(lane_batches, reference) -> None:
    assert len(lane_batches) == len(reference)
    for (images, labels), (expected, expected_labels) in zip(lane_batches, reference):
        assert images.dtype == expected.dtype and images.shape == expected.shape
        assert torch.equal(labels, expected_labels)
        assert torch.equal(images, expected)


def sequential_batches(dataset) -> BatchSampler:
    return BatchSampler(SequentialSampler(range(len(dataset))), BATCH, drop_last=False)


@pytest.mark.parametrize("tail", [(), (v2.ToDtype(torch.float32, scale=True),)],
                         ids=["crop-flip", "deterministic-tail"])
def test_lane_calls_equal_the_per_sample_pipeline(folder, tail) -> None:
    lane = BatchLane(custom_op.JpegFolder(folder), recipe(*tail), seed=11)
    reference = per_sample(lane, folder, recipe(*tail), batches=4)
    torch.manual_seed(0)  # the lane's draws do not depend on the global generator's state
    assert_same([lane(batch) for batch in sequential_batches(lane)], reference)


def test_random_tail_in_this_process_draws_from_each_samples_stream(folder) -> None:
    """Called in the training process, each sample's tail finds the process-wide generators
    seeded from the sample's stream, as a worker seeds them, and the caller's states are put
    back afterwards: the per-sample pipeline's pixels, whatever the caller drew before."""
    tail = v2.Compose([v2.ColorJitter(0.4, 0.4, 0.4), v2.RandomGrayscale(0.5)])
    lane = BatchLane(custom_op.JpegFolder(folder), recipe(tail), seed=11)
    expected = per_sample(lane, folder, recipe(tail), batches=4)
    seed_everything(12)
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    assert_same([lane(batch) for batch in sequential_batches(lane)], expected)
    assert torch.equal(torch.get_rng_state(), states[0]) and random.getstate() == states[1]
    assert np.array_equal(np.random.get_state()[1], states[2])


def test_timm_pipeline_runs_per_sample_as_jpeg_folder_runs_it(folder) -> None:
    """Not fused: timm's train transform (v1, PIL) runs per sample in ComposeJPEG, the same
    images as JpegFolder(transform=...) with each sample's seeds (timm draws from Python's
    random, which the lane seeds from each sample's stream)."""
    timm_data = pytest.importorskip("timm.data")
    transform = timm_data.create_transform(SIZE, is_training=True, no_aug=False)
    transform.transforms = [step for step in transform.transforms
                            if type(step).__name__ not in ("ToTensor", "MaybeToTensor", "Normalize")]
    transform.transforms.append(v2.PILToTensor())
    lane = BatchLane(custom_op.JpegFolder(folder), transform, seed=1)
    expected = per_sample(lane, folder, transform, batches=1)
    seed_everything(2)
    assert_same([lane(range(BATCH))], expected)


def test_jpeg_windows_go_through_one_batch_call(folder, monkeypatch) -> None:
    """Every JPEG of a batch is decoded by the batched call; only the PNG by the v2 kernel."""
    import custom_op.lane._batch_lane as lane_module

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
    """The fused draws are v2's: make_params and the flip's draw on the global generator seeded
    with the sample's seed give each sample's window and flip."""
    lane = BatchLane(custom_op.JpegFolder(folder), recipe(), seed=5)
    lane.set_epoch(3)
    plan = lane.draw(lane.load(range(len(lane))))
    for index, (sample, window, flip) in enumerate(zip(plan.samples, plan.windows, plan.flips)):
        torch.manual_seed(lane.sample_seed(index, 3))
        assert window == lane.crop.make_params([sample.image])
        assert flip == bool(torch.rand(1) < 0.5)
    assert any(plan.flips) and not all(plan.flips)
    assert plan.windows != lane.draw(lane.load(range(len(lane))), epoch=4).windows


def test_workers_equal_the_per_sample_pipeline_with_a_random_tail(folder) -> None:
    """Workers seed their own generators from each sample's stream before its tail: the whole
    transform, ColorJitter included, is the per-sample pipeline seeded with the sample's seed,
    epoch after epoch (persistent workers see each epoch through its batch requests)."""
    transform = recipe(v2.ColorJitter(0.5, 0.5, 0.5), v2.RandomGrayscale(0.5))
    lane = BatchLane(custom_op.JpegFolder(folder), transform, seed=3)
    loader = lane_dataloader(lane, sequential_batches(lane), num_workers=2,
                             persistent_workers=True)
    first, second = list(loader), list(loader)
    assert_same(first, per_sample(lane, folder, transform, batches=4, epoch=0))
    assert_same(second, per_sample(lane, folder, transform, batches=4, epoch=1))
    assert not torch.equal(second[0][0], first[0][0])


def test_threads_equal_calls_in_order(folder) -> None:
    lane = BatchLane(custom_op.JpegFolder(folder), recipe(v2.ToDtype(torch.float32)), seed=8)
    expected = [lane(batch) for batch in sequential_batches(lane)]
    torch.manual_seed(1)
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
    lane = BatchLane(None, recipe(), seed=2)

    def batches(collate):
        return list(wds.DataPipeline(wds.SimpleShardList(urls), TarSamples(),
                                     wds.batched(BATCH, collation_fn=collate, partial=True)))

    got = batches(lane.collate_samples)

    def seeded(sample):
        # A member's stream is keyed by its shard's file name and its key.
        torch.manual_seed(lane.sample_seed(f"{os.path.basename(sample['__url__'])}/"
                                           f"{sample['__key__']}"))
        return recipe()(hf_image(sample["jpg"]))

    def per_sample_collate(samples):
        images = [seeded(sample) for sample in samples]
        return torch.stack(images), torch.tensor([int(sample["cls"]) for sample in samples])

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
    lane = BatchLane(HfRows(parquet_rows), recipe(), seed=6)
    expected = []
    for start in range(0, 8, BATCH):
        images, labels = [], []
        for index in range(start, start + BATCH):
            torch.manual_seed(lane.sample_seed(index))
            row = transform(parquet_rows[index:index + 1])
            images.append(row["image"][0])
            labels.append(row["label"][0])
        expected.append((torch.stack(images), torch.tensor(labels)))
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
    with pytest.raises(ValueError, match="seed must be >= 0, got -1"):
        BatchLane(custom_op.JpegFolder(folder), recipe(), seed=-1)
    with pytest.raises(TypeError, match="seed must be an int, got '1'"):
        BatchLane(custom_op.JpegFolder(folder), recipe(), seed="1")
    with pytest.raises(ValueError, match="epoch must be >= 0, got -2"):
        BatchLane(custom_op.JpegFolder(folder), recipe()).set_epoch(-2)
    with pytest.raises(ValueError, match="initial_epoch must be an int >= 0, got -1"):
        lane_threads(BatchLane(custom_op.JpegFolder(folder), recipe()), [[0]], initial_epoch=-1)
    with pytest.raises(ValueError, match="initial_epoch must be an int >= 0, got 1.5"):
        lane_dataloader(BatchLane(custom_op.JpegFolder(folder), recipe()), [[0]],
                        initial_epoch=1.5)


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
