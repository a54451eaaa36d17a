"""The training job as the installed SageMaker Python SDK builds it.

launch.py describes the job as a plan (a plain dict, see launch.plan_job);
this module turns the plan into SDK v3's ``ModelTrainer`` or, when v2 is what
is installed, v2's ``PyTorch`` estimator, and submits it. Both read the same
plan, so the two SDKs start the same job. Nothing here talks to AWS until
``submit``: building the object resolves the image URI from the SDK's bundled
tables, and with a role ARN given (and the SDK's own role check switched off
by SAGEMAKER_VALIDATE_ROLE=false) it needs no network at all.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import sys
from typing import Any

SDK_REQUIREMENT = "sagemaker>=3"


def installed_sdk() -> type:
    """The job class for the installed SDK (v3 or v2), or exits saying what to install."""
    try:
        version = importlib.metadata.version("sagemaker")
    except importlib.metadata.PackageNotFoundError:
        _missing("it is not installed")
    major = int(version.split(".")[0])
    if major >= 3:
        return ModelTrainerJob
    if major == 2:
        return EstimatorJob
    _missing(f"version {version} is too old")


def _missing(why: str, error: Exception | None = None) -> None:
    detail = f" ({error})" if error else ""
    raise SystemExit(f"launch.py: the SageMaker Python SDK is needed to start a job, and {why}"
                     f"{detail}. Install it with: pip install '{SDK_REQUIREMENT}' (or pip "
                     f"install '.[sagemaker]'). --dry-run works without it.")


def _summary(fields: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in fields.items() if v not in (None, {}, [])}, indent=2,
                      default=str)


class ModelTrainerJob:
    """SDK v3: ``ModelTrainer`` with SourceCode, Compute, InputData and Torchrun."""

    #: The newest SageMaker PyTorch training image SDK 3.27 knows.
    DEFAULT_IMAGE = ("2.10.0", "py313")

    def __init__(self, plan: dict) -> None:
        try:
            from sagemaker.core import image_uris
            from sagemaker.core.helper.session_helper import Session
            from sagemaker.core.training.configs import (Compute, InputData, OutputDataConfig,
                                                          SourceCode, StoppingCondition)
            from sagemaker.train import ModelTrainer
            from sagemaker.train.distributed import Torchrun
        except ImportError as error:
            _missing("its v3 training modules did not import", error)
        session = Session()
        image = plan["image"].get("uri") or image_uris.retrieve(
            framework=plan["image"]["framework"], region=session.boto_region_name,
            version=plan["image"]["version"], py_version=plan["image"]["py_version"],
            instance_type=plan["instance_type"], image_scope=plan["image"]["image_scope"])
        arguments: dict[str, Any] = {
            "sagemaker_session": session,
            "training_image": image,
            "source_code": SourceCode(source_dir=plan["source_dir"],
                                      entry_script=plan["entry_script"],
                                      requirements=plan["requirements"]),
            "compute": Compute(instance_type=plan["instance_type"],
                               instance_count=plan["instance_count"],
                               volume_size_in_gb=plan["volume_size_in_gb"]),
            "stopping_condition": StoppingCondition(
                max_runtime_in_seconds=plan["max_runtime_in_seconds"]),
            "hyperparameters": plan["hyperparameters"],
            "environment": plan["environment"],
            "base_job_name": plan["base_job_name"],
            "role": plan["role"],  # None: the SDK resolves the caller's role
        }
        if plan["torchrun"]:
            arguments["distributed"] = Torchrun()  # one rank per GPU on every instance
        if plan["output_path"]:
            arguments["output_data_config"] = OutputDataConfig(s3_output_path=plan["output_path"])
        self.trainer = ModelTrainer(**arguments)
        self.inputs = [InputData(channel_name=name, data_source=uri)
                       for name, uri in plan["inputs"].items()]

    def describe(self) -> str:
        """The built job as JSON (the fields that decide what runs where)."""
        trainer = self.trainer
        return _summary({
            "sdk": f"sagemaker {importlib.metadata.version('sagemaker')}: ModelTrainer",
            "training_image": trainer.training_image,
            "role": trainer.role,
            "base_job_name": trainer.base_job_name,
            "source_code": trainer.source_code.model_dump(exclude_none=True),
            "compute": {"instance_type": trainer.compute.instance_type,
                        "instance_count": trainer.compute.instance_count,
                        "volume_size_in_gb": trainer.compute.volume_size_in_gb},
            "distributed": type(trainer.distributed).__name__ if trainer.distributed else None,
            "max_runtime_in_seconds": trainer.stopping_condition.max_runtime_in_seconds,
            "output_path": trainer.output_data_config.s3_output_path,
            "hyperparameters": trainer.hyperparameters,
            "environment": trainer.environment,
            "input_data_config": [{"channel_name": i.channel_name, "data_source": i.data_source}
                                  for i in self.inputs],
        })

    def submit(self, wait: bool) -> str:
        """Starts the job (uploads source_dir, creates the training job); returns a report."""
        self.trainer.train(input_data_config=self.inputs, wait=wait, logs=wait)
        job = self.trainer._latest_training_job  # The SDK keeps no public handle on it.
        name = getattr(job, "training_job_name", "?")
        return (f"training job {name}; model artefacts under "
                f"{self.trainer.output_data_config.s3_output_path}/{name}/output")


class EstimatorJob:
    """SDK v2: the ``PyTorch`` estimator (v3 removed it)."""

    #: The newest image SDK 2.257 accepts with torch_distributed.
    DEFAULT_IMAGE = ("2.8.0", "py312")

    def __init__(self, plan: dict) -> None:
        # v2 warns of its own deprecation twice per job; say it once, here. Its
        # config logger writes to stdout, where --no-submit prints the job.
        os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
        logging.getLogger("sagemaker.config").setLevel(logging.WARNING)
        print(f"launch.py: using the SageMaker Python SDK v2 (deprecated upstream); "
              f"launch.py also works with v3: pip install '{SDK_REQUIREMENT}'", file=sys.stderr)
        try:
            import sagemaker
            from sagemaker.pytorch import PyTorch
        except ImportError as error:
            _missing("its v2 PyTorch estimator did not import", error)
        self.arguments: dict[str, Any] = {
            "entry_point": plan["entry_script"],
            "source_dir": plan["source_dir"],  # v2 installs its requirements.txt itself
            "role": plan["role"] or sagemaker.get_execution_role(),
            "instance_type": plan["instance_type"],
            "instance_count": plan["instance_count"],
            "hyperparameters": plan["hyperparameters"],
            "base_job_name": plan["base_job_name"],
            "max_run": plan["max_runtime_in_seconds"],
            "volume_size": plan["volume_size_in_gb"],
        }
        if "uri" in plan["image"]:
            self.arguments["image_uri"] = plan["image"]["uri"]
        else:
            self.arguments["framework_version"] = plan["image"]["version"]
            self.arguments["py_version"] = plan["image"]["py_version"]
        if plan["torchrun"]:
            self.arguments["distribution"] = {"torch_distributed": {"enabled": True}}
        if plan["output_path"]:
            self.arguments["output_path"] = plan["output_path"]
        if plan["environment"]:
            self.arguments["environment"] = plan["environment"]
        self.estimator = PyTorch(**self.arguments)
        self.inputs = dict(plan["inputs"])

    def describe(self) -> str:
        """The estimator's arguments and inputs as JSON."""
        return _summary({"sdk": f"sagemaker {importlib.metadata.version('sagemaker')}: PyTorch",
                         "training_image": self.estimator.training_image_uri(),
                         **self.arguments, "inputs": self.inputs})

    def submit(self, wait: bool) -> str:
        """Starts the job; returns a report."""
        self.estimator.fit(self.inputs, wait=wait)
        artefacts = self.estimator.model_data if wait else "(when the job ends) under the output path"
        return f"training job {self.estimator.latest_training_job.name}; model artefacts: {artefacts}"
