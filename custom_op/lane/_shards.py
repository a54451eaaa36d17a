"""Training from tar shards: equal steps on every rank, a new order every epoch, whole batches decoded.

webdataset does the reading: its shard list, its node and worker splitters
(``wds.split_by_node`` reads torch.distributed's rank, ``wds.split_by_worker``
the DataLoader worker), its buffer shuffle and its batching. What it leaves to
the training script, and what lives here instead of in every script:

- :class:`ShardSet`: the shards of a folder and how many samples and classes
  they hold, known before the first step (DistributedDataParallel's ranks must
  run the same number of steps).
- :class:`EpochShuffle`: webdataset's shuffle with a seed per epoch, worker
  and pass, so that each epoch has a new order and a rerun the same ones.
- :func:`shard_loader`: the pipeline (shards split by rank and worker,
  members read by :class:`TarSamples`, batches decoded by a
  :class:`BatchLane` in one native call) in a DataLoader, cut to exactly
  the same number of batches on every rank (:class:`ShardLoader`).
"""

from __future__ import annotations

import itertools
import pathlib
import random
import tarfile
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from ._batch_lane import BatchLane
from ..datasets._tar_samples import TarSamples

__all__ = ["EpochShuffle", "ShardLoader", "ShardSet", "shard_loader"]


class ShardSet:
    """The ``*.tar`` shards of a folder, their sample count and their classes.

    From ``dataset_size`` and ``num_classes`` when both are given; else by
    scanning every shard once (it seeks from header to header and reads only
    the ``.cls`` members, but on S3 that is still a request per sample: give
    the sizes for large datasets).

    Args:
        root: The folder of shards (``KEY.jpg`` + ``KEY.cls`` per sample).
        dataset_size, num_classes: The sizes, if known (0: scan).
        on_error: ``"raise"``: a damaged shard found by the scan raises
            ``tarfile.ReadError`` naming it; ``"substitute"``: it is counted
            up to the damage and ``warn`` is called with a message naming it.
        warn: Called with each warning's text (default: nothing).

    Raises:
        FileNotFoundError: no ``*.tar`` in ``root``.
        tarfile.ReadError: a damaged shard, with ``on_error="raise"``.
    """

    def __init__(self, root: pathlib.Path, dataset_size: int = 0, num_classes: int = 0,
                 on_error: str = "raise", warn: Callable[[str], Any] = lambda message: None
                 ) -> None:
        root = pathlib.Path(root)
        self.urls = sorted(str(path) for path in root.glob("*.tar"))
        if not self.urls:
            raise FileNotFoundError(f"no tar shards (*.tar) in {root.resolve()}")
        if dataset_size and num_classes:
            self.samples, self.classes = dataset_size, [str(label) for label in range(num_classes)]
            self.scanned = False
            return
        self.samples, labels = 0, set()
        for url in self.urls:
            try:
                self._scan(url, labels)
            except (tarfile.TarError, OSError, ValueError) as error:
                if on_error == "raise":
                    raise tarfile.ReadError(f"{url}: a damaged shard ({error})") from error
                warn(f"{url}: a damaged shard ({error})")
        self.classes = [str(label) for label in range(max(labels) + 1)] if labels else []
        self.scanned = True

    def _scan(self, url: str, labels: set[int]) -> None:
        with tarfile.open(url, mode="r:") as shard:  # random access: seeks over the images
            for member in shard:
                if member.name.endswith(".jpg"):
                    self.samples += 1
                elif member.name.endswith(".cls"):
                    labels.add(int(shard.extractfile(member).read()))

    def __len__(self) -> int:
        return self.samples


class EpochShuffle:
    """webdataset's buffer shuffle, with a new order every epoch and pass, the same on a rerun.

    ``wds.shuffle(seed=...)`` starts from its seed on every pass, and the
    DataLoader's workers start afresh every epoch: with a fixed seed every
    epoch would replay the same order. The seed here is (seed, epoch, worker,
    pass); ``set_epoch`` sets the epoch before the workers start.
    """

    def __init__(self, buffer: int, seed: int) -> None:
        self.buffer, self.seed, self.epoch, self.passes = buffer, seed, 0, 0

    def __call__(self, source: Any) -> Iterator[Any]:
        import webdataset as wds
        from torch.utils.data import get_worker_info

        worker = get_worker_info()
        self.passes += 1
        rng = random.Random(f"{self.seed}/{self.epoch}/{worker.id if worker else 0}/{self.passes}")
        return wds.shuffle(self.buffer, initial=min(self.buffer, 100), rng=rng)(source)


class ShardLoader:
    """Exactly ``steps`` batches per epoch on every rank, from a repeating shard pipeline."""

    def __init__(self, loader: Any, steps: int, samples_per_rank: int,
                 shuffles: Sequence[EpochShuffle], lane: Optional[BatchLane] = None) -> None:
        self.loader, self.steps, self.samples_per_rank = loader, steps, samples_per_rank
        self.shuffles, self.lane = list(shuffles), lane

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.loader), self.steps)

    def set_epoch(self, epoch: int) -> None:
        """A new shard and sample order for this epoch (the workers start after this)."""
        for shuffle in self.shuffles:
            shuffle.epoch, shuffle.passes = epoch, 0
        if self.lane is not None:
            # The workers start from copies of the lane made after this: their draws are
            # this epoch's.
            self.lane.set_epoch(epoch)


class _KeyedBatch:
    """webdataset samples -> (images, labels, keys): the lane's batch and the samples' key
    numbers (make_dataset.py's keys are sample numbers; -1 for a key that is not)."""

    def __init__(self, lane: BatchLane) -> None:
        self.lane = lane

    def __call__(self, samples: list[dict]) -> tuple[torch.Tensor, Any, torch.Tensor]:
        images, labels = self.lane.collate_samples(samples)
        keys = [int(s["__key__"]) if s["__key__"].isdigit() else -1 for s in samples]
        return images, labels, torch.tensor(keys, dtype=torch.int64)


def shard_loader(shards: ShardSet, lane: BatchLane, *, batch_size: int, world_size: int = 1,
                 num_workers: int = 2, seed: int = 0, shuffle_buffer: int = 1000,
                 pin_memory: bool = False, handler: Optional[Callable[[Exception], bool]] = None
                 ) -> ShardLoader:
    """A DataLoader over ``shards`` split by rank and worker, ``len(shards) // (world_size *
    batch_size)`` batches of ``(images, labels, keys)`` per epoch on every rank.

    The pipeline is webdataset's: the shard list (shuffled per epoch), its
    ``split_by_node`` and ``split_by_worker``, :class:`TarSamples` with
    ``handler`` (webdataset's error handlers: ``reraise_exception`` stops,
    ``warn_and_continue`` skips a damaged shard), a buffer shuffle of
    ``shuffle_buffer`` samples (0: none), and batches decoded by ``lane``
    (its ``on_error`` decides for a member that cannot be decoded). It
    repeats, so that a rank whose share of shards runs out first still
    makes its steps.

    Raises:
        ValueError: fewer shards than ``world_size * max(1, num_workers)``
            readers (a worker without a shard would end its rank's epoch).
        ImportError: webdataset is missing.

    Example:
        >>> shards = ShardSet("train-shards")
        >>> loader = shard_loader(shards, BatchLane(None, transform), batch_size=64)
        >>> for epoch in range(3):
        ...     loader.set_epoch(epoch)
        ...     for images, labels, keys in loader: ...
    """
    import webdataset as wds
    from torch.utils.data import DataLoader

    readers = world_size * max(1, num_workers)
    if len(shards.urls) < readers:
        raise ValueError(f"{len(shards.urls)} shards for {world_size} ranks x "
                         f"{max(1, num_workers)} workers: every DataLoader worker needs at least "
                         "one shard; write smaller shards or use fewer workers")
    shuffles = [EpochShuffle(len(shards.urls), seed)]
    if shuffle_buffer:
        shuffles.append(EpochShuffle(shuffle_buffer, seed))
    pipeline = wds.DataPipeline(
        wds.SimpleShardList(shards.urls), wds.split_by_node, wds.split_by_worker, shuffles[0],
        TarSamples(handler), *shuffles[1:],
        wds.batched(batch_size, collation_fn=_KeyedBatch(lane), partial=False),
    ).repeat()
    loader = DataLoader(pipeline, batch_size=None, num_workers=num_workers, pin_memory=pin_memory)
    steps = max(1, len(shards) // (world_size * batch_size))
    return ShardLoader(loader, steps, steps * batch_size, shuffles, lane)
