"""The worker processes: chunks of tasks over pipes, a clean Ctrl-C, deaths survived.

Tasks go to the workers in chunks (a list of Tasks each), at most two chunks
per worker at a time (one running, one waiting in its pipe), so that a
dataset of millions of files is never queued whole, no worker waits for work,
and an interrupted run drops what has not started. The work itself is a
function passed in; this module does not know what a Task holds.

Each worker says when it starts a task and sends back the task's outcomes
when it ends, so the parent always knows which file each worker is on. When
a worker dies (the kernel's out-of-memory killer, kill -9, a crash in native
code), the file it was on is reported as an error that names how it died,
the tasks it had not started go to the other workers, a new worker takes its
place, and the run ends with its summary as usual.

Workers die with their parent: on Linux the kernel sends them SIGKILL when it
dies (prctl PR_SET_PDEATHSIG), and everywhere they check, between two tasks,
that their parent is still the one that started them. A killed run therefore
leaves no process writing into DST.
"""

from __future__ import annotations

import collections
import ctypes
import multiprocessing
import multiprocessing.connection
import multiprocessing.synchronize
import os
import signal
import sys
import time
from typing import Callable, Iterator, Optional, Sequence

import torch

from .items import ERROR, Outcome, Task

# Files per chunk: large enough that the round trip through the pipes (about 0.1 ms) is small
# next to the work, small enough that the last chunks keep every core busy and that Ctrl-C,
# which lets running files finish, is answered within a second or so.
_MAX_CHUNK = 16
_CHUNKS_PER_WORKER = 8  # aim: each worker takes this many chunks, so the load balances
_IN_FLIGHT_PER_WORKER = 2  # chunks given to a worker: the one it runs and the next one
# Workers that die before starting any task, in a row: something is wrong with starting them
# (not with a file), and starting more would loop for ever.
_MAX_DEATHS_BEFORE_WORK = 8
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>

Work = Callable[[Task, bool], list[Outcome]]

# Set in each worker: the parent sets it when it stops the run early (Ctrl-C, an error), so that
# workers stop between two files instead of finishing the chunks they hold. None in the parent.
_stop_event: Optional[multiprocessing.synchronize.Event] = None
# True while run_inline does the work in this process, whose Ctrl-C is a KeyboardInterrupt.
_running_inline = False
# A worker's message that it starts the next task of its chunk (outcomes are lists).
_STARTED = "started"
# What reading from a pipe whose other end died raises. Pipes are Unix socket pairs: a process
# that dies with a chunk still unread in its end makes the kernel reset the connection, so the
# reader gets ConnectionResetError (after every message sent before the death) instead of EOF.
_PEER_GONE = (EOFError, ConnectionResetError)


#: Tests only: a worker (or run_inline) that has finished this many tasks (or shard members)
#: waits until the run is stopped, so that a test's Ctrl-C lands at a known point however
#: loaded the machine is (tests/_interrupt.py). Unset, nothing waits.
HOLD_AFTER_VARIABLE = "CUSTOM_OP_PREPARE_TEST_HOLD_AFTER"
_HOLD_SECONDS = 600.0  # a test that never interrupts still ends


def stop_requested() -> bool:
    """Whether the parent asked the workers to stop (always False in the parent itself)."""
    return _stop_event is not None and _stop_event.is_set()


def hold_for_test(done: int) -> None:
    """After ``done`` pieces of work in this worker (or in run_inline): waits for the run to be
    stopped when a test asked for it (HOLD_AFTER_VARIABLE); returns at once otherwise."""
    wanted = os.environ.get(HOLD_AFTER_VARIABLE)
    if wanted is None or done < int(wanted):
        return
    if _stop_event is not None:
        _stop_event.wait(_HOLD_SECONDS)
    elif _running_inline:
        time.sleep(_HOLD_SECONDS)  # the Ctrl-C's KeyboardInterrupt ends the wait


def chunked(tasks: Sequence[Task], workers: int) -> Iterator[list[Task]]:
    """``tasks`` in consecutive slices of at most _MAX_CHUNK, about _CHUNKS_PER_WORKER each."""
    size = max(1, min(_MAX_CHUNK, len(tasks) // (workers * _CHUNKS_PER_WORKER)))
    for start in range(0, len(tasks), size):
        yield list(tasks[start:start + size])


def _die_with_parent(parent: int) -> None:
    """Has the kernel kill this process when its parent dies (Linux), and exits now if it
    already has (the signal is only sent for deaths after the request)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl (an unusual libc): the check between tasks remains
    if os.getppid() != parent:
        os._exit(1)


def _init_worker(stop_event: multiprocessing.synchronize.Event, parent: int) -> None:
    """Runs once in each worker process, before any task."""
    global _stop_event
    _die_with_parent(parent)
    _stop_event = stop_event
    # Ctrl-C goes to the whole process group; the parent alone decides what to do (set the stop
    # event, drop the chunks not started) rather than every worker printing a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # blocked by _start while the parent forked us
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    # One process per core already: torch's own threads would only compete for the same cores.
    torch.set_num_threads(1)


def _worker_main(connection: multiprocessing.connection.Connection, work: Work, verify: bool,
                 stop_event: multiprocessing.synchronize.Event, parent: int) -> None:
    """A worker's life: chunks in, a _STARTED and the outcomes of each task out, until None."""
    _init_worker(stop_event, parent)
    done = 0  # tasks finished, for hold_for_test
    while True:
        try:
            chunk = connection.recv()
        except _PEER_GONE:
            return  # the parent closed the pipe, or died
        if chunk is None:
            return
        for task in chunk:
            if stop_requested() or os.getppid() != parent:
                return
            connection.send(_STARTED)
            outcomes = work(task, verify)
            connection.send(outcomes)
            done += 1
            if not task.is_whole:  # a shard or parquet file holds between its members instead
                hold_for_test(done)


def _pool_context() -> multiprocessing.context.BaseContext:
    """fork on Linux: workers start in milliseconds with torch and the extension loaded.

    spawn and forkserver import torch again in every worker (a second or two
    each); Python 3.14 makes forkserver the default on Linux, so fork is asked
    for by name. Elsewhere (macOS, Windows) the platform's default is safer.
    """
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def death_reason(exitcode: Optional[int]) -> str:
    """Why a worker's file failed, from the worker's exit code (negative: killed by a signal)."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        how = f"killed by {name}"
        if -exitcode == signal.SIGKILL:
            how += ", as the kernel's out-of-memory killer does"
    else:
        how = f"exit status {exitcode}"
    return (f"the worker process died while handling it ({how}); nothing was written under "
            "its name")


class _Worker:
    """One worker process, its pipe, and the chunks it holds (the first one running)."""

    def __init__(self, context: multiprocessing.context.BaseContext, work: Work, verify: bool,
                 stop_event: multiprocessing.synchronize.Event) -> None:
        self.connection, child = context.Pipe()
        self.process = context.Process(
            target=_worker_main, args=(child, work, verify, stop_event, os.getpid()),
            daemon=True)
        _start(self.process)
        child.close()  # the worker's end: this process keeps only its own
        self.chunks: collections.deque[list[Task]] = collections.deque()
        self.finished = 0  # tasks of chunks[0] whose outcomes came back
        self.started = False  # whether chunks[0][finished] has started
        self.worked = False  # whether it ever started a task

    def give(self, chunk: list[Task]) -> None:
        self.chunks.append(chunk)
        try:
            self.connection.send(chunk)
        except OSError:
            pass  # it died: its sentinel says so, and the chunk is taken back then

    def receive(self, record: Callable[[list[Outcome]], None]) -> None:
        """Handles every message waiting in the pipe; one of _PEER_GONE when the worker is gone."""
        while self.connection.poll():
            message = self.connection.recv()
            if message == _STARTED:
                self.started = self.worked = True
                continue
            record(message)
            self.started = False
            self.finished += 1
            if self.finished == len(self.chunks[0]):
                self.chunks.popleft()
                self.finished = 0

    def take_back(self) -> tuple[Optional[Task], list[list[Task]]]:
        """After its death: the task it was on (None if between tasks), and those not started."""
        if not self.chunks:
            return None, []
        first = self.chunks.popleft()
        position = self.finished + self.started
        lost = first[self.finished] if self.started else None
        rest = ([first[position:]] if position < len(first) else []) + list(self.chunks)
        self.chunks.clear()
        return lost, rest

    def stop(self) -> None:
        try:
            self.connection.send(None)
        except OSError:
            pass  # already gone
        self.process.join()
        self.connection.close()


def _start(process: multiprocessing.process.BaseProcess) -> None:
    """process.start() with SIGINT blocked: a Ctrl-C reaching a worker before it ignores SIGINT
    would print that worker's traceback. The worker inherits the block; _init_worker lifts it."""
    if not hasattr(signal, "pthread_sigmask"):
        process.start()
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def run_pool(chunks: Iterator[list[Task]], work: Work, verify: bool, workers: int,
             record: Callable[[list[Outcome]], None]) -> None:
    """Runs ``work`` over every chunk in ``workers`` processes; ``record`` gets each task's
    outcomes.

    A worker's death is recorded as an ERROR outcome of the task it was on,
    and the run goes on with a new worker.

    Raises:
        RuntimeError: workers keep dying before they start any task.
    """
    context = _pool_context()
    stop_event = context.Event()
    crew: list[_Worker] = []
    returned: collections.deque[list[Task]] = collections.deque()  # taken back from the dead
    deaths_before_work = 0
    try:
        crew = [_Worker(context, work, verify, stop_event) for _ in range(workers)]
        while True:
            for worker in crew:
                while len(worker.chunks) < _IN_FLIGHT_PER_WORKER:
                    chunk = returned.popleft() if returned else next(chunks, None)
                    if chunk is None:
                        break
                    worker.give(chunk)
            busy = [worker for worker in crew if worker.chunks]
            if not busy:
                break
            ready = set(multiprocessing.connection.wait(
                [worker.connection for worker in busy]
                + [worker.process.sentinel for worker in busy]))
            for worker in busy:
                if not _alive_after_reading(worker, ready, record):
                    returned.extendleft(reversed(_bury(worker, record)))
                    deaths_before_work = 0 if worker.worked else deaths_before_work + 1
                    if deaths_before_work >= _MAX_DEATHS_BEFORE_WORK:
                        raise RuntimeError(
                            f"{deaths_before_work} worker processes in a row died before "
                            f"starting any work (the last: "
                            f"{death_reason(worker.process.exitcode)})")
                    crew[crew.index(worker)] = _Worker(context, work, verify, stop_event)
    finally:
        # Normally every chunk is done by now. After Ctrl-C, the chunks not yet started are
        # dropped and the running ones stop after their current file, which is written under a
        # temporary name and renamed, so no partial file remains under a final name.
        stop_event.set()
        for worker in crew:
            if not worker.connection.closed:
                worker.stop()


def _alive_after_reading(worker: _Worker, ready: set,
                         record: Callable[[list[Outcome]], None]) -> bool:
    """Records what ``worker`` sent, if ``wait`` said so; False when it has died."""
    if worker.process.sentinel not in ready and worker.connection not in ready:
        return True
    try:
        worker.receive(record)
    except _PEER_GONE:
        return False  # the pipe closed or was reset: the process is gone or going
    return worker.process.sentinel not in ready


def _bury(worker: _Worker, record: Callable[[list[Outcome]], None]) -> list[list[Task]]:
    """After a worker's death: fails the task it was on; the chunks it had not started."""
    worker.process.join()
    worker.connection.close()
    lost, rest = worker.take_back()
    if lost is not None:
        record([Outcome(lost.relative, ERROR, death_reason(worker.process.exitcode), lost.size)])
    return rest


def run_inline(chunks: Iterator[list[Task]], work: Work, verify: bool,
               record: Callable[[list[Outcome]], None]) -> None:
    """The same as run_pool in this process, for one worker (a kill of it ends the run)."""
    global _running_inline
    _running_inline = True
    try:
        done = 0  # tasks finished, for hold_for_test
        for chunk in chunks:
            for task in chunk:
                record(work(task, verify))
                done += 1
                if not task.is_whole:  # a shard or parquet file holds between its members
                    hold_for_test(done)
    finally:
        _running_inline = False
