"""Leaving a script in the middle of a lane_threads epoch exits cleanly.

torchdata.nodes decodes ahead on daemon threads. Before the exit gate (custom_op/datasets/
_exit_gate.py) the interpreter's exit found them inside torch and the process aborted
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
    from custom_op.datasets import BatchLane, lane_threads

    folder = JpegFolder(sys.argv[1])
    lane = BatchLane(folder, v2.Compose([v2.RandomResizedCrop(64), v2.RandomHorizontalFlip()]))
    sampler = BatchSampler(RandomSampler(folder, num_samples=64 * 40), 64, drop_last=True)
    for step, (images, labels) in enumerate(lane_threads(lane, sampler, threads=2, prefetch=4)):
        if step == int(sys.argv[2]):
            break  # as a job does at its last step: the threads are still decoding ahead
    print("left the loop", flush=True)
""")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("exit") / "train"
    write_jpeg_folder(root, 16, 240, 320, classes=("a", "b"), seed=3)
    return root


@pytest.mark.parametrize("step", [0, 1, 2, 0, 1])
def test_breaking_out_and_exiting_is_clean(folder, step) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(folder), str(step)],
                          capture_output=True, text=True, timeout=300)
    assert "terminate called" not in done.stderr
    assert done.returncode == 0, done.stderr[-2000:]
    assert "left the loop" in done.stdout
