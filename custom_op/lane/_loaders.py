"""The batch lane in the loaders users run: torch's DataLoader (worker processes), torchdata.nodes (threads).

Nothing here schedules work: the DataLoader and torchdata.nodes do. The lane
only gives them one object per batch.

- :func:`lane_dataloader`: a DataLoader whose sampler is a batch sampler and
  whose ``batch_size`` is None, so each worker builds whole batches and one
  tensor per batch crosses the process boundary (decoded into shared memory
  in the worker: it crosses as a handle, without the copy the DataLoader
  makes of a private tensor).
- :func:`lane_threads`: a ``torchdata.nodes`` graph in one process: files
  read by a pool of threads, the draws made on one thread, the batches
  decoded by a pool of threads, each batch on one native thread (the native
  decode releases the GIL). torchdata.nodes was chosen over SPDL because it
  is PyTorch's own, pure-Python package on PyPI (no native build to match
  torch's), composes with samplers, and its thread mappers keep the order:
  all the lane needs. Every step its (daemon) threads run passes through the
  exit gate (_exit_gate.py), so that the interpreter's exit never finds one
  inside torch.

Both count their epochs and the batches handed out (_lane_resume.py), tell
the lane and the batch sampler the epoch, and resume from a state dict.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Union

import torch
from torch.utils.data import DataLoader, Dataset

from .._core._extras import require
from .._index._counts import IndexCounts, index_counts
from ._batch_lane import BatchLane
from ._exit_gate import GatedIterable, gated, stop_at_exit
from ._random_streams import derived_seed, sample_generator
from ._resume import BatchRequest, EpochCursor, Requests

__all__ = ["LaneBatches", "LaneDataLoader", "LaneThreads", "lane_dataloader", "lane_threads"]


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

    def __getitem__(self, request: Union[BatchRequest, Sequence[int]]) -> tuple[Any, ...]:
        """A :class:`BatchRequest` is drawn for its epoch; plain indices for the lane's. The
        last item is what the batch did to this process's index counts (_index_counts.py),
        which LaneDataLoader takes off and adds up."""
        epoch, indices = request if isinstance(request, BatchRequest) else (None, request)
        before = index_counts()
        images, labels = self.lane(indices, epoch)
        counts = index_counts() - before
        if self.with_indices:
            return images, labels, torch.tensor(list(indices), dtype=torch.int64), counts
        return images, labels, counts


def _warn_unfused_drawing(drawing: list[str]) -> None:
    """Says once, when lane_threads is built, that a transform with nothing fused draws on
    the decoding threads, where the process-wide generators cannot be seeded per sample."""
    warnings.warn(f"lane_threads: {', '.join(drawing)} in the lane's transform draws from the "
                  "process-wide random generators (torch, random, numpy), and with no "
                  "v2.RandomResizedCrop first to fuse, the whole transform runs per sample on "
                  "the decoding threads, which cannot seed those generators per sample while "
                  "the training loop draws from them: these draws are not reproducible. Put "
                  "v2.RandomResizedCrop first (a tail after it is run reproducibly), or use "
                  "lane_dataloader, which seeds them per sample.",
                  RuntimeWarning, stacklevel=3)


class LaneDataLoader(DataLoader):
    """The DataLoader :func:`lane_dataloader` returns: one epoch per ``iter()``, and
    ``state_dict()`` / ``load_state_dict()`` to resume an epoch mid-way."""

    def __init__(self, lane: BatchLane, batch_sampler: Iterable[Sequence[int]],
                 initial_epoch: int, with_indices: bool, **loader_options: Any) -> None:
        self._cursor = EpochCursor(lane, batch_sampler, initial_epoch, "lane_dataloader")
        self._counts = IndexCounts()
        super().__init__(LaneBatches(lane, with_indices), batch_size=None,
                         sampler=Requests(batch_sampler, self._cursor), **loader_options)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        self._cursor.start()
        for *batch, counts in super().__iter__():
            self._counts = self._counts + counts
            self._cursor.handed()
            yield tuple(batch)
        self._cursor.finish()

    def index_stats(self) -> dict[str, int]:
        """How the MCU-row indexes served this loader's batches so far, in whichever process
        decoded them (its workers' counts, which :func:`custom_op.index_stats` and
        :func:`custom_op.index_cache_stats` in the training process do not see): the
        decodes' outcomes (``indexed``, ``unneeded``, the fallbacks), the index caches'
        ``hits``, ``misses`` and ``builds``, and the node store's ``store_hits``,
        ``store_misses``, ``store_writes``, ``store_refused``, ``store_write_failures``
        and ``store_full`` (:func:`custom_op.index_cache_stats`).

        Example:
            >>> for images, labels in loader: ...
            >>> stats = loader.index_stats(); stats["hits"] / max(1, stats["hits"] + stats["misses"])
        """
        return self._counts.as_dict()

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "batches", "seed"}``: where a resumed loader starts (see _lane_resume.py)."""
        return self._cursor.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next epoch is ``state``'s, from the batch after its ``batches`` batches."""
        self._cursor.load_state_dict(state)


def lane_dataloader(lane: BatchLane, batch_sampler: Iterable[Sequence[int]], *,
                    num_workers: int = 2, pin_memory: bool = False,
                    persistent_workers: bool = False, with_indices: bool = False,
                    initial_epoch: int = 0, **loader_options: Any) -> LaneDataLoader:
    """A ``torch.utils.data.DataLoader`` that yields the lane's batches.

    Every ``iter(loader)`` is an epoch, counted from ``initial_epoch``: the
    loader sets the lane's epoch (and the batch sampler's, if it has
    ``set_epoch``) before it starts. The process-wide generators are seeded
    from each sample's stream before the sample's tail (in each worker, or
    with ``num_workers=0`` in the training loop's thread, its own states put
    back after each batch), so a tail that draws from them (ColorJitter,
    RandAugment) draws reproducibly too.

    Args:
        lane: The :class:`BatchLane` (``pin_memory=False``).
        batch_sampler: Lists of indices, one per batch: a
            :class:`LaneBatchSampler`, whose order depends on (seed, epoch)
            alone, or ``BatchSampler(DistributedSampler(...), 64)`` (call the
            DistributedSampler's ``set_epoch`` before each epoch, as with
            any DataLoader). Resuming skips the batches already yielded, so
            it needs an order that the epoch determines: ``load_state_dict``
            refuses (TypeError) a batch sampler whose order it cannot vouch for.
        num_workers, pin_memory, persistent_workers: the DataLoader's. Persistent
            workers also keep their MCU-row index caches from one epoch to the
            next (docs/batch_lane.md, MCU-row indexes).
        with_indices: also yield each batch's dataset indices (int64 [B]),
            e.g. to record what each rank trained on.
        initial_epoch: the epoch of the first ``iter()``.
        loader_options: any other DataLoader argument (``prefetch_factor``,
            ``worker_init_fn``, ...), but not ``batch_size``, ``sampler``,
            ``batch_sampler`` or ``collate_fn``, which this sets. Without
            ``generator``, the workers' base seed is drawn from a generator
            seeded from the lane's seed, not from the global one.

    Returns:
        A :class:`LaneDataLoader` yielding ``(images, labels)``: uint8
        ``[B, C, H, W]`` and int64 ``[B]`` (and the indices with
        ``with_indices``); ``state_dict()`` after batch ``k``, given to
        ``load_state_dict()`` of a new loader (also in a new process), makes
        its next epoch yield batches ``k + 1``, ... of that epoch, bit for
        bit the uninterrupted run's.

    Raises:
        ValueError: the lane pins memory, ``initial_epoch`` is negative, or
            ``loader_options`` sets what this function sets.

    Example:
        >>> batches = LaneBatchSampler(len(folder), 64, seed=0, drop_last=True)
        >>> loader = lane_dataloader(BatchLane(folder, transform, seed=0), batches)
        >>> images, labels = next(iter(loader))
    """
    taken = sorted({"batch_size", "sampler", "batch_sampler", "collate_fn"} & set(loader_options))
    if taken:
        raise ValueError(f"lane_dataloader: {', '.join(taken)} cannot be given: the lane makes "
                         "whole batches (batch_size=None, the batch sampler as sampler)")
    if loader_options.get("generator") is None:
        # The DataLoader draws its workers' base seed at every epoch; from its own generator
        # that draw leaves the training loop's global generator alone.
        loader_options["generator"] = sample_generator(
            derived_seed(lane.seed, 0, "lane_dataloader base seeds"))
    return LaneDataLoader(lane, batch_sampler, initial_epoch, with_indices,
                          num_workers=num_workers, pin_memory=pin_memory,
                          persistent_workers=persistent_workers and num_workers > 0,
                          **loader_options)


def _nodes() -> Any:
    require("lane", "custom_op.lane.lane_threads (it runs on torchdata.nodes)")
    import torchdata.nodes as nodes

    return nodes


class LaneThreads:
    """What :func:`lane_threads` returns: iterate it once per epoch; ``state_dict()`` /
    ``load_state_dict()`` resume an epoch mid-way. ``loader`` is the torchdata.nodes.Loader."""

    def __init__(self, loader: Any, cursor: EpochCursor,
                 deliver: Optional[Callable[[Any], Any]] = None) -> None:
        self.loader, self._cursor, self._deliver = loader, cursor, deliver

    def __iter__(self) -> Iterator[Any]:
        self._cursor.start()
        for batch in self.loader:
            if self._deliver is not None:
                # In the thread that iterates the loader: the lane's own threads never draw
                # from the process-wide generators, so the tail seeded here draws only the
                # samples' numbers, and the loop's states are put back before it goes on.
                batch = self._deliver(batch)
            self._cursor.handed()
            yield batch
        self._cursor.finish()

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "batches", "seed"}``: where a resumed loader starts (see _lane_resume.py)."""
        return self._cursor.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next epoch is ``state``'s, from the batch after its ``batches`` batches."""
        self._cursor.load_state_dict(state)


def lane_threads(lane: BatchLane, batch_sampler: Iterable[Sequence[int]], *, threads: int = 2,
                 prefetch: int = 2, pin_memory: bool = False,
                 initial_epoch: int = 0) -> LaneThreads:
    """A ``torchdata.nodes`` graph that yields the lane's batches from threads of this process.

    Files are read on ``threads`` threads, the windows and flips drawn on one
    thread from each sample's own stream, and ``threads`` batches decoded at
    once, each on one native thread: whole batches side by side keep every
    core busy to the end of each batch, where one batch split over the cores
    leaves them waiting for its last image. The batches are those of
    ``lane(indices, epoch)`` called in a loop, whatever the thread count and
    whatever the training loop draws. A tail that draws from the process-wide
    generators (found when the loader is built, by running it once on a
    blank image) runs in the thread that iterates the loader, as each batch
    is handed over, with each sample's stream installed and the loop's own
    states put back afterwards: its draws are reproducible and the loop's
    sequence is unchanged (another thread drawing at that moment would see
    the samples' streams). A transform with nothing fused that draws runs on
    the decoding threads, not reproducibly: a RuntimeWarning names it.

    Args:
        lane: The :class:`BatchLane`; ``lane.pin_memory`` pins each batch as
            it is decoded.
        batch_sampler: Lists of indices, one per batch: a
            :class:`LaneBatchSampler`, or any batch sampler (its
            ``set_epoch``, if it has one, is called at every epoch; a
            ``BatchSampler`` around a ``DistributedSampler`` has none: call
            the DistributedSampler's ``set_epoch`` before each epoch).
        threads: threads reading files, and batches decoded at once.
        prefetch: batches decoded ahead of the consumer.
        pin_memory: pin each batch after decoding, on the decoding thread;
            ``lane.pin_memory`` does it without the copy.
        initial_epoch: the epoch of the first iteration.

    Returns:
        A :class:`LaneThreads`: iterate it once per epoch. Breaking out of
        the loop and leaving the script is safe: the exit waits for the
        batches being decoded (at most one per thread) and starts no more.
        ``state_dict()`` / ``load_state_dict()`` resume as
        :func:`lane_dataloader`'s do.

    Raises:
        ImportError: torchdata is not installed.
        ValueError: ``threads`` or ``prefetch`` is below 1, or
            ``initial_epoch`` is negative.

    Example:
        >>> loader = lane_threads(BatchLane(folder, transform), sampler, threads=2)
        >>> for images, labels in loader: ...
    """
    for name, value in (("threads", threads), ("prefetch", prefetch)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"lane_threads: {name} must be an int >= 1, got {value!r}")
    cursor = EpochCursor(lane, batch_sampler, initial_epoch, "lane_threads")
    nodes = _nodes()
    drawing = lane.global_draws()
    # A fused tail that draws waits for the consumer's thread: the decoding threads run
    # beside the training loop, and seeding the process-wide generators there would
    # change the loop's draws and let the loop change the tail's.
    deferred = bool(drawing) and lane.crop is not None
    if drawing and not deferred:
        _warn_unfused_drawing(drawing)
    pin = pin_memory and not lane.pin_memory

    def load(request: BatchRequest) -> tuple[int, Any]:
        return request.epoch, lane.load(request.indices)

    def draw(loaded: tuple[int, Any]) -> Any:
        return lane.draw(loaded[1], loaded[0])

    def finish(decoded: Any, streams: bool) -> tuple[Any, Any]:
        images, labels = lane._finished(decoded, streams=streams)
        return (images.pin_memory() if pin else images), labels

    def decode(plan: Any) -> Any:
        decoded = lane._decoded(plan, num_threads=1, streams=False)
        return decoded if deferred else finish(decoded, streams=False)

    def deliver(decoded: Any) -> tuple[Any, Any]:
        return finish(decoded, streams=True)

    batches = nodes.IterableWrapper(GatedIterable(Requests(batch_sampler, cursor)))
    loaded = nodes.ParallelMapper(batches, gated(load), num_workers=threads, method="thread",
                                  in_order=True)
    drawn = nodes.Mapper(loaded, gated(draw))  # pulled by the next stage's one reader
    decoded = nodes.ParallelMapper(drawn, gated(decode), num_workers=threads, method="thread",
                                   in_order=True)
    ahead = nodes.Prefetcher(decoded, prefetch_factor=prefetch)
    loader = nodes.Loader(ahead)
    stop_at_exit(loader, [ahead, decoded, loaded])
    return LaneThreads(loader, cursor, deliver if deferred else None)
