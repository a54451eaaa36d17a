"""The SageMaker entry point (sagemaker/train.py), its local torchrun run
(sagemaker/run_local.sh) and the launcher's dry run (sagemaker/launch.py).

Everything runs in subprocesses with timeouts; nothing contacts AWS (a fake
``sagemaker`` package on PYTHONPATH fails loudly if the launcher imports the
SDK). Two tests build custom_op cold (~15-20 s each), as a training job does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import _sdk_venvs
from synthetic import write_jpeg_folder

REPO = Path(__file__).resolve().parent.parent
SAGEMAKER = REPO / "sagemaker"
BUILDING = "building the native extension"
WAITING = "waiting for another process"

# Variables of the surrounding environment that would change what the scripts do.
_SCRUBBED_PREFIXES = ("SM_", "CUSTOM_OP_", "TORCHELASTIC_")
_SCRUBBED = {"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "PYTHONPATH", "WORK_DIR", "NPROC", "NUM_IMAGES", "IMAGE_HEIGHT", "IMAGE_WIDTH",
             "DATA_FORMAT", "SAMPLES_PER_SHARD", "PREPARE", "PREPARE_INSTANCES"}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in _SCRUBBED and not k.startswith(_SCRUBBED_PREFIXES)}
    env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU path (gloo), even on a machine with GPUs
    env["CUSTOM_OP_INDEX_STORE"] = ""  # as conftest: not the user's index store
    env.update(extra)
    return env


def run(command: list, *, cwd: Path, env: dict, timeout: float) -> tuple[int, str]:
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return done.returncode, done.stdout


def make_dataset(root: Path, images: int, height: int, width: int) -> None:
    code, output = run([sys.executable, SAGEMAKER / "make_dataset.py", root, "--images", images,
                        "--height", height, "--width", width],
                       cwd=REPO, env=clean_env(), timeout=120)
    assert code == 0, output


def load_train_module():
    spec = importlib.util.spec_from_file_location("train_under_test", SAGEMAKER / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_saved_model(path: Path, classes: list[str]) -> None:
    import torch

    checkpoint = torch.load(path, map_location="cpu")
    assert checkpoint["classes"] == classes
    model = load_train_module().build_model(len(classes))
    model.load_state_dict(checkpoint["state_dict"])
    model.eval()
    crops = torch.randint(0, 256, (2, 3, checkpoint["crop_size"], checkpoint["crop_size"]),
                          dtype=torch.uint8)
    from custom_op.transforms import NormalizeBatch

    normalize = NormalizeBatch(checkpoint["normalize_mean"], checkpoint["normalize_std"])
    with torch.no_grad():
        assert model(normalize(crops)).shape == (2, len(classes))


# --------------------------------------------------------------------------
# The two-rank local job: torchrun, gloo, cold custom_op build inside the job.
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def local_job(tmp_path_factory):
    work = tmp_path_factory.mktemp("sagemaker_local")
    env = clean_env(PY=sys.executable, WORK_DIR=str(work), NPROC="2", NUM_IMAGES="40",
                    IMAGE_HEIGHT="96", IMAGE_WIDTH="128")
    # 40 images, 2 ranks, 4 per batch: 5 steps per epoch; 6 steps end in epoch 2.
    code, output = run(["bash", SAGEMAKER / "run_local.sh", "--crop-size", "64", "--batch-size",
                        "4", "--max-steps", "6", "--epochs", "2", "--num-workers", "1",
                        "--log-indices", work / "indices"],
                       cwd=REPO, env=env, timeout=420)
    assert code == 0, output[-6000:]
    return work, output


def test_local_job_builds_once_and_saves_model(local_job):
    work, output = local_job
    assert output.count(BUILDING) == 1, output
    assert output.count(WAITING) == 1, output  # the other rank waited for the build
    assert re.search(r"built in [0-9.]+ s", output)
    builds = list((work / "custom_op_build").glob("*/_C*.so"))  # beside each: its .json record
    assert len(builds) == 1, builds
    assert "DistributedDataParallel: backend gloo, 2 ranks" in output
    assert "reached --max-steps 6" in output
    check_saved_model(work / "model" / "model.pth", ["class_a", "class_b"])


def test_local_job_logs_throughput_on_rank_0(local_job):
    work, output = local_job
    for epoch in (1, 2):
        line = re.search(rf"^\[rank 0/2\] epoch {epoch}/2: .*$", output, re.MULTILINE)
        assert line, output
        assert re.search(r"[0-9.]+ images/s", line.group()) and "step time" in line.group()
    assert "[rank 1/2] epoch" not in output
    metrics = json.loads((work / "output" / "data" / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["steps"] == 6
    assert [e["steps"] for e in metrics["epochs"]] == [5, 1]
    assert [e["images"] for e in metrics["epochs"]] == [40, 8]
    assert all(e["images_per_second"] > 0 and e["step_time_seconds"] > 0
               for e in metrics["epochs"])
    assert len(metrics["custom_op_import_seconds"]) == 2


def test_local_job_ranks_see_disjoint_data(local_job):
    work, _ = local_job
    logs = [json.loads((work / "indices" / f"indices-rank{r}.json").read_text()) for r in (0, 1)]
    assert [log["rank"] for log in logs] == [0, 1]
    assert all(log["world_size"] == 2 and log["dataset_size"] == 40 for log in logs)
    first, second = ([epoch["indices"] for epoch in log["epochs"]] for log in logs)
    assert len(first) == len(second) == 2
    # Epoch 1: each rank saw half the data, no sample twice, nothing in common.
    assert len(first[0]) == len(set(first[0])) == 20
    assert len(second[0]) == len(set(second[0])) == 20
    assert not set(first[0]) & set(second[0])
    assert set(first[0]) | set(second[0]) == set(range(40))
    # Epoch 2 (one step of 4 each): still disjoint, and reshuffled by set_epoch.
    assert len(first[1]) == len(second[1]) == 4
    assert not set(first[1]) & set(second[1])
    assert first[1] != first[0][:4]


# --------------------------------------------------------------------------
# One plain process, no SM_* variables, from a staged source_dir (the layout of
# /opt/ml/code in a job: custom_op next to train.py).
# --------------------------------------------------------------------------

def fake_sdk(tmp_path: Path, body: str) -> Path:
    """A folder holding a `sagemaker` package whose import runs `body`."""
    root = tmp_path / "fake_sdk"
    (root / "sagemaker").mkdir(parents=True, exist_ok=True)
    (root / "sagemaker" / "__init__.py").write_text(body + "\n")
    return root


def dry_run_process(tmp_path: Path, *arguments: str, **env: str) -> subprocess.CompletedProcess:
    guard = fake_sdk(tmp_path, "raise RuntimeError('launch.py --dry-run imported the SDK')")
    return subprocess.run([sys.executable, str(SAGEMAKER / "launch.py"), "--dry-run", *arguments],
                          cwd=tmp_path, env=clean_env(PYTHONPATH=str(guard), **env), timeout=60,
                          capture_output=True, text=True)


def dry_run(tmp_path: Path, *arguments: str) -> tuple[int, str]:
    done = dry_run_process(tmp_path, *arguments)
    return done.returncode, done.stdout + done.stderr


def test_plain_run_with_defaults_from_staged_source_dir(tmp_path):
    # --from-source: the package's sources staged beside train.py, built cold in the job (with a
    # wheel in dist/, the launcher would stage the wheel instead: tests/test_sagemaker_wheel.py).
    stage = tmp_path / "source_dir"
    code, output = dry_run(tmp_path, "--source-dir", str(stage), "--from-source")
    assert code == 0, output
    job = tmp_path / "job"
    make_dataset(job / "data" / "train", 20, 240, 320)  # the default crop is 224
    # No arguments, no SM_*, no PYTHONPATH, no CUSTOM_OP_BUILD_DIR: all defaults.
    code, output = run([sys.executable, stage / "train.py"], cwd=job, env=clean_env(),
                       timeout=300)
    assert code == 0, output[-6000:]
    assert output.count(BUILDING) == 1  # cold: the staged package has never been built
    assert f"from {stage.resolve() / 'custom_op'}" in output  # custom_op next to train.py
    assert "one process on cpu" in output
    assert re.search(r"^\[rank 0/1\] epoch 2/2: .* images/s", output, re.MULTILINE), output
    check_saved_model(job / "model" / "model.pth", ["class_a", "class_b"])
    assert json.loads((job / "output" / "metrics.json").read_text())["world_size"] == 1
    assert list((stage / "custom_op" / "_build").glob("*/_C*"))


# --------------------------------------------------------------------------
# A missing or empty channel folder: a clear message before anything starts.
# --------------------------------------------------------------------------

def run_train(cwd: Path, **env: str) -> tuple[int, str]:
    return run([sys.executable, SAGEMAKER / "train.py"], cwd=cwd, env=clean_env(**env), timeout=60)


def test_missing_default_channel_folder(tmp_path):
    code, output = run_train(tmp_path)
    assert code != 0
    assert f"{tmp_path.resolve() / 'data' / 'train'} does not exist" in output
    assert "SM_CHANNEL_TRAIN" in output
    assert "Traceback" not in output and BUILDING not in output


def test_missing_channel_folder_from_environment(tmp_path):
    missing = tmp_path / "input" / "data" / "train"
    code, output = run_train(tmp_path, SM_CHANNEL_TRAIN=str(missing))
    assert code != 0
    assert f"{missing.resolve()} does not exist" in output and "SM_CHANNEL_TRAIN" in output
    assert "Traceback" not in output


@pytest.mark.parametrize("layout", ["empty", "class folders without images", "loose images"])
def test_empty_channel_folder(tmp_path, layout):
    channel = tmp_path / "channel"
    channel.mkdir()
    if layout == "class folders without images":
        (channel / "cats").mkdir()
        (channel / "dogs").mkdir()
        (channel / "dogs" / "notes.txt").write_text("not an image")
    elif layout == "loose images":
        (channel / "a.jpg").write_bytes(b"\xff\xd8\xff")
    code, output = run_train(tmp_path, SM_CHANNEL_TRAIN=str(channel))
    assert code != 0
    assert f"{channel.resolve()} is empty" in output and "SM_CHANNEL_TRAIN" in output
    if layout == "loose images":
        assert "one subfolder per class" in output
    assert "Traceback" not in output and BUILDING not in output


def test_a_class_folder_without_images_beside_one_with_them(tmp_path):
    """Past the check before torch (a JPEG file is there), JpegFolder's own listing refuses the
    empty class, and train.py says so without a traceback."""
    channel = tmp_path / "channel"
    write_jpeg_folder(channel, 2, 32, 32, classes=("cats",), seed=0)
    (channel / "dogs").mkdir()
    code, output = run_train(tmp_path, SM_CHANNEL_TRAIN=str(channel))
    assert code != 0
    assert f"{channel.resolve()} cannot be read" in output and "dogs" in output
    assert "SM_CHANNEL_TRAIN" in output and "Traceback" not in output


# --------------------------------------------------------------------------
# launch.py --dry-run: the job, without the SDK or AWS.
# --------------------------------------------------------------------------

def dry_run_config(tmp_path: Path, *arguments: str) -> dict:
    done = dry_run_process(tmp_path, "--source-dir", str(tmp_path / "stage"), *arguments)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_dry_run_stages_custom_op_sources(tmp_path):
    config = dry_run_config(tmp_path, "--from-source")
    files = config["source_dir_files"]
    for name in ("train.py", "requirements.txt", "custom_op/__init__.py", "custom_op/_core/_build_script.py",
                 "custom_op/decode_and_crop_jpeg.cpp", "custom_op/csrc/jpeg_decoder.h"):
        assert name in files, files
    assert not [f for f in files if "_build/" in f or "_prebuilt/" in f or "__pycache__" in f
                or f.endswith(".so")]
    assert sorted(str(p.relative_to(tmp_path / "stage")) for p in (tmp_path / "stage").rglob("*")
                  if p.is_file()) == files
    job = config["job"]
    assert job["entry_script"] == "train.py" and job["requirements"] == "requirements.txt"
    assert job["source_dir"] == str((tmp_path / "stage").resolve())
    assert config["source_dir_kept"] is True
    assert job["image"]["framework"] == "pytorch" and job["image"]["py_version"].startswith("py3")
    # A second run replaces its own staging folder.
    assert dry_run_config(tmp_path, "--from-source")["source_dir_files"] == files


def test_dry_run_leaves_no_temporary_folder(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    done = dry_run_process(tmp_path, "--train-s3", "s3://example-bucket/train", "--from-source",
                           TMPDIR=str(scratch))
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    assert config["source_dir_kept"] is False
    assert config["job"]["source_dir"].startswith(str(scratch))
    assert "custom_op/__init__.py" in config["source_dir_files"]
    assert list(scratch.iterdir()) == []


def test_dry_run_warns_without_train_channel(tmp_path):
    done = dry_run_process(tmp_path)
    assert done.returncode == 0
    assert json.loads(done.stdout)["job"]["inputs"] == {"train": None}
    assert "warning: no --train-s3" in done.stderr and "'train' channel" in done.stderr
    with_channel = dry_run_process(tmp_path, "--train-s3", "s3://example-bucket/train",
                                   "--from-source")  # no warning about dist/'s wheel either
    assert with_channel.returncode == 0 and "warning" not in with_channel.stderr


def test_dry_run_multi_gpu_uses_torchrun(tmp_path):
    config = dry_run_config(tmp_path, "--instance-type", "ml.g5.12xlarge", "--instance-count",
                            "2", "--train-s3", "s3://example-bucket/train",
                            "--", "--epochs", "3", "--batch-size", "64", "--lr", "0.05",
                            "--max-steps", "0", "--crop-size", "256")
    job = config["job"]
    assert job["torchrun"] is True
    assert job["instance_type"] == "ml.g5.12xlarge" and job["instance_count"] == 2
    assert config["gpus_per_instance"] == 4 and config["ranks"] == 8
    assert job["hyperparameters"] == {"epochs": 3, "batch-size": 64, "lr": 0.05,
                                      "max-steps": 0, "crop-size": 256}
    assert job["inputs"] == {"train": "s3://example-bucket/train"}
    assert "uri" not in job["image"] and job["environment"] == {}


def test_dry_run_custom_image_and_environment(tmp_path):
    job = dry_run_config(tmp_path, "--image-uri", "example.com/custom_op:1", "--env",
                         "CUSTOM_OP_BUILD_DIR=/opt/custom_op_build")["job"]
    assert job["image"] == {"uri": "example.com/custom_op:1"}
    assert job["environment"] == {"CUSTOM_OP_BUILD_DIR": "/opt/custom_op_build"}


def test_dry_run_multi_gpu_single_instance(tmp_path):
    config = dry_run_config(tmp_path, "--instance-type", "ml.p4d.24xlarge")
    assert config["job"]["torchrun"] is True
    assert config["ranks"] == 8


@pytest.mark.parametrize("instance_type", ["ml.c5.2xlarge", "ml.p3.2xlarge"])
def test_dry_run_single_process_has_no_distribution(tmp_path, instance_type):
    config = dry_run_config(tmp_path, "--instance-type", instance_type, "--instance-count", "1")
    assert config["job"]["torchrun"] is False
    assert config["ranks"] == 1
    assert config["gpus_per_instance"] == (0 if ".c5." in instance_type else 1)


def test_dry_run_refuses_several_cpu_instances(tmp_path):
    code, output = dry_run(tmp_path, "--instance-type", "ml.c5.4xlarge", "--instance-count", "2")
    assert code != 0 and "torchrun" in output and "Traceback" not in output


def test_dry_run_checks_hyperparameters(tmp_path):
    code, output = dry_run(tmp_path, "--", "--epochs", "0")
    assert code != 0 and "--epochs must be at least 1" in output
    code, output = dry_run(tmp_path, "--", "--no-such-option", "1")
    assert code != 0 and "unrecognized arguments" in output
    code, output = dry_run(tmp_path, "--", "--model-dir", "/tmp/x")
    assert code != 0 and "set by SageMaker" in output


def test_launch_without_sdk_says_what_to_install(tmp_path):
    # A stand-in for "not installed": even with the real SDK present, nothing reaches AWS.
    missing = fake_sdk(tmp_path, "raise ImportError('simulated: the SDK is not installed')")
    code, output = run([sys.executable, SAGEMAKER / "launch.py", "--train-s3", "s3://b/train",
                        "--source-dir", tmp_path / "stage"], cwd=tmp_path,
                       env=clean_env(PYTHONPATH=str(missing)), timeout=60)
    assert code != 0
    assert "pip install 'sagemaker>=3'" in output and "--dry-run" in output
    assert "Traceback" not in output
    assert not (tmp_path / "stage").exists(), "staged before finding that the SDK is missing"


# --------------------------------------------------------------------------
# run_local.sh's own work folder.
# --------------------------------------------------------------------------

def test_run_local_removes_its_temporary_work_folder(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # The job stops at train.py's argument check: the folder must go on failure too.
    code, output = run(["bash", SAGEMAKER / "run_local.sh", "--epochs", "0"], cwd=REPO,
                       env=clean_env(PY=sys.executable, TMPDIR=str(scratch), NUM_IMAGES="2",
                                     IMAGE_HEIGHT="32", IMAGE_WIDTH="32"), timeout=300)
    assert code != 0 and "--epochs must be at least 1" in output, output[-3000:]
    assert f"work folder {scratch}" in output
    # (torchrun leaves a torchelastic_* folder of its own there.)
    assert not list(scratch.glob("custom_op-sagemaker-*"))


@pytest.mark.parametrize("env, message", [
    ({"PREPARE": "yes"}, "PREPARE must be none or processing, not 'yes'"),
    ({"PREPARE": "processing"}, "PREPARE=processing needs DATA_FORMAT=webdataset"),
], ids=["unknown", "folder-format"])
def test_run_local_refuses_a_bad_prepare_setting(tmp_path, env, message):
    code, output = run(["bash", SAGEMAKER / "run_local.sh"], cwd=REPO,
                       env=clean_env(PY=sys.executable, TMPDIR=str(tmp_path), **env), timeout=60)
    assert code == 2 and message in output, output
    assert not list(tmp_path.iterdir())  # refused before any work folder or data


# --------------------------------------------------------------------------
# The job object built by the real SDK, v3 and v2 (each installed in a
# throwaway venv kept under .venv/), with the network refused: nothing is
# submitted.
# --------------------------------------------------------------------------

#: Runs launch.py with every socket connection refused.
NETWORK_OFF = """\
import runpy, socket, sys

def refuse(*args, **kwargs):
    raise OSError("the network is off in this test")
socket.socket.connect = refuse
socket.create_connection = refuse
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def sdk_v3_python() -> Path:
    return _sdk_venvs.sdk_python("sagemaker-sdk-v3")


@pytest.fixture(scope="module")
def sdk_v2_python() -> Path:
    return _sdk_venvs.sdk_python("sagemaker-sdk-v2")


def no_submit_with_sdk(sdk_python: Path, tmp_path: Path, launcher: Path,
                       *arguments: str) -> tuple[dict, str]:
    """(``launcher --no-submit ARGUMENTS``'s JSON, its stderr), run with the real SDK, offline.

    Every socket connection is refused, AWS credentials and configuration are
    fake, and the launcher must leave no temporary source_dir behind.
    """
    guard = tmp_path / "network_off.py"
    guard.write_text(NETWORK_OFF)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = clean_env(AWS_DEFAULT_REGION="us-east-1", AWS_ACCESS_KEY_ID="testing",
                    AWS_SECRET_ACCESS_KEY="testing", AWS_EC2_METADATA_DISABLED="true",
                    AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
                    SAGEMAKER_VALIDATE_ROLE="false", TMPDIR=str(scratch))
    done = subprocess.run([str(sdk_python), str(guard), str(launcher), "--no-submit", *arguments],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(scratch.iterdir()) == [], "the temporary source_dir was left behind"
    return json.loads(done.stdout), done.stderr


def build_with_sdk(sdk_python: Path, tmp_path: Path, *arguments: str) -> tuple[dict, str]:
    """(launch.py --no-submit's JSON, its stderr)."""
    return no_submit_with_sdk(sdk_python, tmp_path, SAGEMAKER / "launch.py", "--role",
                              "arn:aws:iam::111122223333:role/Example", "--output-path",
                              "s3://example-bucket/out", *arguments)


def test_sdk_v3_builds_the_torchrun_job(sdk_v3_python, tmp_path):
    job, _ = build_with_sdk(sdk_v3_python, tmp_path, "--train-s3", "s3://example-bucket/train",
                         "--instance-type", "ml.g5.12xlarge", "--instance-count", "2", "--env",
                         "CUSTOM_OP_BUILD_DIR=/opt/custom_op_build", "--", "--epochs", "3")
    assert job["sdk"] == "sagemaker 3.27.0: ModelTrainer"
    assert job["training_image"].endswith(
        ".dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.10.0-gpu-py313")
    assert job["distributed"] == "Torchrun"
    assert job["compute"] == {"instance_type": "ml.g5.12xlarge", "instance_count": 2,
                              "volume_size_in_gb": 30}
    assert job["source_code"]["entry_script"] == "train.py"
    assert job["source_code"]["requirements"] == "requirements.txt"
    assert job["hyperparameters"] == {"epochs": 3}
    assert job["environment"] == {"CUSTOM_OP_BUILD_DIR": "/opt/custom_op_build"}
    assert job["input_data_config"] == [{"channel_name": "train",
                                         "data_source": "s3://example-bucket/train"}]
    assert job["role"] == "arn:aws:iam::111122223333:role/Example"
    assert job["output_path"] == "s3://example-bucket/out"
    assert job["max_runtime_in_seconds"] == 14400
    assert "placeholders" not in job  # everything --no-submit could fill in was given


def test_sdk_v3_builds_a_single_process_job_on_a_custom_image(sdk_v3_python, tmp_path):
    job, _ = build_with_sdk(sdk_v3_python, tmp_path, "--train-s3", "s3://example-bucket/train",
                         "--instance-type", "ml.g5.xlarge", "--image-uri",
                         "111122223333.dkr.ecr.us-east-1.amazonaws.com/custom-op:1")
    assert "distributed" not in job
    assert job["training_image"] == "111122223333.dkr.ecr.us-east-1.amazonaws.com/custom-op:1"


def test_sdk_v2_builds_the_same_torchrun_job(sdk_v2_python, tmp_path):
    job, stderr = build_with_sdk(sdk_v2_python, tmp_path, "--train-s3",
                                 "s3://example-bucket/train", "--instance-type", "ml.g5.12xlarge",
                                 "--instance-count", "2", "--", "--epochs", "3")
    assert job["sdk"] == "sagemaker 2.257.7: PyTorch"
    assert job["training_image"].endswith(
        ".dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-gpu-py312")
    assert job["distribution"] == {"torch_distributed": {"enabled": True}}
    assert job["instance_type"] == "ml.g5.12xlarge" and job["instance_count"] == 2
    assert job["entry_point"] == "train.py" and job["hyperparameters"] == {"epochs": 3}
    assert job["inputs"] == {"train": "s3://example-bucket/train"}
    # One line from launch.py instead of the SDK's deprecation warnings, twice over.
    assert stderr.count("SDK v2") == 1 and "SageMakerV2DeprecationWarning" not in stderr
