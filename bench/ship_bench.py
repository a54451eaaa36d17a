"""Shipping: custom_op built on the system's libjpeg-turbo against the static 3.1 build, and the wheel.

Run from the repository root:

    python -m bench ship                          # generated and real, 500x375, 800x533, 2560x1600
    python -m bench ship --images real --ship-rounds 5
    python -m bench ship --ship-make-wheel        # runs `make wheel` first when dist/ has none

1. Ratios against torchvision (decode_jpeg, which bundles libjpeg-turbo 3.1,
   then v2 ops on uint8) of three tasks, for two builds of custom_op:
     crop   a 256x256 window: decode_and_crop_jpeg against F.crop(decode_jpeg)
     rrc    a RandomResizedCrop window (drawn by torchvision's own code,
            bench/sampling.py) resized to 224: decode_and_resized_crop_jpeg
            against F.resized_crop(decode_jpeg, antialias=True)
     eval   Compose([Resize(256), CenterCrop(224)]) on custom_op.EncodedJpeg
            (DCT scaling allowed) against the same on decode_jpeg
   The builds: "2.1.5", the source checkout's JIT build on the system's
   libjpeg-turbo, and "3.1", the same sources with libjpeg-turbo 3.1.0 linked
   statically (CUSTOM_OP_JPEG_STATIC=build/libjpeg-turbo-static, what
   `make wheel` ships; the part runs `make libjpeg-static` when it is
   missing). Two builds cannot load in one process, so each round runs one
   child process per build (bench/ship_child.py; CUSTOM_OP_BUILD_DIR=
   build/bench-ship/<build>, built by its first child, reused afterwards), the
   builds' order alternating from round to round so that a change of load
   hits both. In a child every file is timed for every task and method, the
   methods rotating per call, after an untimed warm-up. A round's ratio is
   torchvision's median time over custom_op's in that child (above 1 is
   faster); the table gives the median of the rounds' ratios and their range
   (the noise), and the times' medians over all rounds. 3.1/2.1.5 is the
   median over rounds of the 3.1 child's ratio over the 2.1.5 child's (they
   ran back to back): each build against the torchvision of its own process,
   so that drifts between processes cancel.
2. The wheel (dist/custom_op-*.whl): its size; installed into a fresh venv
   that borrows this environment's torch, the import time of custom_op (after
   torch's) and the first decode (nothing compiled); its full decode against
   torchvision's decode_jpeg, one thread (both are libjpeg-turbo with SIMD, so
   a ratio well under 1 says the wheel's SIMD code does not run); against the first decode
   of a cold source checkout, i.e. a JIT build into an empty
   CUSTOM_OP_BUILD_DIR (bench/ship_wheel.py). Measured once per run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchvision.transforms import v2

from bench import images, report, sampling, ship_wheel, timing
from bench.machine import REPO_ROOT

CROP_SIZE = 256
#: (label, height, width, files option).
CASES = (("500x375", 375, 500, "ship_small"), ("800x533", 533, 800, "ship_medium"),
         ("2560x1600", 1600, 2560, "ship_large"))
SYSTEM, STATIC = "2.1.5", "3.1"
STATIC_ARCHIVE = REPO_ROOT / "build" / "libjpeg-turbo-static"
BUILDS_ROOT = REPO_ROOT / "build" / "bench-ship"
TASKS = ("crop", "rrc", "eval")
#: The wheel figures are the same for every kind of image: measured once per process.
_WHEEL_FIGURES: dict[str, Any] = {}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("ship benchmark")
    group.add_argument("--ship-small", type=int, default=4, help="500x375 files (default 4)")
    group.add_argument("--ship-medium", type=int, default=4, help="800x533 files (default 4)")
    group.add_argument("--ship-large", type=int, default=2, help="2560x1600 files (default 2)")
    group.add_argument("--ship-rounds", type=int, default=2,
                       help="rounds, each one child process per build (default 2)")
    group.add_argument("--ship-repeats", type=int, default=1,
                       help="timed calls per file, task and method in each child (default 1)")
    group.add_argument("--ship-make-wheel", action="store_true",
                       help="run `make wheel` when dist/ has no wheel (else the wheel figures are skipped)")
    group.add_argument("--ship-no-cold", action="store_true",
                       help="skip the cold source build (a compile of about a minute)")


def _static_archive() -> tuple[bool, str]:
    """Whether build/libjpeg-turbo-static holds libjpeg.a, after `make libjpeg-static` if needed."""
    if (STATIC_ARCHIVE / "lib" / "libjpeg.a").exists():
        return True, ""
    python = getattr(sys, "_base_executable", sys.executable)
    print("ship: no static libjpeg-turbo yet; running `make libjpeg-static`", flush=True)
    done = subprocess.run(["make", "libjpeg-static", f"PYTHON={python}"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=900)
    if done.returncode == 0 and (STATIC_ARCHIVE / "lib" / "libjpeg.a").exists():
        return True, ""
    return False, ("the static libjpeg-turbo 3.1 archive is missing and `make libjpeg-static` failed "
                   f"({done.stderr.strip()[-300:]}); run it, then this part again: system build only")


def _build_env(build: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("CUSTOM_OP_")}
    env.update(PYTHONPATH=str(REPO_ROOT), CUSTOM_OP_BUILD_DIR=str(BUILDS_ROOT / build))
    if build == STATIC:
        env["CUSTOM_OP_JPEG_STATIC"] = str(STATIC_ARCHIVE)
    return env


def _windows(paths: list[Path], height: int, width: int, rng: np.random.Generator) -> list[dict]:
    """Per file: a 256x256 crop at a random place and a RandomResizedCrop(224) window."""
    transform = v2.RandomResizedCrop(224)
    windows = []
    for path in paths:
        crop = [int(rng.integers(0, height - CROP_SIZE + 1)), int(rng.integers(0, width - CROP_SIZE + 1)),
                CROP_SIZE]
        windows.append({"crop": crop, "rrc": list(sampling.random_resized_crop(
            transform, images.read_encoded(path)))})
    return windows


def _job(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    cases = []
    for label, height, width, option in CASES:
        files = source.files(height, width, getattr(args, option))
        cases.append({"label": label, "recipe": files.description["recipe"],
                      "paths": [str(path) for path in files.paths],
                      "windows": _windows(files.paths, height, width, rng)})
    return {"repeats": args.ship_repeats, "cases": cases}


def _run_child(build: str, job_path: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "bench.ship_child", str(job_path)], cwd=REPO_ROOT,
                          env=_build_env(build), capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"ship child for build {build} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _rounds(builds: list[str], job_path: Path, rounds: int) -> dict[str, list[dict[str, Any]]]:
    """Every build's child results, the builds' order alternating from round to round."""
    results: dict[str, list[dict[str, Any]]] = {build: [] for build in builds}
    for order in timing.rotations(builds, rounds):
        for build in order:
            results[build].append(_run_child(build, job_path))
    return results


def _ratio(samples: dict[str, list[int]], task: str) -> float:
    return float(np.median(samples[f"{task}/torchvision"]) / np.median(samples[f"{task}/custom_op"]))


def _summarise(children: list[dict[str, Any]], label: str, task: str) -> dict[str, Any]:
    """The median of the per-round ratios (each within one process), their range, and pooled times."""
    pooled: dict[str, list[int]] = {}
    for child in children:
        for name, values in child["cases"][label].items():
            pooled.setdefault(name, []).extend(values)
    per_round = [_ratio(child["cases"][label], task) for child in children]
    return {"torchvision_ms": float(np.median(pooled[f"{task}/torchvision"])) / 1e6,
            "custom_op_ms": float(np.median(pooled[f"{task}/custom_op"])) / 1e6,
            "ratio": float(np.median(per_round)), "ratio_low": min(per_round), "ratio_high": max(per_round),
            "per_round": per_round, "samples": len(pooled[f"{task}/custom_op"])}


def _static_over_system(row: dict[str, Any]) -> float:
    """The median over rounds of 3.1's ratio over 2.1.5's: the two children of a round ran back to back."""
    return float(np.median([static / system for static, system
                            in zip(row[STATIC]["per_round"], row[SYSTEM]["per_round"])]))


def _rows(results: dict[str, list[dict[str, Any]]], job: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for case in job["cases"]:
        for task in TASKS:
            row = {"size": case["label"], "task": task,
                   **{build: _summarise(children, case["label"], task) for build, children in results.items()}}
            if STATIC in row and SYSTEM in row:
                row["static_over_system"] = _static_over_system(row)
            rows.append(row)
    return rows


def _wheel_figures(args: argparse.Namespace, jpeg: Path) -> dict[str, Any]:
    if not _WHEEL_FIGURES:
        _WHEEL_FIGURES.update(ship_wheel.measure(jpeg, args.ship_make_wheel, not args.ship_no_cold))
    return dict(_WHEEL_FIGURES)


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """Both builds' ratios on the source's files, then (once per run) the wheel's figures."""
    has_static, static_note = _static_archive()
    builds = [SYSTEM, STATIC] if has_static else [SYSTEM]
    job = _job(args, source)
    with tempfile.TemporaryDirectory(prefix="bench-ship-job-") as folder:
        job_path = Path(folder) / "job.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        results = _rounds(builds, job_path, args.ship_rounds)
    loaded = {build: sorted({child["libjpeg"] for child in children}) for build, children in results.items()}
    if has_static and loaded[STATIC] == loaded[SYSTEM]:
        raise RuntimeError(f"both builds loaded libjpeg-turbo {loaded[SYSTEM]}: the static build did not "
                           "take CUSTOM_OP_JPEG_STATIC")
    return {"config": {"images": source.kind, "rounds": args.ship_rounds, "repeats": args.ship_repeats,
                       "files": {case["label"]: len(case["paths"]) for case in job["cases"]},
                       "recipes": {case["label"]: case["recipe"] for case in job["cases"]},
                       "threads": 1, "builds": builds, "static_note": static_note,
                       "build_dirs": {build: str(BUILDS_ROOT / build) for build in builds},
                       "load_average_after_1_5_15": list(os.getloadavg())},
            "libjpeg": loaded,
            "first_call_s": {build: children[0]["load_s"] for build, children in results.items()},
            "rows": _rows(results, job),
            "install": _wheel_figures(args, Path(job["cases"][0]["paths"][0]))}


def _ratio_cell(figures: dict[str, Any] | None) -> str:
    if figures is None:
        return "-"
    return (f"{figures['ratio']:.2f}x ({figures['ratio_low']:.2f}-{figures['ratio_high']:.2f}), "
            f"{figures['custom_op_ms']:.2f} ms")


def _install_lines(install: dict[str, Any]) -> list[str]:
    lines = []
    wheel = install.get("wheel")
    if wheel is None:
        lines.append(f"Wheel: skipped: {install.get('wheel_skipped')}")
    else:
        lines.append(f"Wheel {wheel['file']}: {wheel['size_bytes'] / 1e6:.2f} MB; fresh venv install "
                     f"{wheel['install_s']:.1f} s; import custom_op {wheel['import_s'] * 1e3:.0f} ms (after "
                     f"torch {wheel['torch_import_s']:.2f} s); first decode {wheel['first_decode_s'] * 1e3:.0f} ms "
                     f"(libjpeg-turbo {wheel['libjpeg']}, compiled: {'YES' if wheel['compiled'] else 'no'}); "
                     f"full decode {wheel['full_decode_ms']:.2f} ms, {wheel['full_decode_vs_torchvision']:.2f}x "
                     f"torchvision's {wheel['torchvision_full_decode_ms']:.2f} ms (both libjpeg-turbo with SIMD; "
                     "well under 1x: the wheel's SIMD code is not running)")
    cold = install.get("cold_checkout")
    if cold is None:
        lines.append("Cold source checkout: skipped (--ship-no-cold)")
    else:
        lines.append(f"Cold source checkout (empty CUSTOM_OP_BUILD_DIR): import custom_op "
                     f"{cold['import_s'] * 1e3:.0f} ms; first decode (JIT build) {cold['first_decode_s']:.1f} s "
                     f"(libjpeg-turbo {cold['libjpeg']})")
    return lines


def format_table(result: dict[str, Any]) -> str:
    config = result["config"]
    headers = ["size", "task", "torchvision ms", f"custom_op {SYSTEM}: vs tv (range), time",
               f"custom_op {STATIC}: vs tv (range), time", f"{STATIC}/{SYSTEM}"]
    rows = [[row["size"], row["task"], f"{row[SYSTEM]['torchvision_ms']:.2f}", _ratio_cell(row.get(SYSTEM)),
             _ratio_cell(row.get(STATIC)), report.format_ratio(row.get("static_over_system"))]
            for row in result["rows"]]
    title = (f"Shipping ({config['images']} images, {config['rounds']} rounds x {config['repeats']} calls per "
             f"file; files {config['files']}; libjpeg-turbo loaded: {result['libjpeg']})")
    lines = [title, "", report.markdown_table(headers, rows, [False, False, True, True, True, True])]
    if config["static_note"]:
        lines.append(f"Note: {config['static_note']}")
    lines.append("vs tv: torchvision's median time over custom_op's in one child (above 1 is faster), median "
                 "of the rounds (range: lowest-highest round); times: medians of all rounds (torchvision: "
                 f"the {SYSTEM} children's).")
    return "\n".join([*lines, *_install_lines(result["install"])])


if __name__ == "__main__":
    report.standalone_main(sys.modules[__name__])
