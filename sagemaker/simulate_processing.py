#!/usr/bin/env python3
"""The Processing job of launch_prepare.py on this machine: N instances, local folders for S3.

    python sagemaker/simulate_processing.py WORK [--instances 2] [--images 48]
    python sagemaker/simulate_processing.py WORK --shards-from SHARDS_DIR --verify

It writes shards with make_dataset.py --shards (or takes a folder of them),
deals their keys to N instance folders as ShardedByS3Key does (every object
to exactly one instance; SageMaker does not document which, so keys are
dealt round-robin in sorted order), stages the job's source_dir as
launch_prepare.py does, and runs prepare_job.py for every instance at once,
each over its own input folder into its own output folder (WORK/instance-K/
input/data and output/data, the job's two folders). Then it "uploads": the
union of the output folders goes to WORK/s3-output, as the instances'
uploads meet under one S3 prefix. Finally it runs ``python -m
custom_op.prepare`` once over all the shards (one machine) and checks that
the union is that dataset: every key present once and only once, the same
keys as the input, every shard byte for byte the one-machine run's shard
(so prepared the same way), with the same members in the same order as its
input shard, and every instance's prepare exiting 0 (with --verify: every
file verified).

WORK/report.json holds the instances' keys, exit statuses and the check's
problems; the exit status is 0 when the check passes, 1 otherwise. The
extension is built once into WORK/build (or $CUSTOM_OP_BUILD_DIR), by the
first instance; the others wait for it, as ranks on one machine do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# Run as a script, this folder is on the path already; imported (by the tests), it may not be.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import launch_prepare  # noqa: E402  (what the job's source_dir holds)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simulate_processing.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, help="folder for the simulation (made; must be empty)")
    parser.add_argument("--instances", type=int, default=2, help="instances (default 2)")
    parser.add_argument("--shards-from", type=Path, default=None,
                        help="a folder of shards to use instead of generated ones")
    parser.add_argument("--images", type=int, default=48, help="generated JPEGs (default 48)")
    parser.add_argument("--samples-per-shard", type=int, default=8, help="(default 8)")
    parser.add_argument("--workers", type=int, default=1,
                        help="prepare's workers per instance (default 1)")
    parser.add_argument("--verify", action="store_true", help="prepare --verify on each instance")
    return parser


def relative_files(root: Path) -> list[str]:
    """Every file under root, as sorted POSIX paths relative to it (S3 keys under a prefix)."""
    return sorted(path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file())


def deal_keys(keys: list[str], instances: int) -> list[list[str]]:
    """ShardedByS3Key: each key to one instance; here round-robin over the sorted keys."""
    return [sorted(keys)[number::instances] for number in range(instances)]


def copy_keys(source: Path, keys: list[str], target: Path) -> None:
    for key in keys:
        (target / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / key, target / key)


def upload(outputs: list[Path], target: Path) -> list[str]:
    """Copies every output folder into target, as the uploads to one S3 prefix; returns the
    problems: keys that more than one instance wrote (the later upload would win)."""
    problems, owner = [], {}
    for number, output in enumerate(outputs):
        for key in relative_files(output):
            if key in owner:
                problems.append(f"{key} was written by instance {owner[key]} and by {number}")
                continue
            owner[key] = number
            copy_keys(output, [key], target)
    return problems


def check_union(source: Path, union: Path, reference: Path) -> list[str]:
    """Problems with the union of the outputs against the input and a one-machine run."""
    keys, found, expected = relative_files(source), relative_files(union), relative_files(reference)
    problems = [f"missing from the outputs: {key}" for key in sorted(set(keys) - set(found))]
    problems += [f"not in the input: {key}" for key in sorted(set(found) - set(keys))]
    problems += [f"the one-machine run wrote {key}, the instances did not"
                 for key in sorted(set(expected) - set(found))]
    problems += [f"{key} differs from the one-machine run's" for key in sorted(set(found) & set(expected))
                 if (union / key).read_bytes() != (reference / key).read_bytes()]
    problems += [f"{key} holds other members than its input" for key in sorted(set(found) & set(keys))
                 if key.endswith(".tar") and member_names(union / key) != member_names(source / key)]
    return problems


def member_names(shard: Path) -> list[str] | None:
    """A tar's member names in order, or None if it is not a readable tar."""
    try:
        with tarfile.open(shard) as archive:
            return archive.getnames()
    except (tarfile.TarError, OSError):
        return None


def run_instances(args: argparse.Namespace, code: Path, folders: list[Path], env: dict) -> list[int]:
    """prepare_job.py for every instance at once; their exit statuses, each log kept."""
    running = []
    for folder in folders:
        command = [sys.executable, str(code / "prepare_job.py"), "--input",
                   str(folder / "input" / "data"), "--output", str(folder / "output" / "data"),
                   "--workers", str(args.workers)] + (["--verify"] if args.verify else [])
        log = open(folder / "job.log", "w")
        running.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env),
                        log))
    codes = []
    for process, log in running:
        codes.append(process.wait())
        log.close()
    return codes


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.instances < 1:
        raise SystemExit("simulate_processing.py: --instances must be at least 1")
    work = args.work.resolve()
    if work.exists() and any(work.iterdir()):
        raise SystemExit(f"simulate_processing.py: {work} is not empty")
    source = work / "s3-input"
    if args.shards_from is not None:
        shutil.copytree(args.shards_from, source)
    else:
        subprocess.run([sys.executable, str(HERE / "make_dataset.py"), str(source), "--shards",
                        "--images", str(args.images), "--samples-per-shard",
                        str(args.samples_per_shard)], check=True)
    code = launch_prepare.launch.stage_source_dir(work / "code", launch_prepare.PROCESSING_FILES)
    shares = deal_keys(relative_files(source), args.instances)
    folders = [work / f"instance-{number}" for number in range(args.instances)]
    for folder, keys in zip(folders, shares):
        (folder / "output" / "data").mkdir(parents=True)  # SageMaker makes it before the start
        (folder / "input" / "data").mkdir(parents=True)
        copy_keys(source, keys, folder / "input" / "data")
    env = {**os.environ,
           "CUSTOM_OP_BUILD_DIR": os.environ.get("CUSTOM_OP_BUILD_DIR", str(work / "build"))}
    env.pop("PYTHONPATH", None)  # custom_op comes from the staged code, as in the job
    codes = run_instances(args, code, folders, env)
    problems = [f"instance {number} exited with {status} (see {folder / 'job.log'})"
                for number, (folder, status) in enumerate(zip(folders, codes)) if status != 0]
    problems += upload([folder / "output" / "data" for folder in folders], work / "s3-output")
    reference = subprocess.run([sys.executable, "-m", "custom_op.prepare", str(source),
                                str(work / "one-machine"), "--quiet"] +
                               (["--verify"] if args.verify else []),
                               cwd=REPO, env={**env, "PYTHONPATH": str(REPO)})
    if reference.returncode != 0:
        problems.append(f"the one-machine run exited with {reference.returncode}")
    problems += check_union(source, work / "s3-output", work / "one-machine")
    report = {"instances": [{"keys": keys, "exit_status": status}
                            for keys, status in zip(shares, codes)],
              "keys": relative_files(source), "problems": problems}
    (work / "report.json").write_text(json.dumps(report, indent=2))
    for number, (keys, status) in enumerate(zip(shares, codes)):
        print(f"simulate_processing.py: instance {number}: {len(keys)} shards, exit status {status}")
    for problem in problems:
        print(f"simulate_processing.py: problem: {problem}")
    print(f"simulate_processing.py: {'FAILED' if problems else 'passed'}: the union of "
          f"{args.instances} outputs {'is not' if problems else 'is'} the one-machine prepared "
          f"dataset ({len(report['keys'])} shards; report in {work / 'report.json'})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
