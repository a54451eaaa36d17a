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

``--no-submit`` builds the job with no AWS configuration at all
(offline_plan): what the SDK would otherwise ask AWS for (the region, the
caller's role, the default bucket) is filled with a placeholder named on
stderr, with the setting that replaces it. Failures of the SDK or of AWS
become one line saying what to set (aws_errors_in_one_line).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import os
import sys
from typing import Any, Iterator

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


#: What --no-submit puts where AWS configuration is missing: a region, a role and a bucket
#: that are recognisably not anyone's (account 000000000000).
PLACEHOLDER_REGION = "us-east-1"
PLACEHOLDER_ROLE = "arn:aws:iam::000000000000:role/placeholder-pass-role"
PLACEHOLDER_BUCKET = "s3://sagemaker-placeholder-000000000000"


def configured_region() -> str | None:
    """The AWS region boto3 would use (environment, ~/.aws/config, profile), or None."""
    import boto3

    return boto3.session.Session().region_name


def offline_plan(plan: dict, output_key: str | None) -> dict:
    """The plan with placeholders where --no-submit has no AWS configuration to ask.

    Without a region one is set in the environment (the SDK reads it there);
    the SDK's role check is switched off; a missing role, and the output path
    (``plan[output_key]``) when missing, get placeholders. Each placeholder is
    named on stderr with the setting that replaces it; the returned plan
    lists them under "placeholders".
    """
    prog = _prog()
    placeholders = {}
    if configured_region() is None:
        os.environ["AWS_DEFAULT_REGION"] = PLACEHOLDER_REGION
        placeholders["region"] = (PLACEHOLDER_REGION, "set AWS_DEFAULT_REGION (or a region in "
                                                      "~/.aws/config)")
    os.environ["SAGEMAKER_VALIDATE_ROLE"] = "false"  # the check asks STS who we are
    plan = dict(plan)
    if not plan["role"]:
        plan["role"] = PLACEHOLDER_ROLE
        placeholders["role"] = (PLACEHOLDER_ROLE, "pass --role ROLE_ARN (or set SAGEMAKER_ROLE)")
    if output_key is not None and not plan[output_key]:
        plan[output_key] = f"{PLACEHOLDER_BUCKET}/{plan['base_job_name']}"
        placeholders["output_path"] = (plan[output_key], "pass --output-path s3://BUCKET/PREFIX "
                                                         "(a real launch uses the SDK's default "
                                                         "bucket)")
    for name, (value, how) in placeholders.items():
        print(f"{prog}: --no-submit: no {name.replace('_', ' ')} configured, building with "
              f"{value}; for a real "
              f"launch, {how}", file=sys.stderr)
    plan["placeholders"] = {name: value for name, (value, _) in placeholders.items()}
    return plan


#: botocore's exception class name -> what to set, for the one-line messages.
_WHAT_TO_SET = {
    "NoRegionError": "no AWS region is configured: set AWS_DEFAULT_REGION (or a region in "
                     "~/.aws/config)",
    "NoCredentialsError": "no AWS credentials were found: run aws configure, or set AWS_PROFILE "
                          "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
    "PartialCredentialsError": "the AWS credentials are incomplete: set both AWS_ACCESS_KEY_ID "
                               "and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)",
    "NoAuthTokenError": "the AWS SSO session has expired: run aws sso login",
    "TokenRetrievalError": "the AWS SSO session has expired: run aws sso login",
    "EndpointConnectionError": "AWS could not be reached (network, or AWS_DEFAULT_REGION names "
                               "no such region)",
}


def _what_to_set(error: BaseException, stage: str) -> str | None:
    """The one-line advice for an SDK failure while ``stage`` ran, or None if unknown."""
    name = type(error).__name__
    text = str(error)
    if name in _WHAT_TO_SET:
        return _WHAT_TO_SET[name]
    if "region" in text.lower() and isinstance(error, ValueError):
        return _WHAT_TO_SET["NoRegionError"]
    if name == "ClientError":
        code = getattr(error, "response", {}).get("Error", {}).get("Code", "?")
        if code in ("ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId",
                    "UnrecognizedClientException", "SignatureDoesNotMatch"):
            return f"AWS refused the credentials ({code}): refresh them (aws configure, aws " \
                   f"sso login) or set AWS_PROFILE"
        if stage == "build":
            return (f"AWS refused a request while building the job ({code}: {text}); pass "
                    f"--role ROLE_ARN and --output-path s3://BUCKET/PREFIX so that nothing "
                    f"needs looking up")
        return f"AWS refused the job ({code}): {text}"
    return None


@contextlib.contextmanager
def aws_errors_in_one_line(stage: str) -> Iterator[None]:
    """Turns the SDK's known AWS configuration failures into SystemExit with one line saying
    what to set; anything else propagates unchanged. ``stage``: "build" or "submit"."""
    try:
        yield
    except SystemExit:
        raise
    except Exception as error:  # noqa: BLE001  (botocore's classes are not importable here)
        advice = _what_to_set(error, stage)
        if advice is None:
            raise
        doing = "building the job" if stage == "build" else "starting the job"
        raise SystemExit(f"{_prog()}: {doing} failed: {advice}. (--dry-run and --no-submit "
                         f"need no AWS configuration.)") from None


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
