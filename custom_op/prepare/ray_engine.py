"""The Ray engine: the pool's chunks of tasks run as a Ray Data dataset, on one machine or many.

pool.py runs the work in worker processes of this machine; this module runs
the same work, the same function on the same chunks, as one ``map`` step of
a Ray Data dataset whose rows are the chunks (one block each), so Ray
schedules them on every CPU of a cluster. Nothing else changes: the plan,
DST's lock, the journal, the summary and the exit status stay with the
driver (tree.py), and every output is still written under a temporary name
in DST's private folder and renamed (atomic.py), so a task killed with its
node leaves nothing under a final name. Ray retries a task whose worker
died; the retry rewrites the chunk's outputs whole, with the same bytes. A
chunk whose every attempt died is recorded as an error of each task whose
outcomes never came back, as the pool records a worker's death, and the run
goes on.

Every node must see SRC and DST at the same paths (a shared file system) and
import the same custom_op. Ray is imported only here, when the engine runs.
"""

from __future__ import annotations

import itertools
import pickle
from typing import Any, Callable, Optional, Sequence

from .._core._extras import require
from .items import ERROR, Outcome, Task
from .pool import chunked

#: Attempts of a chunk whose worker died (a killed node, the out-of-memory killer). Ray Data
#: retries its tasks without end by default, which would loop on a file that always kills its
#: worker; the pool gives up at the first death, Ray at the fourth.
ATTEMPTS = 4

_CHUNK, _OUTCOMES = "chunk", "outcomes"


def _run_chunk(row: dict[str, Any], work: Callable[[Task, bool], list[Outcome]],
               verify: bool) -> dict[str, Any]:
    """One row of the dataset, in a Ray worker: the chunk's tasks through ``work``, in order."""
    chunk: list[Task] = pickle.loads(row[_CHUNK])
    done = [(task.relative, work(task, verify)) for task in chunk]
    return {_OUTCOMES: pickle.dumps(done)}


def _retries() -> dict[str, int]:
    """The Ray task options of every chunk (Ray Data takes them from a function)."""
    return {"max_retries": ATTEMPTS - 1}


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
        rows = [{_CHUNK: pickle.dumps(chunk)} for chunk in chunks]
        waiting = _run_rows(ray, rows, work, verify, record)
    finally:
        if started:
            ray.shutdown()
    for task in waiting:
        record([Outcome(task.relative, ERROR, died_reason(), task.size)])


def _run_rows(ray: Any, rows: list[dict[str, bytes]], work: Callable[[Task, bool], list[Outcome]],
              verify: bool, record: Callable[[list[Outcome]], None]) -> list[Task]:
    """Records the outcomes of every chunk that finishes; the tasks of those that never did."""
    dataset = ray.data.from_items(rows, override_num_blocks=len(rows))
    # This dataset's own settings (a copy of the process's): a chunk that dies in every
    # attempt is dropped rather than ending the run, and the bar is prepare's, not Ray's.
    dataset.context.max_errored_blocks = -1
    dataset.context.enable_progress_bars = False
    prepared = dataset.map(_run_chunk, fn_kwargs={"work": work, "verify": verify},
                           num_cpus=1, ray_remote_args_fn=_retries)
    waiting = {task.relative: task for row in rows for task in pickle.loads(row[_CHUNK])}
    for row in prepared.iter_rows():
        for relative, outcomes in pickle.loads(row[_OUTCOMES]):
            waiting.pop(relative, None)
            record(outcomes)
    return list(waiting.values())
