#!/usr/bin/env python3
"""Starts sagemaker/train.py as a SageMaker training job (SageMaker Python SDK v2).

    python sagemaker/launch.py --train-s3 s3://BUCKET/PREFIX/train --role ROLE_ARN \\
        --instance-type ml.g5.12xlarge --instance-count 1 -- --epochs 5 --batch-size 64

Arguments after ``--`` are train.py's hyperparameters, checked here against
train.py's own parser and passed to the estimator, which hands them to
train.py as ``--name value``.

The job's source_dir is a staging folder holding train.py, requirements.txt
and the custom_op package's sources (.py, .cpp, csrc/*.h; no build products):
the training container builds custom_op's native extension when train.py
imports it, against the container's own PyTorch.

Distribution: with more than one GPU in all (instance count x GPUs per
instance), ``distribution={"torch_distributed": {"enabled": True}}``: the
container starts train.py with torchrun, one rank per GPU on each instance.
With one GPU, or one CPU instance, train.py runs as a single plain process
(on a CPU instance its DataLoader workers use the cores). Several CPU
instances are refused: the SDK accepts torch_distributed only on GPU and
Trainium instances, and without a launcher every instance would run its own
independent copy of the whole job.

``--dry-run`` prints the estimator's configuration and the source_dir's files
as JSON and exits, without importing the SDK or contacting AWS.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PACKAGE = REPO / "custom_op"
#: What launch.py puts in source_dir (top level).
STAGED_NAMES = {"train.py", "requirements.txt", "custom_op"}

#: GPUs per instance of common SageMaker training instance types.
GPUS_PER_INSTANCE = {
    "ml.p3.2xlarge": 1, "ml.p3.8xlarge": 4, "ml.p3.16xlarge": 8, "ml.p3dn.24xlarge": 8,
    "ml.p4d.24xlarge": 8, "ml.p4de.24xlarge": 8, "ml.p5.48xlarge": 8,
    "ml.g4dn.xlarge": 1, "ml.g4dn.2xlarge": 1, "ml.g4dn.4xlarge": 1, "ml.g4dn.8xlarge": 1,
    "ml.g4dn.16xlarge": 1, "ml.g4dn.12xlarge": 4,
    "ml.g5.xlarge": 1, "ml.g5.2xlarge": 1, "ml.g5.4xlarge": 1, "ml.g5.8xlarge": 1,
    "ml.g5.16xlarge": 1, "ml.g5.12xlarge": 4, "ml.g5.24xlarge": 4, "ml.g5.48xlarge": 8,
    "ml.g6.xlarge": 1, "ml.g6.2xlarge": 1, "ml.g6.4xlarge": 1, "ml.g6.8xlarge": 1,
    "ml.g6.16xlarge": 1, "ml.g6.12xlarge": 4, "ml.g6.24xlarge": 4, "ml.g6.48xlarge": 8,
    "local": 0,  # SageMaker local mode on a CPU machine
}
#: Instance families without GPUs (ml.c5.*, ml.m5.*, ...).
CPU_FAMILY_PREFIXES = ("c", "m", "r", "t")
#: Hyperparameters SageMaker provides through the environment instead.
SET_BY_SAGEMAKER = ("train", "model-dir", "output-data-dir")
DEFAULT_INSTANCE_TYPE = "ml.g5.xlarge"
DEFAULT_FRAMEWORK_VERSION = "2.5.1"
DEFAULT_PY_VERSION = "py311"
SDK_REQUIREMENT = "sagemaker>=2.200,<3"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="launch.py",
        usage="%(prog)s [options] [-- train.py hyperparameters, e.g. --epochs 5]",
        description="Start sagemaker/train.py as a SageMaker training job with the PyTorch "
                    "estimator of the SageMaker Python SDK v2.")
    parser.add_argument("--instance-type", default=DEFAULT_INSTANCE_TYPE,
                        help=f"training instance type (default {DEFAULT_INSTANCE_TYPE})")
    parser.add_argument("--instance-count", type=int, default=1, help="instances (default 1)")
    parser.add_argument("--gpus-per-instance", type=int, default=None,
                        help="GPUs per instance, for types missing from the built-in table")
    parser.add_argument("--framework-version", default=DEFAULT_FRAMEWORK_VERSION,
                        help=f"PyTorch version of the SageMaker training image "
                             f"(default {DEFAULT_FRAMEWORK_VERSION})")
    parser.add_argument("--py-version", default=DEFAULT_PY_VERSION,
                        help=f"Python version of that image (default {DEFAULT_PY_VERSION})")
    parser.add_argument("--image-uri", default=None,
                        help="a custom training image (e.g. one with libjpeg-turbo's headers, or "
                             "with custom_op prebuilt) instead of the SageMaker PyTorch image")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="environment variable for the job, e.g. CUSTOM_OP_BUILD_DIR=... "
                             "(repeatable)")
    parser.add_argument("--train-s3", default=os.environ.get("CUSTOM_OP_TRAIN_S3"),
                        help="S3 URI of the training images, an ImageFolder tree "
                             "(<class>/<image>.jpg); the job's 'train' channel "
                             "(default $CUSTOM_OP_TRAIN_S3)")
    parser.add_argument("--role", default=os.environ.get("SAGEMAKER_ROLE"),
                        help="IAM role ARN for the job (default $SAGEMAKER_ROLE, else the "
                             "SDK's get_execution_role())")
    parser.add_argument("--output-path", default=None,
                        help="S3 URI for the model artefacts (default: the SDK's bucket)")
    parser.add_argument("--base-job-name", default="custom-op-train")
    parser.add_argument("--max-run", type=int, default=4 * 3600,
                        help="time limit of the job in seconds (default 14400)")
    parser.add_argument("--volume-size", type=int, default=30,
                        help="EBS volume per instance in GB (default 30)")
    parser.add_argument("--source-dir", default=None,
                        help="staging folder to assemble the job's source_dir in (default: a "
                             "new temporary folder); one staged by an earlier run is replaced")
    parser.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                        help="wait for the job and stream its logs (default: wait)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the configuration and the source_dir's files as JSON; no "
                             "SDK, no AWS")
    return parser


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def load_train_module():
    """train.py, imported by path (it imports no torch at module level)."""
    spec = importlib.util.spec_from_file_location("custom_op_sagemaker_train", HERE / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hyperparameters_from(tokens: list[str]) -> dict:
    """Checks train.py hyperparameters with train.py's parser; returns those given."""
    train = load_train_module()
    full = train.build_parser()
    full.prog = "launch.py (train.py hyperparameters after --)"
    train.check_arguments(full, full.parse_args(tokens))
    only_given = train.build_parser()
    only_given.prog = full.prog
    names = {}
    for action in only_given._actions:
        action.default = argparse.SUPPRESS
        if action.option_strings:
            names[action.dest] = action.option_strings[-1].lstrip("-")
    given = vars(only_given.parse_args(tokens))
    hyperparameters = {names[dest]: value for dest, value in given.items()}
    for name in SET_BY_SAGEMAKER:
        if name in hyperparameters:
            raise SystemExit(f"launch.py: --{name} is set by SageMaker in the job (SM_* "
                             f"variables); do not pass it as a hyperparameter")
    return hyperparameters


def environment_from(pairs: list[str]) -> dict:
    environment = {}
    for pair in pairs:
        name, separator, value = pair.partition("=")
        if not separator or not name:
            raise SystemExit(f"launch.py: --env wants NAME=VALUE, got {pair!r}")
        environment[name] = value
    return environment


def gpus_per_instance(instance_type: str, override: int | None) -> int:
    if override is not None:
        if override < 0:
            raise SystemExit("launch.py: --gpus-per-instance must be 0 or more")
        return override
    if instance_type in GPUS_PER_INSTANCE:
        return GPUS_PER_INSTANCE[instance_type]
    parts = instance_type.split(".")
    if len(parts) == 3 and parts[0] == "ml" and parts[1].startswith(CPU_FAMILY_PREFIXES):
        return 0
    raise SystemExit(f"launch.py: the number of GPUs of {instance_type} is not in the table; "
                     f"pass --gpus-per-instance N")


def choose_distribution(instance_type: str, count: int, gpus: int) -> tuple[dict | None, str]:
    """(the estimator's distribution argument, why)."""
    if count < 1:
        raise SystemExit("launch.py: --instance-count must be at least 1")
    total = count * gpus
    if total > 1:
        return ({"torch_distributed": {"enabled": True}},
                f"{count} x {gpus} GPUs: torchrun starts {gpus} rank(s) per instance, "
                f"{total} in all, trained with DistributedDataParallel (nccl)")
    if gpus == 1:
        return None, "one GPU: train.py runs as one plain process"
    if count == 1:
        return None, ("one CPU instance: train.py runs as one plain process; its DataLoader "
                      "workers use the cores")
    raise SystemExit(
        f"launch.py: {count} CPU instances ({instance_type}) are not supported: the SageMaker "
        f"SDK accepts torch_distributed only on GPU and Trainium instances, and without a "
        f"launcher each instance would run its own full copy of the job. Use one CPU instance, "
        f"or GPU instances.")


def package_files() -> list[Path]:
    """custom_op's sources, relative to the package: .py, .cpp, .h; no build products."""
    skipped_dirs = {"_build", "__pycache__", "build"}
    files = []
    for path in sorted(PACKAGE.rglob("*")):
        relative = path.relative_to(PACKAGE)
        if any(part in skipped_dirs or part.startswith(".") for part in relative.parts[:-1]):
            continue
        if path.is_file() and path.suffix in (".py", ".cpp", ".h") \
                and not path.name.startswith("."):
            files.append(relative)
    return files


def stage_source_dir(target: str | None) -> Path:
    """Assembles the job's source_dir; returns its path."""
    if target is None:
        root = Path(tempfile.mkdtemp(prefix="custom_op-sagemaker-source-"))
    else:
        root = Path(target).expanduser().resolve()
        if root.exists() and any(root.iterdir()):
            if not {p.name for p in root.iterdir()} <= STAGED_NAMES:
                raise SystemExit(f"launch.py: --source-dir {root} holds files launch.py did not "
                                 f"put there; give a new or empty folder")
            shutil.rmtree(root)
        root.mkdir(parents=True, exist_ok=True)
    for name in ("train.py", "requirements.txt"):
        shutil.copy2(HERE / name, root / name)
    for relative in package_files():
        destination = root / "custom_op" / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PACKAGE / relative, destination)
    return root


def listed_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def import_sdk():
    """(the sagemaker module, its PyTorch estimator class), or exits saying what to install."""
    try:
        import sagemaker
        from sagemaker.pytorch import PyTorch
    except ImportError as error:
        # SDK v3 dropped the Estimator classes, so it fails here too.
        raise SystemExit(f"launch.py: the SageMaker Python SDK v2 is needed to start a job "
                         f"({error}). Install it with: pip install '{SDK_REQUIREMENT}' (or "
                         f"pip install '.[sagemaker]'). --dry-run works without it.")
    return sagemaker, PyTorch


def main(argv: list[str] | None = None) -> None:
    own, hyperparameter_tokens = split_argv(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(own)
    hyperparameters = hyperparameters_from(hyperparameter_tokens)
    gpus = gpus_per_instance(args.instance_type, args.gpus_per_instance)
    distribution, reason = choose_distribution(args.instance_type, args.instance_count, gpus)
    environment = environment_from(args.env)
    if not args.dry_run:
        if not args.train_s3:
            raise SystemExit("launch.py: --train-s3 s3://BUCKET/PREFIX is needed (the training "
                             "images: <class>/<image>.jpg under it)")
        sagemaker, PyTorch = import_sdk()
    source_dir = stage_source_dir(args.source_dir)

    estimator = {
        "entry_point": "train.py",
        "source_dir": str(source_dir),
        "role": args.role,
        "instance_type": args.instance_type,
        "instance_count": args.instance_count,
        "framework_version": args.framework_version,
        "py_version": args.py_version,
        "hyperparameters": hyperparameters,
        "base_job_name": args.base_job_name,
        "max_run": args.max_run,
        "volume_size": args.volume_size,
    }
    if distribution is not None:
        estimator["distribution"] = distribution
    if args.output_path:
        estimator["output_path"] = args.output_path
    if args.image_uri:
        estimator["image_uri"] = args.image_uri
    if environment:
        estimator["environment"] = environment
    inputs = {"train": args.train_s3}

    if args.dry_run:
        print(json.dumps({
            "estimator": estimator,
            "fit": {"inputs": inputs, "wait": args.wait},
            "gpus_per_instance": gpus,
            "ranks": args.instance_count * max(gpus, 1) if distribution else 1,
            "distribution_reason": reason,
            "source_dir_files": listed_files(source_dir),
        }, indent=2))
        return

    if not estimator["role"]:
        try:
            estimator["role"] = sagemaker.get_execution_role()
        except Exception as error:  # the SDK raises ValueError or botocore errors
            raise SystemExit(f"launch.py: no IAM role: pass --role ARN or set SAGEMAKER_ROLE "
                             f"({error})")
    print(f"launch.py: {reason}", flush=True)
    job = PyTorch(**estimator)
    job.fit(inputs, wait=args.wait)
    print(f"launch.py: training job {job.latest_training_job.name}; model artefacts: "
          f"{job.model_data if args.wait else '(when the job ends) under the output path'}",
          flush=True)


if __name__ == "__main__":
    main()
