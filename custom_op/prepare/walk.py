"""Listing SRC: the folder checks, the walk, and the plan of what is still to do.

SRC and DST must not contain each other. The walk yields every file under SRC
in sorted order, following symbolic links as ImageFolder does, except links
that lead around a cycle or into DST, and lists the folders on the way. The
plan turns each file into a Task, unless its output is already up to date.
Nothing here reads a file's content.

One name is refused at the top of SRC: ``.custom_op-prepare``, which is DST's
private folder (workspace.py); an entry of SRC so named is an error of the
summary, never written.
"""

from __future__ import annotations

import os
import stat
from typing import Iterator, Optional, Union

from . import atomic
from .atomic import PRIVATE_FOLDER
from .items import Task, describe
from .journal import JOURNAL_NAME, Journal
from .summary import Summary

PathLike = Union[str, "os.PathLike[str]"]

RESERVED = (f"reserved name: python -m custom_op.prepare keeps its lock and temporary files in "
            f"DST/{PRIVATE_FOLDER}, and its journal in DST/{JOURNAL_NAME}; rename this entry of "
            "SRC to have it prepared")


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


def walk(source: str, exclude: str, errors: list[tuple[str, str]],
         folders: Optional[list[str]] = None) -> Iterator[str]:
    """Relative paths of every file under ``source``, in sorted order.

    Symbolic links are followed, as ImageFolder follows them, except links back
    to a folder on the current path (a cycle) or into ``exclude`` (DST). A
    folder that cannot be listed is added to ``errors``, and so is an entry at
    the top named like DST's private folder. The relative path of every folder
    below ``source`` is appended to ``folders`` as the walk enters it.
    """
    # Real paths of each visited folder and its ancestors: a link to one of them is a cycle.
    chains = {source: (source,)}

    def on_error(error: OSError) -> None:
        errors.append((_relative(error.filename or source, source), describe(error)))

    for folder, dirnames, filenames in os.walk(source, onerror=on_error, followlinks=True):
        chain = chains.pop(folder)
        if folder == source:
            _refuse_reserved(dirnames, filenames, errors)
        elif folders is not None:
            folders.append(_relative(folder, source))
        kept = []
        for name in sorted(dirnames):
            real = os.path.realpath(os.path.join(folder, name))
            if real not in chain and not _is_within(real, exclude):
                chains[os.path.join(folder, name)] = chain + (real,)
                kept.append(name)
        dirnames[:] = kept  # os.walk descends into these only, in this order
        for name in sorted(filenames):
            yield _relative(os.path.join(folder, name), source)


def _refuse_reserved(dirnames: list[str], filenames: list[str],
                     errors: list[tuple[str, str]]) -> None:
    """Takes DST's private folder name out of SRC's top level, as an error."""
    for names in (dirnames, filenames):
        for reserved in (PRIVATE_FOLDER, JOURNAL_NAME):
            if reserved in names:
                names.remove(reserved)
                errors.append((reserved, RESERVED))


def _relative(path: str, root: str) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")


def plan(source: str, destination: str, force: bool, summary: Summary,
         folders: Optional[list[str]] = None, journal: Optional[Journal] = None) -> list[Task]:
    """The files still to handle; counts the others (done, unreadable) in ``summary``.

    The folders under ``source`` are appended to ``folders`` (see walk). With
    a ``journal`` (a DST without extended attributes) it decides what is done.
    """
    tasks = []
    for relative in walk(source, destination, summary.errors, folders):
        summary.files_seen += 1
        path = os.path.join(source, relative)
        target = os.path.join(destination, relative)
        try:
            status = os.stat(path)
        except OSError as error:  # e.g. a broken symbolic link
            summary.errors.append((relative, describe(error)))
            continue
        task = Task(relative, path, target, status.st_size,
                    (status.st_atime_ns, status.st_mtime_ns), status.st_ino,
                    stat.S_IMODE(status.st_mode))
        summary.shards_seen += task.is_whole
        summary.parquet_seen += task.is_parquet
        if not stat.S_ISREG(status.st_mode):
            summary.errors.append((relative, "not a regular file (a FIFO or device?)"))
        elif not force and (journal.is_done(relative, status) if journal is not None
                            else atomic.is_done(status, target)):
            summary.already_done += 1
            # What was found when it was written still describes the tree (items.findings_of).
            summary.restore(journal.findings_of(relative) if journal is not None
                            else atomic.recorded_findings(target))
        else:
            tasks.append(task)
    return tasks
