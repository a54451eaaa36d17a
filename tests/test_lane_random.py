"""The lane's own random streams: torchvision's distributions, drawn from generators the lane owns.

- The lane's RandomResizedCrop window and flip, drawn from a ``torch.Generator``
  seeded ``s``, are what ``v2.RandomResizedCrop.make_params`` and the flip's
  ``torch.rand(1) < p`` draw from the global generator seeded ``s``, over many
  seeds, settings and image sizes, the fallback branches included.
- A training loop's own draws are never repeated or replayed by the lane: its
  generators are not set from the lane's threads, and a drawing tail, run in
  the loop's own thread with each sample's streams, puts the loop's states back.
- The same seed gives the same batches in every loader, with any thread or
  worker count, whatever the loop draws between batches, a drawing tail's
  included.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
import warnings

import numpy as np
import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

import custom_op
from custom_op.lane import BatchLane, LaneBatchSampler, lane_dataloader, lane_threads
from custom_op.lane._random_streams import flip_draw, numpy_seed, resized_crop_window
from synthetic import write_jpeg_folder

SIZE, BATCH = 40, 4
SEEDS = range(300)

#: (scale, ratio, image size, the window when every try must fail, else None).
CROP_CASES = {
    "default-photo": ((0.08, 1.0), (3 / 4, 4 / 3), (375, 500), None),
    "default-tiny": ((0.08, 1.0), (3 / 4, 4 / 3), (2, 3), None),
    "default-pixel": ((0.08, 1.0), (3 / 4, 4 / 3), (1, 1), None),
    "narrow-scale": ((0.5, 0.6), (1.0, 1.0), (120, 160), None),
    "small-and-tall": ((0.01, 0.02), (0.2, 0.3), (257, 256), None),
    "whole-area": ((1.0, 1.0), (0.5, 2.0), (100, 100), None),
    # Every try is too wide: the fallback keeps the width and cuts the height to the ratio.
    "fallback-too-tall": ((0.9, 1.0), (4.0, 5.0), (120, 160),
                          {"top": 40, "left": 0, "height": 40, "width": 160}),
    # Every try is too tall: the fallback keeps the height and cuts the width.
    "fallback-too-wide": ((0.9, 1.0), (0.2, 0.25), (160, 120),
                          {"top": 0, "left": 40, "height": 160, "width": 40}),
    "fallback-thin": ((0.9, 1.0), (3 / 4, 4 / 3), (1000, 7),
                      {"top": 495, "left": 0, "height": 9, "width": 7}),
}


@pytest.mark.parametrize("case", list(CROP_CASES))
def test_crop_and_flip_draws_equal_torchvision_for_equal_generator_states(case) -> None:
    scale, ratio, (height, width), fallback = CROP_CASES[case]
    theirs = v2.RandomResizedCrop(SIZE, scale=scale, ratio=ratio)
    log_ratio = torch.log(torch.tensor(ratio)).tolist()
    image = tv_tensors.Image(torch.zeros((1, height, width), dtype=torch.uint8))
    for seed in SEEDS:
        torch.manual_seed(seed)
        expected = theirs.make_params([image])
        generator = torch.Generator().manual_seed(seed)
        window = resized_crop_window(generator, height, width, scale, ratio, log_ratio)
        assert window == expected, f"seed {seed}"
        assert torch.equal(generator.get_state(), torch.get_rng_state()), f"seed {seed}"
        if fallback is not None:
            assert window == fallback
        for p in (0.5, 0.3):
            assert flip_draw(generator, float(np.float32(p))) == bool(torch.rand(1) < p)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("lane-random") / "train"
    write_jpeg_folder(root, 10, 90, 120, classes=("a", "b"), seed=2)
    return root


def recipe(random_tail: bool) -> v2.Compose:
    tail = [v2.ColorJitter(0.5, 0.5, 0.5), v2.RandomGrayscale(0.5)] if random_tail else []
    return v2.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip(), *tail])


def _reference_draws(count: int) -> dict[str, list]:
    generator = torch.Generator().manual_seed(123)
    python, numpy = random.Random(123), np.random.RandomState(123)
    return {"torch": [torch.rand(1, dtype=torch.float64, generator=generator).item()
                      for _ in range(count)],
            "numpy": [numpy.random_sample() for _ in range(count)],
            "random": [python.random() for _ in range(count)]}


# A random tail in threads runs in the thread that iterates the loader, with the samples'
# streams installed in the process-wide generators while it runs: another thread drawing at
# that moment would see them, so that case is the serial test further down.
@pytest.mark.parametrize("random_tail, loader_kind", [(False, "threads"), (False, "workers"),
                                                      (True, "workers")],
                         ids=["crop-flip-threads", "crop-flip-workers", "random-tail-workers"])
def test_training_loop_draws_are_its_own(folder, random_tail, loader_kind) -> None:
    """A thread draws from torch, numpy and random from before the lane's first batch until
    after its last, while the lane's threads (or workers) run: its three streams are exactly
    those of its seeds."""
    lane = BatchLane(custom_op.JpegFolder(folder), recipe(random_tail), seed=1)
    batches = LaneBatchSampler(len(lane), BATCH, seed=1)
    loader = (lane_threads(lane, batches, threads=2) if loader_kind == "threads" else
              lane_dataloader(lane, batches, num_workers=2))
    torch.manual_seed(123)
    random.seed(123)
    np.random.seed(123)
    done, seen = threading.Event(), {"torch": [], "numpy": [], "random": []}

    def training_loop() -> None:
        while True:
            finished = done.is_set()
            seen["torch"].append(torch.rand(1, dtype=torch.float64).item())
            seen["numpy"].append(np.random.random_sample())
            seen["random"].append(random.random())
            if finished:
                return
            time.sleep(0)  # lets the lane's threads take the GIL between draws

    thread = threading.Thread(target=training_loop)
    thread.start()
    try:
        for _ in range(3):
            assert sum(len(labels) for _, labels in loader) == len(lane)
    finally:
        done.set()
        thread.join()
    reference = _reference_draws(len(seen["torch"]))
    assert seen == reference


def _digest(batches) -> list[str]:
    return [hashlib.sha256(images.contiguous().numpy().tobytes()
                           + labels.numpy().tobytes()).hexdigest()[:16]
            for images, labels in batches]


def _draw_between(batches):
    """The training loop's own draws between batches."""
    for batch in batches:
        torch.rand(7)
        np.random.rand(3)
        random.random()
        yield batch


LOADERS = {
    "threads-1": lambda lane, sampler: lane_threads(lane, sampler, threads=1),
    "threads-2": lambda lane, sampler: lane_threads(lane, sampler, threads=2),
    "workers-0": lambda lane, sampler: lane_dataloader(lane, sampler, num_workers=0),
    "workers-1": lambda lane, sampler: lane_dataloader(lane, sampler, num_workers=1),
    "workers-2": lambda lane, sampler: lane_dataloader(lane, sampler, num_workers=2,
                                                       persistent_workers=True),
}


@pytest.mark.parametrize("kind", list(LOADERS))
def test_same_seed_same_batches_in_every_loader(folder, kind) -> None:
    """Two epochs of every loader equal ``lane(indices, epoch)`` calls, batch for batch."""
    def new_lane():
        return BatchLane(custom_op.JpegFolder(folder), recipe(False), seed=9)

    def new_sampler():
        return LaneBatchSampler(len(new_lane()), BATCH, seed=4)

    lane, sampler = new_lane(), new_sampler()
    expected = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        expected.append(_digest(lane(batch, epoch) for batch in sampler))
    assert expected[0] != expected[1]
    torch.manual_seed(0)
    loader = LOADERS[kind](new_lane(), new_sampler())
    assert [_digest(_draw_between(loader)) for _ in (0, 1)] == expected


@pytest.mark.parametrize("workers", [1, 2])
def test_random_tail_in_workers_is_the_same_whatever_the_worker_count(folder, workers) -> None:
    def run(workers: int, draws: bool) -> list[list[str]]:
        lane = BatchLane(custom_op.JpegFolder(folder), recipe(True), seed=9)
        loader = lane_dataloader(lane, LaneBatchSampler(len(lane), BATCH, seed=4),
                                 num_workers=workers)
        return [_digest(_draw_between(loader) if draws else loader) for _ in (0, 1)]

    assert run(workers, draws=True) == run(1, draws=False)


def _loop_draws() -> list:
    """What a training loop draws between two batches, from all three process-wide generators."""
    return [torch.rand(3).tolist(), random.random(), float(np.random.rand())]


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def test_a_drawing_tail_in_threads_is_reproducible_and_leaves_the_loops_draws_alone(
        folder) -> None:
    """ColorJitter and RandomGrayscale after the fused crop, in lane_threads: two epochs give
    the same batches whether or not the loop draws between them, the batches of the lane
    called directly and of a worker, and the loop's own draws are those of a loop without
    the lane."""
    def run(draw: bool) -> tuple[list[list[str]], list]:
        _seed_everything(5)
        lane = BatchLane(custom_op.JpegFolder(folder), recipe(True), seed=9)
        loader = lane_threads(lane, LaneBatchSampler(len(lane), BATCH, seed=4), threads=2)
        epochs, draws = [], []
        for _ in (0, 1):
            digests = []
            for batch in loader:
                digests += _digest([batch])
                if draw:
                    draws.append(_loop_draws())
            epochs.append(digests)
        return epochs, draws

    drawn, loop_draws = run(draw=True)
    assert run(draw=False)[0] == drawn
    _seed_everything(5)
    assert loop_draws == [_loop_draws() for _ in loop_draws]

    lane = BatchLane(custom_op.JpegFolder(folder), recipe(True), seed=9)
    sampler = LaneBatchSampler(len(lane), BATCH, seed=4)
    called = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        called.append(_digest(lane(batch, epoch) for batch in sampler))
    assert called == drawn and drawn[0] != drawn[1]
    worker = lane_dataloader(lane, LaneBatchSampler(len(lane), BATCH, seed=4), num_workers=1,
                             persistent_workers=True)
    assert [_digest(worker) for _ in (0, 1)] == drawn


def test_the_callers_generators_are_put_back_when_a_tail_raises(folder) -> None:
    class FailsOnTheSecond:
        def __init__(self) -> None:
            self.calls = 0

        def __call__(self, image):
            self.calls += 1
            torch.rand(1)
            if self.calls == 2:
                raise RuntimeError("the tail's own failure")
            return image

    lane = BatchLane(custom_op.JpegFolder(folder), v2.Compose(
        [*recipe(False).transforms, FailsOnTheSecond()]), seed=3)
    _seed_everything(8)
    states = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    with pytest.raises(RuntimeError, match="the tail's own failure"):
        lane([0, 1, 2])
    assert torch.equal(torch.get_rng_state(), states[0])
    assert random.getstate() == states[1]
    assert np.array_equal(np.random.get_state()[1], states[2])


def test_only_an_unfused_drawing_transform_is_named_as_not_reproducible(folder) -> None:
    sampler = LaneBatchSampler(10, BATCH)
    unfused = BatchLane(custom_op.JpegFolder(folder), v2.Compose(
        [v2.RandomCrop(SIZE), v2.RandomHorizontalFlip()]))
    torch.manual_seed(2)
    state = torch.get_rng_state()
    with pytest.warns(RuntimeWarning, match=r"lane_threads: Compose in the lane's transform "
                                            r"draws .* not reproducible"):
        lane_threads(unfused, sampler)
    # Finding out ran the transform once, and put the generator back.
    assert torch.equal(torch.get_rng_state(), state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lane = BatchLane(custom_op.JpegFolder(folder), recipe(True))
        lane_threads(lane, sampler)
        lane_dataloader(lane, sampler, num_workers=0)
        lane_dataloader(lane, sampler, num_workers=1)
        lane_dataloader(unfused, sampler, num_workers=0)


class DrawsFromRandomAndNumpy:
    """A tail that draws from Python's and numpy's global generators (as timm's and
    albumentations' transforms do): it shifts every pixel by what it draws."""

    def __call__(self, image):
        return image + (random.randrange(50) + int(np.random.randint(50)))


def test_workers_seed_random_and_numpy_per_sample(folder) -> None:
    """In a worker, before each sample's tail: ``random.seed(s)`` and
    ``np.random.seed(numpy_seed(s))`` for the sample's seed ``s``, as well as torch's."""
    transform = v2.Compose([*recipe(False).transforms, DrawsFromRandomAndNumpy()])
    lane = BatchLane(custom_op.JpegFolder(folder), transform, seed=6)
    reference = custom_op.JpegFolder(folder, transform=transform)
    expected = []
    for index in range(len(lane)):
        seed = lane.sample_seed(index)
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(numpy_seed(seed))
        expected.append(reference[index][0])
    assert numpy_seed(2 ** 40 + 5) == (2 ** 8) ^ 5
    loader = lane_dataloader(lane, [list(range(len(lane)))], num_workers=1)
    (images, _), = list(loader)
    assert torch.equal(images, torch.stack(expected))
