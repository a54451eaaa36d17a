"""Leaving a script in the middle of a lane_threads epoch exits cleanly.

torchdata.nodes decodes ahead on daemon threads. Before the exit gate
(custom_op/lane/_exit_gate.py) the interpreter's exit found them inside torch and the process aborted
("terminate called without an active exception", status 134) on every run of this script:
after a training job's work was done, its exit status said it failed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from synthetic import write_jpeg_folder

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from torch.utils.data import BatchSampler, RandomSampler
    from torchvision.transforms import v2
    from custom_op import JpegFolder
    from custom_op.lane import BatchLane, lane_threads

    step_to_leave, threads, prefetch = map(int, sys.argv[2:5])
    folder = JpegFolder(sys.argv[1])
    lane = BatchLane(folder, v2.Compose([v2.RandomResizedCrop(64), v2.RandomHorizontalFlip()]))
    sampler = BatchSampler(RandomSampler(folder, num_samples=64 * 40), 64, drop_last=True)
    loader = lane_threads(lane, sampler, threads=threads, prefetch=prefetch)
    for step, (images, labels) in enumerate(loader):
        assert images.shape == (64, 3, 64, 64), images.shape
        if step == step_to_leave:
            break  # as a job does at its last step: the threads are still decoding ahead
    print("left the loop at step", step, flush=True)
""")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("exit") / "train"
    write_jpeg_folder(root, 16, 240, 320, classes=("a", "b"), seed=3)
    return root


@pytest.mark.parametrize("step, threads, prefetch", [(0, 1, 1), (0, 2, 4), (1, 2, 2),
                                                     (2, 1, 4), (5, 2, 1)])
def test_breaking_out_and_exiting_is_clean(folder, step, threads, prefetch) -> None:
    """The exit status is 0 and the script's output is all it printed: the loop left at its
    step, with every batch whole, and nothing from an aborting runtime."""
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(folder), str(step), str(threads),
                           str(prefetch)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [f"left the loop at step {step}"], done.stdout
    assert "terminate called" not in done.stderr and "Fatal Python error" not in done.stderr
