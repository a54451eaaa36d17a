"""python -m custom_op.check, what ``make check`` runs: it decodes, feeds a DataLoader, says so."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import custom_op

REPO = Path(__file__).resolve().parents[1]


def run_check(tmp_path: Path, *arguments: str,
              **environment: str) -> tuple[subprocess.CompletedProcess, list]:
    """(the check's result, what it left in its TMPDIR)."""
    # A short TMPDIR: DataLoader workers pass tensors over Unix sockets made under it, whose
    # paths may not exceed 107 bytes (a pytest-xdist tmp_path is longer than that).
    scratch = Path(tempfile.mkdtemp(prefix="co-check-"))
    try:
        env = dict(os.environ, PYTHONPATH=str(REPO), TMPDIR=str(scratch), **environment)
        done = subprocess.run([sys.executable, "-m", "custom_op.check", *arguments],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        return done, list(scratch.glob("custom_op-check-*"))
    finally:
        shutil.rmtree(scratch)


def test_check_decodes_a_photo_and_runs_a_dataloader(tmp_path, pillow_photo):
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(pillow_photo)
    store = tmp_path / "index-store"
    done, left = run_check(tmp_path, "--photo", str(photo), "--seconds", "1",
                           CUSTOM_OP_INDEX_STORE=str(store))
    assert done.returncode == 0, done.stdout + done.stderr
    # The check's images are temporary: no index of theirs stays in the user's store.
    assert not store.exists(), sorted(store.rglob("*"))
    out = done.stdout
    assert f"libjpeg-turbo {custom_op.libjpeg_version()}" in out
    assert "photo.jpg: 800 x 533" in out and "equal to that window of a full decode" in out
    assert "2 worker(s):" in out and "uint8 images of 3 x 224 x 224" in out
    assert out.rstrip().endswith("custom_op.check: all good")
    assert not left, "the check's scratch folder was left behind"


def test_check_stops_on_a_photo_it_cannot_decode(tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0 this is not the rest of a JPEG file")
    done, _ = run_check(tmp_path, "--photo", str(broken), "--seconds", "0", "--workers", "0")
    assert done.returncode != 0
    assert "custom_op.JpegDecodeError" in done.stderr and "all good" not in done.stdout


def test_check_explains_a_folder_that_hides_the_installed_package(tmp_path):
    """A clone named custom_op in the current folder makes ``custom_op`` a namespace package when
    the real one comes from an import hook (pip's editable install): the check says so and how to
    get out, instead of failing on a missing attribute. The hook is played here by adding the real
    package's folder to the namespace's path, as the hook resolves its submodules."""
    (tmp_path / "custom_op").mkdir()
    script = ("import sys; sys.path.insert(0, '.'); import custom_op; "
              f"custom_op.__path__.append({str(REPO / 'custom_op')!r}); "
              "import custom_op.check; custom_op.check.main(['--seconds', '0'])")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=""))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"'custom_op' here is the folder {tmp_path / 'custom_op'}" in done.stderr
    assert "Run the check from another folder" in done.stderr
    assert "Traceback" not in done.stderr


#: Runs the check with some modules hidden: a module set to None in sys.modules is one that
#: ``import`` refuses and ``importlib.util.find_spec`` reports as absent, as for an environment
#: where it was never installed. argv[1] names them, the rest goes to the check.
HIDING_CHECK = """
import runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
sys.argv = ["custom_op.check", *sys.argv[2:]]
runpy.run_module("custom_op.check", run_name="__main__")
"""


def run_check_without(tmp_path: Path, hidden: str, *arguments: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", HIDING_CHECK, hidden, *arguments], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)


def test_check_without_torchvision_runs_what_needs_torch_alone_and_names_the_rest(tmp_path,
                                                                                  pillow_photo):
    """Without torchvision (and Pillow) the check still loads the extension and decodes windows,
    then says what it skipped and the command that installs it, which keeps the installed torch,
    and exits 0: an install of the core alone is a working install."""
    # The version pip compares, which may lack the local label torch.__version__ carries.
    torch_version = importlib.metadata.version("torch")
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(pillow_photo)
    done = run_check_without(tmp_path, "torchvision,PIL", "--photo", str(photo))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    out = done.stdout
    assert f"libjpeg-turbo {custom_op.libjpeg_version()}" in out
    assert "a JPEG file that custom_op carries" in out
    assert out.count("equal to that window of a full decode") == 2  # its own JPEG and the photo
    assert "photo.jpg: 800 x 533" in out
    assert "Skipped: writing a small image folder and running a DataLoader over it" in out
    assert f"pip install 'custom_op[torchvision]' 'torch=={torch_version}'" in out
    assert "worker(s):" not in out
    assert out.rstrip().endswith("the torchvision steps were skipped")


def test_check_without_torchvision_decodes_a_photo_written_by_pillow(tmp_path):
    done = run_check_without(tmp_path, "torchvision")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a JPEG file written by Pillow's encoder" in done.stdout
    assert "written.jpg: 640 x 480" in done.stdout
    assert "equal to that window of a full decode" in done.stdout


def test_check_without_torchvision_still_fails_on_a_photo_it_cannot_decode(tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0 this is not the rest of a JPEG file")
    done = run_check_without(tmp_path, "torchvision", "--photo", str(broken))
    assert done.returncode != 0
    assert "custom_op.JpegDecodeError" in done.stderr and "all good" not in done.stdout
