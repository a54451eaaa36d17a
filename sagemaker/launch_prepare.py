#!/usr/bin/env python3
"""Prepares a dataset of tar shards in S3 with a SageMaker Processing job on many instances.

    python sagemaker/launch_prepare.py --input-s3 s3://BUCKET/shards/train \\
        --output-s3 s3://BUCKET/shards-prepared/train --role ROLE_ARN \\
        --instance-type ml.c5.4xlarge --instance-count 8 --verify

Every instance runs prepare_job.py, which runs ``python -m custom_op.prepare
/opt/ml/processing/input/data /opt/ml/processing/output/data`` over its share
of the input's S3 objects: the input is distributed ``ShardedByS3Key`` (each
object to one instance, about 1/N of them each), and every instance's output
folder is uploaded to the same ``--output-s3`` prefix when the job ends, so
the shards come out at the same relative keys as they went in. Give at least
as many shards as instances (an instance without any does nothing), and
shards of similar sizes (the slowest instance sets the job's length).

The job is built with the SageMaker Python SDK v3 (``FrameworkProcessor``
with ``ProcessingInput``/``ProcessingS3Input`` and
``ProcessingOutput``/``ProcessingS3Output``), or with v2's
``PyTorchProcessor`` when v2 is what is installed; sagemaker/sdk_jobs.py does
that. The image is the SageMaker PyTorch image the training launcher uses
(CPU or GPU variant by instance type), or ``--image-uri``. Its source_dir
holds prepare_job.py, a requirements.txt (tqdm, which prepare imports, and
custom_op's wheel) and the wheel, which the container installs before the
job starts: nothing is compiled or apt-get installed in the job. The options
shared with launch.py (image, role, limits, staging, --wheel, --from-source,
--dry-run, --no-submit) work the same way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Run as a script, this folder is on the path already; imported, it may not be.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import launch  # noqa: E402  (sagemaker/launch.py: the options, staging and flow it shares)
#: What the job's source_dir holds next to the custom_op package: name in the job -> file here.
PROCESSING_FILES = {"prepare_job.py": HERE / "prepare_job.py",
                    "requirements.txt": HERE / "requirements-prepare.txt"}
#: Where the job sees its share of the shards and where it writes (see prepare_job.py).
INPUT_PATH = "/opt/ml/processing/input/data"
OUTPUT_PATH = "/opt/ml/processing/output/data"
DEFAULT_INSTANCE_TYPE = "ml.c5.4xlarge"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="launch_prepare.py",
        description="Prepare tar shards in S3 with python -m custom_op.prepare on several "
                    "instances (a SageMaker Processing job, ShardedByS3Key).")
    parser.add_argument("--input-s3", required=True,
                        help="S3 prefix of the shards (*.tar; other objects are copied)")
    parser.add_argument("--output-s3", required=True,
                        help="S3 prefix for the prepared shards (same relative keys)")
    parser.add_argument("--instance-type", default=DEFAULT_INSTANCE_TYPE,
                        help=f"processing instance type (default {DEFAULT_INSTANCE_TYPE})")
    parser.add_argument("--instance-count", type=int, default=1, help="instances (default 1)")
    parser.add_argument("--workers", type=int, default=None,
                        help="prepare's worker processes per instance (default: its CPU count)")
    parser.add_argument("--verify", action="store_true",
                        help="prepare --verify: decode every input and output in full and "
                             "require equal pixels (two extra full decodes per file)")
    # An instance holds its share twice (the shards and their prepared copies).
    launch.add_job_options(parser, base_job_name="custom-op-prepare", volume_size=100)
    return parser


def check_arguments(args: argparse.Namespace) -> None:
    for option, uri in (("--input-s3", args.input_s3), ("--output-s3", args.output_s3)):
        if not uri.startswith("s3://") or len(uri) <= len("s3://"):
            raise SystemExit(f"launch_prepare.py: {option} wants an S3 URI (s3://BUCKET/PREFIX), "
                             f"got {uri!r}")
    if args.input_s3.rstrip("/") == args.output_s3.rstrip("/"):
        raise SystemExit(f"launch_prepare.py: --output-s3 must differ from --input-s3 "
                         f"({args.input_s3}): the prepared shards would overwrite the originals")
    if args.instance_count < 1:
        raise SystemExit("launch_prepare.py: --instance-count must be at least 1")
    if args.workers is not None and args.workers < 1:
        raise SystemExit(f"launch_prepare.py: --workers must be at least 1, got {args.workers}")


def job_arguments(args: argparse.Namespace) -> list[str]:
    """prepare_job.py's arguments in the job."""
    arguments = ["--workers", str(args.workers)] if args.workers is not None else []
    if args.verify:
        arguments.append("--verify")
    return arguments


def plan_job(args: argparse.Namespace, environment: dict, source_dir: Path,
             default_image: tuple[str, str]) -> dict:
    """The job, independent of the SDK version: what --dry-run prints and sdk_jobs builds."""
    return {
        "source_dir": str(source_dir),
        "entry_script": "prepare_job.py",
        "requirements": "requirements.txt",
        "image": launch.image_plan(args, default_image),
        "role": args.role,
        "instance_type": args.instance_type,
        "instance_count": args.instance_count,
        "volume_size_in_gb": args.volume_size,
        "max_runtime_in_seconds": args.max_run,
        "environment": environment,
        "base_job_name": args.base_job_name,
        "arguments": job_arguments(args),
        "input": {"name": "shards", "s3_uri": args.input_s3, "local_path": INPUT_PATH,
                  "distribution": "ShardedByS3Key"},
        "output": {"name": "prepared", "s3_uri": args.output_s3, "local_path": OUTPUT_PATH,
                   "upload_mode": "EndOfJob"},
    }


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    check_arguments(args)
    environment = launch.environment_from(args.env)
    command = f"python -m custom_op.prepare {INPUT_PATH} {OUTPUT_PATH}"
    launch.run_plan(args, "processing", PROCESSING_FILES,
                    lambda source_dir, default_image: plan_job(args, environment, source_dir,
                                                               default_image),
                    {"command_on_each_instance": command},
                    announce=f"{args.instance_count} x {args.instance_type}, each running "
                             f"{command} over its share of {args.input_s3}")


if __name__ == "__main__":
    main()
