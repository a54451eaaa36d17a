"""prepare_tree: one run over SRC, from the checks to the Summary.

It checks SRC and DST, removes a killed run's temporaries, plans the files
still to do, hands plain files to the workers in chunks and each tar shard
whole to one worker, and counts what comes back.
"""

from __future__ import annotations

import functools
import itertools
import os
import time
from typing import Optional

from .._decode import DEFAULT_MAX_MEMORY, _as_limit
from . import atomic, pool, walk
from .files import handle_file
from .items import Outcome, Task
from .progress import Progress
from .shards import handle_shard
from .summary import Summary


def handle_task(task: Task, verify: bool, max_memory: int = DEFAULT_MAX_MEMORY) -> list[Outcome]:
    """What a worker does with one Task: a shard as a whole, or a plain file."""
    if task.is_shard:
        return handle_shard(task, verify, max_memory)
    return [handle_file(task, verify, max_memory)]


def prepare_tree(src: walk.PathLike, dst: walk.PathLike, *, workers: Optional[int] = None,
                 verify: bool = False, force: bool = False,
                 progress: Optional[bool] = None,
                 max_memory: int = DEFAULT_MAX_MEMORY) -> Summary:
    """Prepares every JPEG under ``src`` for seeking into the same relative path under ``dst``.

    JPEGs (by content) are rewritten by :func:`custom_op.prepare_jpeg`, with
    the same pixels; every other file, and every JPEG prepare_jpeg refuses, is
    copied unchanged and listed in the summary with the reason. A tar shard
    (``*.tar``) becomes a tar of the same members in the same order, its JPEG
    members prepared the same way; one worker writes a whole shard, so its
    bytes do not depend on ``workers``. Outputs get their source's access and
    modification times, and an output whose mtime is at least its source's is
    taken as done by an earlier run and left alone, unless ``force``. Each
    output is written under a temporary name (``.NAME.PID.custom_op-tmp``) and
    renamed, so an interrupted run leaves only complete files and shards; the
    next run removes the temporaries and goes on.

    Args:
        src: The folder to read, searched recursively (symbolic links followed).
        dst: The folder to write; created if missing. It must not be ``src``,
            lie inside it, or contain it.
        workers: Processes to use; default ``os.cpu_count()``. 1 does the work
            in this process.
        verify: Decode every prepared file and its input in full and require
            identical pixels, and check that the output is seekable. A file
            that fails is replaced by a copy of its input and listed in
            ``Summary.verify_failed``. Costs two full decodes per file.
        force: Rewrite outputs that are already up to date.
        progress: True draws a progress bar on stderr, False never does,
            None draws it only when stderr is a terminal.
        max_memory: Bytes of working memory one file's rewrite (and its
            verification) may use, as for :func:`custom_op.prepare_jpeg`:
            about 2 bytes per pixel and component, plus the file. A JPEG
            that needs more is copied unchanged and listed in
            ``Summary.copied`` under a reason that names the bytes it needs.

    Returns:
        A :class:`Summary`; ``summary.report()`` is its text and
        ``summary.exit_code`` is 1 when a file failed verification, could not
        be read or written, or a shard was refused (truncated, not a tar, a
        repeated sample key).

    Raises:
        ValueError: ``src`` is not a folder, ``dst`` is ``src`` or inside it (or
            contains it), ``workers`` < 1, or ``max_memory`` < 1.
        TypeError: ``max_memory`` is not an int.
        OSError: ``dst`` cannot be created. Errors on single files are listed
            in the summary instead.
        KeyboardInterrupt: the run was interrupted; every output written so far
            is complete, and a rerun resumes.

    Example:
        >>> summary = prepare_tree("photos", "photos-prepared", workers=4, verify=True)
        >>> print(summary.report())
    """
    start = time.perf_counter()
    workers = (os.cpu_count() or 1) if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"prepare_tree(): workers must be an int >= 1, got {workers!r}")
    max_memory = _as_limit("prepare_tree", "max_memory", max_memory)
    # A partial of a module-level function pickles by name, so it reaches the workers.
    work = functools.partial(handle_task, max_memory=max_memory)
    source, destination = walk.check_folders(src, dst)
    os.makedirs(destination, exist_ok=True)
    summary = Summary(source, destination)
    summary.stale_removed = atomic.remove_stale_temporaries(destination)
    tasks = walk.plan(source, destination, force, summary)
    shards = [task for task in tasks if task.is_shard]
    files = [task for task in tasks if not task.is_shard]
    # Shards first, one per chunk: the longest pieces of work start early, so the files fill
    # in around them and no core idles at the end while one shard finishes.
    chunks = itertools.chain(([shard] for shard in shards), pool.chunked(files, workers))
    bar = Progress(len(tasks), sum(task.size for task in tasks), progress)

    def record(outcomes: list[Outcome]) -> None:
        summary.record(outcomes)
        bar.advance(outcomes)

    try:
        if workers == 1 or len(tasks) <= 1:
            pool.run_inline(chunks, work, verify, record)
        else:
            pool.run_pool(chunks, work, verify, min(workers, len(tasks)), record)
    finally:
        bar.close()
    summary.sort()
    summary.elapsed_seconds = time.perf_counter() - start
    return summary
