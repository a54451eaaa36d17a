"""Epochs and resuming for the lane's loaders: which epoch runs next, and from which batch.

A loader counts the epochs it runs (each ``iter(loader)`` is one) and the
batches it has handed to the training loop in the current one. That is all
its state: the lane draws every sample from a stream of (seed, epoch, key),
so a loader that starts epoch ``e`` at batch ``k + 1`` (its batch sampler's
first ``k`` batches skipped) yields what the uninterrupted run yielded from
there, provided the batch sampler's order is a function of its epoch
(:class:`LaneBatchSampler`, or DistributedSampler after its ``set_epoch``);
``load_state_dict`` refuses a batch sampler whose order is not.

Each batch the sampler yields is sent on as a :class:`BatchRequest` that
carries its epoch, because a DataLoader's persistent workers hold copies of
the lane that never see ``set_epoch`` called in the training process.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

from torch.utils.data import BatchSampler, DistributedSampler, SequentialSampler

from ._sampler import LaneBatchSampler, checked_count

__all__ = ["BatchRequest", "EpochCursor", "Requests"]


def _check_reproducible(batch_sampler: Any, owner: str) -> None:
    """Refuses to resume with a batch sampler whose order the lane cannot make again.

    Resuming skips the batches the interrupted run already handed out, which is right only
    if the sampler yields the same order again in that epoch: LaneBatchSampler's is a
    function of its seed and epoch, a DistributedSampler's of its seed and the epoch its
    set_epoch was given, a SequentialSampler's and a fixed list's never change. Any other
    (a RandomSampler, a sampler of the caller's) would silently give other batches."""
    if isinstance(batch_sampler, (LaneBatchSampler, list, tuple)):
        return
    inner = getattr(batch_sampler, "sampler", None)
    if isinstance(batch_sampler, BatchSampler) and isinstance(
            inner, (DistributedSampler, SequentialSampler)):
        return
    kind = (f"BatchSampler({type(inner).__name__})" if isinstance(batch_sampler, BatchSampler)
            else type(batch_sampler).__name__)
    raise TypeError(f"{owner}.load_state_dict: the loader's batch sampler is a {kind}, whose "
                    "order the lane cannot reproduce, so the resumed epoch would yield other "
                    "batches than the interrupted run: build the loader with "
                    "LaneBatchSampler(len(lane), batch_size, seed=...), whose order is a "
                    "function of its seed and epoch (or a BatchSampler around a "
                    "DistributedSampler, calling its set_epoch)")


class BatchRequest(NamedTuple):
    """One batch to make: its dataset indices and the epoch they are drawn for."""

    epoch: int
    indices: Sequence[int]


class EpochCursor:
    """The epoch a loader runs next and the batches it has handed out in the current one.

    ``start()`` begins the next epoch (it tells the lane and the batch
    sampler, if the sampler has ``set_epoch``), ``handed()`` counts a batch
    given to the training loop, ``finish()`` ends the epoch; ``state_dict``
    / ``load_state_dict`` read and set the position."""

    def __init__(self, lane: Any, batch_sampler: Iterable[Sequence[int]], initial_epoch: int,
                 owner: str) -> None:
        checked_count(owner, "initial_epoch", initial_epoch)
        self.lane, self.batch_sampler, self.owner = lane, batch_sampler, owner
        self.next_epoch, self.skip = initial_epoch, 0
        self.epoch, self.batches, self.first, self.running = initial_epoch, 0, 0, False

    def start(self) -> None:
        self.epoch, self.batches, self.first = self.next_epoch, self.skip, self.skip
        self.next_epoch, self.skip, self.running = self.epoch + 1, 0, True
        self.lane.set_epoch(self.epoch)
        if hasattr(self.batch_sampler, "set_epoch"):
            self.batch_sampler.set_epoch(self.epoch)

    def handed(self) -> None:
        self.batches += 1

    def finish(self) -> None:
        self.running = False

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "batches", "seed"}``: the epoch to resume and how many of its batches
        the training loop already had (0 at an epoch's start), and the lane's seed."""
        if self.running and not self._all_handed():
            return {"epoch": self.epoch, "batches": self.batches, "seed": self.lane.seed}
        if self.running:  # the last batch was handed out: the next epoch is the one to run
            return {"epoch": self.epoch + 1, "batches": 0, "seed": self.lane.seed}
        return {"epoch": self.next_epoch, "batches": self.skip, "seed": self.lane.seed}

    def _all_handed(self) -> bool:
        try:
            return self.batches >= len(self.batch_sampler)  # type: ignore[arg-type]
        except TypeError:  # a batch sampler without a length
            return False

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next ``iter(loader)`` resumes ``state``'s epoch after its ``batches`` batches."""
        missing = sorted({"epoch", "batches", "seed"} - set(state))
        if missing:
            raise ValueError(f"{self.owner}.load_state_dict: the state has no {missing}; "
                             f"it has {sorted(state)}")
        if state["seed"] != self.lane.seed:
            raise ValueError(f"{self.owner}.load_state_dict: the state was saved by a lane "
                             f"seeded {state['seed']}, this lane's seed is {self.lane.seed}: "
                             f"give BatchLane(seed={state['seed']}) to resume that run")
        for name in ("epoch", "batches"):
            checked_count(f"{self.owner}.load_state_dict", name, state[name])
        _check_reproducible(self.batch_sampler, self.owner)
        self.next_epoch, self.skip, self.running = state["epoch"], state["batches"], False


class Requests:
    """The batch sampler's batches of the cursor's epoch, the first ``skip`` left out, as
    BatchRequests: what the loader's first stage (a DataLoader's sampler) iterates."""

    def __init__(self, batch_sampler: Iterable[Sequence[int]], cursor: EpochCursor) -> None:
        self.batch_sampler, self.cursor = batch_sampler, cursor

    def __iter__(self) -> Iterator[BatchRequest]:
        epoch, skip = self.cursor.epoch, self.cursor.first
        for indices in itertools.islice(iter(self.batch_sampler), skip, None):
            yield BatchRequest(epoch, list(indices))

    def __len__(self) -> int:
        return len(self.batch_sampler)  # type: ignore[arg-type]
