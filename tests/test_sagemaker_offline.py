"""The launchers with the real SDK v3 and no AWS configuration at all.

The environment holds no AWS_* variable, HOME is an empty folder (no
~/.aws), and every socket connection is refused: --no-submit still builds the
job, naming each placeholder it used and what to set instead; a real launch
stops with one line saying what to set, not a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

# The fixture sdk_v3_python is imported for pytest to find.
from test_sagemaker import NETWORK_OFF, SAGEMAKER, sdk_v3_python  # noqa: F401

#: The smallest environment the launchers run in: a PATH, an empty HOME, a TMPDIR.
KEPT = ("PATH", "LANG", "LC_ALL")


def bare_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    home = tmp_path / "home"
    scratch = tmp_path / "scratch"
    home.mkdir(exist_ok=True)
    scratch.mkdir(exist_ok=True)
    env = {name: os.environ[name] for name in KEPT if name in os.environ}
    env.update(HOME=str(home), TMPDIR=str(scratch), **extra)
    assert not [name for name in env if name.startswith("AWS_")] or extra
    return env


def launch(sdk_python: Path, tmp_path: Path, script: str, *arguments: str,
           **extra_env: str) -> subprocess.CompletedProcess:
    guard = tmp_path / "network_off.py"
    guard.write_text(NETWORK_OFF)
    return subprocess.run([str(sdk_python), str(guard), str(SAGEMAKER / script), *arguments],
                          cwd=tmp_path, env=bare_env(tmp_path, **extra_env),
                          capture_output=True, text=True, timeout=300)


def test_no_submit_builds_the_training_job_with_no_aws_configuration(sdk_v3_python, tmp_path):
    done = launch(sdk_v3_python, tmp_path, "launch.py", "--no-submit", "--train-s3",
                  "s3://example-bucket/train")
    assert done.returncode == 0, done.stdout + done.stderr
    job = json.loads(done.stdout)
    assert job["sdk"] == "sagemaker 3.27.0: ModelTrainer"
    assert job["training_image"].endswith(".dkr.ecr.us-east-1.amazonaws.com/pytorch-training:"
                                          "2.10.0-gpu-py313")
    assert set(job["placeholders"]) == {"region", "role", "output_path"}
    assert job["role"] == job["placeholders"]["role"] and ":000000000000:" in job["role"]
    assert job["output_path"] == job["placeholders"]["output_path"]
    # Each placeholder is named on stderr once, with what replaces it.
    for setting in ("set AWS_DEFAULT_REGION", "pass --role ROLE_ARN", "pass --output-path"):
        assert done.stderr.count(setting) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert not list((tmp_path / "scratch").glob("custom_op-sagemaker-source-*"))


def test_no_submit_builds_the_processing_job_with_no_aws_configuration(sdk_v3_python, tmp_path):
    done = launch(sdk_v3_python, tmp_path, "launch_prepare.py", "--no-submit", "--input-s3",
                  "s3://example-bucket/shards", "--output-s3", "s3://example-bucket/prepared")
    assert done.returncode == 0, done.stdout + done.stderr
    job = json.loads(done.stdout)
    assert job["sdk"] == "sagemaker 3.27.0: FrameworkProcessor"
    assert set(job["placeholders"]) == {"region", "role"}
    assert ".dkr.ecr.us-east-1.amazonaws.com/pytorch-training:" in job["image_uri"]
    assert "set AWS_DEFAULT_REGION" in done.stderr and "pass --role" in done.stderr


# Both launchers share the code that turns failures into one line (launch.run_plan): each
# meets one of the two failures, which keeps the SDK's slow import to two runs.
@pytest.mark.parametrize(("script", "arguments", "env", "advice"), [
    ("launch.py", ["--train-s3", "s3://example-bucket/train"], {},
     "no AWS region is configured: set AWS_DEFAULT_REGION"),
    ("launch_prepare.py", ["--input-s3", "s3://b/in", "--output-s3", "s3://b/out"],
     {"AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"},
     "no AWS credentials were found: run aws configure, or set AWS_PROFILE"),
], ids=["training-no-region", "processing-no-credentials"])
def test_a_real_launch_says_in_one_line_what_to_set(sdk_v3_python, tmp_path, script, arguments,
                                                    env, advice):
    done = launch(sdk_v3_python, tmp_path, script, *arguments, **env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{script}: building the job failed: {advice}"), done.stderr
