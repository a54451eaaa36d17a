"""Which epoch an execution of a Ray Data dataset is: the count of the executions before it.

Ray Data counts the executions of a dataset in its ``DataContext`` (the count
grows by one when an execution ends, however it ends short of an error), and
ships that context with every task it starts, on any node, actors' tasks
included; ``FileShuffleConfig(seed, reseed_after_execution=True)`` draws each
execution's file order from it. The decode step reads the same count inside
each actor's call, so the epoch needs no message from the driver: under Ray
Train, whose split coordinator re-executes the dataset once per epoch in an
actor of its own, the driver never sees the executions at all. Ray keeps the
count in a private field (``_execution_idx``, the one Ray's own seeded
readers use), so it is read here alone, and its absence is an error that
says what to pass instead.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["execution_index", "epoch_of_execution"]


def execution_index(context: Optional[Any] = None) -> int:
    """The number of executions ``context`` counted before the current one.

    Args:
        context: A ``ray.data.DataContext``; None: the one Ray Data installed for the task
            running now (in an actor's call: the executing dataset's), else the process's.

    Returns:
        The count, an int >= 0.

    Raises:
        RuntimeError: This Ray keeps no such count (a Ray Data other than the versions
            custom_op is tested with); the message says to pass ``epoch=``.

    Example:
        >>> execution_index(files.context)   # 0 before the first execution
    """
    if context is None:
        from ray.data import DataContext

        context = DataContext.get_current()
    count = getattr(context, "_execution_idx", None)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise RuntimeError("custom_op.ray: this Ray Data counts no executions in its DataContext "
                           f"(_execution_idx is {count!r}), so the epoch cannot follow them: pass "
                           "epoch= for each epoch's dataset")
    return count


def epoch_of_execution(executions_before: int) -> int:
    """The epoch the current execution decodes: the executions counted since the step was added.

    Args:
        executions_before: The count when the decode step was added to the dataset
            (decode_batches reads it in the driver); its first execution is epoch 0.

    Returns:
        The epoch, an int >= 0.

    Raises:
        RuntimeError: The count is below ``executions_before`` (a context other than the
            dataset's), or Ray keeps none (as :func:`execution_index`).

    Example:
        >>> epoch_of_execution(0)   # in an actor's call of the dataset's third execution: 2
    """
    count = execution_index()
    if count < executions_before:
        raise RuntimeError(f"custom_op.ray: this execution is number {count} of its DataContext, "
                           f"but the decode step was added after {executions_before}: the "
                           "dataset runs with another context than the one it was built with; "
                           "pass epoch=")
    return count - executions_before
