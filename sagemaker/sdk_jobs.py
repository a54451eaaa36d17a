"""The jobs as the installed SageMaker Python SDK builds them.

launch.py describes a training job as a plan (a plain dict, see
launch.plan_job), launch_prepare.py a processing job (launch_prepare.plan_job);
this module turns the plan into SDK v3's ``ModelTrainer`` or
``FrameworkProcessor`` or, when v2 is what is installed, v2's ``PyTorch``
estimator or ``PyTorchProcessor``, and submits it. Both SDKs read the same
plan, so they start the same job. Nothing here talks to AWS until
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


def installed_sdk(kind: str = "training") -> type:
    """The job class of ``kind`` for the installed SDK (v3 or v2), or exits saying what to
    install. ``kind`` is a key of JOB_CLASSES."""
    try:
        version = importlib.metadata.version("sagemaker")
    except importlib.metadata.PackageNotFoundError:
        _missing("it is not installed")
    major = int(version.split(".")[0])
    if major < 2:
        _missing(f"version {version} is too old")
    return JOB_CLASSES[kind][min(major, 3)]


def _missing(why: str, error: Exception | None = None) -> None:
    detail = f" ({error})" if error else ""
    raise SystemExit(f"{_prog()}: the SageMaker Python SDK is needed to start a job, and {why}"
                     f"{detail}. Install it with: pip install '{SDK_REQUIREMENT}' (or pip "
                     f"install '.[sagemaker]'). --dry-run works without it.")


def _prog() -> str:
    """The launcher's name for messages: launch.py or launch_prepare.py."""
    return os.path.basename(sys.argv[0])


def _quiet_v2() -> None:
    """v2 warns of its own deprecation twice per job; say it once, here. Its config logger
    writes to stdout, where --no-submit prints the job."""
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    logging.getLogger("sagemaker.config").setLevel(logging.WARNING)
    prog = _prog()
    print(f"{prog}: using the SageMaker Python SDK v2 (deprecated upstream); {prog} also "
          f"works with v3: pip install '{SDK_REQUIREMENT}'", file=sys.stderr)


def _summary(fields: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in fields.items() if v not in (None, {}, [])}, indent=2,
                      default=str)


def _image_uri(plan: dict, session: Any, image_uris: Any) -> str:
    """SDK v3: the plan's image URI, or the SageMaker PyTorch image for the session's region
    and the instance type (CPU or GPU), from the SDK's bundled tables."""
    image = plan["image"]
    return image.get("uri") or image_uris.retrieve(
        framework=image["framework"], region=session.boto_region_name, version=image["version"],
        py_version=image["py_version"], instance_type=plan["instance_type"],
        image_scope=image["image_scope"])


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
        image = _image_uri(plan, session, image_uris)
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
        _quiet_v2()
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


class FrameworkProcessorJob:
    """SDK v3: ``FrameworkProcessor`` running the plan's entry script from source_dir, with one
    S3 input (``ProcessingInput``/``ProcessingS3Input``) and one S3 output."""

    DEFAULT_IMAGE = ModelTrainerJob.DEFAULT_IMAGE  # the same image as training jobs

    def __init__(self, plan: dict) -> None:
        try:
            from sagemaker.core import image_uris
            from sagemaker.core.helper.session_helper import Session, get_execution_role
            from sagemaker.core.processing import FrameworkProcessor
            from sagemaker.core.shapes import (ProcessingInput, ProcessingOutput,
                                               ProcessingS3Input, ProcessingS3Output)
            from sagemaker.core.utils.utils import serialize
        except ImportError as error:
            _missing("its v3 processing modules did not import", error)
        session = Session()
        self.plan = plan
        self.serialize = serialize  # to the API's request form, as the SDK sends it
        self.processor = FrameworkProcessor(
            image_uri=_image_uri(plan, session, image_uris),
            # v3's Processor needs a role; ModelTrainer would take the caller's: do the same.
            role=plan["role"] or get_execution_role(session),
            instance_type=plan["instance_type"], instance_count=plan["instance_count"],
            volume_size_in_gb=plan["volume_size_in_gb"],
            max_runtime_in_seconds=plan["max_runtime_in_seconds"],
            base_job_name=plan["base_job_name"], env=plan["environment"] or None,
            sagemaker_session=session)
        source, destination = plan["input"], plan["output"]
        self.inputs = [ProcessingInput(input_name=source["name"], s3_input=ProcessingS3Input(
            s3_uri=source["s3_uri"], local_path=source["local_path"], s3_data_type="S3Prefix",
            s3_input_mode="File", s3_data_distribution_type=source["distribution"]))]
        self.outputs = [ProcessingOutput(output_name=destination["name"],
                                         s3_output=ProcessingS3Output(
                                             s3_uri=destination["s3_uri"],
                                             local_path=destination["local_path"],
                                             s3_upload_mode=destination["upload_mode"]))]

    def describe(self) -> str:
        """The built job as JSON: the processor's settings, inputs, outputs and command."""
        processor = self.processor
        return _summary({
            "sdk": f"sagemaker {importlib.metadata.version('sagemaker')}: FrameworkProcessor",
            "image_uri": processor.image_uri,
            "role": processor.role,
            "base_job_name": processor.base_job_name,
            "instance_type": processor.instance_type,
            "instance_count": processor.instance_count,
            "volume_size_in_gb": processor.volume_size_in_gb,
            "max_runtime_in_seconds": processor.max_runtime_in_seconds,
            "env": processor.env,
            "command": processor.command,
            "code": self.plan["entry_script"],
            "source_dir": self.plan["source_dir"],
            "requirements": self.plan["requirements"],
            "arguments": self.plan["arguments"],
            "inputs": [self.serialize(i) for i in self.inputs],
            "outputs": [self.serialize(o) for o in self.outputs],
        })

    def submit(self, wait: bool) -> str:
        """Uploads source_dir and starts the job; returns a report."""
        self.processor.run(code=self.plan["entry_script"], source_dir=self.plan["source_dir"],
                           requirements=self.plan["requirements"], inputs=self.inputs,
                           outputs=self.outputs, arguments=self.plan["arguments"], wait=wait,
                           logs=wait)
        name = getattr(self.processor.latest_job, "processing_job_name", "?")
        return f"processing job {name}; prepared data under {self.plan['output']['s3_uri']}"


class PyTorchProcessorJob:
    """SDK v2: ``PyTorchProcessor`` (a FrameworkProcessor on the PyTorch image)."""

    DEFAULT_IMAGE = EstimatorJob.DEFAULT_IMAGE

    def __init__(self, plan: dict) -> None:
        _quiet_v2()
        try:
            import sagemaker
            from sagemaker.processing import ProcessingInput, ProcessingOutput
            from sagemaker.pytorch.processing import PyTorchProcessor
        except ImportError as error:
            _missing("its v2 PyTorchProcessor did not import", error)
        self.plan = plan
        image = plan["image"]
        self.arguments: dict[str, Any] = {
            # Ignored by v2 when image_uri is given, but still a required argument.
            "framework_version": image.get("version", self.DEFAULT_IMAGE[0]),
            "py_version": image.get("py_version", self.DEFAULT_IMAGE[1]),
            "image_uri": image.get("uri"),
            "role": plan["role"] or sagemaker.get_execution_role(),
            "instance_type": plan["instance_type"],
            "instance_count": plan["instance_count"],
            "volume_size_in_gb": plan["volume_size_in_gb"],
            "max_runtime_in_seconds": plan["max_runtime_in_seconds"],
            "base_job_name": plan["base_job_name"],
            "env": plan["environment"] or None,
        }
        self.processor = PyTorchProcessor(**self.arguments)
        source, destination = plan["input"], plan["output"]
        self.inputs = [ProcessingInput(source=source["s3_uri"], destination=source["local_path"],
                                       input_name=source["name"],
                                       s3_data_distribution_type=source["distribution"])]
        self.outputs = [ProcessingOutput(source=destination["local_path"],
                                         destination=destination["s3_uri"],
                                         output_name=destination["name"],
                                         s3_upload_mode=destination["upload_mode"])]

    def describe(self) -> str:
        """The processor's arguments, its image, inputs and outputs as JSON."""
        return _summary({
            "sdk": f"sagemaker {importlib.metadata.version('sagemaker')}: PyTorchProcessor",
            **self.arguments, "image_uri": self.processor.image_uri,
            "code": self.plan["entry_script"], "source_dir": self.plan["source_dir"],
            "arguments": self.plan["arguments"],
            "inputs": [i._to_request_dict() for i in self.inputs],
            "outputs": [o._to_request_dict() for o in self.outputs],
        })

    def submit(self, wait: bool) -> str:
        """Uploads source_dir and starts the job (v2 installs requirements.txt itself)."""
        self.processor.run(code=self.plan["entry_script"], source_dir=self.plan["source_dir"],
                           inputs=self.inputs, outputs=self.outputs,
                           arguments=self.plan["arguments"], wait=wait, logs=wait)
        name = self.processor.latest_job.job_name
        return f"processing job {name}; prepared data under {self.plan['output']['s3_uri']}"


#: The job class per kind of job and SDK major version (v3 also for anything newer).
JOB_CLASSES = {"training": {3: ModelTrainerJob, 2: EstimatorJob},
               "processing": {3: FrameworkProcessorJob, 2: PyTorchProcessorJob}}
