"""prepare_tree: one run over SRC, from the checks to the Summary.

It checks SRC and DST, locks DST (workspace.py: one run at a time, and a
killed run's temporaries removed), plans the files still to do, creates DST's
folders, hands plain files to the workers in chunks and each whole-file task
(a tar shard, a parquet file) to one worker, counts what comes back, and
gives the folders their final modes and times, flushed to disk (folders.py).
"""

from __future__ import annotations

import functools
import itertools
import os
import time
from typing import Optional

from .._decode._arguments import _as_limit
from .._decode._single import DEFAULT_MAX_MEMORY
from . import atomic, folders, pool, walk
from .files import handle_file
from .items import COPIED, PREPARED, SHARD_WRITTEN, VERIFY_FAILED, Outcome, Task, findings_of
from .journal import Journal, keeps_attributes
from .progress import Progress
from .shards import handle_shard
from .summary import Summary
from .workspace import Workspace


#: Where the work runs: worker processes of this machine, or Ray tasks on a cluster.
ENGINES = ("processes", "ray")

#: Outcome kinds of a file or shard whose output was renamed into place.
WRITTEN = frozenset({PREPARED, COPIED, VERIFY_FAILED, SHARD_WRITTEN})


def handle_task(task: Task, verify: bool, max_memory: int = DEFAULT_MAX_MEMORY,
                fsync: bool = True, image_column: Optional[str] = None) -> list[Outcome]:
    """What a worker does with one Task: a shard or a parquet file as a whole, or a plain file."""
    atomic.set_flush(fsync)
    if task.is_shard:
        return handle_shard(task, verify, max_memory)
    if task.is_parquet:
        # Imported here: it imports pyarrow, which `import custom_op.prepare` must not.
        from .parquet import handle_parquet
        return handle_parquet(task, verify, max_memory, image_column)
    return [handle_file(task, verify, max_memory)]


def prepare_tree(src: walk.PathLike, dst: walk.PathLike, *, workers: Optional[int] = None,
                 verify: bool = False, force: bool = False,
                 progress: Optional[bool] = None,
                 max_memory: int = DEFAULT_MAX_MEMORY, fsync: bool = True,
                 image_column: Optional[str] = None, engine: str = "processes",
                 ray_address: Optional[str] = None) -> Summary:
    """Prepares every JPEG under ``src`` for seeking into the same relative path under ``dst``.

    JPEGs (by content) are rewritten by :func:`custom_op.prepare_jpeg`, with
    the same pixels; every other file, and every JPEG prepare_jpeg refuses, is
    copied unchanged and listed in the summary with the reason. A tar shard
    (``*.tar``) becomes a tar of the same members in the same order, its JPEG
    members prepared the same way; a parquet file (``*.parquet``, a Hugging
    Face Hub dataset's) becomes one with the same schema, rows, row groups
    and other columns, each JPEG of its image column prepared the same way
    (custom_op/prepare/parquet.py; it needs pyarrow, without which parquet
    files are copied unchanged with that reason). One worker writes a whole
    shard or parquet file, so its bytes do not depend on ``workers``.
    Outputs and folders get their source's mode bits, access and
    modification times (as ``cp -p``). Each output
    records its source's identity (size, mtime, inode), and an output whose
    source still has that identity is taken as done by an earlier run and left
    alone, unless ``force``. Each output is written under a temporary name in
    ``DST/.custom_op-prepare/``, flushed to disk and renamed, so an
    interrupted run (or a power cut) leaves only complete files and shards;
    the next run removes the temporaries and goes on. That folder also holds
    a lock: a second run into the same DST stops with DestinationBusy. A
    worker process that dies (the out-of-memory killer, kill -9) is reported
    as an error of the file it was handling, and the run goes on.

    Args:
        src: The folder to read, searched recursively (symbolic links followed).
        dst: The folder to write; created if missing. It must not be ``src``,
            lie inside it, or contain it.
        workers: Processes to use; default ``os.cpu_count()``. 1 does the work
            in this process, where a kill (the OOM killer) ends the run; with
            2 or more, a worker's death fails only the file it was on.
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
        fsync: Flush each output to disk before its rename, and every folder
            at the end, so that a power cut never leaves a partial file under
            a final name and a finished run is on disk. False skips the
            flushes (faster on disks where fsync is slow); after a power cut
            during such a run, rerun it with ``force``.
        image_column: The column of each parquet file whose images are
            prepared: a struct ``{bytes, path}`` or a binary column. Default
            None: every struct ``{bytes: binary, path: string}`` column (how
            ``datasets`` writes its Image feature); a parquet file without
            one is copied unchanged, and one without a column of this name
            is refused.
        engine: ``"processes"`` (worker processes of this machine) or
            ``"ray"``: the same work as Ray tasks on every CPU of a Ray
            cluster (custom_op/prepare/ray_engine.py; needs the ``ray``
            extra, and SRC and DST at the same paths on every node), where
            a task whose node dies is retried; ``workers`` is then unused.
        ray_address: With ``engine="ray"``, the cluster to join (as
            ``ray.init(address=...)``); None joins the one RAY_ADDRESS
            names, else starts Ray on this machine.

    Returns:
        A :class:`Summary`; ``summary.report()`` is its text and
        ``summary.exit_code`` is 1 when a file failed verification, could not
        be read or written, or a shard or parquet file was refused (truncated,
        not a tar or not parquet, a repeated sample key, no usable
        ``image_column``).

    Raises:
        ValueError: ``src`` is not a folder, ``dst`` is ``src`` or inside it (or
            contains it), ``workers`` < 1, ``max_memory`` < 1,
            ``image_column`` is empty, or ``engine`` is not one of ENGINES.
        TypeError: ``max_memory`` is not an int, or ``image_column`` is
            neither a str nor None.
        custom_op.prepare.workspace.DestinationBusy: another run is writing
            into ``dst`` (the message names its pid).
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
    _check_image_column(image_column)
    if engine not in ENGINES:
        raise ValueError(f"prepare_tree(): engine must be one of {', '.join(ENGINES)}, got "
                         f"{engine!r}")
    # A partial of a module-level function pickles by name, so it reaches the workers.
    work = functools.partial(handle_task, max_memory=max_memory, fsync=fsync,
                             image_column=image_column)
    source, destination = walk.check_folders(src, dst)
    # DST itself gets SRC's mode and times, as `rsync -a SRC/ DST/` gives them.
    root = folders.source_folder(source, destination, "")
    assert root is not None, "check_folders found SRC a folder"
    os.makedirs(os.path.dirname(destination), exist_ok=True)
    folders.make_writable([root])
    summary = Summary(source, destination)
    with Workspace(destination) as space:
        summary.stale_removed = space.stale_removed
        # Where outputs cannot carry their source's identity, a journal in DST keeps it.
        journal = None if keeps_attributes(space.lock_path) else Journal(destination)
        _run(source, destination, work, verify, force, workers, progress, summary, fsync,
             journal, engine, ray_address)
    # The private folder is gone (workspace.py); now DST can get its final mode and times.
    folders.finish([root], also_flush=[os.path.dirname(destination)], flush=fsync)
    summary.sort()
    summary.elapsed_seconds = time.perf_counter() - start
    return summary


def _check_image_column(image_column: Optional[str]) -> None:
    if image_column is not None and not isinstance(image_column, str):
        raise TypeError(f"prepare_tree(): image_column must be a str or None, got "
                        f"{image_column!r}")
    if image_column == "":
        raise ValueError("prepare_tree(): image_column must name a column, got ''")


def _run(source: str, destination: str, work: pool.Work, verify: bool, force: bool,
         workers: int, progress: Optional[bool], summary: Summary, fsync: bool,
         journal: Optional[Journal], engine: str, ray_address: Optional[str]) -> None:
    """Plans, makes the folders, runs the work and finishes the folders; DST is locked."""
    relatives: list[str] = []
    tasks = walk.plan(source, destination, force, summary, relatives, journal)
    by_name = {task.relative: task for task in tasks} if journal is not None else {}
    below = [folder for folder in (folders.source_folder(source, destination, relative)
                                   for relative in relatives) if folder is not None]
    folders.make_writable(below)
    whole = [task for task in tasks if task.is_whole]
    files = [task for task in tasks if not task.is_whole]
    # Shards and parquet files first, one per chunk: the longest pieces of work start early,
    # so the files fill in around them and no core idles at the end while one of them finishes.
    chunks = itertools.chain(([task] for task in whole), pool.chunked(files, workers))
    bar = Progress(len(tasks), sum(task.size for task in tasks), progress)

    def record(outcomes: list[Outcome]) -> None:
        summary.record(outcomes)
        bar.advance(outcomes)
        if journal is not None:
            _journal_outputs(journal, by_name, outcomes)

    try:
        if engine == "ray":
            # Imported here: `import custom_op.prepare` must not need Ray.
            from .ray_engine import run_ray
            run_ray(whole, files, work, verify, record, ray_address)
        elif workers == 1:
            pool.run_inline(chunks, work, verify, record)
        elif tasks:
            # Worker processes even for one task: a worker that dies (the OOM killer) is an
            # error of its file, where this process dying would end the run without a summary.
            pool.run_pool(chunks, work, verify, min(workers, len(tasks)), record)
    finally:
        bar.close()
        if journal is not None:
            journal.save()  # also after Ctrl-C: what was written is kept
    folders.finish(below, also_flush=[], flush=fsync)


def _journal_outputs(journal: Journal, tasks: dict[str, Task], outcomes: list[Outcome]) -> None:
    """Records in the journal each output the outcomes say was renamed into place."""
    for outcome in outcomes:
        task = tasks.get(outcome.relative)
        if not outcome.member and task is not None and outcome.kind in WRITTEN:
            # A shard's outcomes come together: its members' are those under its name.
            own = [other for other in outcomes if other is outcome or (
                other.member and other.relative.startswith(task.relative + ":"))]
            journal.written(task.relative, task.size, task.times_ns[1], task.inode,
                            findings_of(own))
