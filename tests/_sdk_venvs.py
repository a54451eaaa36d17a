"""The SageMaker SDK venvs the launcher tests build jobs with, made once and kept.

Each SDK lives in its own venv under REPO/.venv/<name> (``make clean`` keeps
them), stamped with the requirement it holds: a changed requirement rebuilds
it, an unchanged one is reused by every later run. v3 pulls in over a hundred
packages, so the test session starts building the missing ones in the
background as it starts (conftest.py runs ``python tests/_sdk_venvs.py``)
while other tests run; the fixtures wait for the build under the same file
lock. uv (requirements-dev.txt) makes and fills the venvs: both took 79 s
with pip (69 s of CPU, taken from the tests running beside it), 14 s with
uv. Without uv, pip does it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENVS = REPO / ".venv"
#: venv name -> the SDK it holds.
SDKS = {"sagemaker-sdk-v3": "sagemaker==3.27.0", "sagemaker-sdk-v2": "sagemaker==2.257.7"}


def _stamp(name: str) -> Path:
    return VENVS / name / f".installed-{SDKS[name]}"


def missing() -> list[str]:
    """The SDK venvs not built yet (or built for another requirement)."""
    return [name for name in SDKS if not _stamp(name).exists()]


def sdk_python(name: str) -> Path:
    """The python of the venv ``name``, building it first if needed (under a file lock, so
    parallel workers and the background build make it once)."""
    import filelock

    root = VENVS / name
    python = root / "bin" / "python"
    VENVS.mkdir(exist_ok=True)
    with filelock.FileLock(str(root) + ".lock"):
        if not _stamp(name).exists():
            make_venv, install = _commands(root, python)
            subprocess.run(make_venv, check=True, timeout=300)
            done = subprocess.run(install + [SDKS[name]], capture_output=True, text=True,
                                  timeout=1500)
            if done.returncode != 0:
                raise RuntimeError(f"installing {SDKS[name]} into {root} failed:\n"
                                   f"{done.stdout}{done.stderr}")
            _stamp(name).touch()
    return python


def _commands(root: Path, python: Path) -> tuple[list[str], list[str]]:
    """(the command that makes the venv at ``root``, the one that installs into it), by uv when
    it is installed, else by venv and pip. Neither compiles the SDK's modules to bytecode: the
    tests import a small part of it, which Python compiles on first import."""
    try:
        import uv
        uv_binary = uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        return ([sys.executable, "-m", "venv", "--clear", str(root)],
                [str(python), "-m", "pip", "install", "--quiet", "--no-compile",
                 "--disable-pip-version-check"])
    return ([uv_binary, "venv", "--quiet", "--clear", "--python", sys.executable, str(root)],
            [uv_binary, "pip", "install", "--quiet", "--python", str(python)])


if __name__ == "__main__":
    for venv_name in missing():
        sdk_python(venv_name)
