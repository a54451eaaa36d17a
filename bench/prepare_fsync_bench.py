"""What fsync costs python -m custom_op.prepare: files/s with and without ``--no-fsync``.

Run from the repository root::

    python -m bench.prepare_fsync_bench [--files 100] [--rounds 7] [--scratch DIR]

It writes ``--files`` photos of 800 x 533 (Pillow, quality 90, 4:2:0) into a
scratch folder (``--scratch``: put it on the disk you will prepare on; the
default is the system's temporary folder), then runs ``python -m
custom_op.prepare SRC OUT --quiet --workers W`` with and without
``--no-fsync``, for W = 1 and 2, interleaved (the order alternates every
round), each into a new OUT, and reads the time each run's summary prints.
It prints the medians, files/s, the ratio, the machine and its load. No
asserts: timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import io
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from PIL import Image

from bench.machine import REPO_ROOT, describe_machine, format_machine

sys.path.insert(0, str(REPO_ROOT / "tests"))
from synthetic import make_photo  # noqa: E402 - the tests' generator, on their path

VARIANTS = {"fsync": [], "no-fsync": ["--no-fsync"]}


def _write_photos(folder: pathlib.Path, count: int) -> None:
    for index in range(count):
        path = folder / f"{index % 4}" / f"{index:04d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        Image.fromarray(make_photo(533, 800, index)).save(buffer, format="JPEG", quality=90)
        path.write_bytes(buffer.getvalue())


def _run_once(source: pathlib.Path, output: pathlib.Path, workers: int,
              extra: list[str]) -> float:
    """One run into a new ``output``: the seconds its summary reports."""
    shutil.rmtree(output, ignore_errors=True)
    done = subprocess.run([sys.executable, "-m", "custom_op.prepare", str(source), str(output),
                           "--quiet", "--workers", str(workers), *extra],
                          cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"prepare failed:\n{done.stdout}{done.stderr}")
    return float(re.search(r"^time +([0-9.]+) s", done.stdout, re.MULTILINE).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--scratch", default=None, help="folder for the photos and outputs")
    args = parser.parse_args()
    print(format_machine(describe_machine()))
    with tempfile.TemporaryDirectory(prefix="custom_op-fsync-", dir=args.scratch) as scratch:
        root = pathlib.Path(scratch)
        _write_photos(root / "src", args.files)
        seconds: dict[tuple[str, int], list[float]] = {}
        for round_number in range(args.rounds):
            names = list(VARIANTS) if round_number % 2 == 0 else list(reversed(VARIANTS))
            for workers in (1, 2):
                for name in names:
                    taken = _run_once(root / "src", root / "out", workers, VARIANTS[name])
                    seconds.setdefault((name, workers), []).append(taken)
    print(f"load average after: {os.getloadavg()}")
    print(f"{'workers':>7} {'variant':>9} {'median s':>9} {'files/s':>8} {'vs no-fsync':>11}")
    for workers in (1, 2):
        baseline = statistics.median(seconds[("no-fsync", workers)])
        for name in VARIANTS:
            median = statistics.median(seconds[(name, workers)])
            print(f"{workers:>7} {name:>9} {median:>9.3f} {args.files / median:>8.1f} "
                  f"{baseline / median:>10.2f}x")


if __name__ == "__main__":
    main()
