"""The worker processes: concurrent.futures with a bounded queue, and a clean Ctrl-C.

Tasks go to the workers in chunks (a list of Tasks each), a few chunks per
worker in flight at a time, so that a dataset of millions of files is never
queued whole, no worker waits for work, and an interrupted run drops what has
not started. The work itself is a function passed in; this module does not
know what a Task holds.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import signal
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from .items import Outcome, Task

# Files per chunk: large enough that the round trip through the pool's queues (about 0.1 ms)
# is small next to the work, small enough that the last chunks keep every core busy and that
# Ctrl-C, which lets running chunks finish, is answered within a second or so.
_MAX_CHUNK = 16
_CHUNKS_PER_WORKER = 8  # aim: each worker takes this many chunks, so the load balances
_IN_FLIGHT_PER_WORKER = 2  # submitted chunks per worker: the queue never runs dry, never floods

Work = Callable[[Task, bool], list[Outcome]]

# Set by the parent when it shuts the pool down early (Ctrl-C, an error), so that workers stop
# between two files instead of finishing the chunks they hold. None in the parent process.
_stop_event: Optional[multiprocessing.synchronize.Event] = None


def stop_requested() -> bool:
    """Whether the parent asked the workers to stop (always False in the parent itself)."""
    return _stop_event is not None and _stop_event.is_set()


def chunked(tasks: Sequence[Task], workers: int) -> Iterator[list[Task]]:
    """``tasks`` in consecutive slices of at most _MAX_CHUNK, about _CHUNKS_PER_WORKER each."""
    size = max(1, min(_MAX_CHUNK, len(tasks) // (workers * _CHUNKS_PER_WORKER)))
    for start in range(0, len(tasks), size):
        yield list(tasks[start:start + size])


def _handle_chunk(work: Work, tasks: list[Task], verify: bool) -> list[Outcome]:
    """What a worker runs: ``work`` on each task, until the parent says stop."""
    outcomes = []
    for task in tasks:
        if stop_requested():
            break
        outcomes += work(task, verify)
    return outcomes


def _init_worker(stop_event: multiprocessing.synchronize.Event) -> None:
    """Runs once in each worker process."""
    global _stop_event
    _stop_event = stop_event
    # Ctrl-C goes to the whole process group; the parent alone decides what to do (set the stop
    # event, drop the chunks not started) rather than every worker printing a traceback and
    # breaking the pool.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # blocked by _submit while the pool forked us
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    # One process per core already: torch's own threads would only compete for the same cores.
    torch.set_num_threads(1)


def _pool_context() -> multiprocessing.context.BaseContext:
    """fork on Linux: workers start in milliseconds with torch and the extension loaded.

    spawn and forkserver import torch again in every worker (a second or two
    each); Python 3.14 makes forkserver the default on Linux, so fork is asked
    for by name. Elsewhere (macOS, Windows) the platform's default is safer.
    """
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _submit(pool: ProcessPoolExecutor, *args: Any) -> Future:
    """pool.submit with SIGINT blocked: the pool forks its workers inside submit, and a Ctrl-C
    reaching a worker before its initializer ignores SIGINT would print that worker's traceback.
    Forked workers inherit the block; _init_worker lifts it once SIGINT is ignored."""
    if not hasattr(signal, "pthread_sigmask"):
        return pool.submit(*args)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return pool.submit(*args)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def run_pool(chunks: Iterator[list[Task]], work: Work, verify: bool, workers: int,
             record: Callable[[list[Outcome]], None]) -> None:
    """Runs ``work`` over every chunk in ``workers`` processes; ``record`` gets each chunk's outcomes.

    ``work`` must be a module-level function, so that it pickles by name.
    """
    pending: set[Future] = set()
    context = _pool_context()
    stop_event = context.Event()
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker,
                               initargs=(stop_event,))
    try:
        while True:
            while len(pending) < workers * _IN_FLIGHT_PER_WORKER:
                chunk = next(chunks, None)
                if chunk is None:
                    break
                pending.add(_submit(pool, _handle_chunk, work, chunk, verify))
            if not pending:
                break
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                record(future.result())
    finally:
        # Normally every chunk is done by now. After Ctrl-C, the chunks not yet started are
        # dropped and the running ones stop after their current file, which is written under a
        # temporary name and renamed, so no partial file remains under a final name.
        stop_event.set()
        pool.shutdown(wait=True, cancel_futures=True)


def run_inline(chunks: Iterator[list[Task]], work: Work, verify: bool,
               record: Callable[[list[Outcome]], None]) -> None:
    """The same as run_pool in this process: for one worker, or one task."""
    for chunk in chunks:
        for task in chunk:
            record(work(task, verify))
