"""Keeps the lane's threads out of torch while the interpreter shuts down.

Before Python 3.14, a daemon thread that wants the GIL back once finalization
has begun is ended with ``pthread_exit``, which unwinds its C++ frames. A
torch operator releases the GIL for its work and takes it back in a
destructor, which is ``noexcept``: the unwinding stops there in
``std::terminate``. The process then aborts ("terminate called without an
active exception", exit status 134) after the training script has finished,
and a job scheduler (SageMaker, torchrun) records a failure. torchdata.nodes
runs its stages on daemon threads, so a script that breaks out of a
``lane_threads`` loop and returns hit this at every exit while the loader
was still decoding ahead.

So at exit (``atexit`` runs before finalization, while daemon threads still
run) two things happen, in this order:

1. :data:`EXIT_GATE` closes: every step of the lane that runs on those
   threads passes through it; closing waits for the steps inside (a batch
   being decoded) and refuses later ones with :class:`InterpreterExiting`.
2. The threads of every graph registered with :func:`stop_at_exit` are
   stopped and joined, so that none is left to drop its last reference to a
   tensor (whose deallocation also releases the GIL) during finalization.
   torchdata.nodes has no public way to stop a graph's threads: its
   iterators' ``_shutdown`` (what their ``__del__`` calls) is used, and
   tests/test_batch_lane.py checks that the exit is clean.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import threading
import weakref
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

__all__ = ["EXIT_GATE", "InterpreterExiting", "GatedIterable", "gated", "stop_at_exit"]

T = TypeVar("T")

#: How long exit waits for lane steps in flight: a batch of large photos on one thread takes
#: seconds; a step stuck longer (a hung network read) is left behind rather than hang the exit.
EXIT_WAIT_SECONDS = 60.0


class InterpreterExiting(RuntimeError):
    """Raised in a lane thread that starts a step after the interpreter began to exit."""


class ExitGate:
    """Counts the steps inside; :meth:`close` waits for them and refuses new ones."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._inside = 0
        self._closed = False

    @contextlib.contextmanager
    def passage(self) -> Iterator[None]:
        with self._changed:
            if self._closed:
                raise InterpreterExiting("custom_op lane: the interpreter is exiting; this "
                                         "thread's step was not started")
            self._inside += 1
        try:
            yield
        finally:
            with self._changed:
                self._inside -= 1
                self._changed.notify_all()

    def close(self, timeout: float = EXIT_WAIT_SECONDS) -> bool:
        """Refuses new steps and waits for the ones inside; False if some are still inside."""
        with self._changed:
            self._closed = True
            return self._changed.wait_for(lambda: self._inside == 0, timeout)


EXIT_GATE = ExitGate()


class _Graph:
    """The nodes of one loader, consumer side first (the order their threads are stopped in)."""

    def __init__(self, nodes: Sequence[Any]) -> None:
        self.nodes = list(nodes)

    def stop_threads(self) -> None:
        for node in self.nodes:
            iterator = node
            while iterator is not None:  # a node's iterator, that iterator's, ...
                shutdown = getattr(iterator, "_shutdown", None)
                if callable(shutdown):
                    shutdown()  # sets its stop event and joins its threads
                iterator = getattr(iterator, "_it", None)


_GRAPHS: "weakref.WeakSet[_Graph]" = weakref.WeakSet()


def stop_at_exit(owner: Any, nodes: Sequence[Any]) -> None:
    """Stops the threads of ``nodes`` (consumer side first) at exit while ``owner`` lives."""
    graph = _Graph(nodes)
    owner._custom_op_exit_graph = graph  # the graph lives as long as the loader
    _GRAPHS.add(graph)


@atexit.register
def _quiesce() -> None:
    EXIT_GATE.close()
    for graph in list(_GRAPHS):
        graph.stop_threads()


def gated(function: Callable[..., T]) -> Callable[..., T]:
    """``function`` run through the gate: for the stages a daemon thread runs."""
    @functools.wraps(function)
    def through_the_gate(*args: Any, **kwargs: Any) -> T:
        with EXIT_GATE.passage():
            return function(*args, **kwargs)
    return through_the_gate


class GatedIterable:
    """``iterable`` whose every ``next`` runs through the gate (a sampler draws with torch)."""

    def __init__(self, iterable: Iterable[T]) -> None:
        self.iterable = iterable

    def __iter__(self) -> Iterator[T]:
        with EXIT_GATE.passage():
            iterator = iter(self.iterable)
        while True:
            with EXIT_GATE.passage():
                try:
                    item = next(iterator)
                except StopIteration:
                    return
            yield item

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def set_epoch(self, epoch: int) -> None:
        """Passed on, for torchdata's SamplerWrapper (which calls it if the sampler has it)."""
        if hasattr(self.iterable, "set_epoch"):
            self.iterable.set_epoch(epoch)
