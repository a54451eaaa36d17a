"""The node's store of MCU-row indexes: one file per index in a folder that every DataLoader
worker, every DDP rank and every job of the user on the machine reads, so that an index built
once serves every later epoch of every process (custom_op/_index/_cache.py decides when to
build; this module only keeps what is built).

Where: ``configure_index_cache(store=PATH)``, else the environment variable
``CUSTOM_OP_INDEX_STORE`` (an empty value turns the store off), else
``$XDG_CACHE_HOME/custom_op/index-store`` (``~/.cache/...`` without it). The folder is made
with mode 0700 when missing, and refused (logged once; the process runs without a store) when
it is a symbolic link, not a folder, not the user's, or writable by others: an entry is
trusted as far as its checksums go, like the JPEG beside it, so only the user may write one.

An entry, all integers little-endian::

    magic        8 bytes  b"CJMISTO\\n"
    version      u32      STORE_VERSION
    sidecar      u32 length, UTF-8     \\
    name         u32 length, UTF-8      | the sample's IndexKey
    size, mtime  u64, i64              /
    fingerprint  16 bytes  blake2b of the file's first and last 4 KiB (file_fingerprint)
    index        u32 length, the index (length 0: the file cannot be indexed)
    checksum     16 bytes  blake2b of every byte before it

Its name is the blake2b of everything before the index (magic to fingerprint), as
``<2 hex digits>/<30 hex digits>``: a file changed in any field of its key, or in its head or
tail, names another entry (a miss, then a build and a new entry), never an old one. The
fingerprint covers what the key cannot: tar members (mtime 0) of a shard rewritten under the
same name, and a file rewritten in place with its size and mtime kept; it is not an inode, so
a copy of a dataset elsewhere with its mtimes kept (a job's local scratch) still names the
same entries.

Writing: the record goes whole into a temporary of an unpredictable name in ``tmp/``, created
exclusively (O_CREAT | O_EXCL | O_NOFOLLOW), then is hard-linked to its name. A link never
replaces a name, so the first writer wins and a second builder of the same entry drops its
temporary; no entry is ever overwritten in place, and a reader sees a whole record or none.
A writer killed mid-write leaves only its temporary, which the next process that writes
removes once it is an hour old (the temporaries have a folder of their own, so that finding
them lists a few names, never a folder of entries). Nothing is fsynced: an entry cut short by
a crash of the machine is refused like any damaged one. Nothing is pruned either: the entries
of changed or deleted files stay until the folder is deleted.

Reading: the entry is opened with O_NOFOLLOW and O_NONBLOCK, must be a regular file, its size
is bounded (fstat) before it is read, and its magic, version, key, fingerprint, length and
checksum must all match. Anything else is a miss, counted in ``store_refused``, and the entry
is removed so that the next build can write a good one; never an exception.

The budget (``store_max_bytes``) is approximate: each process measures the store when it first
writes (every folder when the store is small, else one folder in SAMPLED_SHARE, scaled up: the
names are uniform), adds what it writes, and measures again after every REMEASURE_SHARE-th of
the budget it writes, so that processes writing at once overshoot by at most their number
times that share. Once full, nothing more is written. A write that fails (a full disk, a
read-only folder) is logged once, counted, and the process carries on without writing.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import secrets
import stat
import struct
import threading
import time
from typing import Any, Optional, Union

import torch

from .._core._regular_files import read_head

_log = logging.getLogger("custom_op")

#: The environment variable that names the store's folder ("" turns the store off); unlike
#: configure_index_cache(store=...) in the main process, it reaches DataLoader workers started
#: by spawn and forkserver too.
STORE_ENV = "CUSTOM_OP_INDEX_STORE"
DEFAULT_STORE_MAX_BYTES = 4 << 30
#: Bumped with the core's index format (3, mcu_index.h) and with this layout: the version is
#: part of every entry's name, so another version's entries are never found, only left over.
STORE_VERSION = 1
MAGIC = b"CJMISTO\n"
#: Bytes of the file's head, and of its tail, that its fingerprint covers.
FINGERPRINT_SPAN = 4096
#: An entry on disk is counted in whole blocks: what it takes on most filesystems.
BLOCK = 4096
STALE_TEMPORARY_SECONDS = 3600
#: One in this many of the 256 folders is measured when the store is large.
SAMPLED_SHARE = 32
#: Below this many entries in the sampled folders the whole store is measured: a scaled-up
#: sample of a few entries would say little.
EXACT_BELOW = 256
#: A process measures the store again after writing this share of the budget.
REMEASURE_SHARE = 64
TEMPORARIES = "tmp"
STORE_COUNTS = ("store_hits", "store_misses", "store_writes", "store_refused",
                "store_write_failures", "store_full")

_U32 = struct.Struct("<I")
_SIZE_AND_MTIME = struct.Struct("<Qq")
_DIGEST_BYTES = 16
_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0))
_CREATE_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0))

StoreSetting = Union[bool, str, "os.PathLike[str]", None]


class _Refused(Exception):
    """An entry that is not a valid one of its key; the message says why."""


def file_fingerprint(data: Any) -> bytes:
    """The blake2b of ``data``'s first and last FINGERPRINT_SPAN bytes (a uint8 tensor or any
    buffer): what binds an entry to its file's bytes beyond the IndexKey, at the cost of
    hashing 8 KiB, not the file."""
    view = memoryview(data.contiguous().numpy()) if isinstance(data, torch.Tensor) else (
        memoryview(data).cast("B"))
    digest = hashlib.blake2b(digest_size=_DIGEST_BYTES, person=b"cjmi-file")
    digest.update(view[:FINGERPRINT_SPAN])
    digest.update(view[max(FINGERPRINT_SPAN, len(view) - FINGERPRINT_SPAN):])
    return digest.digest()


def _text(value: str) -> bytes:
    encoded = value.encode("utf-8", "surrogateescape")
    return _U32.pack(len(encoded)) + encoded


def entry_head(key: Any, fingerprint: bytes) -> bytes:
    """An entry's bytes up to its index: magic, version, the key, the fingerprint."""
    return b"".join((MAGIC, _U32.pack(STORE_VERSION), _text(key.sidecar), _text(key.name),
                     _SIZE_AND_MTIME.pack(key.size, key.mtime_ns), fingerprint))


def _seal(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=_DIGEST_BYTES, person=b"cjmi-entry").digest()


def encode_entry(head: bytes, index: Optional[bytes]) -> bytes:
    """The whole record of an entry whose head is ``head`` (None: not indexable)."""
    body = head + _U32.pack(len(index or b"")) + (index or b"")
    return body + _seal(body)


def decode_entry(data: bytes, head: bytes) -> Optional[bytes]:
    """The index an entry's bytes hold (None: the file cannot be indexed).

    Raises:
        _Refused: they are not an entry of ``head``'s key and fingerprint, or are damaged.
    """
    start = len(head) + _U32.size
    if len(data) < start + _DIGEST_BYTES or data[:len(head)] != head:
        raise _Refused("not an entry of this file (magic, version, key or fingerprint)")
    (length,) = _U32.unpack_from(data, len(head))
    if start + length + _DIGEST_BYTES != len(data):
        raise _Refused("its length does not match its size")
    if _seal(data[:-_DIGEST_BYTES]) != data[-_DIGEST_BYTES:]:
        raise _Refused("its checksum does not match its bytes")
    return data[start:start + length] or None


def max_index_bytes(file_size: int) -> int:
    """The largest index an entry may hold for a file of ``file_size`` bytes: jpeg_index keeps
    an index within a hundredth of its file, or one entry per row for a small one."""
    return file_size // 4 + 4096


def entry_name(head: bytes) -> str:
    """``<folder>/<file>`` of the entry whose head is ``head``."""
    digest = hashlib.blake2b(head, digest_size=_DIGEST_BYTES, person=b"cjmi-name").hexdigest()
    return os.path.join(digest[:2], digest[2:])


def default_store_folder() -> str:
    """``$XDG_CACHE_HOME/custom_op/index-store``, or ``~/.cache/custom_op/index-store``."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):  # the XDG rule: a relative value is ignored
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "custom_op", "index-store")


def store_folder(setting: StoreSetting) -> Optional[str]:
    """The absolute folder ``setting`` names (True: the environment's, else the default), or
    None: no store."""
    if setting is None or setting is False:
        return None
    if setting is True:
        named = os.environ.get(STORE_ENV)
        if named is None:
            return default_store_folder()
        if not named:
            return None
        setting = named
    return os.path.abspath(os.path.expanduser(os.fspath(setting)))


def check_store_setting(setting: object) -> None:
    """Raises TypeError or ValueError naming a ``store=`` that is not True, None, False or a
    folder's path."""
    if setting is None or isinstance(setting, bool):
        return
    if not isinstance(setting, (str, os.PathLike)) or isinstance(os.fspath(setting), bytes):
        raise TypeError("configure_index_cache(): store must be a folder's path (str or "
                        f"os.PathLike), True or None, got {type(setting).__name__}")
    if not os.fspath(setting):
        raise ValueError("configure_index_cache(): store must name a folder, got ''; None "
                         "turns the store off")


def _folder_problem(folder: str) -> Optional[str]:
    """Why ``folder`` cannot be the store (made with mode 0700 when missing), or None."""
    try:
        if not os.path.lexists(folder):
            os.makedirs(os.path.dirname(folder), exist_ok=True)
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:
                pass  # another process made it first
        info = os.lstat(folder)
    except OSError as error:
        return f"cannot be made or read ({error.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    user = os.getuid() if hasattr(os, "getuid") else None
    if user is not None and info.st_uid != user:
        return f"belongs to user {info.st_uid}, not to this user ({user})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by other users"
    return None


def _read_entry_file(path: str, bound: int) -> Optional[bytes]:
    """The bytes of the entry file ``path``, or None when there is none.

    Raises:
        _Refused: it is a symbolic link, not a regular file, larger than ``bound``, or
            unreadable.
    """
    try:
        descriptor = os.open(path, _READ_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise _Refused("a symbolic link" if error.errno == errno.ELOOP
                       else f"cannot be opened ({error.strerror})") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise _Refused("not a regular file")
        if info.st_size > bound:
            raise _Refused(f"{info.st_size} bytes, more than an entry of this file holds")
        with open(descriptor, "rb", buffering=0, closefd=False) as file:
            data = read_head(file, info.st_size)
    except OSError as error:
        raise _Refused(f"cannot be read ({error.strerror})") from None
    finally:
        os.close(descriptor)
    return data


def _write_whole(descriptor: int, data: bytes) -> None:
    with memoryview(data) as view:
        while view:
            view = view[os.write(descriptor, view):]


def _on_disk(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


class IndexStore:
    """The store a ``configure_index_cache(store=...)`` setting names, opened at its first use
    (in each process: a DataLoader worker resolves the environment's folder itself)."""

    def __init__(self, setting: StoreSetting, max_bytes: int) -> None:
        self.setting, self.max_bytes = setting, max_bytes
        self.lock = threading.Lock()
        self.folder: Optional[str] = None
        self.opened = False
        self.writable = True
        self.measured: Optional[int] = None  # bytes at the last measure, with this process's since
        self.written_since = 0
        self.warned: set[str] = set()
        self.counts = dict.fromkeys(STORE_COUNTS, 0)

    # --- opening, counting, logging -------------------------------------------------------

    def usable(self) -> bool:
        """Whether the store is on and its folder acceptable (checked once per process)."""
        if not self.opened:
            with self.lock:
                if not self.opened:
                    self.folder = self._open_folder()
                    self.opened = True
        return self.folder is not None

    def _open_folder(self) -> Optional[str]:
        folder = store_folder(self.setting)
        if folder is None:
            return None
        problem = _folder_problem(folder)
        if problem is not None:
            self._warn_once("folder", "custom_op: the index store %s %s: indexes are kept in "
                            "this process only", folder, problem)
            return None
        return folder

    def _warn_once(self, topic: str, message: str, *arguments: Any) -> None:
        if topic not in self.warned:
            self.warned.add(topic)
            _log.warning(message, *arguments)

    def _count(self, name: str) -> None:
        with self.lock:
            self.counts[name] += 1

    def stats(self) -> dict[str, int]:
        with self.lock:
            return dict(self.counts)

    def takes_writes(self) -> bool:
        """Whether a build would be kept here: the store is usable, writable and not full (a
        build it cannot take for want of room is counted in ``store_full``)."""
        if not self.usable() or not self.writable:
            return False
        with self.lock:
            if self.max_bytes > 0 and (self.measured is None or self.measured < self.max_bytes):
                return True
            self.counts["store_full"] += 1
            return False

    # --- reading ----------------------------------------------------------------------------

    def read(self, key: Any, fingerprint: bytes) -> tuple[bool, Optional[bytes]]:
        """``(found, index)`` of ``key``'s entry: found False on a miss, a refused entry
        included; index None for a file that cannot be indexed."""
        if not self.usable():
            return False, None
        head = entry_head(key, fingerprint)
        path = os.path.join(self.folder, entry_name(head))
        try:
            data = _read_entry_file(path, len(head) + 64 + max_index_bytes(key.size))
            if data is not None:
                index = decode_entry(data, head)
                self._count("store_hits")
                return True, index
        except _Refused as refusal:
            self._refuse(path, str(refusal))
        self._count("store_misses")
        return False, None

    def _refuse(self, path: str, reason: str) -> None:
        """Counts the bad entry at ``path`` and removes it (a link, not what it points at), so
        that the next build writes a good one."""
        self._count("store_refused")
        self._warn_once("entry", "custom_op: index store entry %s refused (%s); its index is "
                        "built again", path, reason)
        try:
            os.unlink(path)
        except OSError:
            pass  # a folder planted there, or a read-only store: it stays a miss

    # --- writing ----------------------------------------------------------------------------

    def write(self, key: Any, fingerprint: bytes, index: Optional[bytes]) -> None:
        """Keeps ``index`` (None: not indexable) as ``key``'s entry, unless the store is off,
        full, unwritable, or another process wrote the entry first."""
        if (not self.usable() or not self.writable
                or (index is not None and len(index) > max_index_bytes(key.size))):
            return
        head = entry_head(key, fingerprint)
        record = encode_entry(head, index)
        if not self._reserve(_on_disk(len(record))):
            self._count("store_full")
            return
        try:
            linked = self._link(record, os.path.join(self.folder, entry_name(head)))
        except OSError as error:
            self._write_failed(error)
            return
        if linked:
            self._count("store_writes")

    def _reserve(self, cost: int) -> bool:
        """Whether ``cost`` more bytes fit the budget (then counted as written)."""
        with self.lock:
            if self.measured is None or self.written_since * REMEASURE_SHARE >= self.max_bytes:
                self.measured, self.written_since = self._measure(), 0
            if self.measured + cost > self.max_bytes:
                return False
            self.measured += cost
            self.written_since += cost
            return True

    def _measure(self) -> int:
        """The bytes the entries take (approximately: see the module's note); also removes the
        temporaries of writers killed an hour ago or more."""
        self._remove_stale_temporaries()
        folders = [f"{number:02x}" for number in range(256)]
        total, entries = _usage(self.folder, folders[::SAMPLED_SHARE])
        if entries < EXACT_BELOW:
            return _usage(self.folder, folders)[0]
        return total * SAMPLED_SHARE

    def _remove_stale_temporaries(self) -> None:
        oldest = time.time() - STALE_TEMPORARY_SECONDS
        try:
            with os.scandir(os.path.join(self.folder, TEMPORARIES)) as found:
                for entry in found:
                    try:
                        if entry.stat(follow_symlinks=False).st_mtime < oldest:
                            os.unlink(entry.path)
                    except OSError:
                        pass  # removed by another writer meanwhile
        except OSError:
            pass  # no temporaries yet

    def _link(self, record: bytes, path: str) -> bool:
        """Writes ``record`` under ``path`` through a temporary; False when ``path`` exists
        (another writer's, or anything planted there, which a reader refuses)."""
        temporaries = os.path.join(self.folder, TEMPORARIES)
        os.makedirs(temporaries, mode=0o700, exist_ok=True)
        temporary = os.path.join(temporaries, secrets.token_hex(16))
        descriptor = os.open(temporary, _CREATE_FLAGS, 0o600)
        try:
            try:
                _write_whole(descriptor, record)
            finally:
                os.close(descriptor)
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            os.link(temporary, path, follow_symlinks=False)
            return True
        except FileExistsError:
            return False
        finally:
            try:
                os.unlink(temporary)
            except OSError:
                pass  # removed as stale meanwhile

    def _write_failed(self, error: OSError) -> None:
        with self.lock:
            self.counts["store_write_failures"] += 1
            self.writable = False
        self._warn_once("write", "custom_op: cannot write to the index store %s (%s); this "
                        "process reads it but writes no more", self.folder, error.strerror)


def _usage(root: str, folders: list[str]) -> tuple[int, int]:
    """(bytes on disk, entries) of the entries in ``folders`` of the store at ``root``."""
    total = entries = 0
    for folder in folders:
        try:
            with os.scandir(os.path.join(root, folder)) as found:
                for entry in found:
                    try:
                        total += _on_disk(entry.stat(follow_symlinks=False).st_size)
                        entries += 1
                    except OSError:
                        pass
        except OSError:
            pass  # a folder no entry has needed yet
    return total, entries


def no_store_counts() -> dict[str, int]:
    """The store's counts with no store: every one 0."""
    return dict.fromkeys(STORE_COUNTS, 0)
