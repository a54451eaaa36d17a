"""A process's MCU-row index counts as one value that can be subtracted, added and sent: what a
loader gathers from the processes that decoded its batches (its DataLoader workers), whose own
counts (custom_op.index_stats, custom_op.index_cache_stats) the training process never sees."""

from __future__ import annotations

from typing import NamedTuple

from ._jpeg_index import INDEX_OUTCOMES, index_stats
from ._cache import index_cache_stats
from ._store import STORE_COUNTS

__all__ = ["IndexCounts", "index_counts"]

#: The index caches' and the node store's counts that a loader adds up (the rest describe one
#: cache's contents).
CACHE_COUNTS = ("hits", "misses", "builds", *STORE_COUNTS)
NAMES = (*INDEX_OUTCOMES, *CACHE_COUNTS)


class IndexCounts(NamedTuple):
    """The decodes' outcomes (INDEX_OUTCOMES) then the caches' CACHE_COUNTS: plain ints, which
    cross from a worker to the training process pickled with the batch, no shared memory."""

    values: tuple[int, ...] = (0,) * len(NAMES)

    def __sub__(self, other: "IndexCounts") -> "IndexCounts":  # type: ignore[override]
        return IndexCounts(tuple(a - b for a, b in zip(self.values, other.values)))

    def __add__(self, other: "IndexCounts") -> "IndexCounts":  # type: ignore[override]
        return IndexCounts(tuple(a + b for a, b in zip(self.values, other.values)))

    def as_dict(self) -> dict[str, int]:
        return dict(zip(NAMES, self.values, strict=True))


def index_counts() -> IndexCounts:
    """This process's counts so far."""
    outcomes, cache = index_stats(), index_cache_stats()
    return IndexCounts(tuple(outcomes[name] for name in INDEX_OUTCOMES)
                       + tuple(cache[name] for name in CACHE_COUNTS))
