"""DST's private folder: one run at a time (a lock), and the temporary files of that run.

A run keeps ``DST/.custom_op-prepare/`` (mode 0700) while it works: the file
``lock``, locked with flock for the whole run and holding the run's process
id, and the temporary files its processes write (atomic.py). A second run
into the same DST finds the lock taken and stops, naming the pid, before it
touches anything. The lock is released by the kernel when every process
holding it is gone, even after kill -9, so a killed run never blocks the
next one; the worker processes share the lock and die with their parent
(pool.py), so a rerun cannot start while a killed run's workers still write.

Holding the lock, a run knows that every other file in the folder was left
by a killed run and deletes it. At the end (also after Ctrl-C or an error)
it removes the folder, so a finished DST holds only outputs: ImageFolder
would take a leftover folder for a class.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from types import TracebackType
from typing import Optional

from .atomic import PRIVATE_FOLDER

try:
    import fcntl
except ImportError:  # Windows: no flock; runs are not locked there.
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = "lock"


class DestinationBusy(Exception):
    """Another run holds DST's lock; the message names its process id when it is known."""


class Workspace:
    """The private folder of DST, locked while the ``with`` block runs.

    Example:
        >>> with Workspace("/data/prepared") as space:
        ...     print(space.stale_removed)
    """

    def __init__(self, destination: str) -> None:
        self.folder = os.path.join(destination, PRIVATE_FOLDER)
        self.lock_path = os.path.join(self.folder, LOCK_NAME)
        self.descriptor: Optional[int] = None
        #: Temporary files a killed run left, deleted when the lock was taken.
        self.stale_removed = 0

    def __enter__(self) -> "Workspace":
        self.descriptor = _lock(self.folder, self.lock_path)
        self.stale_removed = self._remove_all_but_the_lock()
        return self

    def __exit__(self, kind: Optional[type], error: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        # The folder goes before the lock is released, so no other run sees it half-removed;
        # a run that opened the lock file meanwhile finds it unlinked and makes a new one.
        self._remove_all_but_the_lock()
        with contextlib.suppress(OSError):
            os.unlink(self.lock_path)
        with contextlib.suppress(OSError):
            os.rmdir(self.folder)
        if self.descriptor is not None:
            os.close(self.descriptor)
            self.descriptor = None

    def _remove_all_but_the_lock(self) -> int:
        removed = 0
        with os.scandir(self.folder) as entries:
            for entry in entries:
                if entry.name == LOCK_NAME:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
                removed += 1
        return removed


def _lock(folder: str, lock_path: str) -> Optional[int]:
    """Takes the lock of ``lock_path`` (creating the folder and file); the open descriptor.

    Raises:
        DestinationBusy: another run holds it.
    """
    while True:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        if fcntl is None:
            return descriptor
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(descriptor)
            os.close(descriptor)
            raise DestinationBusy(_busy_message(os.path.dirname(folder), holder)) from None
        if _still_linked(descriptor, lock_path):
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, f"{os.getpid()}\n".encode("ascii"), 0)
            return descriptor
        os.close(descriptor)  # the run that held it removed it as it ended: take a new one


def _still_linked(descriptor: int, path: str) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(descriptor).st_ino
    except FileNotFoundError:
        return False


def _read_pid(descriptor: int) -> Optional[int]:
    text = os.pread(descriptor, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def _busy_message(destination: str, holder: Optional[int]) -> str:
    who = f"pid {holder}" if holder is not None else "pid unknown"
    return (f"another run of python -m custom_op.prepare ({who}, or its worker processes) is "
            f"writing into {destination}; wait for it to end, or stop it, then run again "
            f"(its lock: {os.path.join(destination, PRIVATE_FOLDER, LOCK_NAME)})")
