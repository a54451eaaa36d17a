"""The batch lane in the loaders users run: torch's DataLoader (worker processes), torchdata.nodes (threads).

Nothing here schedules work: the DataLoader and torchdata.nodes do. The lane
only gives them one object per batch.

- :func:`lane_dataloader`: a DataLoader whose sampler is a batch sampler and
  whose ``batch_size`` is None, so each worker builds whole batches and one
  tensor per batch crosses the process boundary (decoded into shared memory
  in the worker: it crosses as a handle, without the copy the DataLoader
  makes of a private tensor). Draws are made in the worker, batch by batch,
  as the per-sample pipeline makes them: the same seed gives the same batches.
- :func:`lane_threads`: a ``torchdata.nodes`` graph in one process: files
  read by a pool of threads, the draws made in order on one thread, the
  batches decoded by a pool of threads, each batch on one native thread
  (the native decode releases the GIL). torchdata.nodes was chosen over SPDL
  because it is PyTorch's own, pure-Python package on PyPI (no native build
  to match torch's), composes with samplers (``SamplerWrapper``:
  DistributedSampler, ``set_epoch``), and its thread mappers keep the order:
  all the lane needs. Every step its (daemon) threads run passes through the
  exit gate (_exit_gate.py), so that the interpreter's exit never finds one
  inside torch.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from ._batch_lane import BatchLane
from ._exit_gate import GatedIterable, gated, stop_at_exit

__all__ = ["LaneBatches", "lane_dataloader", "lane_threads"]


class LaneBatches(Dataset):
    """A map-style dataset whose "index" is a batch's list of indices: ``batches[indices]``
    is ``lane(indices)``. For a DataLoader with a batch sampler as ``sampler`` and
    ``batch_size=None``."""

    def __init__(self, lane: BatchLane, with_indices: bool = False) -> None:
        if lane.pin_memory:
            raise ValueError("lane_dataloader: give pin_memory to the DataLoader, not to the "
                             "BatchLane (workers must not pin; the DataLoader pins in the main "
                             "process)")
        self.lane, self.with_indices = lane, with_indices

    def __len__(self) -> int:
        return len(self.lane)

    def __getitem__(self, indices: Sequence[int]) -> tuple[Any, ...]:
        images, labels = self.lane(indices)
        if self.with_indices:
            return images, labels, torch.tensor(list(indices), dtype=torch.int64)
        return images, labels


def lane_dataloader(lane: BatchLane, batch_sampler: Iterable[Sequence[int]], *,
                    num_workers: int = 2, pin_memory: bool = False,
                    persistent_workers: bool = False, with_indices: bool = False,
                    **loader_options: Any) -> DataLoader:
    """A ``torch.utils.data.DataLoader`` that yields the lane's batches.

    Args:
        lane: The :class:`BatchLane` (``pin_memory=False``).
        batch_sampler: Lists of indices, one per batch: ``BatchSampler(
            RandomSampler(dataset), 64, drop_last=True)``, or around a
            ``DistributedSampler`` for torchrun's ranks (call its
            ``set_epoch`` before each epoch, as with any DataLoader).
        num_workers, pin_memory, persistent_workers: the DataLoader's.
        with_indices: also yield each batch's dataset indices (int64 [B]),
            e.g. to record what each rank trained on.
        loader_options: any other DataLoader argument (``prefetch_factor``,
            ``worker_init_fn``, ``generator``, ...), but not ``batch_size``,
            ``sampler``, ``batch_sampler`` or ``collate_fn``, which this sets.

    Returns:
        A DataLoader yielding ``(images, labels)``: uint8 ``[B, C, H, W]``
        and int64 ``[B]`` (and the indices with ``with_indices``).

    Raises:
        ValueError: the lane pins memory, or ``loader_options`` sets what
            this function sets.

    Example:
        >>> sampler = BatchSampler(RandomSampler(folder), 64, drop_last=True)
        >>> loader = lane_dataloader(BatchLane(folder, transform), sampler, num_workers=2)
        >>> images, labels = next(iter(loader))
    """
    taken = sorted({"batch_size", "sampler", "batch_sampler", "collate_fn"} & set(loader_options))
    if taken:
        raise ValueError(f"lane_dataloader: {', '.join(taken)} cannot be given: the lane makes "
                         "whole batches (batch_size=None, the batch sampler as sampler)")
    return DataLoader(LaneBatches(lane, with_indices), batch_size=None, sampler=batch_sampler,
                      num_workers=num_workers, pin_memory=pin_memory,
                      persistent_workers=persistent_workers and num_workers > 0,
                      **loader_options)


def _nodes() -> Any:
    try:
        import torchdata.nodes as nodes
    except ImportError as error:
        raise ImportError("custom_op.datasets.lane_threads runs on torchdata.nodes: "
                          "pip install torchdata") from error
    return nodes


def lane_threads(lane: BatchLane, batch_sampler: Iterable[Sequence[int]], *, threads: int = 2,
                 prefetch: int = 2, pin_memory: bool = False,
                 initial_epoch: int = 0) -> Any:
    """A ``torchdata.nodes.Loader`` that yields the lane's batches from threads of this process.

    Files are read on ``threads`` threads, the random draws made in batch
    order on one thread (so a seed gives the same batches as
    ``lane(indices)`` called in a loop), and ``threads`` batches decoded at
    once, each on one native thread: whole batches side by side keep every
    core busy to the end of each batch, where one batch split over the cores
    leaves them waiting for its last image.

    Args:
        lane: The :class:`BatchLane`; ``lane.pin_memory`` pins each batch as
            it is decoded.
        batch_sampler: Lists of indices, one per batch. torchdata's
            ``SamplerWrapper`` calls its ``set_epoch`` (if it has one) at the
            start of every epoch, counting from ``initial_epoch``; a
            ``BatchSampler`` around a ``DistributedSampler`` has none: call
            the DistributedSampler's ``set_epoch`` before each epoch.
        threads: threads reading files, and batches decoded at once.
        prefetch: batches decoded ahead of the consumer.
        pin_memory: pin each batch after decoding, on the decoding thread;
            ``lane.pin_memory`` does it without the copy.
        initial_epoch: the first epoch SamplerWrapper passes to set_epoch.

    Returns:
        A ``torchdata.nodes.Loader``: iterate it once per epoch. Breaking out
        of the loop and leaving the script is safe: the exit waits for the
        batches being decoded (at most one per thread) and starts no more.

    Raises:
        ImportError: torchdata is not installed.
        ValueError: ``threads`` or ``prefetch`` is below 1.

    Example:
        >>> loader = lane_threads(BatchLane(folder, transform), sampler, threads=2)
        >>> for images, labels in loader: ...
    """
    for name, value in (("threads", threads), ("prefetch", prefetch)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"lane_threads: {name} must be an int >= 1, got {value!r}")
    nodes = _nodes()
    pin = pin_memory and not lane.pin_memory

    def decode(plan: Any) -> tuple[Any, Any]:
        images, labels = lane.decode(plan, num_threads=1)
        return (images.pin_memory() if pin else images), labels

    batches = nodes.SamplerWrapper(GatedIterable(batch_sampler), initial_epoch=initial_epoch)
    loaded = nodes.ParallelMapper(batches, gated(lane.load), num_workers=threads, method="thread",
                                  in_order=True)
    drawn = nodes.Mapper(loaded, gated(lane.draw))  # pulled by the next stage's one reader
    decoded = nodes.ParallelMapper(drawn, gated(decode), num_workers=threads, method="thread",
                                   in_order=True)
    ahead = nodes.Prefetcher(decoded, prefetch_factor=prefetch)
    loader = nodes.Loader(ahead)
    stop_at_exit(loader, [ahead, decoded, loaded])
    return loader
