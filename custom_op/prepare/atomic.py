"""Outputs that are complete or absent: temporary names, atomic renames, and resuming.

Every output (a file or a whole shard) is written under a hidden temporary
name beside its final one, stamped with its source's times, then renamed. A
killed run therefore leaves only complete outputs plus temporaries, which the
next run deletes. An output at least as new as its source counts as done.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Callable

from .items import Task

#: Every temporary file this tool writes ends so; a run removes the ones a killed run left.
TEMPORARY_SUFFIX = ".custom_op-tmp"


def temporary_name(destination: str) -> str:
    """A hidden name beside ``destination``, unique to this process."""
    folder, name = os.path.split(destination)
    return os.path.join(folder, f".{name}.{os.getpid()}{TEMPORARY_SUFFIX}")


def replace_atomically(task: Task, write: Callable[[str], None]) -> None:
    """Has ``write`` fill a temporary file, gives it the source's times, renames it.

    The rename is atomic, so the destination is either the old file or the
    complete new one, even when the process is killed. Setting the mtime before
    the rename means a file under its final name always has its source's
    mtime, which is what resuming relies on. Only the times are copied, not the
    mode (shutil.copystat), which some network file systems refuse to set. When
    ``write`` raises, the temporary file is removed and nothing is renamed.
    """
    temporary = temporary_name(task.destination)
    try:
        write(temporary)
        os.utime(temporary, ns=task.times_ns)
        os.replace(temporary, task.destination)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)  # only left when something above failed or was interrupted


def write_bytes(data: bytes) -> Callable[[str], None]:
    """A writer for replace_atomically that writes ``data``."""

    def write(path: str) -> None:
        with open(path, "wb") as file:
            file.write(data)
    return write


def copy_from(source: str) -> Callable[[str], None]:
    """A writer for replace_atomically that copies ``source`` byte for byte."""
    return lambda path: shutil.copyfile(source, path)


def remove_stale_temporaries(destination: str) -> int:
    """Deletes the temporary files a killed run left in ``destination``; returns how many.

    Two runs writing into the same DST at once are not supported: this would
    delete the other run's files in progress.
    """
    removed = 0
    for folder, _, filenames in os.walk(destination):
        for name in filenames:
            if name.startswith(".") and name.endswith(TEMPORARY_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, name))
                    removed += 1
    return removed


def is_done(source_stat: os.stat_result, destination: str) -> bool:
    """Whether ``destination`` is at least as new as its source (written by an earlier run)."""
    try:
        return os.stat(destination).st_mtime_ns >= source_stat.st_mtime_ns
    except OSError:
        return False
