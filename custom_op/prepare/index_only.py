"""``python -m custom_op.prepare --index-only SRC``: the MCU-row indexes of a tree's JPEGs
written as sidecars beside them (custom_op/_index/_sidecar.py), the JPEGs untouched.

One sidecar per folder holding JPEGs (a hidden file inside it), per tar shard and per
parquet file (``<name>.cjmi`` beside it). What holds:

- Only regular files are read, opened without blocking (a FIFO or device is a failure of the
  summary, never waited on), and none is read whole beyond ``max_memory``: a file or shard
  member larger than it, or a parquet row group whose image column does not fit twice in it,
  is a failure, not read.
- A run holds a lock on SRC (``SRC/.custom_op-prepare/lock``, prepare's own, workspace.py):
  a second run on the same SRC stops at once (the command line's exit status 3).
- Each sidecar is written to a temporary created exclusively under a random name, never
  through a symbolic link, flushed to disk and renamed over the sidecar's name (a link
  there is replaced, not followed): a killed run leaves under a sidecar's name only a
  complete sidecar. A run removes only temporaries that are provably stale: written on
  this machine by a process that is gone, or by its own process and not being written.
- A tar member whose name a sidecar cannot record (more than 65535 bytes) is left out and
  listed as a failure.
- A rerun skips the sidecars that are current (a folder's lists every JPEG with its size
  and mtime; a shard's or parquet file's records the size and mtime it has), unless
  ``force``. A file that failed is left out of its folder's sidecar, so the rerun tries it
  again; a shard's member that failed is left out of the shard's sidecar, which the rerun
  keeps (``force`` reads the shard again).
- Every failure is listed in the summary, which a run fills whatever happens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import secrets
import socket
import tarfile
import threading
from typing import BinaryIO, Callable, Iterator, Optional

from .._decode._single import DEFAULT_MAX_MEMORY, JPEG_SIGNATURE
from .._index._jpeg_index import jpeg_index
from .._index._sidecar import (FOLDER_SIDECAR, SIDECAR_SUFFIX, SidecarEntry, SidecarError,
                              decode_sidecar, encode_sidecar, name_fits, read_sidecar,
                              sidecar_of_folder, sidecar_of_source)
from .._core._errors import JpegDecodeError
from .._core._regular_files import FileTooLarge, open_regular, read_bounded, read_head
from .atomic import PRIVATE_FOLDER
from .items import describe
from .summary import printable_name
from .workspace import Workspace

#: This machine, as a temporary's name records it: a process id means something only here.
_MACHINE = hashlib.blake2s(socket.gethostname().encode(), digest_size=4).hexdigest()
#: A temporary sidecar: hidden, the sidecar's name, the writer's machine and process id, and
#: a random part.
_TEMPORARY = re.compile(r"^\..*\.cjmi\.(?P<machine>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]{16}\.tmp$")
#: webdataset's split of a member name into the sample's key and the member's suffix.
_KEY_AND_SUFFIX = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
#: How a temporary is created: new (never an existing file, nor a link's target), write-only.
_CREATE_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
#: How many random names a temporary tries before the folder is taken to be hostile.
_CREATE_ATTEMPTS = 8
#: The longest name a summary line shows of a path: a member's name may be megabytes long.
_SHOWN_NAME = 200

# The temporaries this process is writing now: the one kind of this process's own that a
# run must not take for stale (another thread may be writing into an overlapping tree).
_writing: set[str] = set()
_writing_lock = threading.Lock()


@dataclasses.dataclass
class IndexSummary:
    """What an --index-only run did: sidecars written and kept (already current), JPEGs
    indexed, JPEGs that cannot be indexed, and what failed (a source or member not read, a
    sidecar not written), each with the reason."""

    written: int = 0
    current: int = 0
    indexed: int = 0
    unindexable: int = 0
    index_bytes: int = 0
    stale_removed: int = 0
    failed: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def fail(self, path: str, reason: str) -> None:
        """Lists ``path`` as failed, for ``reason``."""
        self.failed.append((path, reason))

    def report(self) -> str:
        """The summary as the command line prints it."""
        lines = [f"index sidecars: {self.written} written, {self.current} already current; "
                 f"{self.indexed} JPEGs indexed ({self.index_bytes} bytes of indexes), "
                 f"{self.unindexable} cannot be indexed (progressive, restart markers, ...); "
                 f"{len(self.failed)} failed"]
        if self.stale_removed:
            lines.append(f"  {self.stale_removed} temporaries of killed runs removed")
        lines += [f"  failed: {_shown(path)}: {_shown(reason)}" for path, reason in self.failed]
        return "\n".join(lines)


def _shown(text: str) -> str:
    """``text`` on one printable line, cut to a length a summary can show."""
    text = printable_name(text)
    return text if len(text) <= _SHOWN_NAME else f"{text[:_SHOWN_NAME]}... ({len(text)} characters)"


def _index_of(data: bytes) -> Optional[bytes]:
    """The file's index, or None (not indexable, or its header cannot be read)."""
    try:
        return jpeg_index(data)
    except JpegDecodeError:
        return None


def _too_large(size: int, max_memory: int) -> ValueError:
    return ValueError(f"{size} bytes or more, larger than max_memory ({max_memory} bytes): "
                      "not read (raise --max-memory to index it)")


# Writing a sidecar.

def _temporary_name(path: str) -> str:
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.{_MACHINE}-{os.getpid()}-{secrets.token_hex(8)}.tmp")


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view):]


def _create_temporary(path: str) -> tuple[str, int]:
    """A new temporary beside ``path`` and its descriptor, open for writing: created, never
    opened if it exists, never through a symbolic link. A name that exists (whatever put it
    there) is passed over for another random one; the temporary is registered as being
    written (see ``_writing``) until the caller discards it."""
    for attempt in range(1, _CREATE_ATTEMPTS + 1):
        temporary = _temporary_name(path)
        with _writing_lock:
            _writing.add(temporary)
        try:
            return temporary, os.open(temporary, _CREATE_FLAGS, 0o666)
        except BaseException as error:
            with _writing_lock:
                _writing.discard(temporary)
            if not isinstance(error, FileExistsError) or attempt == _CREATE_ATTEMPTS:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")


def _write_atomically(path: str, data: bytes, fsync: bool) -> None:
    """``data`` under ``path``, whole or not at all (see the module's note). An error removes
    the temporary; an interruption leaves it for a later run to find stale."""
    temporary, descriptor = _create_temporary(path)
    try:
        try:
            _write_all(descriptor, data)
            if fsync:
                os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, path)
    except Exception:
        _unlink_quietly(temporary)
        raise
    finally:
        with _writing_lock:
            _writing.discard(temporary)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _process_is_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists, as another user's process
        return False
    return False


def _is_stale(path: str, match: re.Match) -> bool:
    """Whether no process can be writing the temporary at ``path`` (see the module's note)."""
    if match.group("machine") != _MACHINE:
        return False  # another machine's process, which this one cannot see
    pid = int(match.group("pid"))
    if pid == os.getpid():
        with _writing_lock:
            return path not in _writing
    return _process_is_gone(pid)


def _remove_stale(folder: str, names: list[str], summary: IndexSummary) -> None:
    for name in names:
        match = _TEMPORARY.match(name)
        path = os.path.join(folder, name)
        if match is not None and _is_stale(path, match):
            try:
                os.unlink(path)
                summary.stale_removed += 1
            except FileNotFoundError:
                pass
            except OSError as error:
                summary.fail(path, f"a stale temporary cannot be removed: {describe(error)}")


def _current_entries(path: str, max_memory: int
                     ) -> Optional[tuple[tuple[int, int], dict[str, SidecarEntry]]]:
    """The valid sidecar at ``path``, or None."""
    try:
        return decode_sidecar(read_sidecar(path, max_memory))
    except (OSError, SidecarError):
        return None


def _finish(sidecar: str, stamp: tuple[int, int], entries: list[SidecarEntry],
            options: "_Options", summary: IndexSummary) -> None:
    _write_atomically(sidecar, encode_sidecar(stamp, entries), options.fsync)
    summary.written += 1
    for entry in entries:
        summary.indexed += entry.index is not None
        summary.unindexable += entry.index is None
        summary.index_bytes += len(entry.index or b"")


@dataclasses.dataclass(frozen=True)
class _Options:
    image_column: Optional[str]
    max_memory: int
    force: bool
    fsync: bool


# A folder's JPEGs.

def _probe(path: str) -> Optional[os.stat_result]:
    """The stat of the regular file ``path`` if it is a JPEG (by content), else None.

    Raises:
        OSError: it is not a regular file (NotRegularFile), or cannot be opened.
    """
    with open_regular(path) as file:
        if read_head(file, len(JPEG_SIGNATURE)) != JPEG_SIGNATURE:
            return None
        return os.fstat(file.fileno())


def _folder_jpegs(folder: str, names: list[str],
                  summary: IndexSummary) -> list[tuple[str, os.stat_result]]:
    """The folder's JPEGs by content (names sorted), with their stat; what cannot be opened
    (a FIFO, a device, an unreadable file) is listed as failed."""
    jpegs = []
    for name in sorted(names):
        path = os.path.join(folder, name)
        try:
            stat = _probe(path)
        except OSError as error:  # a FIFO, a device, a broken link, an unreadable file
            summary.fail(path, describe(error))
            continue
        if stat is not None:
            jpegs.append((name, stat))
    return jpegs


def _read_jpeg(path: str, max_memory: int) -> tuple[bytes, os.stat_result]:
    """The bytes of the JPEG at ``path`` and its stat as read, within ``max_memory``."""
    with open_regular(path) as file:
        try:
            data = read_bounded(file, max_memory)
        except FileTooLarge as error:
            raise _too_large(error.size, max_memory) from None
        return data, os.fstat(file.fileno())


def _index_folder(folder: str, names: list[str], options: _Options,
                  summary: IndexSummary) -> None:
    jpegs = _folder_jpegs(folder, names, summary)
    if not jpegs:
        return
    sidecar = sidecar_of_folder(folder)
    wanted = {name: (stat.st_size, stat.st_mtime_ns) for name, stat in jpegs}
    found = None if options.force else _current_entries(sidecar, options.max_memory)
    if found is not None and {name: (entry.size, entry.mtime_ns) for name, entry in
                              found[1].items()} == wanted:
        summary.current += 1
        return
    entries = []
    for name in wanted:
        path = os.path.join(folder, name)
        try:
            data, stat = _read_jpeg(path, options.max_memory)
        except (OSError, ValueError) as error:
            summary.fail(path, describe(error) if isinstance(error, OSError) else str(error))
            continue
        entries.append(SidecarEntry(name, stat.st_size, stat.st_mtime_ns, _index_of(data)))
    if entries:  # when every JPEG failed there is nothing to record
        _finish(sidecar, (0, 0), entries, options, summary)


# Tar shards and parquet files.

def _tar_entries(path: str, file: BinaryIO, options: _Options,
                 summary: IndexSummary) -> Iterator[SidecarEntry]:
    """Each JPEG member of the shard, named as webdataset names it: key, ".", lower-case
    suffix (what the lane's tar samples look up). A member larger than max_memory, or whose
    name a sidecar cannot record, is listed as failed and left out."""
    with tarfile.open(fileobj=file, mode="r:") as shard:
        for member in shard:
            match = _KEY_AND_SUFFIX.match(member.name)
            if not member.isfile() or match is None:
                continue
            where = f"{path}:{member.name}"
            name = f"{match.group(1)}.{match.group(2).lower()}"
            if not name_fits(name):
                summary.fail(where, "the member's name is longer than an index sidecar can "
                                    "record (65535 bytes in UTF-8): not indexed")
                continue
            if member.size > options.max_memory:
                summary.fail(where, str(_too_large(member.size, options.max_memory)))
                continue
            data = shard.extractfile(member).read(member.size)
            if data.startswith(JPEG_SIGNATURE):
                yield SidecarEntry(name, len(data), 0, _index_of(data))


def _column_bytes(metadata, group: int, column: str) -> int:
    """The uncompressed bytes of ``column`` (and its fields) in row group ``group``."""
    row_group = metadata.row_group(group)
    total = 0
    for k in range(row_group.num_columns):
        chunk = row_group.column(k)
        if chunk.path_in_schema == column or chunk.path_in_schema.startswith(column + "."):
            total += chunk.total_uncompressed_size
    return total


def _check_row_group(metadata, group: int, column: str, max_memory: int) -> None:
    """Refuses a row group whose image column, held twice (read, then as Python values),
    does not fit in ``max_memory``."""
    held = 2 * _column_bytes(metadata, group, column)
    if held > max_memory:
        raise ValueError(f"row group {group}'s column {column!r} holds {held // 2} bytes; "
                         f"reading it for its indexes holds that twice, more than max_memory "
                         f"({max_memory} bytes): raise --max-memory to at least {held}")


def _parquet_entries(path: str, file: BinaryIO, options: _Options,
                     summary: IndexSummary) -> Iterator[SidecarEntry]:
    """Each row's image (by its row number in the file) of the parquet file's first image
    column (or ``options.image_column``)."""
    from . import parquet

    if parquet.pq is None:
        raise ValueError("reading parquet files needs pyarrow: pip install pyarrow")
    reader = parquet.pq.ParquetFile(file, pre_buffer=False)
    columns = parquet.image_columns(reader.schema_arrow, options.image_column)
    if not columns:
        return
    row = 0
    for group in range(reader.num_row_groups):
        _check_row_group(reader.metadata, group, columns[0], options.max_memory)
        values = reader.read_row_group(group, columns=columns[:1]).column(0).to_pylist()
        for value in values:
            data = value.get("bytes") if isinstance(value, dict) else value
            if data and bytes(data[:3]) == JPEG_SIGNATURE:
                yield SidecarEntry(str(row), len(data), 0, _index_of(bytes(data)))
            row += 1


_Entries = Callable[[str, BinaryIO, _Options, IndexSummary], Iterator[SidecarEntry]]


def _index_source(path: str, entries: _Entries, options: _Options,
                  summary: IndexSummary) -> None:
    """The sidecar of a shard or parquet file, unless it is current."""
    with open_regular(path) as file:  # a FIFO named like a shard: refused, never waited on
        stat = os.fstat(file.fileno())
        stamp = (stat.st_size, stat.st_mtime_ns)
        sidecar = sidecar_of_source(path)
        found = None if options.force else _current_entries(sidecar, options.max_memory)
        if found is not None and found[0] == stamp:
            summary.current += 1
            return
        listed = list(entries(path, file, options, summary))
    _finish(sidecar, stamp, listed, options, summary)


_SOURCES: dict[str, _Entries] = {".tar": _tar_entries, ".parquet": _parquet_entries}


def _index_sources(folder: str, names: list[str], options: _Options,
                   summary: IndexSummary) -> None:
    for name in sorted(names):
        entries = _SOURCES.get(os.path.splitext(name)[1])
        if entries is None:
            continue
        path = os.path.join(folder, name)
        try:
            _index_source(path, entries, options, summary)
        except Exception as error:  # noqa: BLE001 - one unreadable source must not end the run
            summary.fail(path, str(error) if isinstance(error, ValueError) else describe(error))


def _index_one_folder(folder: str, filenames: list[str], options: _Options,
                      summary: IndexSummary) -> None:
    _remove_stale(folder, filenames, summary)
    names = [name for name in filenames if not name.startswith(".")
             and not name.endswith(SIDECAR_SUFFIX) and name != FOLDER_SIDECAR]
    _index_sources(folder, names, options, summary)
    # A shard or parquet file is a source of its own, never one of the folder's JPEGs.
    jpeg_names = [name for name in names if os.path.splitext(name)[1] not in _SOURCES]
    try:
        _index_folder(folder, jpeg_names, options, summary)
    except Exception as error:  # noqa: BLE001 - one folder's sidecar must not end the run
        summary.fail(folder, describe(error))


def index_tree(src: str, *, image_column: Optional[str] = None,
               max_memory: int = DEFAULT_MAX_MEMORY, force: bool = False, fsync: bool = True,
               summary: Optional[IndexSummary] = None) -> IndexSummary:
    """Writes the index sidecars of every folder of JPEGs, tar shard and parquet file under
    ``src`` (recursively), skipping those already current; the JPEGs are only read. See the
    module's note for what holds.

    Args:
        src: The folder.
        image_column: parquet files: the image column (default: the first struct
            {bytes, path} column).
        max_memory: The most bytes one file, shard member or parquet row group's image
            column (held twice) may take; what needs more is listed as failed, unread.
        force: Rewrite the sidecars that are current too.
        fsync: Flush each sidecar to disk before its rename.
        summary: The summary to fill (so that a caller holds what was done even when the
            run is interrupted); a new one by default.

    Returns:
        The :class:`IndexSummary`.

    Raises:
        ValueError: ``src`` is not a folder, or ``max_memory`` is not positive.
        DestinationBusy: another run holds SRC's lock.

    Example:
        >>> print(index_tree("train").report())
    """
    if not os.path.isdir(src):
        raise ValueError(f"--index-only: {src!r} is not a folder")
    if max_memory < 1:
        raise ValueError(f"max_memory must be positive, got {max_memory}")
    options = _Options(image_column, max_memory, force, fsync)
    summary = IndexSummary() if summary is None else summary
    with Workspace(src):
        for folder, dirnames, filenames in os.walk(
                src, onerror=lambda error: summary.fail(error.filename or src, describe(error))):
            dirnames[:] = sorted(name for name in dirnames if name != PRIVATE_FOLDER)
            _index_one_folder(folder, filenames, options, summary)
    return summary
