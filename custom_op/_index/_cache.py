"""The process's cache of MCU-row indexes: what lets epoch 2 and later decode a
crop from its first row with no preparation at all.

A sample carries an :class:`IndexKey` (set by the dataset that read it: its sidecar's path,
its name there, its size and mtime); its cropped decodes ask :func:`index_for`, which
returns the cached index, or reads the sample's sidecar once, or builds the index, or gives
None (the ordinary decode). Whatever it returns, the pixels are the same: the index's own
checksum refuses an index that is not the file's.

When to build: once the sample's cropped decodes so far would have saved a build. A build
costs an entropy pass over the whole file, about what an indexed crop saves on a few to
several later crops (``python -m bench index``: ``build_vs_full_decode`` and the indexed and
unindexed crops), and a process cannot know how often it will see a sample again. So each
cropped decode of a sample adds what an index would have saved it, estimated from the rows
outside its window (:func:`saving_of`), and the decode whose savings reach one build's cost
builds: at most about twice the cost of the best choice made knowing the future, and never a
build for a sample seen once (a DataLoader worker that is not persistent sees each sample
once). ``configure_index_cache(build_on_touch=N)`` builds on the N-th cropped decode instead.

The bound: a byte budget, and once it is full nothing more is added (no eviction). Each
epoch visits every sample once in a random order; with less room than the dataset needs,
an LRU cache would evict every entry before its next use and rebuild it each epoch,
paying the build for nothing, while a cache that keeps what it has serves the same share
of samples every epoch and builds each at most once. Each process (each DataLoader worker)
has its own cache: ``persistent_workers=True`` keeps them from one epoch to the next.

The node's store (_store.py) changes where an index lives and so when to build. A lookup
asks the process's cache (which holds the sample's sidecar entries once read), then the
store, then builds; a store hit joins the process's cache. Without a store, an index serves
only the process that built it, which a reshuffling sampler rarely sends the sample back
to, hence the rule above. With one, the index serves every later decode of the sample on the
node: every epoch, in every worker and rank, and later jobs. A run of a few epochs then
decodes the sample several times against one build, which pays, while waiting for savings
counted per process would wait for ever in workers that live one epoch. So with a store
that takes writes, a sample builds on its first cropped decode that an index would save
anything (``build_on_touch=N`` still counts touches per process instead); with the store
off, full or unwritable, the rule above holds. The cost falls on the first epoch of the
first run: about a build per sample, which every later epoch and run on the node earns back.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import NamedTuple, Optional, Union

from .._core._errors import JpegDecodeError
from ._jpeg_index import jpeg_index
from ._sidecar import SIDECAR_SUFFIX, SidecarError, decode_sidecar, read_sidecar
from ._store import (DEFAULT_STORE_MAX_BYTES, IndexStore, StoreSetting, check_store_setting,
                     file_fingerprint, no_store_counts)

__all__ = ["IndexKey", "configure_index_cache", "index_cache_stats", "index_for"]

_log = logging.getLogger("custom_op")

#: The default budget of one process's cache.
DEFAULT_MAX_BYTES = 256 << 20
#: What an index saves one cropped decode, as a share of the index's build, per share of the
#: file's rows outside the window: the rows above it need no entropy decoding, nor the columns
#: outside it in the rows it keeps. Derived from the index part of the benchmark (the indexed
#: crop's gain over the unindexed one against the build's time, on real photos of every size it
#: measures) and taken at the low end of what it measures, so that a sample builds a little
#: later rather than before it pays.
SAVING_PER_ROW_SHARE = 0.4

#: What an entry costs besides its index: the key (a path string, three ints), the dict's
#: slot and the bytes object's header; an estimate, counted so that many unindexable
#: files (no index bytes) still fill the budget.
ENTRY_OVERHEAD = 200


class IndexKey(NamedTuple):
    """What identifies a sample's bytes: its sidecar (the folder's, shard's or parquet file's,
    whether it exists or not), its name in it, its size and its mtime in ns (0 for tar members
    and rows)."""

    sidecar: str
    name: str
    size: int
    mtime_ns: int


class _Cache:
    """Indexes (or None: not indexable) by IndexKey, within a byte budget; thread-safe (the
    threads lane decodes on several threads of one process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.load_lock = threading.Lock()
        self.configure(DEFAULT_MAX_BYTES, None, IndexStore(True, DEFAULT_STORE_MAX_BYTES))

    def configure(self, max_bytes: int, build_on_touch: Optional[int],
                  store: Optional[IndexStore]) -> None:
        with self.lock:
            self.max_bytes, self.build_on_touch = max_bytes, build_on_touch
            # The cache off (max_bytes 0) means no index at all: the store is off with it.
            self.store = store if max_bytes > 0 else None
            self.entries: dict[IndexKey, Optional[bytes]] = {}
            # What an index would have saved each sample's cropped decodes so far, in builds.
            self.savings: dict[IndexKey, float] = {}
            self.sidecars: set[str] = set()
            self.bytes = 0
            self.counts = dict.fromkeys(("hits", "misses", "builds", "unindexable", "full",
                                         "sidecar_entries", "sidecars_refused"), 0)

    def lookup(self, key: IndexKey) -> tuple[bool, Optional[bytes]]:
        if key.sidecar not in self.sidecars and self.max_bytes > 0:  # 0: the cache is off
            # One thread reads a sidecar; the others wait for its entries rather than build.
            with self.load_lock:
                if key.sidecar not in self.sidecars and self.max_bytes > 0:  # 0: the cache is off
                    self._load_sidecar(key.sidecar)
                    self.sidecars.add(key.sidecar)
        with self.lock:
            return key in self.entries, self.entries.get(key)

    def count(self, name: str) -> None:
        with self.lock:
            self.counts[name] += 1

    def should_build(self, key: IndexKey, saving: float, stored: bool) -> bool:
        """Counts this cropped decode of ``key``, which an index would have saved ``saving``
        of a build; whether it builds: with ``stored`` (the store will keep the index) and
        the default rule, if it saves anything; else if the cache has room, and the decodes
        so far would have saved a build, or it is the ``build_on_touch``-th."""
        if stored and self.build_on_touch is None:
            return saving > 0  # see the module's note on the node's store
        with self.lock:
            if self.bytes + ENTRY_OVERHEAD > self.max_bytes:
                self.counts["full"] += 1
                return False
            step = saving if self.build_on_touch is None else 1 / self.build_on_touch
            if step <= 0:  # a window of every row: an index would save it nothing
                return False
            earlier = self.savings.get(key)
            total = (earlier or 0.0) + step
            if total < 1 - 1e-9:
                self.savings[key] = total
                self.bytes += ENTRY_OVERHEAD if earlier is None else 0
                return False
            if earlier is not None:
                del self.savings[key]
                self.bytes -= ENTRY_OVERHEAD
            return True

    def add(self, key: IndexKey, index: Optional[bytes], counter: Optional[str]) -> None:
        with self.lock:
            cost = ENTRY_OVERHEAD + (len(index) if index else 0)
            if key in self.entries or self.bytes + cost > self.max_bytes:
                if key not in self.entries:
                    self.counts["full"] += 1
                return
            self.entries[key] = index
            self.bytes += cost
            if counter is not None:
                self.counts[counter] += 1
            if index is None:
                self.counts["unindexable"] += 1

    def _load_sidecar(self, path: str) -> None:
        """Adds the entries of the sidecar at ``path``, if there is one and it is valid and
        current; a damaged one is refused as a whole, logged, and counted."""
        try:  # read only if the whole cache's budget could hold it
            stamp, entries = decode_sidecar(read_sidecar(path, self.max_bytes))
        except OSError:
            return  # no sidecar (the usual case): indexes are built as samples are touched
        except SidecarError as error:
            with self.lock:
                self.counts["sidecars_refused"] += 1
            _log.warning("custom_op: index sidecar %s refused (%s); indexes are built as the "
                         "samples are decoded instead", path, error)
            return
        if stamp != (0, 0) and stamp != _stamp_of_source(path):
            return  # the shard or parquet file changed since: its entries would be refused
        for name, entry in entries.items():
            self.add(IndexKey(path, name, entry.size, entry.mtime_ns), entry.index,
                     "sidecar_entries")

    def stats(self) -> dict[str, int]:
        store = no_store_counts() if self.store is None else self.store.stats()
        with self.lock:
            return {"entries": len(self.entries), "bytes": self.bytes,
                    "max_bytes": self.max_bytes, **self.counts, **store}


def _stamp_of_source(sidecar: str) -> tuple[int, int]:
    """(size, mtime_ns) of the shard or parquet file a sidecar describes, or (-1, -1)."""
    try:
        stat = os.stat(sidecar[:-len(SIDECAR_SUFFIX)])
    except OSError:
        return (-1, -1)
    return (stat.st_size, stat.st_mtime_ns)


def saving_of(crop_height: int, file_height: int) -> float:
    """What an index would save a cropped decode of ``crop_height`` of the file's
    ``file_height`` rows, as a share of the index's build (see SAVING_PER_ROW_SHARE)."""
    return SAVING_PER_ROW_SHARE * max(0.0, 1 - crop_height / max(file_height, 1))


_cache = _Cache()


def index_for(key: Union[IndexKey, bytes, None], data: torch.Tensor, crop_height: int,
              file_height: int) -> Optional[bytes]:
    """The index to decode a window of ``crop_height`` rows of ``data`` with, or None.

    From the cache, or the sample's sidecar, or built now (see the module's note on when);
    None when ``key`` is None (a sample no dataset named), the file cannot be indexed, or
    the cache is full. ``key`` may be the index itself (a Hugging Face index column's)."""
    if key is None or isinstance(key, bytes):
        return key
    found, index = _cache.lookup(key)
    store = _cache.store
    fingerprint = None
    if not found and store is not None and store.usable():
        fingerprint = file_fingerprint(data)
        found, index = store.read(key, fingerprint)
        if found:
            _cache.add(key, index, None)
    _cache.count("hits" if found else "misses")
    stored = fingerprint is not None and store.takes_writes()
    if found or not _cache.should_build(key, saving_of(crop_height, file_height), stored):
        return index
    try:
        index = jpeg_index(data)
    except JpegDecodeError:
        return None  # the decode itself reports what is wrong with the file
    _cache.add(key, index, "builds")
    if stored:
        store.write(key, fingerprint, index)
    return index


def configure_index_cache(max_bytes: int = DEFAULT_MAX_BYTES,
                          build_on_touch: Optional[int] = None, store: StoreSetting = True,
                          store_max_bytes: int = DEFAULT_STORE_MAX_BYTES) -> None:
    """Sets this process's MCU-row index cache's budget, building rule and node store, and
    empties the cache (the store keeps its entries).

    The datasets (JpegFolder, tar shards, Hugging Face rows) and the batch lane
    name each sample; its cropped decodes then use an index from the cache, from
    a sidecar written by ``python -m custom_op.prepare --index-only``, from the
    node's store, or built (see the module's note on when). Pixels are the same with
    or without. Each process has its own cache and settings: a DataLoader's forked
    workers inherit the main process's; under spawn or forkserver, call this in its
    ``worker_init_fn``, or name the store with ``CUSTOM_OP_INDEX_STORE``.

    Args:
        max_bytes: The budget in bytes (indexes plus about 200 bytes per entry);
            once full, nothing is added. 0 turns the cache off, and the store.
        build_on_touch: N builds on a sample's N-th cropped decode in a process (1:
            epoch 2 gains; 2: epoch 1 costs nothing more). None (the default): on
            the first with a store, else on the decode whose predecessors an index
            would have saved a build's cost.
        store: The folder of the indexes every process of the node shares (made
            with mode 0700; refused, with a warning, if a symbolic link, not yours,
            or writable by others). True (the default): ``$CUSTOM_OP_INDEX_STORE``
            ("" turns it off), else ``$XDG_CACHE_HOME/custom_op/index-store``
            (``~/.cache/...``). None or False: no store.
        store_max_bytes: The store's budget in bytes on disk, approximate (each
            process measures the store, then counts its own writes); once full,
            nothing more is written. 0: read the store, never write it.

    Raises:
        TypeError, ValueError: a value is not an int (``store``: a path, True or
            None), or out of range.

    Example:
        >>> custom_op.configure_index_cache(max_bytes=64 << 20, store="/scratch/indexes")
    """
    for name, value, minimum in (("max_bytes", max_bytes, 0),
                                 ("build_on_touch", 1 if build_on_touch is None else build_on_touch,
                                  1), ("store_max_bytes", store_max_bytes, 0)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"configure_index_cache(): {name} must be an int, got "
                            f"{type(value).__name__}")
        if value < minimum:
            raise ValueError(f"configure_index_cache(): {name} must be at least {minimum}, "
                             f"got {value}")
    check_store_setting(store)
    no_store = store is None or store is False
    _cache.configure(max_bytes, build_on_touch,
                     None if no_store else IndexStore(store, store_max_bytes))


def index_cache_stats() -> dict[str, int]:
    """This process's MCU-row index cache: its size and how lookups went.

    Returns:
        ``entries`` (samples cached, unindexable ones included), ``bytes`` (their
        cost against the budget), ``max_bytes``, ``hits`` (lookups answered by
        the cache, its sidecar entries or the node's store), ``misses``,
        ``builds`` (indexes built here), ``unindexable`` (entries recording a
        file that cannot be indexed), ``full`` (indexes not kept: no room),
        ``sidecar_entries`` (entries read from sidecars), ``sidecars_refused``
        (damaged or other-version sidecars ignored); the node store's
        ``store_hits``, ``store_misses``, ``store_writes`` (entries this process
        wrote), ``store_refused`` (damaged, foreign or planted entries, each a
        miss), ``store_write_failures`` (after the first, the process writes no
        more), ``store_full`` (builds not written: over its budget). Whether the
        decodes used the indexes: :func:`index_stats`.

    Example:
        >>> custom_op.index_cache_stats()["hits"]
        1281
    """
    return _cache.stats()
