"""Throughput of whole input pipelines: epochs of several DataLoaders, interleaved.

Each pipeline is a "runner": a callable that does one epoch and returns the
images it delivered and the nanoseconds it took. Every runner does one
untimed warm-up epoch (which also starts persistent workers), then
``rounds`` timed rounds, each running every runner once in an order that
rotates from round to round, so drift hits every pipeline alike. Only one
runner works at a time; the others' workers sleep. The spread of a row is
(max - min) / median of its rounds: the run-to-run noise to read its ratios
against.
"""

from __future__ import annotations

import glob
import os
import time
from typing import Any, Callable, Iterable

import numpy as np

from bench import timing

Runner = Callable[[], tuple[int, int]]


def _batch_size(batch: Any) -> int:
    """Images in a batch: the first element's length (a stacked tensor or a list of images)."""
    images = batch[0] if isinstance(batch, (tuple, list)) else batch
    return int(images.shape[0]) if hasattr(images, "shape") else len(images)


def epoch_runner(loader: Iterable, after_batch: Callable[[Any], Any] | None = None) -> Runner:
    """A runner that iterates ``loader`` once, calling ``after_batch`` on every batch (timed)."""
    def run() -> tuple[int, int]:
        images = 0
        start = time.perf_counter_ns()
        for batch in loader:
            images += _batch_size(batch)
            if after_batch is not None:
                after_batch(batch)
        return images, time.perf_counter_ns() - start
    return run


_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def _child_cpu_seconds(pid: str) -> float:
    """User + system CPU of a live child process (a DataLoader worker), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_SECOND  # utime, stime


def cpu_seconds() -> float:
    """CPU time so far of this process (all its threads) and of its live children (DataLoader
    workers, which a finished child's rusage would count only once it exits); Linux."""
    total = sum(os.times()[:2])
    for children in glob.glob("/proc/self/task/*/children"):
        try:
            with open(children, encoding="ascii") as listed:
                pids = listed.read().split()
        except OSError:
            continue  # the thread ended since the listing (torchdata's threads come and go)
        total += sum(_child_cpu_seconds(pid) for pid in pids)
    return total


def steady_runner(loader: Iterable, after_batch: Callable[[Any], Any] | None = None) -> Runner:
    """A runner like :func:`epoch_runner` that leaves out the epoch's fill: it times from the
    arrival of the second batch to that of the last, and counts the batches after the second.

    Before its first batches a loader starts threads or wakes workers (torchdata.nodes joins
    the last epoch's threads first, about 0.1 s) and waits for a whole pipeline of work; a
    training epoch's thousands of batches hide that, a benchmark's dozen do not. Why the
    second: two loaders working side by side (2 workers, 2 threads) deliver batches in
    pairs, the first two together; from the second arrival on, each loader's stream is
    counted from the end of one of its batches to the end of another. One stream (the
    ceiling's batches, one after another) is counted exactly either way. With an even
    number of batches the last pair ends the epoch together.

    The CPU time of the same span (this process and its workers, :func:`cpu_seconds`) per
    image counted goes to ``run.cpu_us_per_image``, one entry per epoch.
    """
    # The list, not ``run`` itself, in run's closure: a function that names itself is a
    # reference cycle, and the cycle would keep the loader's workers alive after its last
    # use, until a garbage collection shut them down in the middle of a later timing.
    cpu_per_image: list[float] = []

    def run() -> tuple[int, int]:
        arrivals, sizes, cpu_at_second = [], [], 0.0
        for batch in loader:
            sizes.append(_batch_size(batch))
            if after_batch is not None:
                after_batch(batch)
            arrivals.append(time.perf_counter_ns())
            if len(arrivals) == 2:
                cpu_at_second = cpu_seconds()
        cpu = cpu_seconds() - cpu_at_second
        if len(arrivals) < 4:
            raise ValueError(f"steady_runner: {len(arrivals)} batches, need at least 4")
        images = sum(sizes[2:])
        cpu_per_image.append(1e6 * cpu / images)
        return images, arrivals[-1] - arrivals[1]
    run.cpu_us_per_image = cpu_per_image  # type: ignore[attr-defined]
    run.loader = loader  # type: ignore[attr-defined]
    return run


def time_interleaved(runners: dict[str, Runner], rounds: int) -> dict[str, Any]:
    """Warm-up, then ``rounds`` rotating rounds; images/s per runner and round, and the orders."""
    warmup = {}
    for name, run in runners.items():
        images, elapsed = run()
        warmup[name] = images / (elapsed / 1e9)
    orders = timing.rotations(list(runners), rounds)
    per_round: dict[str, list[float]] = {name: [] for name in runners}
    for order in orders:
        for name in order:
            images, elapsed = runners[name]()
            per_round[name].append(images / (elapsed / 1e9))
    return {"warmup": warmup, "per_round": per_round, "orders": orders}


def summarise(name: str, rates: list[float], warmup: float) -> dict[str, Any]:
    """A row: the median images/s of the rounds, their range and spread."""
    median = float(np.median(rates))
    return {"config": name, "median_images_per_s": median, "min_images_per_s": min(rates),
            "max_images_per_s": max(rates), "spread": (max(rates) - min(rates)) / median,
            "per_round_images_per_s": rates, "warmup_images_per_s": warmup}


def table_cells(row: dict[str, Any]) -> list[str]:
    """A summarised row's first table cells: its name, median, min and max images/s, spread."""
    return [row["config"], f"{row['median_images_per_s']:.0f}", f"{row['min_images_per_s']:.0f}",
            f"{row['max_images_per_s']:.0f}", f"{100 * row['spread']:.0f}%"]
