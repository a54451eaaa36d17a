"""The decode step under Ray Train (custom_op/ray/): a TorchTrainer of one CPU worker on a local
cluster of two nodes iterates its dataset shard for 3 epochs; each epoch's images are the
per-sample pipeline's in that epoch (so the windows differ from epoch to epoch), and a second
run with the same seed sees the same 3 epochs. Ray's deprecation warnings raised by our calls
fail the test."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import ray
import ray.train
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from custom_op.ray import decode_batches
from synthetic import write_jpeg_folder
from test_ray_data import SEED, TRANSFORM, _expected
from _ray_processes import two_node_cluster

EPOCHS = 3

pytestmark = pytest.mark.filterwarnings(
    r"error::ray.util.annotations.RayDeprecationWarning:(custom_op|test_)")


@pytest.fixture(scope="module")
def cluster():
    yield from two_node_cluster(__name__)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ray-train") / "train"
    write_jpeg_folder(root, 10, 96, 128, classes=("a", "b"), seed=8)
    return root


def _digest(image) -> str:
    return hashlib.sha256(image.contiguous().numpy().tobytes()).hexdigest()


def _train_loop(config: dict) -> list[list[str]]:
    """Each epoch, the sorted digests of the images the shard gives (the blocks' order is
    Ray's, the multiset of images the epoch's)."""
    shard = ray.train.get_dataset_shard("train")
    epochs = []
    for _ in range(config["epochs"]):
        digests = []
        for batch in shard.iter_torch_batches(batch_size=4):
            assert batch["label"].dtype == config["label_dtype"]
            digests += [_digest(image) for image in batch["image"]]
        epochs.append(sorted(digests))
    return epochs


def _fit(files: Path, storage: Path, name: str) -> list[list[str]]:
    """One training run over a dataset built from scratch: the file order shuffled by Ray per
    execution, the decode step's epochs following the executions."""
    read = ray.data.read_binary_files(
        str(files), include_paths=True, shuffle=ray.data.FileShuffleConfig(seed=SEED),
        partitioning=ray.data.datasource.Partitioning("dir", field_names=["cls"],
                                                      base_dir=str(files)))
    decoded = decode_batches(read, TRANSFORM, seed=SEED, batch_size=4, label_column="cls",
                             classes=["a", "b"])
    import torch

    trainer = TorchTrainer(_train_loop,
                           train_loop_config={"epochs": EPOCHS, "label_dtype": torch.int64},
                           scaling_config=ScalingConfig(num_workers=1, use_gpu=False),
                           datasets={"train": decoded},
                           run_config=RunConfig(storage_path=str(storage), name=name))
    result = trainer.fit()
    assert result.error is None, result.error
    assert result.return_value is not None, "the train loop's return value did not come back"
    return result.return_value


def test_each_epoch_of_a_torch_trainer_decodes_its_own_windows_and_a_second_run_the_same(
        cluster, files, tmp_path):
    first = _fit(files, tmp_path, "first")
    expected = [sorted(_digest(image) for image in _expected(files, epoch).values())
                for epoch in range(EPOCHS)]
    assert first == expected
    assert len({tuple(epoch) for epoch in first}) == EPOCHS, "two epochs had the same images"
    assert _fit(files, tmp_path, "second") == first
