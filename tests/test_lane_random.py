"""The lane's own random streams: torchvision's distributions, drawn from generators the lane owns.

- The lane's RandomResizedCrop window and flip, drawn from a ``torch.Generator``
  seeded ``s``, are what ``v2.RandomResizedCrop.make_params`` and the flip's
  ``torch.rand(1) < p`` draw from the global generator seeded ``s``, over many
  seeds, settings and image sizes, the fallback branches included.
- A training loop's own draws are never repeated or replayed by the lane: its
  generators are not set from the lane's threads (with a random tail) and
  not drawn from at all (without one).
- The same seed gives the same batches in every loader, with any thread or
  worker count, whatever the loop draws between batches.
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
from custom_op.datasets import BatchLane, LaneBatchSampler, lane_dataloader, lane_threads
from custom_op.datasets._lane_random import flip_draw, numpy_seed, resized_crop_window
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


@pytest.mark.parametrize("loader_kind", ["threads", "workers"])
@pytest.mark.parametrize("random_tail", [False, True], ids=["crop-flip", "random-tail"])
def test_training_loop_draws_are_its_own(folder, random_tail, loader_kind) -> None:
    """A thread draws from torch, numpy and random from before the lane's first batch until
    after its last. Its three streams are exactly those of its seeds, but for a random tail
    in threads: it draws from the global torch generator there, and then numpy's and
    random's streams still are the seeds' and no torch value comes twice."""
    lane = BatchLane(custom_op.JpegFolder(folder), recipe(random_tail), seed=1)
    batches = LaneBatchSampler(len(lane), BATCH, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the tail's warning: tested below
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
    assert seen["numpy"] == reference["numpy"]
    assert seen["random"] == reference["random"]
    if random_tail and loader_kind == "threads":
        assert len(set(seen["torch"])) == len(seen["torch"])
    else:
        assert seen["torch"] == reference["torch"]


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


def test_a_drawing_tail_is_named_where_it_is_not_reproducible(folder) -> None:
    lane = BatchLane(custom_op.JpegFolder(folder), recipe(True))
    sampler = LaneBatchSampler(len(lane), BATCH)
    message = r"ColorJitter, RandomGrayscale in the lane's transform draws from the process-wide"
    with pytest.warns(RuntimeWarning, match=message):
        lane_threads(lane, sampler)
    with pytest.warns(RuntimeWarning, match=message):
        lane_dataloader(lane, sampler, num_workers=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lane_dataloader(lane, sampler, num_workers=1)
        deterministic = BatchLane(custom_op.JpegFolder(folder), v2.Compose(
            [*recipe(False).transforms, v2.ToDtype(torch.float32)]))
        lane_threads(deterministic, sampler)


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
