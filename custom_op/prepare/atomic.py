"""Outputs that are complete or absent: temporary files, durable renames, and resuming.

Every output (a file or a whole shard) is written under a short temporary
name in DST's private folder (workspace.py), then given its source's
identity, times and mode bits, flushed to disk (fsync), and renamed to its
final name. So a killed run, or a power cut, leaves under final names only
complete outputs, each carrying the identity of the source it was made from;
the temporaries left over are in the private folder, which the next run
empties. No source name is ever a temporary's name, and a temporary's name
does not grow with the source's (a 255-byte name is prepared like any other).

The identity is (size, mtime in ns, inode) of the source as it was listed,
before it was read, stored in an extended attribute of the output
(``user.custom_op.source``). An output counts as done only when its recorded
identity is the source's current one: a source replaced in any way that its
size, mtime or inode show (``cp -p`` from a backup, an older file moved over
it, a rewrite that kept the mtime) is prepared again. On a file system that
keeps no user extended attributes (some NFS mounts, tmpfs before Linux 6.6),
the run keeps the same identities, and the output's, in a journal in DST
instead (journal.py), so the guarantee is the same on every file system.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import os
import shutil
import socket
from typing import Callable, Sequence

from .._core._regular_files import open_regular
from .items import Outcome, Task, findings_of

#: DST's private folder, holding the lock and the temporary files (see workspace.py).
PRIVATE_FOLDER = ".custom_op-prepare"
#: The extended attribute holding the identity of an output's source.
IDENTITY_ATTRIBUTE = "user.custom_op.source"
#: The extended attribute holding what the run found in an output (items.findings_of): JSON.
FINDINGS_ATTRIBUTE = "user.custom_op.findings"
# The identity's format: a version, then the fields; another version never matches.
_IDENTITY_FORMAT = "1 size={} mtime_ns={} inode={}"
# Errors that mean "this file system (or platform) keeps no user extended attributes".
_NO_ATTRIBUTES = {errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}
_HAS_ATTRIBUTES = hasattr(os, "setxattr")
_COPY_CHUNK = 1 << 20  # bytes per read of a copy

# Whether outputs are flushed to disk before their rename (prepare_tree's ``fsync``), set in
# each process by the work function before each task (tree.handle_task).
_flush = True


def set_flush(enabled: bool) -> None:
    """Turns the fsync of each output before its rename on or off, in this process."""
    global _flush
    _flush = enabled


# Temporary names: the machine, the process id and a counter, unique within a run (one process
# writes one temporary at a time, and the run holds DST's lock, so no other run writes there).
# The machine matters with the Ray engine, whose tasks on several nodes share DST's private
# folder and may have the same process id; a short hash keeps every name short.
_counter = itertools.count()
_MACHINE = hashlib.blake2s(socket.gethostname().encode(), digest_size=4).hexdigest()


def destination_root(task: Task) -> str:
    """DST itself: ``task.destination`` is DST joined with ``task.relative``."""
    root = task.destination
    for _ in range(task.relative.count("/") + 1):
        root = os.path.dirname(root)
    return root


def temporary_name(task: Task) -> str:
    """A fresh path in DST's private folder for ``task``'s output, as short for any source."""
    return os.path.join(destination_root(task), PRIVATE_FOLDER,
                        f"{_MACHINE}-{os.getpid()}-{next(_counter)}")


def identity(size: int, mtime_ns: int, inode: int) -> bytes:
    """The recorded identity of a source with these size, mtime and inode."""
    return _IDENTITY_FORMAT.format(size, mtime_ns, inode).encode("ascii")


def replace_atomically(task: Task, write: Callable[[str], None],
                       outcomes: Sequence[Outcome] = ()) -> None:
    """Has ``write`` fill a temporary file, finishes it (below) and renames it to its final name.

    Finishing: the source's identity is recorded, and the findings of
    ``outcomes`` (read after ``write``, which may add a shard's members' to
    them: items.findings_of), its access and modification
    times and mode bits are given to the file, and the file is flushed to disk,
    all before the rename, so that whatever stands under the final name, even
    after a kill or a power cut, is a complete output with its source's
    identity, times and mode. The rename itself becomes durable when the run
    flushes DST's folders at its end (folders.py). When ``write`` raises, the
    temporary file is removed and nothing is renamed.
    """
    temporary = temporary_name(task)
    try:
        write(temporary)
        _finish(temporary, task, findings_of(list(outcomes)))
        os.replace(temporary, task.destination)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)  # only left when something above failed or was interrupted


def _finish(temporary: str, task: Task, findings: list[list]) -> None:
    """Identity, findings, times, mode, fsync: on one descriptor, so a read-only mode set last
    still lets the flush through."""
    descriptor = os.open(temporary, os.O_RDONLY)
    try:
        if findings:
            _set_attribute(descriptor, FINDINGS_ATTRIBUTE, json.dumps(findings).encode())
        _record_identity(descriptor, task)
        os.utime(descriptor, ns=task.times_ns)
        os.chmod(descriptor, task.mode)
        if _flush:
            os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _record_identity(descriptor: int, task: Task) -> None:
    _set_attribute(descriptor, IDENTITY_ATTRIBUTE,
                   identity(task.size, task.times_ns[1], task.inode))


def _set_attribute(descriptor: int, name: str, value: bytes) -> None:
    if not _HAS_ATTRIBUTES:
        return
    try:
        os.setxattr(descriptor, name, value)
    except OSError as error:
        if error.errno not in _NO_ATTRIBUTES:
            raise  # e.g. no space left for the attribute: the output must not look done


def recorded_findings(destination: str) -> list[list]:
    """The findings ``destination`` was written with (see replace_atomically); [] for none."""
    try:
        entries = json.loads(os.getxattr(destination, FINDINGS_ATTRIBUTE))
    except (OSError, ValueError, AttributeError):  # none, unreadable, or no attributes here
        return []
    return valid_findings(entries)


def valid_findings(entries: object) -> list[list]:
    """``entries`` as read back from an attribute or the journal, without what is malformed."""
    if not isinstance(entries, list):
        return []
    return [entry for entry in entries if isinstance(entry, list) and len(entry) == 4
            and all(isinstance(field, str) for field in entry[:3])]


def flush_file(path: str) -> None:
    """fsync ``path`` when this run flushes (prepare_tree's ``fsync``)."""
    if not _flush:
        return
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_bytes(data: bytes) -> Callable[[str], None]:
    """A writer for replace_atomically that writes ``data``."""

    def write(path: str) -> None:
        with open(path, "wb") as file:
            file.write(data)
    return write


def copy_from(source: str) -> Callable[[str], None]:
    """A writer for replace_atomically that copies the regular file ``source`` byte for byte
    (a FIFO or device put in its place is refused, never waited on or read for ever)."""

    def write(path: str) -> None:
        with open_regular(source) as reader, open(path, "wb") as writer:
            shutil.copyfileobj(reader, writer, _COPY_CHUNK)
    return write


def is_done(source_stat: os.stat_result, destination: str) -> bool:
    """Whether ``destination`` carries the identity of the source as it is now (see the
    module's note); False where the file system keeps no attributes (journal.py decides
    there)."""
    expected = identity(source_stat.st_size, source_stat.st_mtime_ns, source_stat.st_ino)
    try:
        return _HAS_ATTRIBUTES and os.getxattr(destination, IDENTITY_ATTRIBUTE) == expected
    except OSError:
        return False  # no output, one without a record (not ours), or no attributes here
