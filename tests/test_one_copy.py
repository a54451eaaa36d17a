"""One definition of the operators per process: a namespace another library took, a second copy
of the module, and ``python -m custom_op.build --into DIR`` beside a loaded build each raise an
ImportError that says what happened (or work), and never kill the process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import custom_op
from custom_op._core import _build_config, _native

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = _build_config.OPERATOR_NAMESPACE


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})


@pytest.fixture(scope="module")
def loaded_build() -> Path:
    """The folder of the build this checkout uses (built on the first decode if need be)."""
    return Path(_native.module().__file__).parent


@pytest.fixture()
def copied_build(loaded_build, tmp_path) -> Path:
    """A build folder holding a copy of that build: the same key, another file."""
    root = tmp_path / "copy"
    shutil.copytree(loaded_build, root / loaded_build.name)
    return root


def test_operators_live_in_a_namespace_of_their_own():
    assert NAMESPACE == "custom_op_jpeg"
    assert custom_op.decode_and_crop_jpeg is not None
    import torch

    assert hasattr(getattr(torch.ops, NAMESPACE), "_decode_batch")


def test_another_librarys_custom_op_namespace_does_not_matter(loaded_build):
    """The generic name of vendor example code, defined before the import: decodes work."""
    done = _run(f"""\
        import torch
        other = torch.library.Library("custom_op", "DEF")
        other.define("bar(Tensor x) -> Tensor")
        import custom_op
        from custom_op.build import _PROBE_JPEG
        print(tuple(custom_op.decode_and_crop_jpeg(_PROBE_JPEG, 0, 0, 8, 16).shape))
        """, CUSTOM_OP_BUILD_DIR=str(loaded_build.parent))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(3, 8, 16)"


def test_a_taken_namespace_raises_import_error_naming_it(loaded_build):
    done = _run(f"""\
        import torch
        other = torch.library.Library({NAMESPACE!r}, "DEF")
        other.define("foo(Tensor x) -> Tensor")
        import custom_op
        for attempt in range(2):
            try:
                custom_op.jpeg_size(b"\\xff\\xd8")
            except ImportError as error:
                print("ImportError:", error)
        """, CUSTOM_OP_BUILD_DIR=str(loaded_build.parent))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("ImportError: custom_op: another library in this process has "
                               f"already defined the operator namespace {NAMESPACE!r}"), line
        assert "Only a single TORCH_LIBRARY" in line


def test_a_second_copy_of_the_module_raises_import_error(copied_build, loaded_build):
    from custom_op._core import _loader

    key = loaded_build.name
    second = _build_config.module_path(copied_build, key)
    with pytest.raises(ImportError, match="a copy of the native module is already loaded in "
                                          "this process") as raised:
        _loader.load_module(second, key)
    assert str(second) in str(raised.value)
    assert str(loaded_build) in str(raised.value)


def test_build_into_a_folder_beside_a_loaded_build_checks_it_in_a_new_process(copied_build,
                                                                              loaded_build):
    """``import custom_op`` loads the environment's build; the folder's copy is checked apart."""
    done = subprocess.run([sys.executable, "-m", "custom_op.build", "--into", str(copied_build)],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO),
                               "CUSTOM_OP_BUILD_DIR": str(loaded_build.parent)})
    assert done.returncode == 0, done.stderr
    copy = _build_config.module_path(copied_build, loaded_build.name)
    assert f"at {copy} works (libjpeg-turbo" in done.stdout, done.stdout
