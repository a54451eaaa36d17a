"""The batch lane on a real Ray cluster of two nodes on this machine (custom_op/datasets/_ray_data.py):
the pixels are the per-sample pipeline's for each sample's stream, every sample arrives once per
epoch across two consumers, an actor killed mid-epoch is replaced without a lost or repeated
sample, and shutting the cluster down leaves no process behind."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import ray
import torch
from ray.cluster_utils import Cluster
from torchvision.transforms import v2

import custom_op
from custom_op.datasets import BatchLane, LaneDecoder, lane_map_batches, lane_map_epochs
from synthetic import write_jpeg_folder
from _ray_processes import ray_descendants, wait_until_gone

SEED, EPOCH = 11, 3
TRANSFORM = v2.Compose([v2.RandomResizedCrop(48), v2.RandomHorizontalFlip()])


@pytest.fixture(scope="module")
def cluster():
    """Two nodes of two logical CPUs each (reading tasks beside the decoding actors), the way Ray's own tests make a cluster on one machine."""
    # Workers import custom_op as this process does (a checkout on PYTHONPATH, or installed).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(custom_op.__file__).parents[1]),
                                                             os.environ.get("PYTHONPATH")]))
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2,
                                                            "include_dashboard": False})
    cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    before = ray_descendants(os.getpid())
    assert before, "no Ray process found below this one: the check would check nothing"
    ray.shutdown()
    cluster.shutdown()
    assert not wait_until_gone(os.getpid(), before), "Ray left processes behind"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ray") / "train"
    write_jpeg_folder(root, 12, 96, 128, classes=("a", "b"), seed=4)
    return root


def _expected(files: Path, epoch: int = EPOCH) -> dict[str, torch.Tensor]:
    """Each file through the per-sample v2 pipeline, its generator seeded from its stream."""
    lane = BatchLane(None, TRANSFORM, seed=SEED)
    expected = {}
    for path in sorted(files.rglob("*.jpg")):
        with torch.random.fork_rng():
            torch.manual_seed(lane.sample_seed(str(path), epoch))
            expected[str(path)] = TRANSFORM(custom_op.EncodedJpeg(path.read_bytes()))
    return expected


def _rows(dataset) -> dict[str, torch.Tensor]:
    rows: dict[str, torch.Tensor] = {}
    for batch in dataset.iter_batches(batch_size=5, batch_format="numpy"):
        for path, image, label in zip(batch["path"], batch["image"], batch["label"]):
            assert path not in rows, f"{path} arrived twice"
            assert int(label) == ("/b/" in path)
            rows[str(path)] = torch.from_numpy(image)
    return rows


def _decoded(files: Path, decoder=LaneDecoder):
    dataset = ray.data.read_binary_files(str(files), include_paths=True,
                                         partitioning=ray.data.datasource.Partitioning(
                                             "dir", field_names=["cls"], base_dir=str(files)))
    return lane_map_batches(dataset, TRANSFORM, seed=SEED, epoch=EPOCH, batch_size=4,
                            concurrency=2, label_column="cls", classes=["a", "b"],
                            key_column="path", keep_key=True) if decoder is LaneDecoder else dataset


def test_one_execution_of_several_epochs_gives_each_epoch_its_own_pixels(cluster, files):
    dataset = _decoded(files, decoder=None)
    decoded = lane_map_epochs({epoch: dataset for epoch in (4, 2)}, TRANSFORM, seed=SEED,
                              batch_size=5, concurrency=2, label_column="cls",
                              classes=["a", "b"], key_column="path", keep_key=True)
    arrived: list[tuple[int, str, torch.Tensor]] = []
    for batch in decoded.iter_batches(batch_size=7, batch_format="numpy"):
        arrived += [(int(epoch), str(path), torch.from_numpy(image)) for epoch, path, image
                    in zip(batch["epoch"], batch["path"], batch["image"])]
    assert len(arrived) == len({(epoch, path) for epoch, path, _ in arrived}) == 24
    by_epoch = {epoch: {path: image for seen, path, image in arrived if seen == epoch}
                for epoch in (2, 4)}
    for epoch, rows in by_epoch.items():
        expected = _expected(files, epoch)
        assert sorted(rows) == sorted(expected)
        assert all(torch.equal(rows[path], expected[path]) for path in rows), epoch
    # The same file in two epochs: its own draws in each.
    path = next(iter(by_epoch[2]))
    assert not torch.equal(by_epoch[2][path], by_epoch[4][path])


def test_lane_map_epochs_refuses_no_epochs_and_a_negative_one(cluster, files):
    dataset = _decoded(files, decoder=None)
    with pytest.raises(ValueError, match="epochs is empty"):
        lane_map_epochs({}, TRANSFORM, seed=SEED)
    with pytest.raises(ValueError, match="an epoch must be an int >= 0, got -1"):
        lane_map_epochs({-1: dataset}, TRANSFORM, seed=SEED)


def test_two_consumers_get_every_sample_once_with_its_streams_pixels(cluster, files):
    """One execution (its actors start in seconds) checks both: every sample arrives once
    across the two consumers of a streaming split, and its pixels are the per-sample
    pipeline's for its stream."""
    splits = _decoded(files).streaming_split(2, equal=False)
    seen: list[dict[str, torch.Tensor]] = [{}, {}]

    def consume(index: int) -> None:
        seen[index] = _rows(splits[index])

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not set(seen[0]) & set(seen[1]), "a sample arrived at both consumers"
    rows = {**seen[0], **seen[1]}
    expected = _expected(files)
    assert len(rows) == 12 and sorted(rows) == sorted(expected)
    for path, image in rows.items():
        assert image.dtype == torch.uint8 and image.shape == (3, 48, 48)
        assert torch.equal(image, expected[path]), path


class _DiesOnce(LaneDecoder):
    """A decoder whose first actor kills its own process at its second batch, mid-epoch (Ray
    Data's actor pools restart actors and retry their tasks by default, as lane_map_batches
    relies on)."""

    def __call__(self, batch):
        marker = Path(os.environ["CUSTOM_OP_TEST_MARKER"])
        if getattr(self, "_calls", 0) == 1 and not marker.exists():
            marker.write_text(str(os.getpid()))
            os._exit(9)
        self._calls = getattr(self, "_calls", 0) + 1
        return super().__call__(batch)


def test_an_actor_killed_mid_epoch_is_replaced_without_a_lost_or_repeated_sample(cluster, files,
                                                                                 tmp_path):
    marker = tmp_path / "died"
    dataset = _decoded(files, decoder=None)
    decoded = dataset.map_batches(
        _DiesOnce, fn_constructor_kwargs={"transform": TRANSFORM, "seed": SEED, "epoch": EPOCH,
                                          "label_column": "cls", "classes": ["a", "b"],
                                          "keep_key": True},
        batch_size=4, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=1), num_cpus=1,
        runtime_env={"env_vars": {"CUSTOM_OP_TEST_MARKER": str(marker)}})
    rows = _rows(decoded)
    assert marker.exists(), "the actor never died: the test tested nothing"
    expected = _expected(files)
    assert sorted(rows) == sorted(expected)
    assert all(torch.equal(rows[path], expected[path]) for path in rows)


@pytest.mark.parametrize("label_column", ["cls", None])
def test_iter_torch_batches_gives_the_training_loop_tensors(cluster, files, label_column):
    dataset = _decoded(files, decoder=None)
    decoded = lane_map_batches(dataset, TRANSFORM, seed=SEED, epoch=EPOCH, batch_size=4,
                               label_column=label_column, classes=["a", "b"])
    batches = list(decoded.iter_torch_batches(batch_size=6))
    columns = ["image", "label"] if label_column else ["image"]
    assert [sorted(batch) for batch in batches] == [columns] * 2
    assert all(batch["image"].dtype == torch.uint8 and batch["image"].shape == (6, 3, 48, 48)
               for batch in batches)
    assert all(batch["label"].dtype == torch.int64 for batch in batches if label_column)


def test_bad_arguments_are_refused_in_the_driver(cluster, files):
    dataset = _decoded(files, decoder=None)
    with pytest.raises(ValueError, match="concurrency must be an int >= 1, got 0"):
        lane_map_batches(dataset, TRANSFORM, seed=SEED, concurrency=0)
    with pytest.raises(TypeError, match="seed must be an int, got None"):
        lane_map_batches(dataset, TRANSFORM, seed=None)


def test_an_empty_batch_gives_an_empty_result_with_or_without_an_epoch_column():
    """Called directly, as an actor calls it, on a batch of no rows."""
    empty = {"bytes": np.array([], dtype=object), "path": np.array([], dtype=object),
             "cls": np.array([], dtype=object), "epoch": np.array([], dtype=np.int64)}
    for epoch_column in ("epoch", None):
        decoder = LaneDecoder(TRANSFORM, seed=SEED, label_column="cls", classes=["a", "b"],
                              epoch_column=epoch_column)
        result = decoder(empty)
        assert result["image"].shape == (0, 3, 48, 48) and result["image"].dtype == np.uint8
        assert result["label"].shape == (0,)
        assert list(result) == (["image", "epoch", "label"] if epoch_column
                                else ["image", "label"])
        if epoch_column:
            assert result["epoch"].shape == (0,) and result["epoch"].dtype == np.int64


def test_a_bad_file_fails_its_task_naming_it(cluster, tmp_path):
    folder = tmp_path / "bad" / "a"
    folder.mkdir(parents=True)
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    dataset = ray.data.read_binary_files(str(folder), include_paths=True)
    decoded = lane_map_batches(dataset, TRANSFORM, seed=SEED, concurrency=1)
    with pytest.raises(Exception) as raised:
        decoded.take_all()
    assert "broken.jpg" in str(raised.value) and "JpegDecodeError" in str(raised.value)
