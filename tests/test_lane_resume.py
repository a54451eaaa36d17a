"""Resuming mid-epoch: a loader given the state taken after batch k yields what the uninterrupted run
yields from batch k + 1 on, bit for bit, and the epochs after it; with threads and with workers, in
this process and in a new one (a spot instance's job restarted from its checkpoint)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler, SequentialSampler
from torchvision.transforms import v2

import custom_op
from custom_op.lane import BatchLane, LaneBatchSampler, lane_dataloader, lane_threads
from synthetic import write_jpeg_folder

SIZE, BATCH, SEED = 40, 4, 9


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("lane-resume") / "train"
    write_jpeg_folder(root, 18, 72, 96, classes=("a", "b"), seed=5)
    return root


# Both lanes with a tail that draws (ColorJitter), whose draws come from each sample's
# stream, and the threads lane with one that draws nothing after it.
SETUP = textwrap.dedent("""
    import torch
    from torchvision.transforms import v2
    import custom_op
    from custom_op.lane import BatchLane, LaneBatchSampler, lane_dataloader, lane_threads

    def make(kind, root):
        tail = [v2.ColorJitter(0.5, 0.5)]
        if kind == "threads":
            tail.append(v2.ToDtype(torch.float32))
        lane = BatchLane(custom_op.JpegFolder(root), v2.Compose(
            [v2.RandomResizedCrop(40), v2.RandomHorizontalFlip(), *tail]), seed=9)
        batches = LaneBatchSampler(len(lane), 4, seed=3)
        if kind == "threads":
            return lane_threads(lane, batches, threads=2)
        return lane_dataloader(lane, batches, num_workers=2, persistent_workers=True)

    def digests(batches):
        import hashlib
        return [hashlib.sha256(images.contiguous().numpy().tobytes()
                               + labels.numpy().tobytes()).hexdigest()[:16]
                for images, labels in batches]
""")
exec(SETUP)  # the same make() and digests() here and in the new process


@pytest.fixture(scope="module", params=["threads", "workers"])
def uninterrupted(request, folder):
    loader = make(request.param, folder)
    return request.param, [digests(loader) for _ in range(3)]


@pytest.mark.parametrize("k", [0, 1, 3, 5])
def test_resume_after_k_batches_equals_the_uninterrupted_run(folder, uninterrupted, k) -> None:
    kind, epochs = uninterrupted
    assert len(epochs[1]) == 5 and epochs[0] != epochs[1] != epochs[2]
    interrupted = make(kind, folder)
    assert digests(interrupted) == epochs[0]
    seen = []
    if k:
        for images, labels in interrupted:
            seen += digests([(images, labels)])
            if len(seen) == k:
                break
    state = interrupted.state_dict()
    expected_state = {"epoch": 2, "batches": 0} if k == 5 else {"epoch": 1, "batches": k}
    assert state == {**expected_state, "seed": SEED}
    assert seen == epochs[1][:k]
    resumed = make(kind, folder)
    resumed.load_state_dict(json.loads(json.dumps(state)))  # as a checkpoint stores it
    rest = [] if k == 5 else digests(resumed)
    assert seen + rest == epochs[1]
    assert digests(resumed) == epochs[2]


def test_a_new_process_resumes_from_the_state(folder, uninterrupted) -> None:
    kind, epochs = uninterrupted
    script = SETUP + textwrap.dedent("""
        import json, sys
        loader = make(sys.argv[1], sys.argv[2])
        loader.load_state_dict(json.loads(sys.argv[3]))
        print(json.dumps([digests(loader), digests(loader)]))
    """)
    state = json.dumps({"epoch": 1, "batches": 2, "seed": SEED})
    done = subprocess.run([sys.executable, "-c", script, kind, str(folder), state],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [epochs[1][2:], epochs[2]]


def test_a_state_of_another_seed_is_refused(folder) -> None:
    loader = make("threads", folder)
    with pytest.raises(ValueError, match="seeded 5, this lane's seed is 9"):
        loader.load_state_dict({"epoch": 1, "batches": 2, "seed": 5})
    with pytest.raises(ValueError, match="batches must be an int >= 0, got -1"):
        loader.load_state_dict({"epoch": 1, "batches": -1, "seed": SEED})
    with pytest.raises(ValueError, match=r"the state has no \['seed'\]"):
        loader.load_state_dict({"epoch": 1, "batches": 2})


def test_a_batch_sampler_whose_order_cannot_be_made_again_is_refused(folder) -> None:
    """Resuming skips the batches already handed out: with a RandomSampler's order, or a
    sampler the lane knows nothing of, that would silently skip other samples."""
    lane = BatchLane(custom_op.JpegFolder(folder), v2.Compose([v2.RandomResizedCrop(SIZE)]),
                     seed=SEED)
    state = {"epoch": 1, "batches": 2, "seed": SEED}
    foreign = {"BatchSampler(RandomSampler)": BatchSampler(RandomSampler(range(len(lane))),
                                                          BATCH, drop_last=False),
               "Batches": Batches()}
    for kind, sampler in foreign.items():
        for loader in (lane_threads(lane, sampler), lane_dataloader(lane, sampler)):
            with pytest.raises(TypeError, match=re.escape(
                    f"load_state_dict: the loader's batch sampler is a {kind}, whose order the "
                    "lane cannot reproduce") + r".*LaneBatchSampler\(len\(lane\)"):
                loader.load_state_dict(state)
    ranks = DistributedSampler(range(len(lane)), num_replicas=2, rank=0, seed=3)
    for sampler in (LaneBatchSampler(len(lane), BATCH, seed=3), [[0, 1], [2, 3], [4, 5]],
                    BatchSampler(ranks, BATCH, drop_last=False),
                    BatchSampler(SequentialSampler(range(len(lane))), BATCH, drop_last=False)):
        loader = lane_threads(lane, sampler)
        loader.load_state_dict(state)
        assert len(list(loader)) == len(sampler) - 2


class Batches:
    """A batch sampler of the caller's own, whose order the lane cannot vouch for."""

    def __iter__(self):
        return iter([[0, 1], [2, 3], [4, 5]])

    def __len__(self) -> int:
        return 3
