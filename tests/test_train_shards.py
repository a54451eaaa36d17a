"""sagemaker/train.py --data-format webdataset: tar shards split by rank and by worker
(custom_op.lane.shard_loader, ShardSet, and the batch lane's collate_samples).

Shards come from make_dataset.py --shards; the two-rank run uses torchrun
(gloo) like the folder job, with the extension already built. The decoding
step is also checked in-process: Pillow never sees the bytes, and a bad
member is named with its shard.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

import pytest
import torch

import custom_op
from synthetic import photo_jpeg
from test_sagemaker import REPO, SAGEMAKER, clean_env, run

BAD_JPEG = b"\xff\xd8\xff\xe0" + bytes(100)  # a JPEG signature and nothing readable after it


def make_shards(root: Path, images: int, per_shard: int) -> None:
    code, output = run([sys.executable, SAGEMAKER / "make_dataset.py", root, "--shards",
                        "--images", images, "--height", 96, "--width", 128,
                        "--samples-per-shard", per_shard], cwd=REPO, env=clean_env(),
                       timeout=120)
    assert code == 0, output


def train(job: Path, *arguments, ranks: int = 1) -> tuple[int, str]:
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", ranks] \
        if ranks > 1 else []
    return run([sys.executable, *launcher, SAGEMAKER / "train.py", "--data-format", "webdataset",
                "--train", job / "data", "--model-dir", job / "model",
                "--output-data-dir", job / "output", "--crop-size", 64, "--batch-size", 4,
                *arguments], cwd=REPO, env=clean_env(), timeout=420)


@pytest.fixture(scope="module")
def two_rank_job(tmp_path_factory):
    job = tmp_path_factory.mktemp("shard_job")
    make_shards(job / "data", 32, 8)  # 4 shards: one per rank and worker, twice over
    code, output = train(job, "--epochs", 2, "--max-steps", 6, "--num-workers", 1,
                         "--log-indices", job / "indices", ranks=2)
    assert code == 0, output[-6000:]
    return job, output


def test_two_ranks_train_from_shards(two_rank_job) -> None:
    job, output = two_rank_job
    assert "data: 32 JPEG files in 2 classes in 4 shards in" in output
    assert "16 samples per rank and epoch, batch size 4 per rank, 4 steps per epoch" in output
    metrics = json.loads((job / "output" / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["steps"] == 6
    assert [epoch["steps"] for epoch in metrics["epochs"]] == [4, 2]
    assert torch.load(job / "model" / "model.pth")["classes"] == ["0", "1"]


def test_ranks_read_disjoint_shards(two_rank_job) -> None:
    job, _ = two_rank_job
    first_epoch = [json.loads((job / "indices" / f"indices-rank{rank}.json").read_text())
                   ["epochs"][0]["indices"] for rank in (0, 1)]
    assert not set(first_epoch[0]) & set(first_epoch[1])
    assert sorted(first_epoch[0] + first_epoch[1]) == list(range(32))


def _sample(data: bytes, shard: str = "/data/train-000003.tar", key: str = "000000042") -> dict:
    return {"__key__": key, "__url__": shard, "jpg": data, "cls": b"1\n"}


def _lane(transform):
    from custom_op.lane import BatchLane

    return BatchLane(None, transform)


def test_decoding_never_goes_through_pillow(monkeypatch: pytest.MonkeyPatch) -> None:
    """train.py's shard batches: the lane's collate_samples reads each .jpg member as an
    EncodedJpeg (Pillow never sees it) and its .cls member as the label."""
    import PIL.Image
    from torchvision.transforms import v2

    def refuse(*args, **kwargs):
        raise AssertionError("the encoded bytes went through Pillow")

    data = photo_jpeg(96, 128, seed=0, index=5)  # encoded by Pillow before it is watched
    monkeypatch.setattr(PIL.Image, "open", refuse)
    monkeypatch.setattr(PIL.Image, "frombytes", refuse)
    images, labels = _lane(v2.CenterCrop(64)).collate_samples([_sample(data)])
    assert labels.tolist() == [1]
    assert torch.equal(images[0], custom_op.decode_and_crop_jpeg(data, 16, 32, 64, 64))


def test_bad_member_is_named_with_its_shard() -> None:
    from torchvision.transforms import v2

    with pytest.raises(custom_op.JpegDecodeError,
                       match=r"^/data/train-000003\.tar: member 000000042\.jpg: "):
        _lane(v2.RandomResizedCrop(64)).collate_samples([_sample(BAD_JPEG)])


def test_shard_set_counts_and_refuses_too_few_shards(tmp_path: Path) -> None:
    from custom_op.lane import BatchLane, ShardSet, shard_loader
    from torchvision.transforms import v2

    make_shards(tmp_path, 12, 4)
    shards = ShardSet(tmp_path)
    assert (len(shards), shards.classes, shards.scanned) == (12, ["0", "1"], True)
    with pytest.raises(ValueError, match="3 shards for 2 ranks x 2 workers"):
        shard_loader(shards, BatchLane(None, v2.RandomResizedCrop(32)), batch_size=4,
                     world_size=2, num_workers=2)
    loader = shard_loader(shards, BatchLane(None, v2.RandomResizedCrop(32)), batch_size=4,
                          num_workers=0, shuffle_buffer=0)
    epochs = []
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        batches = list(loader)
        assert [tuple(images.shape) for images, _, _ in batches] == [(4, 3, 32, 32)] * 3
        epochs.append([key for _, _, keys in batches for key in keys.tolist()])
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(12))
    assert epochs[0] != epochs[1]  # the shard order is reshuffled by the epoch


def _replace_member(shard: Path, name: str, data: bytes) -> None:
    with tarfile.open(shard) as tar:
        members = [(info, tar.extractfile(info).read()) for info in tar.getmembers()]
    with tarfile.open(shard, "w") as tar:
        for info, content in members:
            content = data if info.name == name else content
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))


@pytest.mark.parametrize("policy", ["raise", "substitute"])
def test_on_error_policy_for_a_bad_member(tmp_path: Path, policy: str) -> None:
    make_shards(tmp_path / "data", 8, 4)
    _replace_member(tmp_path / "data" / "train-000000.tar", "000000001.jpg", BAD_JPEG)
    code, output = train(tmp_path, "--epochs", 1, "--num-workers", 0, "--on-error", policy)
    named = "train-000000.tar: member 000000001.jpg: "
    assert named in output
    assert (code != 0) if policy == "raise" else (code == 0), output[-4000:]


def test_fewer_shards_than_readers_is_refused(tmp_path: Path) -> None:
    make_shards(tmp_path / "data", 8, 8)  # one shard for two workers
    code, output = train(tmp_path, "--num-workers", 2)
    assert code != 0
    assert "1 shards for 1 ranks x 2 workers: every DataLoader worker needs at least one" in output


def test_sizes_given_skip_the_scan_and_epochs_reshuffle(tmp_path: Path) -> None:
    """With --dataset-size and --num-classes nothing is scanned; every epoch is one pass over
    the shards in a new order (the shuffles are seeded by the epoch)."""
    make_shards(tmp_path / "data", 16, 4)
    code, output = train(tmp_path, "--epochs", 3, "--num-workers", 0, "--dataset-size", 16,
                         "--num-classes", 2, "--log-indices", tmp_path / "indices")
    assert code == 0, output[-4000:]
    assert "data: 16 JPEG files in 2 classes in 4 shards in" in output
    assert "(from --dataset-size and --num-classes)" in output
    epochs = [epoch["indices"] for epoch in json.loads(
        (tmp_path / "indices" / "indices-rank0.json").read_text())["epochs"]]
    assert [sorted(indices) for indices in epochs] == [list(range(16))] * 3
    assert len({tuple(indices) for indices in epochs}) == 3


@pytest.mark.parametrize("scan", [True, False], ids=["scanned", "sizes-given"])
@pytest.mark.parametrize("policy", ["raise", "substitute"])
def test_on_error_policy_for_a_truncated_shard(tmp_path: Path, policy: str, scan: bool) -> None:
    """Found by the start-up scan, or else by the reader during training: stops the job naming
    the shard, or is skipped with a warning naming it."""
    make_shards(tmp_path / "data", 8, 4)
    shard = tmp_path / "data" / "train-000001.tar"
    shard.write_bytes(shard.read_bytes()[:3000])  # inside its first image
    sizes = [] if scan else ["--dataset-size", 8, "--num-classes", 2]
    code, output = train(tmp_path, "--epochs", 1, "--num-workers", 0, "--on-error", policy, *sizes)
    named = (f"train.py: {'' if policy == 'raise' else 'warning: '}{shard}: a damaged shard" if scan
             else f"{shard}: member 000000004.jpg at byte 0: the archive ends")
    assert named in output
    assert (code != 0) if policy == "raise" else (code == 0), output[-4000:]
