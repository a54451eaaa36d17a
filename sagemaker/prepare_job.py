#!/usr/bin/env python3
"""The SageMaker Processing job's entry point: prepares this instance's share of the shards.

    python prepare_job.py [--workers N] [--verify]

Each instance of the job (started by launch_prepare.py) finds its share of
the input's S3 objects in /opt/ml/processing/input/data (``ShardedByS3Key``:
every object goes to one instance), and whatever it writes to
/opt/ml/processing/output/data is uploaded to the output's S3 prefix when
the job ends; the instances' outputs meet there, at the same relative paths
as their inputs. The steps:

1. ``python -m custom_op.build``: find custom_op's native module (the one
   the wheel installed before the job started, which builds nothing; with
   launch_prepare.py --from-source, a build the image carries or one made
   now) and check that it loads and decodes; a failure stops the job here,
   once, with the reason, rather than in every worker of step 2;
2. ``python -m custom_op.prepare INPUT OUTPUT --quiet`` with ``--workers``
   and ``--verify``: its summary goes to the job's log, its exit status is the
   job's (1 fails the job: a shard refused or a file that failed verification).

The data sits one level below /opt/ml/processing/input because the SDK
mounts the job's code at /opt/ml/processing/input/code (and its launcher
script at .../entrypoint): prepare would otherwise walk and copy them.
``--input`` and ``--output`` change the folders, for a local run
(simulate_processing.py). custom_op is the installed wheel, or found next to
this file when source_dir holds its sources (--from-source).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
INPUT = "/opt/ml/processing/input/data"
OUTPUT = "/opt/ml/processing/output/data"
#: Where SageMaker describes the job's instances (current_host, hosts).
RESOURCE_CONFIG = Path("/opt/ml/config/resourceconfig.json")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prepare_job.py", description=__doc__.splitlines()[0])
    parser.add_argument("--input", default=INPUT, help=f"this instance's shards (default {INPUT})")
    parser.add_argument("--output", default=OUTPUT,
                        help=f"where their prepared copies go (default {OUTPUT})")
    parser.add_argument("--workers", type=int, default=None,
                        help="prepare's worker processes (default: prepare's own, the CPU count)")
    parser.add_argument("--verify", action="store_true",
                        help="decode every input and output in full and require equal pixels")
    return parser


def log(message: str) -> None:
    print(f"prepare_job.py: {message}", flush=True)


def instance_name(config: Path = RESOURCE_CONFIG) -> str:
    """'algo-1 of 2' inside a job, 'this machine' elsewhere."""
    try:
        resources = json.loads(config.read_text())
        return f"{resources['current_host']} of {len(resources['hosts'])}"
    except (OSError, ValueError, KeyError):
        return "this machine"


def share(folder: Path) -> str:
    """'N files, M MB' under folder."""
    files = [path for path in folder.rglob("*") if path.is_file()]
    return f"{len(files)} files, {sum(path.stat().st_size for path in files) / 1e6:.1f} MB"


def custom_op_env() -> dict[str, str]:
    """The environment with custom_op (next to this file) importable by ``python -m``."""
    paths = [str(HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def prepare_command(args: argparse.Namespace) -> list[str]:
    command = [sys.executable, "-m", "custom_op.prepare", args.input, args.output, "--quiet"]
    if args.workers is not None:
        command += ["--workers", str(args.workers)]
    return command + (["--verify"] if args.verify else [])


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    source = Path(args.input)
    if not source.is_dir():
        log(f"error: the input folder {source} does not exist (is the job's input mounted "
            f"there?)")
        return 2
    log(f"{instance_name()}: {share(source)} in {source}")
    env = custom_op_env()
    build = subprocess.run([sys.executable, "-m", "custom_op.build"], env=env)
    if build.returncode != 0:
        log("error: custom_op's extension could not be built or loaded (above); nothing was "
            "prepared")
        return build.returncode
    command = prepare_command(args)
    log(" ".join(command[1:]))
    return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
