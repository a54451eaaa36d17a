"""The SageMaker SDK venvs the launcher tests build jobs with, made once and kept.

Each SDK lives in its own venv under REPO/.venv/<name> (``make clean`` keeps
them), stamped with the requirement it holds: a changed requirement rebuilds
it, an unchanged one is reused by every later run. Installing an SDK takes
minutes (v3 pulls in over a hundred packages), so the test session starts
building the missing ones in the background as it starts (conftest.py runs
``python tests/_sdk_venvs.py``) while other tests run; the fixtures wait for
the build under the same file lock.
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
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True,
                           timeout=300)
            # --no-compile: the tests import a small part of the SDK; Python compiles that
            # on first import instead of pip compiling every module of every package.
            done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-compile",
                                   "--disable-pip-version-check", SDKS[name]],
                                  capture_output=True, text=True, timeout=1500)
            if done.returncode != 0:
                raise RuntimeError(f"installing {SDKS[name]} into {root} failed:\n"
                                   f"{done.stdout}{done.stderr}")
            _stamp(name).touch()
    return python


if __name__ == "__main__":
    for venv_name in missing():
        sdk_python(venv_name)
