"""Preparing shards with a SageMaker Processing job: the launcher (sagemaker/launch_prepare.py),
the job's entry point (sagemaker/prepare_job.py) and the local two-instance run
(sagemaker/simulate_processing.py).

Nothing contacts AWS: --dry-run runs with a fake ``sagemaker`` package that
fails if imported, and the real SDKs (v3 and v2, in the throwaway venvs
test_sagemaker.py makes) build the job object with every socket refused.
The simulation builds custom_op once into a folder shared by its tests.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

# The fixtures sdk_v2_python and sdk_v3_python are imported for pytest to find.
from test_sagemaker import (check_saved_model, clean_env, fake_sdk,  # noqa: F401
                            no_submit_with_sdk, run, sdk_v2_python, sdk_v3_python)
from test_train_shards import train

REPO = Path(__file__).resolve().parent.parent
SAGEMAKER = REPO / "sagemaker"
LAUNCHER = SAGEMAKER / "launch_prepare.py"
INPUT, OUTPUT = "s3://example-bucket/shards/train", "s3://example-bucket/prepared/train"
ROLE = "arn:aws:iam::111122223333:role/Example"
BUILDING = "building the native extension"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", SAGEMAKER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------
# launch_prepare.py --dry-run: the job, without the SDK or AWS.
# --------------------------------------------------------------------------

def dry_run(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess:
    guard = fake_sdk(tmp_path, "raise RuntimeError('launch_prepare.py --dry-run imported the SDK')")
    return subprocess.run([sys.executable, str(LAUNCHER), "--dry-run", *arguments], cwd=tmp_path,
                          env=clean_env(PYTHONPATH=str(guard)), timeout=60, capture_output=True,
                          text=True)


def dry_run_config(tmp_path: Path, *arguments: str) -> dict:
    done = dry_run(tmp_path, "--input-s3", INPUT, "--output-s3", OUTPUT, "--source-dir",
                   str(tmp_path / "stage"), *arguments)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_dry_run_plans_a_sharded_job_on_each_instance(tmp_path):
    config = dry_run_config(tmp_path, "--instance-count", "4")
    job = config["job"]
    assert job["entry_script"] == "prepare_job.py" and job["requirements"] == "requirements.txt"
    assert job["input"] == {"name": "shards", "s3_uri": INPUT, "distribution": "ShardedByS3Key",
                            "local_path": "/opt/ml/processing/input/data"}
    assert job["output"] == {"name": "prepared", "s3_uri": OUTPUT, "upload_mode": "EndOfJob",
                             "local_path": "/opt/ml/processing/output/data"}
    assert job["instance_type"] == "ml.c5.4xlarge" and job["instance_count"] == 4
    assert job["arguments"] == []  # prepare's own defaults: every core, no --verify
    assert job["image"] == {"framework": "pytorch", "version": "2.10.0", "py_version": "py313",
                            "image_scope": "training"}  # the training launcher's default
    assert config["command_on_each_instance"] == ("python -m custom_op.prepare "
                                                  "/opt/ml/processing/input/data "
                                                  "/opt/ml/processing/output/data")


def test_dry_run_stages_the_entry_point_and_custom_op(tmp_path):
    files = dry_run_config(tmp_path, "--from-source")["source_dir_files"]
    for name in ("prepare_job.py", "requirements.txt", "custom_op/build.py",
                 "custom_op/prepare/cli.py", "custom_op/decode_and_crop_jpeg.cpp"):
        assert name in files, files
    assert "train.py" not in files
    assert (tmp_path / "stage" / "requirements.txt").read_text() == \
        (SAGEMAKER / "requirements-prepare.txt").read_text()


def test_dry_run_passes_prepare_options_and_image(tmp_path):
    job = dry_run_config(tmp_path, "--workers", "15", "--verify",
                         "--image-uri", "example.com/custom_op:1", "--env",
                         "CUSTOM_OP_BUILD_DIR=/opt/custom_op_build", "--volume-size", "60")["job"]
    assert job["arguments"] == ["--workers", "15", "--verify"]
    assert job["image"] == {"uri": "example.com/custom_op:1"}
    assert job["environment"] == {"CUSTOM_OP_BUILD_DIR": "/opt/custom_op_build"}
    assert job["volume_size_in_gb"] == 60


@pytest.mark.parametrize("arguments, message", [
    (["--output-s3", OUTPUT], "--input-s3"),
    (["--input-s3", "/data/shards", "--output-s3", OUTPUT], "'/data/shards'"),
    (["--input-s3", INPUT, "--output-s3", INPUT + "/"], "must differ from --input-s3"),
    (["--input-s3", INPUT, "--output-s3", OUTPUT, "--instance-count", "0"], "at least 1"),
    (["--input-s3", INPUT, "--output-s3", OUTPUT, "--workers", "0"], "got 0"),
], ids=["no-input", "not-s3", "same-prefix", "no-instances", "no-workers"])
def test_dry_run_refuses_bad_arguments(tmp_path, arguments, message):
    done = dry_run(tmp_path, *arguments)
    assert done.returncode != 0
    assert message in done.stderr and "Traceback" not in done.stderr


def test_launch_without_sdk_says_what_to_install(tmp_path):
    missing = fake_sdk(tmp_path, "raise ImportError('simulated: the SDK is not installed')")
    code, output = run([sys.executable, LAUNCHER, "--input-s3", INPUT, "--output-s3", OUTPUT,
                        "--source-dir", tmp_path / "stage"], cwd=tmp_path,
                       env=clean_env(PYTHONPATH=str(missing)), timeout=60)
    assert code != 0
    assert "pip install 'sagemaker>=3'" in output and "--dry-run" in output
    assert "Traceback" not in output and not (tmp_path / "stage").exists()


# --------------------------------------------------------------------------
# The job object built by the real SDK v3 and v2, the network refused.
# --------------------------------------------------------------------------

def build_with_sdk(sdk_python: Path, tmp_path: Path, *arguments: str) -> tuple[dict, str]:
    """(launch_prepare.py --no-submit's JSON, its stderr)."""
    return no_submit_with_sdk(sdk_python, tmp_path, LAUNCHER, "--role", ROLE, "--input-s3", INPUT,
                              "--output-s3", OUTPUT, *arguments)


#: The S3 input and output in the API's request form, as both SDKs send them.
SHARDED_INPUT = {"InputName": "shards", "S3Input": {
    "S3Uri": INPUT, "LocalPath": "/opt/ml/processing/input/data", "S3DataType": "S3Prefix",
    "S3InputMode": "File", "S3DataDistributionType": "ShardedByS3Key"}}
UPLOADED_OUTPUT = {"OutputName": "prepared", "S3Output": {
    "S3Uri": OUTPUT, "LocalPath": "/opt/ml/processing/output/data", "S3UploadMode": "EndOfJob"}}


def without_defaults(request: dict, *names: str) -> dict:
    """The request with v2's explicit defaults (AppManaged, S3CompressionType) left out."""
    kept = {k: v for k, v in request.items() if k not in names}
    for key in ("S3Input", "S3Output"):
        if key in kept:
            kept[key] = {k: v for k, v in kept[key].items() if k not in names}
    return kept


def test_sdk_v3_builds_the_processing_job(sdk_v3_python, tmp_path):
    job, _ = build_with_sdk(sdk_v3_python, tmp_path, "--instance-count", "8", "--verify",
                            "--env", "CUSTOM_OP_BUILD_DIR=/opt/custom_op_build")
    assert job["sdk"] == "sagemaker 3.27.0: FrameworkProcessor"
    assert job["image_uri"].endswith(
        ".dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.10.0-cpu-py313")
    assert job["instance_type"] == "ml.c5.4xlarge" and job["instance_count"] == 8
    assert job["role"] == ROLE and job["base_job_name"] == "custom-op-prepare"
    assert job["code"] == "prepare_job.py" and job["requirements"] == "requirements.txt"
    assert job["arguments"] == ["--verify"]
    assert job["env"] == {"CUSTOM_OP_BUILD_DIR": "/opt/custom_op_build"}
    assert job["inputs"] == [SHARDED_INPUT] and job["outputs"] == [UPLOADED_OUTPUT]
    assert job["volume_size_in_gb"] == 100 and job["max_runtime_in_seconds"] == 14400


def test_sdk_v3_builds_the_job_on_a_custom_image(sdk_v3_python, tmp_path):
    uri = "111122223333.dkr.ecr.us-east-1.amazonaws.com/custom-op:1"
    job, _ = build_with_sdk(sdk_v3_python, tmp_path, "--image-uri", uri)
    assert job["image_uri"] == uri


def test_sdk_v2_builds_the_same_processing_job(sdk_v2_python, tmp_path):
    job, stderr = build_with_sdk(sdk_v2_python, tmp_path, "--instance-count", "8", "--verify")
    assert job["sdk"] == "sagemaker 2.257.7: PyTorchProcessor"
    assert job["image_uri"].endswith(
        ".dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-cpu-py312")
    assert job["instance_type"] == "ml.c5.4xlarge" and job["instance_count"] == 8
    assert job["code"] == "prepare_job.py" and job["arguments"] == ["--verify"]
    defaults = ("AppManaged", "S3CompressionType")
    assert [without_defaults(i, *defaults) for i in job["inputs"]] == [SHARDED_INPUT]
    assert [without_defaults(o, *defaults) for o in job["outputs"]] == [UPLOADED_OUTPUT]
    assert stderr.count("SDK v2") == 1


# --------------------------------------------------------------------------
# The local run: N instances over their shares, the union checked.
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def build_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("processing_build")


def simulate(work: Path, build: Path, *arguments: str) -> tuple[int, str, dict]:
    code, output = run([sys.executable, SAGEMAKER / "simulate_processing.py", work, *arguments],
                       cwd=REPO, env=clean_env(CUSTOM_OP_BUILD_DIR=str(build)), timeout=600)
    report = json.loads((work / "report.json").read_text()) if (work / "report.json").exists() \
        else {}
    return code, output, report


@pytest.fixture(scope="module")
def two_instances(tmp_path_factory, build_dir):
    work = tmp_path_factory.mktemp("processing") / "work"
    return (work, *simulate(work, build_dir, "--instances", "2", "--images", "40",
                            "--samples-per-shard", "8", "--verify"))


def test_two_instances_prepare_the_whole_dataset_once(two_instances):
    work, code, output, report = two_instances
    assert code == 0, output[-6000:]
    assert report["problems"] == []
    shares = [set(instance["keys"]) for instance in report["instances"]]
    assert len(shares) == 2 and all(shares) and not shares[0] & shares[1]
    assert shares[0] | shares[1] == set(report["keys"]) == {f"train-{n:06d}.tar" for n in range(5)}
    assert sorted(p.name for p in (work / "s3-output").iterdir()) == sorted(report["keys"])
    assert "passed: the union of 2 outputs is the one-machine prepared dataset" in output


def test_two_instances_verify_and_build_once(two_instances):
    work, *_ = two_instances
    logs = [(work / f"instance-{n}" / "job.log").read_text() for n in (0, 1)]
    for log, instance in zip(logs, ("instance-0", "instance-1")):
        assert f"custom_op.prepare {work / instance / 'input' / 'data'}" in log
        assert "--verify" in log and "failed verification  0" in log
        assert "shards refused       0" in log
    assert sum(log.count(BUILDING) for log in logs) <= 1  # the shared build folder


def test_prepared_shards_keep_their_members(two_instances):
    work, *_ = two_instances
    for shard in sorted((work / "s3-input").glob("*.tar")):
        with tarfile.open(shard) as original, \
                tarfile.open(work / "s3-output" / shard.name) as prepared:
            assert original.getnames() == prepared.getnames()
            assert [n for n in prepared.getnames() if n.endswith(".jpg")]


def test_more_instances_than_shards(tmp_path, build_dir):
    code, output, report = simulate(tmp_path / "work", build_dir, "--instances", "3", "--images",
                                    "8", "--samples-per-shard", "4")
    assert code == 0, output[-6000:]
    assert [len(instance["keys"]) for instance in report["instances"]] == [1, 1, 0]
    assert [instance["exit_status"] for instance in report["instances"]] == [0, 0, 0]


def test_a_truncated_shard_fails_its_instance_and_is_not_uploaded(tmp_path, build_dir):
    shards = tmp_path / "shards"
    code, output = run([sys.executable, SAGEMAKER / "make_dataset.py", shards, "--shards",
                        "--images", "12", "--samples-per-shard", "4"], cwd=REPO, env=clean_env(),
                       timeout=120)
    assert code == 0, output
    cut = shards / "train-000001.tar"
    cut.write_bytes(cut.read_bytes()[:cut.stat().st_size // 2])
    code, output, report = simulate(tmp_path / "work", build_dir, "--shards-from", str(shards))
    assert code == 1
    # Keys are dealt round-robin: train-000001.tar went to instance 1.
    assert [instance["exit_status"] for instance in report["instances"]] == [0, 1]
    assert "missing from the outputs: train-000001.tar" in report["problems"]
    log = (tmp_path / "work" / "instance-1" / "job.log").read_text()
    assert "shards refused       1 (nothing written)" in log and "train-000001.tar" in log
    assert not list((tmp_path / "work" / "instance-1" / "output" / "data").iterdir())
    assert "FAILED" in output


# --------------------------------------------------------------------------
# End to end: the instances' uploaded outputs train two ranks.
# --------------------------------------------------------------------------

def shard_keys(folder: Path) -> dict[int, str]:
    """Sample key number -> the name of the shard holding its JPEG, for every shard in folder."""
    owners = {}
    for shard in sorted(folder.glob("*.tar")):
        with tarfile.open(shard) as archive:
            owners.update({int(name.split(".")[0]): shard.name for name in archive.getnames()
                           if name.endswith(".jpg")})
    return owners


def jpeg_members_seekable(shard: Path) -> list[bool]:
    import custom_op

    with tarfile.open(shard) as archive:
        return [custom_op.seekable(archive.extractfile(member).read())
                for member in archive.getmembers() if member.name.endswith(".jpg")]


@pytest.fixture(scope="module")
def trained_from_prepared(two_instances, tmp_path_factory):
    """train.py --data-format webdataset on 2 ranks over s3-output, the union the instances
    uploaded: 40 samples in 5 shards (3 for rank 0, 2 for rank 1), 4 steps of 4 per rank."""
    work, code, output, _ = two_instances
    assert code == 0, output[-6000:]
    job = tmp_path_factory.mktemp("trained_from_prepared")
    # The later --train wins over the helper's own: the ranks read the uploaded folder itself.
    code, output = train(job, "--train", work / "s3-output", "--epochs", 1, "--max-steps", 4,
                         "--num-workers", 1, "--log-indices", job / "indices", ranks=2)
    assert code == 0, output[-6000:]
    return work, job, output


def test_prepared_shards_train_two_ranks(trained_from_prepared):
    work, job, output = trained_from_prepared
    # train.py names the folder it read: the uploaded union, not the instances' input.
    assert f"data: 40 JPEG files in 2 classes in 5 shards in {work / 's3-output'}" in output
    assert "DistributedDataParallel: backend gloo, 2 ranks" in output
    metrics = json.loads((job / "output" / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["steps"] == 4
    assert [(epoch["steps"], epoch["images"]) for epoch in metrics["epochs"]] == [(4, 32)]
    check_saved_model(job / "model" / "model.pth", ["0", "1"])


def test_ranks_read_disjoint_prepared_shards(trained_from_prepared):
    work, job, _ = trained_from_prepared
    owners = shard_keys(work / "s3-output")
    assert sorted(owners) == list(range(40))
    seen = [json.loads((job / "indices" / f"indices-rank{rank}.json").read_text())
            ["epochs"][0]["indices"] for rank in (0, 1)]
    for indices in seen:
        assert len(indices) == len(set(indices)) == 16
        assert set(indices) <= set(owners)
    # Split by shard: no shard, let alone a sample, is read by both ranks.
    shards = [{owners[index] for index in indices} for indices in seen]
    assert shards[0] and shards[1] and not shards[0] & shards[1]


def test_the_shards_trained_on_are_the_prepared_copies(trained_from_prepared):
    work, *_ = trained_from_prepared
    for shard in sorted((work / "s3-output").glob("*.tar")):
        original = work / "s3-input" / shard.name
        assert shard.read_bytes() != original.read_bytes()
        # Pillow's JPEGs have no restart markers; prepare's copies can be seeked into.
        assert not any(jpeg_members_seekable(original))
        assert all(jpeg_members_seekable(shard)) and jpeg_members_seekable(shard)


# --------------------------------------------------------------------------
# The simulation's own pieces: dealing keys, the upload, the check.
# --------------------------------------------------------------------------

@pytest.mark.parametrize("instances", [1, 2, 3, 7])
def test_keys_are_dealt_to_exactly_one_instance(instances):
    keys = [f"train-{n:06d}.tar" for n in range(5)] + ["extra/notes.txt"]
    shares = load("simulate_processing").deal_keys(keys, instances)
    assert len(shares) == instances
    assert sorted(key for share in shares for key in share) == sorted(keys)
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def write_tar(path: Path, members: dict[str, bytes]) -> None:
    import io

    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


@pytest.fixture
def folders(tmp_path) -> tuple[Path, Path, Path]:
    """(input, union, one-machine run), all three holding the same two shards."""
    roots = tuple(tmp_path / name for name in ("input", "union", "reference"))
    for root in roots:
        write_tar(root / "a.tar", {"1.jpg": b"x", "1.cls": b"0"})
        write_tar(root / "b.tar", {"2.jpg": b"y", "2.cls": b"1"})
    return roots


def test_check_union_passes_on_the_same_dataset(folders):
    assert load("simulate_processing").check_union(*folders) == []


@pytest.mark.parametrize("damage, problem", [
    ("missing", "missing from the outputs: b.tar"),
    ("extra", "not in the input: c.tar"),
    ("bytes", "b.tar differs from the one-machine run's"),
    ("members", "b.tar holds other members than its input"),
])
def test_check_union_finds(folders, damage, problem):
    source, union, reference = folders
    if damage == "missing":
        (union / "b.tar").unlink()
    elif damage == "extra":
        write_tar(union / "c.tar", {"3.jpg": b"z"})
    elif damage == "bytes":
        write_tar(union / "b.tar", {"2.jpg": b"Y", "2.cls": b"1"})
    else:
        for root in (union, reference):
            write_tar(root / "b.tar", {"2.cls": b"1", "2.jpg": b"y"})
    assert problem in load("simulate_processing").check_union(source, union, reference)


def test_upload_refuses_a_key_written_twice(tmp_path):
    for number in (0, 1):
        (tmp_path / f"out{number}" / "a.tar").parent.mkdir(parents=True)
        (tmp_path / f"out{number}" / "a.tar").write_bytes(b"tar")
    problems = load("simulate_processing").upload([tmp_path / "out0", tmp_path / "out1"],
                                                  tmp_path / "s3")
    assert problems == ["a.tar was written by instance 0 and by 1"]


# --------------------------------------------------------------------------
# prepare_job.py's own checks.
# --------------------------------------------------------------------------

def test_prepare_job_without_its_input_folder(tmp_path):
    code, output = run([sys.executable, SAGEMAKER / "prepare_job.py", "--input",
                        tmp_path / "missing", "--output", tmp_path / "out"], cwd=tmp_path,
                       env=clean_env(), timeout=60)
    assert code == 2
    assert f"the input folder {tmp_path / 'missing'} does not exist" in output
    assert BUILDING not in output and "Traceback" not in output


def test_prepare_job_names_its_instance(tmp_path):
    job = load("prepare_job")
    config = tmp_path / "resourceconfig.json"
    config.write_text(json.dumps({"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}))
    assert job.instance_name(config) == "algo-2 of 2"
    assert job.instance_name(tmp_path / "missing.json") == "this machine"
