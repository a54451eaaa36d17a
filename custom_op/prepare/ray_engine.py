"""The Ray engine: the pool's chunks of tasks run as Ray tasks, on one machine or many.

pool.py runs the work in worker processes of this machine; this module runs
the same work, the same function on the same chunks, as one Ray task per
chunk, so Ray schedules them on every CPU of a cluster. Nothing else changes:
the plan, DST's lock, the journal, the summary and the exit status stay with
the driver (tree.py), and every output is still written under a temporary
name in DST's private folder and renamed (atomic.py), so a task killed with
its node leaves nothing under a final name. Ray retries a task whose worker
died, up to ATTEMPTS attempts; the retry rewrites the chunk's outputs whole,
with the same bytes. A chunk whose every attempt died is recorded as an
error of each of its tasks, as the pool records a worker's death, and the
run goes on.

Plain Ray tasks rather than a Ray Data ``map``: the step needs a bounded
number of attempts per chunk, which Ray Data takes only through its
``ray_remote_args`` and ``ray_remote_args_fn`` (both deprecated), and it
needs none of Ray Data's streaming (each chunk's outcomes are a few bytes).

Every node must see SRC and DST at the same paths (a shared file system) and
import the same custom_op. Ray is imported only here, when the engine runs.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Optional, Sequence

from .._core._extras import require
from .items import ERROR, Outcome, Task
from .pool import chunked

#: Attempts of a chunk whose worker died (a killed node, the out-of-memory killer). A bound, so
#: that a file that always kills its worker ends as an error rather than in a loop; the pool
#: gives up at the first death, Ray at this one.
ATTEMPTS = 4


def _run_chunk(chunk: list[Task], work: Callable[[Task, bool], list[Outcome]],
               verify: bool) -> list[tuple[str, list[Outcome]]]:
    """One chunk, in a Ray worker: its tasks through ``work``, in order, with their outcomes."""
    return [(task.relative, work(task, verify)) for task in chunk]


def died_reason() -> str:
    """Why a task failed whose chunk never finished in any of its attempts."""
    return (f"its Ray task never finished: its worker died in each of {ATTEMPTS} attempts (a "
            "killed node, the out-of-memory killer), or it raised an exception (Ray's log "
            "shows it); nothing was written under its name")


def run_ray(whole: Sequence[Task], files: Sequence[Task],
            work: Callable[[Task, bool], list[Outcome]], verify: bool,
            record: Callable[[list[Outcome]], None], address: Optional[str] = None) -> None:
    """Runs ``work`` over every task as Ray tasks; ``record`` gets each task's outcomes.

    The chunks are the pool's: each shard or parquet file alone, then the
    plain files in slices (pool.chunked) sized for the cluster's CPUs.

    Args:
        whole: The shards and parquet files to prepare, each written whole by one task.
        files: The plain files to prepare.
        work: The per-task function (tree.handle_task with the run's options); it must
            pickle by reference, so that Ray's workers import it.
        verify: Passed to ``work``.
        record: Called in this process with each task's outcomes, as they come back.
        address: The Ray cluster to join (``ray.init(address=...)``); None joins the one
            RAY_ADDRESS names or that this process already joined, else starts one here.

    Raises:
        ImportError: Ray is not installed (the message names the ``ray`` extra).

    Example:
        >>> run_ray([], tasks, work, False, summary.record, address="auto")
    """
    require("ray", "python -m custom_op.prepare --engine ray")
    import ray

    if not whole and not files:
        return
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        chunks = itertools.chain(([task] for task in whole), chunked(files, cpus))
        waiting = _run_chunks(ray, list(chunks), work, verify, record)
    finally:
        if started:
            ray.shutdown()
    for task in waiting:
        record([Outcome(task.relative, ERROR, died_reason(), task.size)])


def _run_chunks(ray: Any, chunks: list[list[Task]],
                work: Callable[[Task, bool], list[Outcome]], verify: bool,
                record: Callable[[list[Outcome]], None]) -> list[Task]:
    """Records the outcomes of every chunk that finishes; the tasks of those that never did."""
    # One CPU each, as the pool's workers; a task that raised is not retried (it would raise
    # again), one whose worker died is, ATTEMPTS times in all.
    remote = ray.remote(num_cpus=1, max_retries=ATTEMPTS - 1)(_run_chunk)
    shared = ray.put(work)
    pending = {remote.remote(chunk, shared, verify): chunk for chunk in chunks}
    waiting: list[Task] = []
    while pending:
        (ready,), _ = ray.wait(list(pending), num_returns=1)
        chunk = pending.pop(ready)
        try:
            done = ray.get(ready)
        except ray.exceptions.RayError:
            waiting.extend(chunk)
            continue
        for _, outcomes in done:
            record(outcomes)
    return waiting
