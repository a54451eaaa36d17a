#!/usr/bin/env python3
"""What preparing a dataset costs: prepare's throughput per core here, and the Processing job's arithmetic.

    python sagemaker/prepare_cost.py                       # 480 files of 500x375, 8 shards, 3 rounds
    python sagemaker/prepare_cost.py --rounds 5 --instances 1 4 8 16 --vcpus 16

It cuts ``--files`` real photos to 500 x 375 (an ImageNet-sized file; the
photos and their fitting are bench/photos.py's), writes them as tar shards
with make_dataset.py's writer, and runs the command the Processing job runs
on each instance, ``python -m custom_op.prepare SHARDS OUT --quiet``, with
each worker count of ``--workers``, without and with ``--verify``, the
configurations interleaved round by round. Each run writes a new output
folder; its time is the one the summary prints (the walk, the pool, the work;
not the interpreter's start). Medians are printed per configuration, as
files/s and MB/s of JPEG input, in all and per worker process.

Then the arithmetic for ImageNet (``--dataset-files``, ``--dataset-gb``) on N
instances of ``--vcpus`` vCPUs each, from the one-worker rate per core and
the stated assumptions (``--s3-mb-per-s`` per instance for the download
before the container starts and the upload after it ends, ``--startup-s``
per job for provisioning, the image pull and the extension's build). Nothing
in that table is measured except the rate per core.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import synthetic  # noqa: E402
from bench import photos  # noqa: E402

HEIGHT, WIDTH = 375, 500
SUMMARY_TIME = re.compile(r"^time\s+([0-9.]+) s:", re.MULTILINE)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=480, help="500x375 photos (default 480)")
    parser.add_argument("--samples-per-shard", type=int, default=60)
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--rounds", type=int, default=3, help="runs per configuration (default 3)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--cache", type=Path, default=REPO / "bench" / "data",
                        help="where the photos are cut and kept (default bench/data, as make bench)")
    parser.add_argument("--dataset-files", type=int, default=1_281_167,
                        help="files to prepare (default: ImageNet's training set)")
    parser.add_argument("--dataset-gb", type=float, default=140.0,
                        help="its size in GB (default 140)")
    parser.add_argument("--vcpus", type=int, default=16, help="vCPUs per instance (ml.c5.4xlarge: 16)")
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--s3-mb-per-s", type=float, default=300.0,
                        help="assumed S3 transfer rate per instance, each way (default 300 MB/s)")
    parser.add_argument("--startup-s", type=float, default=300.0,
                        help="assumed start-up per job: provisioning, image pull, pip, build "
                             "(default 300 s)")
    return parser


def make_shards(args: argparse.Namespace, root: Path) -> tuple[int, int]:
    """Writes the photos as shards under root; returns (JPEG files, JPEG bytes)."""
    sources = photos.source_photos(args.cache)
    folder = args.cache / f"real-{HEIGHT}x{WIDTH}-q{args.quality}-420-seed0"
    paths = photos.write_photo_folder(folder, sources, args.files, HEIGHT, WIDTH, classes=("a", "b"),
                                      quality=args.quality, subsampling="4:2:0", seed=0,
                                      progressive=False)
    synthetic.write_shards(((path.read_bytes(), index % 2) for index, path in enumerate(paths)),
                           root, args.samples_per_shard)
    return len(paths), sum(path.stat().st_size for path in paths)


def run_prepare(shards: Path, output: Path, workers: int, verify: bool) -> float:
    """One run of the job's command; returns the time its summary prints, in seconds."""
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, "-m", "custom_op.prepare", str(shards), str(output), "--quiet",
               "--workers", str(workers)] + (["--verify"] if verify else [])
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"prepare_cost.py: {' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    return float(SUMMARY_TIME.search(done.stdout).group(1))


def measure(args: argparse.Namespace, shards: Path, scratch: Path) -> dict:
    """Median seconds per (workers, verify), the configurations interleaved round by round."""
    configurations = [(workers, verify) for verify in (False, True) for workers in args.workers]
    times: dict = {configuration: [] for configuration in configurations}
    for round_number in range(args.rounds):
        order = configurations if round_number % 2 == 0 else configurations[::-1]
        for workers, verify in order:
            times[(workers, verify)].append(run_prepare(shards, scratch / "out", workers, verify))
    return {configuration: statistics.median(values) for configuration, values in times.items()}


def print_measurements(medians: dict, files: int, megabytes: float, load: str) -> None:
    print(f"\npython -m custom_op.prepare over {files} JPEGs of {WIDTH}x{HEIGHT} "
          f"({megabytes:.1f} MB) in tar shards; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} logical cores, load average before the runs {load}; medians\n")
    print("| workers | verify | median s | files/s | MB/s | files/s per worker | MB/s per worker |")
    print("|--:|:--|--:|--:|--:|--:|--:|")
    for (workers, verify), seconds in medians.items():
        print(f"| {workers} | {'yes' if verify else 'no'} | {seconds:.2f} | {files / seconds:.0f} | "
              f"{megabytes / seconds:.1f} | {files / seconds / workers:.0f} | "
              f"{megabytes / seconds / workers:.1f} |")


def print_model(args: argparse.Namespace, files_per_core: dict, mb_per_core: dict) -> None:
    """Minutes for the dataset on N instances: start-up + download + prepare + upload.

    The prepare time is given twice: from the files/s per core (right if the
    dataset's files cost what these do) and from the MB/s per core (right if
    the cost follows the bytes; ImageNet's files are larger on average than
    these, so this is the longer, safer one).
    """
    gigabytes = args.dataset_gb
    print(f"\n{args.dataset_files:,} files, {gigabytes:.0f} GB, on N instances of {args.vcpus} "
          f"vCPUs at the one-worker rate per core above (assumed: it scales with vCPUs), "
          f"{args.s3_mb_per_s:.0f} MB/s from and to S3 per instance, {args.startup_s:.0f} s "
          f"start-up (assumptions, not measured)\n")
    print("| instances | verify | transfer min | prepare min (by files) | prepare min (by MB) "
          "| job min (by MB) | instance-hours (by MB) |")
    print("|--:|:--|--:|--:|--:|--:|--:|")
    for count in args.instances:
        share_mb = gigabytes * 1000 / count
        transfer = 2 * share_mb / args.s3_mb_per_s  # the prepared copy is about as large
        for verify in files_per_core:
            by_files = args.dataset_files / count / (files_per_core[verify] * args.vcpus)
            by_bytes = share_mb / (mb_per_core[verify] * args.vcpus)
            total = args.startup_s + transfer + by_bytes
            print(f"| {count} | {'yes' if verify else 'no'} | {transfer / 60:.1f} | "
                  f"{by_files / 60:.1f} | {by_bytes / 60:.1f} | {total / 60:.1f} | "
                  f"{total * count / 3600:.2f} |")


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="custom_op-prepare-cost-") as scratch_name:
        scratch = Path(scratch_name)
        files, jpeg_bytes = make_shards(args, scratch / "shards")
        run_prepare(scratch / "shards", scratch / "out", 1, False)  # warm-up: builds, caches
        medians = measure(args, scratch / "shards", scratch)
    print_measurements(medians, files, jpeg_bytes / 1e6, load)
    measured = [verify for verify in (False, True) if (1, verify) in medians]
    if measured:
        print_model(args, {verify: files / medians[(1, verify)] for verify in measured},
                    {verify: jpeg_bytes / 1e6 / medians[(1, verify)] for verify in measured})


if __name__ == "__main__":
    main()
