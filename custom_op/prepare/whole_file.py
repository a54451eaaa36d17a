"""A whole-file task (a tar shard, a parquet file) run to its outcomes, the same way for both.

A worker writes such a file in one piece of work: its members' outcomes, then its own. What
can go wrong is also the same for both: the format's own refusal (nothing is written under the
file's name, the reason is listed), a damaged file the reader finds mid-way, any other error,
and the parent's request to stop, after which the task reports nothing (its temporary output is
dropped and the file is left for the rerun).
"""

from __future__ import annotations

import os
import time
from typing import Callable

from .items import COPIED, ERROR, SHARD_REFUSED, Outcome, Task, describe


class Interrupted(Exception):
    """The parent asked the workers to stop; the file's temporary output is dropped."""


def _never(error: Exception) -> bool:
    return False


def whole_file_outcomes(task: Task, write: Callable[[list[Outcome], float], Outcome],
                        refusal: type[Exception],
                        damaged: Callable[[Exception], bool] = _never) -> list[Outcome]:
    """Runs ``write(outcomes, start)``, which appends its members' outcomes and returns the
    file's; returns them all, the file's last and timed from here.

    Never raises for a bad file: ``refusal`` (the message is the reason) and an error that
    ``damaged`` recognises refuse it; any other error is listed as one. A file copied whole
    (COPIED) stands alone: its members were not rewritten, so none of them is listed.
    """
    start = time.perf_counter()
    outcomes: list[Outcome] = []
    try:
        os.makedirs(os.path.dirname(task.destination), exist_ok=True)
        written = write(outcomes, start)
    except Interrupted:
        return []
    except Exception as error:  # noqa: BLE001 - one unreadable file must not end a long run
        refused = isinstance(error, refusal)
        kind = SHARD_REFUSED if refused or damaged(error) else ERROR
        return [Outcome(task.relative, kind, str(error) if refused else describe(error), task.size,
                        seconds=time.perf_counter() - start)]
    if written.kind == COPIED:
        return [written]
    return outcomes + [written._replace(seconds=time.perf_counter() - start)]
