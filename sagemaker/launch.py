#!/usr/bin/env python3
"""Starts sagemaker/train.py as a SageMaker training job.

    python sagemaker/launch.py --train-s3 s3://BUCKET/PREFIX/train --role ROLE_ARN \\
        --instance-type ml.g5.12xlarge --instance-count 1 -- --epochs 5 --batch-size 64

The job is built with the SageMaker Python SDK v3 (``ModelTrainer`` with
``SourceCode``, ``Compute``, ``InputData`` and ``Torchrun``), or with v2's
``PyTorch`` estimator when v2 is what is installed; sagemaker/sdk_jobs.py
does that. Arguments after ``--`` are train.py's hyperparameters, checked here
against train.py's own parser; the job hands them to train.py as
``--name value``.

The job's source_dir is a staging folder holding train.py, requirements.txt
and custom_op's wheel (the one `make wheel` put in dist/, or ``--wheel``),
which requirements.txt names: the container pip-installs it before train.py
starts, native module included, so the job needs no compiler, no libjpeg
headers and builds nothing (sagemaker/job_wheel.py checks first that the
wheel runs on the image's torch and Python). ``--from-source`` stages the
package's sources instead (.py, .cpp, csrc/*.h), for an image that carries a
build or can compile one (docs/install.md). A temporary staging folder is
removed when launch.py ends (the SDK has uploaded it by then).

Distribution: with more than one GPU in all (instance count x GPUs per
instance), torchrun starts train.py, one rank per GPU on each instance. With
one GPU, or one CPU instance, train.py runs as a single plain process (on a
CPU instance its DataLoader workers use the cores). Several CPU instances are
refused: without GPUs to give each rank, every instance would run its own
independent copy of the whole job.

``--dry-run`` prints the job as JSON without importing the SDK or contacting
AWS; ``--no-submit`` builds the SDK's job object (resolving the image URI and
checking the arguments the SDK's way) and prints it, starting nothing. It
needs no AWS configuration either: a missing region, role or output path is
filled with a placeholder, named on stderr with what to set for a real launch
(sdk_jobs.offline_plan). When the SDK or AWS fails, the launcher says in one
line what to set (AWS_DEFAULT_REGION, credentials, --role, --output-path).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PACKAGE = REPO / "custom_op"
#: What launch.py puts in source_dir next to the custom_op package: name in the job -> file here.
TRAINING_FILES = {"train.py": HERE / "train.py", "requirements.txt": HERE / "requirements.txt"}

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="launch.py",
        usage="%(prog)s [options] [-- train.py hyperparameters, e.g. --epochs 5]",
        description="Start sagemaker/train.py as a SageMaker training job (SageMaker Python "
                    "SDK v3's ModelTrainer, or v2's PyTorch estimator if v2 is installed).")
    parser.add_argument("--instance-type", default=DEFAULT_INSTANCE_TYPE,
                        help=f"training instance type (default {DEFAULT_INSTANCE_TYPE})")
    parser.add_argument("--instance-count", type=int, default=1, help="instances (default 1)")
    parser.add_argument("--gpus-per-instance", type=int, default=None,
                        help="GPUs per instance, for types missing from the built-in table")
    parser.add_argument("--train-s3", default=os.environ.get("CUSTOM_OP_TRAIN_S3"),
                        help="S3 URI of the training images, an ImageFolder tree "
                             "(<class>/<image>.jpg); the job's 'train' channel "
                             "(default $CUSTOM_OP_TRAIN_S3)")
    parser.add_argument("--output-path", default=None,
                        help="S3 URI for the model artefacts (default: the SDK's bucket)")
    add_job_options(parser, base_job_name="custom-op-train", volume_size=30)
    return parser


def add_job_options(parser: argparse.ArgumentParser, *, base_job_name: str,
                    volume_size: int) -> None:
    """The options every launcher here shares: image, role, limits, staging, mode."""
    parser.add_argument("--framework-version", default=None,
                        help="PyTorch version of the SageMaker training image (default: the "
                             "newest the SDK supports here, 2.10.0 with v3, 2.8.0 with v2)")
    parser.add_argument("--py-version", default=None,
                        help="Python version of that image (default: py313 with v3, py312 "
                             "with v2)")
    parser.add_argument("--image-uri", default=None,
                        help="a custom training image (e.g. one with custom_op prebuilt, see "
                             "docs/install.md) instead of the SageMaker PyTorch image")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="environment variable for the job, e.g. CUSTOM_OP_BUILD_DIR=... "
                             "(repeatable)")
    parser.add_argument("--role", default=os.environ.get("SAGEMAKER_ROLE"),
                        help="IAM role ARN for the job (default $SAGEMAKER_ROLE, else the "
                             "SDK's own choice: the caller's role)")
    parser.add_argument("--base-job-name", default=base_job_name)
    parser.add_argument("--max-run", type=int, default=4 * 3600,
                        help="time limit of the job in seconds (default 14400)")
    parser.add_argument("--volume-size", type=int, default=volume_size,
                        help=f"EBS volume per instance in GB (default {volume_size})")
    parser.add_argument("--wheel", default=None, metavar="PATH",
                        help="custom_op's wheel to install in the job (default: the one in "
                             "dist/, made by `make wheel`)")
    parser.add_argument("--from-source", action="store_true",
                        help="stage custom_op's sources instead of the wheel: the job then "
                             "builds the extension at its start, which needs a compiler and "
                             "libjpeg-turbo's headers in the image (or a build it carries)")
    parser.add_argument("--source-dir", default=None,
                        help="staging folder to assemble the job's source_dir in, kept "
                             "afterwards (default: a temporary folder, removed at the end); one "
                             "staged by an earlier run is replaced")
    parser.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                        help="wait for the job and stream its logs (default: wait)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="print the job and the source_dir's files as JSON; no SDK, no AWS")
    mode.add_argument("--no-submit", action="store_true",
                      help="build the job object with the installed SDK and print it; start "
                           "nothing")


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def load_sibling(name: str):
    """A module of this folder, imported by path (launch.py may run from anywhere)."""
    spec = importlib.util.spec_from_file_location(f"custom_op_sagemaker_{name}",
                                                  HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hyperparameters_from(tokens: list[str]) -> dict:
    """Checks train.py hyperparameters with train.py's parser; returns those given."""
    train = load_sibling("train")  # It imports no torch at module level.
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


def choose_distribution(instance_type: str, count: int, gpus: int) -> tuple[bool, str]:
    """(whether torchrun starts the ranks, why)."""
    if count < 1:
        raise SystemExit("launch.py: --instance-count must be at least 1")
    total = count * gpus
    if total > 1:
        return (True,
                f"{count} x {gpus} GPUs: torchrun starts {gpus} rank(s) per instance, "
                f"{total} in all, trained with DistributedDataParallel (nccl)")
    if gpus == 1:
        return False, "one GPU: train.py runs as one plain process"
    if count == 1:
        return False, ("one CPU instance: train.py runs as one plain process; its DataLoader "
                      "workers use the cores")
    raise SystemExit(
        f"launch.py: {count} CPU instances ({instance_type}) are not supported: ranks are "
        f"started by torchrun one per GPU, so without GPUs each instance would run its own "
        f"full copy of the job on the whole data set. Use one CPU instance, or GPU instances.")


def package_files() -> list[Path]:
    """custom_op's sources, relative to the package: .py, .cpp, .h; no build products."""
    skipped_dirs = {"_build", "_prebuilt", "__pycache__", "build"}
    files = []
    for path in sorted(PACKAGE.rglob("*")):
        relative = path.relative_to(PACKAGE)
        if any(part in skipped_dirs or part.startswith(".") for part in relative.parts[:-1]):
            continue
        if path.is_file() and path.suffix in (".py", ".cpp", ".h") \
                and not path.name.startswith("."):
            files.append(relative)
    return files


def staged_source_dir(target: str | None, files: dict[str, Path] = TRAINING_FILES,
                      wheel: Path | None = None) -> contextlib.AbstractContextManager[Path]:
    """The job's source_dir, assembled: kept if named, else temporary (removed on exit)."""
    if target is not None:
        return contextlib.nullcontext(stage_source_dir(Path(target).expanduser().resolve(),
                                                       files, wheel))
    return _temporary_source_dir(files, wheel)


@contextlib.contextmanager
def _temporary_source_dir(files: dict[str, Path], wheel: Path | None) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="custom_op-sagemaker-source-") as folder:
        yield stage_source_dir(Path(folder), files, wheel)


def stage_source_dir(root: Path, files: dict[str, Path] = TRAINING_FILES,
                     wheel: Path | None = None) -> Path:
    """Copies ``files`` (name in the job -> file) into ``root``, then custom_op's wheel (named in
    requirements.txt) or, without one, its sources."""
    if root.exists() and any(root.iterdir()):
        ours = {p.name for p in root.iterdir() if p.suffix != ".whl"}
        if not ours <= set(files) | {"custom_op"}:
            raise SystemExit(f"launch.py: --source-dir {root} holds files launch.py did not "
                             f"put there; give a new or empty folder")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        shutil.copy2(source, root / name)
    if wheel is not None:
        load_sibling("job_wheel").stage(wheel, root)
        return root
    for relative in package_files():
        destination = root / "custom_op" / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PACKAGE / relative, destination)
    return root


def listed_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def image_plan(args: argparse.Namespace, default_image: tuple[str, str]) -> dict:
    """--image-uri, or the SageMaker PyTorch training image the SDK resolves."""
    if args.image_uri:
        return {"uri": args.image_uri}
    return {"framework": "pytorch", "version": args.framework_version or default_image[0],
            "py_version": args.py_version or default_image[1], "image_scope": "training"}


def plan_job(args: argparse.Namespace, hyperparameters: dict, environment: dict,
             torchrun: bool, source_dir: Path, default_image: tuple[str, str]) -> dict:
    """The job, independent of the SDK version: what --dry-run prints and sdk_jobs builds.

    ``default_image`` is the SDK's (framework version, Python version), used
    where --framework-version or --py-version is not given.
    """
    return {
        "source_dir": str(source_dir),
        "entry_script": "train.py",
        "requirements": "requirements.txt",
        "image": image_plan(args, default_image),
        "role": args.role,
        "instance_type": args.instance_type,
        "instance_count": args.instance_count,
        "volume_size_in_gb": args.volume_size,
        "max_runtime_in_seconds": args.max_run,
        "torchrun": torchrun,
        "hyperparameters": hyperparameters,
        "environment": environment,
        "base_job_name": args.base_job_name,
        "output_path": args.output_path,
        "inputs": {"train": args.train_s3},
    }


def main(argv: list[str] | None = None) -> None:
    own, hyperparameter_tokens = split_argv(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(own)
    hyperparameters = hyperparameters_from(hyperparameter_tokens)
    gpus = gpus_per_instance(args.instance_type, args.gpus_per_instance)
    torchrun, reason = choose_distribution(args.instance_type, args.instance_count, gpus)
    environment = environment_from(args.env)
    if not args.train_s3:
        if not args.dry_run:
            raise SystemExit("launch.py: --train-s3 s3://BUCKET/PREFIX is needed (the training "
                             "images: <class>/<image>.jpg under it)")
        print("launch.py: warning: no --train-s3 (or $CUSTOM_OP_TRAIN_S3): the job has no "
              "'train' channel, and a real launch stops here", file=sys.stderr)
    run_plan(args, "training", TRAINING_FILES,
             lambda source_dir, default_image: plan_job(args, hyperparameters, environment,
                                                        torchrun, source_dir, default_image),
             {"gpus_per_instance": gpus,
              "ranks": args.instance_count * max(gpus, 1) if torchrun else 1,
              "distribution_reason": reason},
             announce=reason)


def job_wheel(args: argparse.Namespace, default_image: tuple[str, str]) -> Path | None:
    """The wheel to stage (None with --from-source), checked against the job's image.

    A missing or mismatched wheel stops a launch; --dry-run and --no-submit
    only warn, so that a job can be checked on a machine that has not built one.
    """
    if args.from_source:
        return None
    wheels = load_sibling("job_wheel")
    wheel = wheels.find_wheel(args.wheel)
    problem = "no custom_op wheel in dist/: run `make wheel` (docs/install.md) or pass --wheel"
    if wheel is not None:
        problem = "" if args.image_uri else wheels.image_problem(
            wheel, args.framework_version or default_image[0],
            args.py_version or default_image[1])
    if problem:
        prog = Path(sys.argv[0]).name
        advice = ("; choose an image it runs on (--framework-version, --py-version, "
                  "--image-uri), or --from-source")
        if not (args.dry_run or args.no_submit):
            raise SystemExit(f"{prog}: {problem}{advice}")
        print(f"{prog}: warning: {problem}{advice}; a real launch stops here", file=sys.stderr)
    return wheel


def run_plan(args: argparse.Namespace, kind: str, files: dict[str, Path], make_plan,
             dry_run_fields: dict, announce: str) -> None:
    """Stages source_dir, plans the job, then prints it (--dry-run), builds it with the SDK
    and prints that (--no-submit), or starts it.

    ``kind`` is "training" or "processing" (sdk_jobs.installed_sdk's table);
    ``make_plan(source_dir, default_image)`` returns the plan.
    """
    sdk_jobs = load_sibling("sdk_jobs")  # It imports the SDK only to build a job.
    sdk = sdk_jobs.JOB_CLASSES[kind][3] if args.dry_run else sdk_jobs.installed_sdk(kind)
    wheel = job_wheel(args, sdk.DEFAULT_IMAGE)
    with staged_source_dir(args.source_dir, files, wheel) as source_dir:
        plan = make_plan(source_dir, sdk.DEFAULT_IMAGE)
        if args.dry_run:
            print(json.dumps({
                "job": plan,
                "wait": args.wait,
                **dry_run_fields,
                "custom_op": wheel.name if wheel else "sources (built in the job)",
                "source_dir_kept": args.source_dir is not None,
                "source_dir_files": listed_files(source_dir),
            }, indent=2))
            return
        if args.no_submit:
            plan = sdk_jobs.offline_plan(plan, "output_path" if "output_path" in plan else None)
        with sdk_jobs.aws_errors_in_one_line("build"):
            job = sdk(plan)
        if args.no_submit:
            described = json.loads(job.describe())
            if plan["placeholders"]:
                described["placeholders"] = plan["placeholders"]
            print(json.dumps(described, indent=2))
            return
        prog = Path(sys.argv[0]).name  # launch.py or launch_prepare.py
        print(f"{prog}: {announce}", flush=True)
        with sdk_jobs.aws_errors_in_one_line("submit"):
            report = job.submit(wait=args.wait)
        print(f"{prog}: {report}", flush=True)


if __name__ == "__main__":
    main()
