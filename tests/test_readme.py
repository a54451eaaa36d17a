"""The README's shell commands, as a new user types them in a fresh clone.

Every command of the README's ``sh`` blocks must be known here, so a new one
cannot go untested: the ones that run offline are run as written (prepare, the
SageMaker launchers with --dry-run added); pip's install line is the one
tests/test_install.py runs in a throwaway venv, followed by the quick check;
the rest are checked against what the Makefile installs and builds.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from test_install import README_PIP_INSTALL

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
SUDO = "$(command -v sudo)"


def readme_commands() -> list[str]:
    """Every command of the README's sh blocks: continuations joined, comments dropped,
    ``a && b`` split in two."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", README, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"):
                commands += [part.strip() for part in line.split("&&")]
    return commands


def makefile_text() -> str:
    return "\n".join(path.read_text() for path in
                     (REPO / "Makefile", REPO / "fuzz" / "fuzz.mk", REPO / "sagemaker" / "sagemaker.mk"))


def run_python(arguments: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, *arguments], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def check_apt_get(words: list[str], tmp_path: Path) -> None:
    assert words[0] == SUDO, "apt-get without $(command -v sudo): it fails either as a user " \
                             "or in a container without sudo"
    if words[2] == "update":
        return
    assert words[2:4] == ["install", "-y"]
    packages = set(words[4:])
    assert {"build-essential", "python3-dev"} <= packages  # the compiler, Python.h
    jpeg = packages - {"build-essential", "python3-dev"}
    assert len(jpeg) == 1 and f"apt-get install -y -qq {jpeg.pop()}" in makefile_text()


def check_pip(words: list[str], tmp_path: Path) -> None:
    if words[2].startswith("torch=="):
        # The tested pair: what make test and make bench install on x86-64.
        assert f"TORCH_PINS ?= {' '.join(words[2:])}\n" in makefile_text()
        return
    if words[1:] == ["install", "dist/custom_op-*.whl"]:
        # What `make wheel` writes (checked by check_make); tests/test_wheel.py installs it.
        assert "-w dist build/wheel-raw/custom_op-*.whl" in makefile_text()
        return
    assert tuple(words[1:-1]) == README_PIP_INSTALL and words[-1] == ".", words


#: The clone's folder: not custom_op, which from its parent folder would be found as a
#: namespace package before an editable install of the real one.
CLONE = "custom_op-src"


def check_git(words: list[str], tmp_path: Path) -> None:
    assert words[1] == "clone" and words[-1] == CLONE


def check_cd(words: list[str], tmp_path: Path) -> None:
    assert words[1] in (CLONE, "..")


def check_make(words: list[str], tmp_path: Path) -> None:
    assert re.search(rf"^{re.escape(words[1])}:", makefile_text(), flags=re.M), words


def check_python(words: list[str], tmp_path: Path) -> None:
    arguments = words[1:]
    if arguments[:2] == ["-m", "custom_op.check"]:
        # Run by test_install on the installed package and by test_check: the options parse.
        assert arguments[2:] == [], arguments
        return
    if arguments[:2] == ["-m", "custom_op.prepare"]:
        source = tmp_path / arguments[2]
        source.mkdir(parents=True)
        from conftest import RECIPES, encode_recipe
        for index, recipe in enumerate(list(RECIPES.values())[:2]):
            (source / f"{index}.jpg").write_bytes(encode_recipe(recipe))
        done = run_python(arguments, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert sorted(p.name for p in (tmp_path / arguments[3]).iterdir()) == ["0.jpg", "1.jpg"]
        return
    script = arguments[0]
    assert script in ("sagemaker/launch.py", "sagemaker/launch_prepare.py"), arguments
    cut = arguments.index("--") if "--" in arguments else len(arguments)
    done = run_python([*arguments[:cut], "--dry-run", *arguments[cut:]], cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr


HANDLERS = {"apt-get": check_apt_get, "pip": check_pip, "git": check_git, "cd": check_cd,
            "make": check_make, "python": check_python}


def test_no_command_assumes_sudo():
    for command in readme_commands():
        assert not command.startswith("sudo "), command


def test_the_quickstart_installs_torch_before_custom_op_and_then_checks():
    commands = readme_commands()
    torch_line = next(i for i, c in enumerate(commands) if c.startswith("pip install torch=="))
    build_line = commands.index("pip install --no-build-isolation .")
    assert torch_line < build_line < commands.index("python -m custom_op.check")
    assert commands.index("cd ..") == build_line + 1  # the check imports the install, not the checkout


@pytest.mark.parametrize("command", readme_commands(), ids=lambda c: c[:40])
def test_readme_command(command, tmp_path):
    words = shlex.split(command.replace(SUDO, "SUDO"))
    words = [SUDO if word == "SUDO" else word for word in words]
    name = words[1] if words[0] == SUDO else words[0]
    assert name in HANDLERS, f"a README command no test knows: {command}"
    HANDLERS[name](words, tmp_path)
