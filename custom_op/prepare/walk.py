"""Listing SRC: the folder checks, the walk, and the plan of what is still to do.

SRC and DST must not contain each other. The walk yields every file under SRC
in sorted order, following symbolic links as ImageFolder does, except links
that lead around a cycle or into DST. The plan turns each file into a Task,
unless its output is already up to date. Nothing here reads a file's content.
"""

from __future__ import annotations

import os
import stat
from typing import Iterator, Union

from . import atomic
from .items import Task, describe
from .summary import Summary

PathLike = Union[str, "os.PathLike[str]"]


def _is_within(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both absolute and resolved)."""
    return os.path.commonpath([path, folder]) == folder


def check_folders(src: PathLike, dst: PathLike) -> tuple[str, str]:
    """The resolved SRC and DST, or ValueError when they cannot be used together."""
    source, destination = os.path.realpath(src), os.path.realpath(dst)
    if not os.path.isdir(source):
        raise ValueError(f"SRC {os.fspath(src)!r} is not a folder")
    if _is_within(destination, source):
        # The outputs would be listed as inputs: a rerun would prepare them again, into DST/DST.
        raise ValueError(f"DST {os.fspath(dst)!r} is SRC {os.fspath(src)!r} or inside it; "
                         "choose a folder outside SRC")
    if _is_within(source, destination):
        # Writing DST/<relative path> could then overwrite a source file before it is read.
        raise ValueError(f"SRC {os.fspath(src)!r} is inside DST {os.fspath(dst)!r}; "
                         "choose a DST that does not contain SRC")
    if os.path.exists(destination) and not os.path.isdir(destination):
        raise ValueError(f"DST {os.fspath(dst)!r} exists and is not a folder")
    return source, destination


def walk(source: str, exclude: str, errors: list[tuple[str, str]]) -> Iterator[str]:
    """Relative paths of every file under ``source``, in sorted order.

    Symbolic links are followed, as ImageFolder follows them, except links back
    to a folder on the current path (a cycle) or into ``exclude`` (DST). A
    folder that cannot be listed is added to ``errors``.
    """
    # Real paths of each visited folder and its ancestors: a link to one of them is a cycle.
    chains = {source: (source,)}

    def on_error(error: OSError) -> None:
        errors.append((_relative(error.filename or source, source), describe(error)))

    for folder, dirnames, filenames in os.walk(source, onerror=on_error, followlinks=True):
        chain = chains.pop(folder)
        kept = []
        for name in sorted(dirnames):
            real = os.path.realpath(os.path.join(folder, name))
            if real not in chain and not _is_within(real, exclude):
                chains[os.path.join(folder, name)] = chain + (real,)
                kept.append(name)
        dirnames[:] = kept  # os.walk descends into these only, in this order
        for name in sorted(filenames):
            yield _relative(os.path.join(folder, name), source)


def _relative(path: str, root: str) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")


def plan(source: str, destination: str, force: bool, summary: Summary) -> list[Task]:
    """The files still to handle; counts the others (done, unreadable) in ``summary``."""
    tasks = []
    for relative in walk(source, destination, summary.errors):
        summary.files_seen += 1
        path = os.path.join(source, relative)
        target = os.path.join(destination, relative)
        try:
            status = os.stat(path)
        except OSError as error:  # e.g. a broken symbolic link
            summary.errors.append((relative, describe(error)))
            continue
        task = Task(relative, path, target, status.st_size,
                    (status.st_atime_ns, status.st_mtime_ns))
        summary.shards_seen += task.is_shard
        if not stat.S_ISREG(status.st_mode):
            summary.errors.append((relative, "not a regular file (a FIFO or device?)"))
        elif not force and atomic.is_done(status, target):
            summary.already_done += 1
        else:
            tasks.append(task)
    return tasks
