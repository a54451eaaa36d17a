"""``pip install .`` as a user runs it: the extension is built at install time,
the installed package works from any folder without building again, and
``pip uninstall`` leaves nothing behind; without a compiler the install says
what is missing.

Each test installs a copy of the repository into a throwaway venv that sees
this environment's packages (torch, numpy, ...) through a .pth file, so
nothing is downloaded (pip runs with --no-index).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD_LINE = "building the native extension"
#: The README's install command, which these tests run (with --no-index, and a path for ".").
README_PIP_INSTALL = ("install", "--no-build-isolation")
#: What pip needs to build and install the package: no tests, no build products.
SOURCE_FILES = ("pyproject.toml", "setup.py", "README.md", "LICENSE")
IGNORED = shutil.ignore_patterns("_build", "_prebuilt", "__pycache__", "*.egg-info", "*.so")


def _clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CUSTOM_OP_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["XDG_CACHE_HOME"] = str(tmp / "cache")  # where a JIT build of the installed package would go
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(extra)
    return env


class Venv:
    """A venv whose own site-packages starts empty and which borrows this one's packages."""

    def __init__(self, root: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                       timeout=120)
        self.python = root / "bin" / "python"
        self.site = Path(subprocess.run(
            [str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True).stdout.strip())
        (self.site / "_borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    def pip(self, *arguments: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
        # This environment's pip, acting on the venv's interpreter.
        return subprocess.run([sys.executable, "-m", "pip", "--python", str(self.python),
                               *arguments], env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=1200)

    def run(self, code: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.python), "-c", code], env=env, cwd=cwd,
                              capture_output=True, text=True, timeout=300)

    def own_files(self) -> list[str]:
        return sorted(p.name for p in self.site.iterdir() if p.name != "_borrowed.pth")


def _copy_source(target: Path) -> Path:
    target.mkdir()
    for name in SOURCE_FILES:
        shutil.copy2(REPO / name, target / name)
    shutil.copytree(REPO / "custom_op", target / "custom_op", ignore=IGNORED)
    return target


def _jpeg_prefix(root: Path) -> Path:
    """A libjpeg-turbo prefix made of links to the system's headers (the library stays the system's)."""
    include = root / "include"
    include.mkdir(parents=True)
    for header in ("jpeglib.h", "jmorecfg.h", "jerror.h"):
        system = Path("/usr/include") / header
        assert system.exists(), f"{system} is needed for this test"
        (include / header).symlink_to(system)
    return root


@pytest.fixture
def venv(tmp_path) -> Venv:
    return Venv(tmp_path / "venv")


def test_install_builds_then_works_anywhere_then_uninstalls_cleanly(tmp_path, venv):
    source = _copy_source(tmp_path / "source")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _clean_env(tmp_path)
    installed = venv.pip(*README_PIP_INSTALL, "--no-index", str(source), env=env, cwd=elsewhere)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    package = venv.site / "custom_op"
    assert len(list(package.glob("_prebuilt/*/_C*.so"))) == 1
    assert (package / "py.typed").exists()

    used = venv.run("import custom_op, custom_op.build, torch\n"
                    "print('from', custom_op.__file__)\n"
                    "data = torch.frombuffer(bytearray(custom_op.build._PROBE_JPEG), "
                    "dtype=torch.uint8)\n"
                    "print('shape', tuple(custom_op.decode_and_crop_jpeg(data, 0, 0, 4, 4).shape))",
                    env=env, cwd=elsewhere)
    assert used.returncode == 0, used.stderr
    assert f"from {package / '__init__.py'}" in used.stdout
    assert "shape (3, 4, 4)" in used.stdout
    assert BUILD_LINE not in used.stderr, used.stderr
    assert not (tmp_path / "cache").exists(), "the installed build was not used"
    prepare = venv.run("import runpy, sys; sys.argv = ['prepare', '--help']; "
                       "runpy.run_module('custom_op.prepare', run_name='__main__')",
                       env=env, cwd=elsewhere)
    assert prepare.returncode == 0 and "usage" in prepare.stdout, prepare.stderr
    # The README's next command: the quick check, from outside the checkout, on the install.
    checked = subprocess.run([str(venv.python), "-m", "custom_op.check", "--seconds", "1"],
                             env=env, cwd=elsewhere, capture_output=True, text=True, timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"extension from {package / '_prebuilt'}" in checked.stdout, checked.stdout
    assert checked.stdout.rstrip().endswith("all good") and BUILD_LINE not in checked.stderr

    # The build environment changes under the installed module (here: another libjpeg
    # prefix): the module the package was installed with is still the one used (its
    # manifest, _prebuilt/shipped.json, names it; it links the library it was built
    # against), and nothing is built.
    prefix = _jpeg_prefix(tmp_path / "jpeg")
    changed = venv.run("import sys, custom_op; print('version', custom_op.libjpeg_version()); "
                       "print('module', sys.modules['custom_op._C'].__file__)",
                       env=dict(env, CUSTOM_OP_JPEG_PREFIX=str(prefix)), cwd=elsewhere)
    assert changed.returncode == 0, changed.stderr
    assert BUILD_LINE not in changed.stderr, changed.stderr
    assert f"module {package / '_prebuilt'}" in changed.stdout, changed.stdout
    assert not (tmp_path / "cache" / "custom_op").exists()
    # No build folder inside site-packages: the package's own folders only.
    assert sorted(p.name for p in package.iterdir() if p.is_dir()) == [
        "__pycache__", "_core", "_decode", "_index", "_prebuilt", "_timm", "_torchvision", "binding",
        "csrc", "datasets", "lane", "prepare", "ray"]

    removed = venv.pip("uninstall", "--yes", "custom_op", env=env, cwd=elsewhere)
    assert removed.returncode == 0, removed.stderr
    assert venv.own_files() == [], "pip uninstall left files behind"
    gone = venv.run("import custom_op", env=env, cwd=elsewhere)
    assert "ModuleNotFoundError" in gone.stderr


def test_install_without_compiler_says_what_is_missing(tmp_path, venv):
    source = _copy_source(tmp_path / "source")
    env = _clean_env(tmp_path, CC="/nonexistent/cc", CXX="/nonexistent/c++")
    failed = venv.pip("install", "--no-build-isolation", "--no-index", str(source), env=env,
                      cwd=tmp_path)
    output = failed.stdout + failed.stderr
    assert failed.returncode != 0
    assert "No C/C++ compiler was found" in output and "apt-get install g++" in output, output
    assert "CUSTOM_OP_SKIP_BUILD=1" in output
    assert venv.own_files() == []


def test_install_without_the_build_when_asked(tmp_path, venv):
    source = _copy_source(tmp_path / "source")
    env = _clean_env(tmp_path, CC="/nonexistent/cc", CXX="/nonexistent/c++",
                     CUSTOM_OP_SKIP_BUILD="1")
    installed = venv.pip("install", "--no-build-isolation", "--no-index", str(source), env=env,
                         cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert not list((venv.site / "custom_op").glob("_prebuilt/*"))
    # The Python parts work; the build command says there is nothing to load yet.
    verify = subprocess.run([str(venv.python), "-m", "custom_op.build", "--verify"], env=env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert verify.returncode == 1 and "no build for key" in verify.stderr, verify.stderr
    assert str(tmp_path / "cache" / "custom_op") in verify.stderr
