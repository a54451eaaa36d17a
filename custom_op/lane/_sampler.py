"""LaneBatchSampler: batches of dataset indices whose order is a function of (seed, epoch) alone.

A resumed job must see the batches the uninterrupted one would have seen
next, so the order cannot come from a generator that the rest of the process
also draws from (RandomSampler draws its generator's seed from the global
one). Here each epoch's permutation is drawn from a generator of its own,
seeded from (seed, epoch), and every rank takes its share of it as
DistributedSampler does: the same permutation on every rank, rank ``r``
taking every ``world_size``-th index from ``r``.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

import torch

from ._random_streams import derived_seed, sample_generator

__all__ = ["LaneBatchSampler"]


def checked_count(owner: str, name: str, value: Any) -> int:
    """``value`` checked as an epoch or a count of batches: an int >= 0, and not a bool.

    The one rule for every epoch and batch count the lane takes (the loaders' initial
    epoch and states, LaneBatchSampler's epoch and state), so that what one refuses the
    others refuse too: a negative count would skip from the end, a fractional one be cut."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{owner}: {name} must be an int >= 0, got {value!r}")
    return value


class LaneBatchSampler:
    """Batches of indices into a dataset of ``length`` samples, reshuffled every epoch.

    Args:
        length: The dataset's size (``len(lane)``).
        batch_size: Indices per batch.
        shuffle: A new permutation every epoch; False: ``0..length-1`` in order.
        seed: The order's seed; default ``torch.initial_seed()`` when the
            sampler is built (read, not drawn).
        drop_last: Drop each rank's last, short batch, and the samples that
            do not divide evenly among the ranks; otherwise the ranks' shares
            are padded with the permutation's first indices, as
            DistributedSampler pads them.
        rank, world_size: This rank's share; default
            ``torch.distributed``'s when it is initialised, else 0 and 1.

    ``set_epoch(epoch)`` chooses the epoch (the lane's loaders call it);
    ``state_dict()`` / ``load_state_dict()`` hold (epoch, batches yielded),
    for torchdata's StatefulDataLoader: a loaded state skips the batches
    already yielded in that epoch.

    Raises:
        TypeError: an argument is not an int.
        ValueError: ``length`` or ``seed`` is negative, ``batch_size`` or
            ``world_size`` below 1, or ``rank`` outside ``0..world_size-1``.

    Example:
        >>> batches = LaneBatchSampler(len(lane), 64, seed=0, drop_last=True)
        >>> loader = lane_threads(lane, batches)
    """

    def __init__(self, length: int, batch_size: int, *, shuffle: bool = True,
                 seed: Optional[int] = None, drop_last: bool = False,
                 rank: Optional[int] = None, world_size: Optional[int] = None) -> None:
        if rank is None or world_size is None:
            distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
            rank = rank if rank is not None else (torch.distributed.get_rank() if distributed else 0)
            world_size = world_size if world_size is not None else (
                torch.distributed.get_world_size() if distributed else 1)
        seed = torch.initial_seed() if seed is None else seed
        for name, value, low in (("length", length, 0), ("batch_size", batch_size, 1),
                                 ("seed", seed, 0), ("world_size", world_size, 1),
                                 ("rank", rank, 0)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"LaneBatchSampler: {name} must be an int, got {value!r}")
            if value < low:
                raise ValueError(f"LaneBatchSampler: {name} must be >= {low}, got {value}")
        if rank >= world_size:
            raise ValueError(f"LaneBatchSampler: rank must be below world_size={world_size}, "
                             f"got {rank}")
        self.length, self.batch_size, self.shuffle, self.seed = length, batch_size, shuffle, seed
        self.drop_last, self.rank, self.world_size = drop_last, rank, world_size
        self.epoch, self._skip, self._yielded = 0, 0, 0

    def __repr__(self) -> str:
        return (f"LaneBatchSampler({self.length}, {self.batch_size}, shuffle={self.shuffle}, "
                f"seed={self.seed}, drop_last={self.drop_last}, rank={self.rank}, "
                f"world_size={self.world_size})")

    def _share(self) -> int:
        """How many indices each rank takes."""
        if self.drop_last:
            return self.length // self.world_size
        return -(-self.length // self.world_size)

    def __len__(self) -> int:
        share = self._share()
        return share // self.batch_size if self.drop_last else -(-share // self.batch_size)

    def order(self, epoch: Optional[int] = None) -> list[int]:
        """The whole epoch's order of indices (before the ranks take their shares)."""
        epoch = self.epoch if epoch is None else epoch
        if not self.shuffle:
            return list(range(self.length))
        generator = sample_generator(derived_seed(self.seed, epoch, "LaneBatchSampler order"))
        return torch.randperm(self.length, generator=generator).tolist()

    def __iter__(self) -> Iterator[list[int]]:
        order = self.order()
        total = self._share() * self.world_size
        if total > len(order) and order:
            order = (order * -(-total // len(order)))[:total]
        mine = order[self.rank:total:self.world_size]
        start, self._skip = self._skip, 0
        self._yielded = start
        for first in range(start * self.batch_size, len(mine), self.batch_size):
            batch = mine[first:first + self.batch_size]
            if len(batch) < self.batch_size and self.drop_last:
                return
            self._yielded += 1
            yield batch

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next iteration yields."""
        self.epoch = checked_count("LaneBatchSampler", "epoch", epoch)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "batches": self._yielded}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next iteration is ``state``'s epoch, from the batch after the last it yielded.

        Raises:
            ValueError: ``epoch`` or ``batches`` is not an int >= 0 (the loaders' rule)."""
        owner = "LaneBatchSampler.load_state_dict"
        epoch = checked_count(owner, "epoch", state["epoch"])
        batches = checked_count(owner, "batches", state["batches"])
        self.epoch, self._skip, self._yielded = epoch, batches, batches
