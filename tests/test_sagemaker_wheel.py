"""The SageMaker launchers ship custom_op's wheel (issue 23, item 5).

The job's source_dir holds the wheel, and the staged requirements.txt names
it, so the container installs the native module before the entry script
starts: no custom_op sources (they would shadow the wheel on sys.path), no
libjpeg header script, nothing compiled. A wheel that cannot run in the
job's image (its Python tag, the torch its manifest names) stops a launch
before anything is uploaded. The wheels here are small stand-ins with the
real name layout and manifest; tests/test_wheel.py installs the real one.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAGEMAKER = REPO / "sagemaker"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"sagemaker_{name}_under_test",
                                                  SAGEMAKER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


job_wheel = _load("job_wheel")


def fake_wheel(folder: Path, tags: str = "cp39-abi3", torch_minimum: str | None = "2.10",
               torch_built: str = "2.13.0+cpu") -> Path:
    """A wheel file with the name layout and manifest of `make wheel`'s."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"custom_op-0.1.0-{tags}-manylinux_2_34_x86_64.whl"
    manifest = {"key": "k", "module": "k/_C.abi3.so", "torch_built": torch_built,
                "torch_git": "", "torch_minimum": torch_minimum, "libjpeg": "static 3.1.0"}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(job_wheel.MANIFEST, json.dumps(manifest))
    return path


def dry_run(tmp_path: Path, launcher: str, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SAGEMAKER / launcher), "--dry-run",
                           "--source-dir", str(tmp_path / "stage"), *arguments], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def test_the_training_job_stages_the_wheel_and_no_sources(tmp_path):
    wheel = fake_wheel(tmp_path / "dist")
    done = dry_run(tmp_path, "launch.py", "--wheel", str(wheel), "--train-s3", "s3://b/train")
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    assert config["custom_op"] == wheel.name
    assert config["source_dir_files"] == sorted(["requirements.txt", "train.py", wheel.name])
    requirements = (tmp_path / "stage" / "requirements.txt").read_text().splitlines()
    assert requirements[-1] == f"./{wheel.name}"
    assert "webdataset>=1.0" in requirements  # train.py's own requirements stay
    assert "warning" not in done.stderr  # abi3, torch 2.10 and newer: the default image fits


def test_the_processing_job_stages_the_wheel_and_no_header_script(tmp_path):
    wheel = fake_wheel(tmp_path / "dist")
    done = dry_run(tmp_path, "launch_prepare.py", "--wheel", str(wheel), "--input-s3",
                   "s3://b/in", "--output-s3", "s3://b/out")
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    assert config["source_dir_files"] == sorted(["prepare_job.py", "requirements.txt",
                                                 wheel.name])
    requirements = (tmp_path / "stage" / "requirements.txt").read_text().splitlines()
    assert "tqdm" in requirements and requirements[-1] == f"./{wheel.name}"


def test_the_header_install_is_gone_from_the_processing_entry():
    prepare_job = _load("prepare_job")
    with pytest.raises(SystemExit):
        prepare_job.build_parser().parse_args(["--install-jpeg-headers"])
    assert not (SAGEMAKER / "jpeg_headers.py").exists()


@pytest.mark.parametrize("tags, minimum, built, image, problem", [
    ("cp39-abi3", "2.10", "2.13.0+cpu", ("2.10.0", "py313"), ""),
    ("cp39-abi3", "2.11", "2.13.0+cpu", ("2.10.0", "py313"),
     "runs on torch 2.11 or newer, the image has 2.10.0"),
    ("cp311-cp311", "2.10", "2.13.0+cpu", ("2.10.0", "py313"),
     "for CPython cp311 only, the image has py313"),
    ("cp310-abi3", "2.10", "2.13.0+cpu", ("2.10.0", "py39"),
     "needs CPython cp310 or newer, the image has py39"),
    ("cp311-cp311", None, "2.13.0+cpu", ("2.10.0", "py311"),
     "runs only on the torch it was built against (2.13.0+cpu"),
    ("cp311-cp311", None, "2.13.0+cpu", ("2.13.0", "py311"), ""),
], ids=["fits", "old-torch", "other-python", "old-python", "exact-torch", "same-torch"])
def test_a_wheel_is_checked_against_the_image(tmp_path, tags, minimum, built, image, problem):
    wheel = fake_wheel(tmp_path, tags, minimum, built)
    found = job_wheel.image_problem(wheel, *image)
    assert (problem in found) if problem else found == "", found


def test_a_launch_stops_on_a_wheel_the_image_cannot_run(tmp_path):
    launch = _load("launch")
    wheel = fake_wheel(tmp_path, torch_minimum="2.11")
    args = argparse.Namespace(from_source=False, wheel=str(wheel), image_uri=None,
                              framework_version=None, py_version=None, dry_run=False,
                              no_submit=False)
    with pytest.raises(SystemExit, match="torch 2.11 or newer, the image has 2.10.0"):
        launch.job_wheel(args, ("2.10.0", "py313"))
    args.framework_version = "2.11.0"
    assert launch.job_wheel(args, ("2.10.0", "py313")) == wheel
    args.from_source = True
    assert launch.job_wheel(args, ("2.10.0", "py313")) is None


def test_a_launch_without_any_wheel_says_to_make_one(tmp_path, monkeypatch):
    launch = _load("launch")
    wheels = launch.load_sibling("job_wheel")
    monkeypatch.setattr(launch, "load_sibling", lambda name: wheels)
    monkeypatch.setattr(wheels, "DIST", tmp_path)
    args = argparse.Namespace(from_source=False, wheel=None, image_uri=None,
                              framework_version=None, py_version=None, dry_run=False,
                              no_submit=False)
    with pytest.raises(SystemExit, match="make wheel"):
        launch.job_wheel(args, ("2.10.0", "py313"))
