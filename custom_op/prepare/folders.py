"""DST's folders: created before the work with no more access than SRC's, made exact after it.

Each folder of SRC gets a folder of DST with its mode bits and times, as
``cp -p`` gives them. While the run writes, a folder has its source's mode
plus the owner's read, write and search bits (a read-only folder of SRC must
still be written into), never more for the group or others, so a private
folder is never readable by others, even after a crash. At the end of a run
that was not interrupted, every folder gets its source's exact mode and
times, deepest first, and is flushed to disk (fsync): this is what makes the
renames of the outputs durable, so that once the summary is printed a power
cut loses nothing (atomic.py flushed each output before its rename). The
next run gives the owner's bits back before it writes.

DST itself gets SRC's mode and times, as ``rsync -a SRC/ DST/`` gives them,
unless it belongs to another user.
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import NamedTuple, Optional

# While a run writes, the owner may always read, write and enter a folder of DST.
_WRITABLE = stat.S_IRWXU


class Folder(NamedTuple):
    """A folder of DST and what its source folder's ``stat`` says it should get."""

    path: str
    mode: int
    times_ns: tuple[int, int]


def source_folder(source: str, destination: str, relative: str) -> Optional[Folder]:
    """The Folder of DST for SRC's ``relative`` (``""``: SRC itself); None if it cannot be read."""
    try:
        status = os.stat(os.path.join(source, relative))
    except OSError:
        return None  # the walk reported what it could not list
    return Folder(os.path.join(destination, relative), stat.S_IMODE(status.st_mode),
                  (status.st_atime_ns, status.st_mtime_ns))


def make_writable(folders: list[Folder]) -> None:
    """Creates each folder (parents first) or gives the owner's bits back to an existing one."""
    for folder in sorted(folders, key=lambda folder: folder.path):
        mode = folder.mode | _WRITABLE
        try:
            os.mkdir(folder.path, mode)
        except FileExistsError:
            if stat.S_IMODE(os.stat(folder.path).st_mode) & _WRITABLE == _WRITABLE:
                continue
        os.chmod(folder.path, mode)  # also past the umask, which mkdir applies


def finish(folders: list[Folder], also_flush: list[str], flush: bool = True) -> None:
    """Gives every folder its exact mode and times, deepest first, and, when ``flush``,
    flushes it and the folders ``also_flush`` (DST's parent) to disk."""
    for folder in sorted(folders, key=lambda folder: folder.path, reverse=True):
        if flush:
            _flush(folder.path)  # before a read-only mode could stop the open
        # A DST that belongs to another user (a shared, group-writable folder) keeps its own
        # mode and times, as cp -p leaves what it may not change.
        with contextlib.suppress(PermissionError):
            os.utime(folder.path, ns=folder.times_ns)
            os.chmod(folder.path, folder.mode)
    for path in also_flush if flush else []:
        _flush(path)


def _flush(path: str) -> None:
    """fsync a folder, where the platform can (not on Windows, where folders cannot be opened)."""
    with contextlib.suppress(PermissionError, IsADirectoryError):
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
