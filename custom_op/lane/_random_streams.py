"""The batch lane's own random streams: one per sample, a function of (seed, epoch, sample key).

Each sample's window and flip are drawn from a ``torch.Generator`` that belongs
to that sample alone and is seeded from a hash of the lane's seed, the epoch
and the sample's key (its dataset index, or a tar member's shard and key), as
DALI and FFCV derive theirs. These draws neither read nor move the
process-wide generators, so the training loop's own draws, the number of
threads or workers and their timing change no batch, and a resumed epoch
draws what the uninterrupted one drew.

A tail that draws (ColorJitter) knows only the process-wide generators. For
it, :func:`seed_process_generators` puts them in the sample's stream, inside
:func:`process_generators_kept`, which puts the caller's states back: the
tail's draws are the sample's own and the training loop's sequence is left
as it was.

The draws keep torchvision's distributions exactly: :func:`resized_crop_window`
makes the same calls as ``v2.RandomResizedCrop.make_params`` on the
sample's generator, and :func:`flip_draw` is the flip's ``torch.rand(1) < p``,
so a generator in a given state draws what the global generator in that state
would give the transforms.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
from typing import Any, Iterator, Sequence

import numpy as np
import torch

__all__ = ["derived_seed", "draws_from_global_generators", "flip_draw", "resized_crop_window",
           "numpy_seed", "process_generators_kept", "sample_generator", "seed_process_generators"]

def derived_seed(seed: int, epoch: int, key: Any) -> int:
    """A 64-bit seed for the stream of sample ``key`` in ``epoch``: a hash, so that nearby
    indices, epochs and seeds give unrelated streams, and the same triple always the same one.

    ``key`` is an int (a dataset index) or a str (a tar member); the two kinds never collide
    because the hashed text spells the key's type."""
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise TypeError(f"BatchLane: a sample key must be an int index or a str, got {key!r}")
    text = f"custom_op.lane\0{int(seed)}\0{int(epoch)}\0{type(key).__name__}\0{key}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def sample_generator(seed: int) -> torch.Generator:
    """A CPU generator in the state ``torch.manual_seed(seed)`` puts the global one in."""
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def resized_crop_window(generator: torch.Generator, height: int, width: int,
                        scale: Sequence[float], ratio: Sequence[float],
                        log_ratio: Sequence[float]) -> dict[str, int]:
    """RandomResizedCrop's window for a ``height`` x ``width`` image, drawn from ``generator``.

    Up to ten tries of an area fraction uniform in ``scale`` and an aspect ratio log-uniform
    in ``ratio``; the first that fits is placed uniformly at random; when none fits, the
    largest centred window whose ratio is within ``ratio``. ``log_ratio`` is ``ratio``'s
    logarithm as torchvision computes it (in float32), because the bounds of the uniform draw
    must be the very same numbers for the draws to be the same."""
    area = height * width
    for _ in range(10):
        fraction = torch.empty(1).uniform_(scale[0], scale[1], generator=generator).item()
        target = area * fraction
        log_aspect = torch.empty(1).uniform_(log_ratio[0], log_ratio[1], generator=generator)
        aspect = torch.exp(log_aspect).item()
        crop_width = int(round(math.sqrt(target * aspect)))
        crop_height = int(round(math.sqrt(target / aspect)))
        if 0 < crop_width <= width and 0 < crop_height <= height:
            top = int(torch.randint(0, height - crop_height + 1, (1,), generator=generator).item())
            left = int(torch.randint(0, width - crop_width + 1, (1,), generator=generator).item())
            return {"top": top, "left": left, "height": crop_height, "width": crop_width}
    image_ratio = width / height
    if image_ratio < min(ratio):
        crop_width, crop_height = width, int(round(width / min(ratio)))
    elif image_ratio > max(ratio):
        crop_width, crop_height = int(round(height * max(ratio))), height
    else:
        crop_width, crop_height = width, height
    return {"top": (height - crop_height) // 2, "left": (width - crop_width) // 2,
            "height": crop_height, "width": crop_width}


def flip_draw(generator: torch.Generator, below: float) -> bool:
    """RandomHorizontalFlip's decision: one float32 uniform below ``p`` (given as float32)."""
    return torch.rand(1, generator=generator).item() < below


def seed_process_generators(generator: torch.Generator, seed: int) -> None:
    """Puts this process's torch, ``random`` and numpy generators where a sample's transform
    would find them in the per-sample pipeline seeded with ``seed``: torch's in ``generator``'s
    state (the sample's stream after the lane's own draws), ``random`` seeded with ``seed``,
    numpy with :func:`numpy_seed` of it.

    Only inside :func:`process_generators_kept`, and only in a thread where nothing else
    draws meanwhile: the generators are the whole process's, so the caller's own streams
    must be put back afterwards and no other thread may draw from the sample's."""
    torch.set_rng_state(generator.get_state())
    random.seed(seed)
    np.random.seed(numpy_seed(seed))


@contextlib.contextmanager
def process_generators_kept() -> Iterator[None]:
    """Runs the body with the process-wide torch, ``random`` and numpy generators saved and
    put back afterwards, as ``torch.random.fork_rng`` does for torch's alone.

    The lane seeds those generators per sample for a tail that draws from them; putting
    the caller's states back leaves the training loop's own sequence as if the lane had
    drawn nothing."""
    torch_state, python_state, numpy_state = _global_states()
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def numpy_seed(seed: int) -> int:
    """The 32 bits numpy's global generator takes, folded from both halves of ``seed``:
    numpy seeds from an int much faster than from an array of words, once per sample."""
    return (seed ^ (seed >> 32)) & 0xFFFFFFFF


def _global_states() -> tuple:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def _same_states(first: tuple, second: tuple) -> bool:
    return (torch.equal(first[0], second[0]) and first[1] == second[1]
            and all(np.array_equal(a, b) for a, b in zip(first[2][1:3], second[2][1:3])))


def draws_from_global_generators(steps: Sequence[Any], image: Any) -> list[str]:
    """The names of the ``steps`` that draw from the process-wide generators, found by running
    them once in turn on ``image`` and reading (never setting) the generators around each.

    A step that draws moves those generators on by its draws; they are put back afterwards,
    so the caller's streams go on as if nothing had been run."""
    drawing = []
    with process_generators_kept():
        for step in steps:
            before = _global_states()
            image = step(image)
            if not _same_states(before, _global_states()):
                drawing.append(type(step).__name__)
    return drawing

