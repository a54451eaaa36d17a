"""Interleaved timing of single calls, and the statistics every part reports.

The methods a part compares run back to back for each sample, in an order
that rotates from sample to sample, so slow drift of the machine (frequency,
other load) hits them alike. The garbage collector is off while timing, and
freeing each result is timed, so every method pays for its own memory.
"""

from __future__ import annotations

import gc
import time
from typing import Any, Callable, Sequence

import numpy as np


def time_rotating(names: Sequence[str], plan: Sequence[Any],
                  call: Callable[[str, Any], Any]) -> dict[str, list[int]]:
    """Nanoseconds of ``call(name, item)`` for every name and plan item, names rotating per item."""
    samples: dict[str, list[int]] = {name: [] for name in names}
    order = list(names)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for number, item in enumerate(plan):
            shift = number % len(order)
            for name in order[shift:] + order[:shift]:
                start = time.perf_counter_ns()
                result = call(name, item)
                del result
                samples[name].append(time.perf_counter_ns() - start)
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    """Median, p10 and p90 (numpy's linear interpolation) and the sample count."""
    p10, median, p90 = np.percentile(np.asarray(samples, dtype=np.float64), [10, 50, 90])
    return {"median": float(median), "p10": float(p10), "p90": float(p90), "n": len(samples)}


def milliseconds(samples: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """percentiles() of each method's nanosecond samples, in milliseconds (the count unchanged)."""
    return {name: {key: (value / 1e6 if key != "n" else value) for key, value in percentiles(times).items()}
            for name, times in samples.items()}


def rotations(names: Sequence[str], rounds: int) -> list[list[str]]:
    """The order of ``names`` in each round: shifted by one each time."""
    names = list(names)
    return [names[number % len(names):] + names[:number % len(names)] for number in range(rounds)]
