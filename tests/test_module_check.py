"""A damaged module in a build folder is never loaded (issue 26, item 9).

A truncated ``_C*.so`` (an interrupted copy of a build folder, a full disk)
killed the first decode with SIGBUS, and ``python -m custom_op.build`` died the
same way instead of rebuilding; a garbage file gave an ImportError on every
call. Now the loader checks the module first (the size and hash its build
recorded; without a record, that it is a whole ELF file), removes a damaged
one and builds again, or says exactly what to delete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from custom_op._core import _build_config, _loader, _module_check

REPO = Path(__file__).resolve().parents[1]
#: Decodes the probe JPEG of python -m custom_op.build (no other input needed).
DECODE = ("import torch, custom_op, custom_op.build as b\n"
          "data = torch.frombuffer(bytearray(b._PROBE_JPEG), dtype=torch.uint8)\n"
          "print('shape', tuple(custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 16).shape))\n")


@pytest.fixture(scope="module")
def built_module(native_extension) -> Path:
    """The module this checkout loads (built on first use)."""
    return Path(sys.modules[_loader.MODULE_NAME].__file__)


def _env(build_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTOM_OP_")}
    env.update(PYTHONPATH=str(REPO), CUSTOM_OP_BUILD_DIR=str(build_dir), **extra)
    return env


def _damaged_folder(tmp_path: Path, module: Path, cut: int | None, record: bool) -> Path:
    """A build folder holding ``module`` for this key, cut to ``cut`` bytes (None: garbage)."""
    key = _loader.current_build_key()
    target = _build_config.module_path(tmp_path / "builds", key)
    target.parent.mkdir(parents=True)
    data = module.read_bytes()
    target.write_bytes(data[:cut] if cut is not None else b"not a module " * 1000)
    if record:
        record_of_whole = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        _module_check.record_path(target).write_text(json.dumps(record_of_whole))
    return target


def test_a_whole_module_passes_with_and_without_its_record(built_module, tmp_path):
    copy = tmp_path / built_module.name
    shutil.copy(built_module, copy)
    assert _module_check.damage(copy) == ""  # no record: the ELF check
    _module_check.write_record(copy)
    assert _module_check.damage(copy) == ""


@pytest.mark.parametrize("fraction", [2, 3, 4, 1000])
@pytest.mark.parametrize("record", [True, False], ids=["record", "no-record"])
def test_a_truncated_module_is_found(built_module, tmp_path, fraction, record):
    size = built_module.stat().st_size
    cut = size - size // fraction  # 1000: the last few hundred bytes (the section table)
    target = _damaged_folder(tmp_path, built_module, cut, record)
    problem = _module_check.damage(target)
    assert problem.startswith(f"{cut} bytes where" if record else "cut short"), problem


def test_a_changed_byte_is_found_by_the_record(built_module, tmp_path):
    target = _damaged_folder(tmp_path, built_module, None, record=True)
    data = bytearray(built_module.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    assert "differs" in _module_check.damage(target)


def test_garbage_is_found_without_a_record(built_module, tmp_path):
    target = _damaged_folder(tmp_path, built_module, None, record=False)
    assert _module_check.damage(target) == "not an ELF shared object"


@pytest.mark.parametrize("cut", [2, None], ids=["half", "garbage"])
def test_the_first_decode_removes_a_damaged_build_instead_of_crashing(built_module, tmp_path, cut):
    # The compiler is missing, so the rebuild fails at once: what matters is
    # that nothing loads the damaged file (before: SIGBUS, exit -7, no message).
    target = _damaged_folder(tmp_path, built_module,
                             None if cut is None else built_module.stat().st_size // cut, False)
    done = subprocess.run([sys.executable, "-c", DECODE], capture_output=True, text=True,
                          timeout=600, env=_env(tmp_path / "builds", CC="/nonexistent/cc",
                                                CXX="/nonexistent/c++"))
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert f"removed a damaged build {target}" in done.stderr, done.stderr[-2000:]
    assert "ImportError" in done.stderr and "compiler was found" in done.stderr
    assert not target.exists()


def test_a_damaged_build_that_cannot_be_removed_says_what_to_delete(built_module, tmp_path,
                                                                     monkeypatch):
    # Tests run as root here, which any folder lets write: refuse the removal instead.
    target = _damaged_folder(tmp_path, built_module, built_module.stat().st_size // 2, False)

    def refuse(*_):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_module_check, "_remove_if_still_damaged", refuse)
    with pytest.raises(ImportError) as raised:
        _module_check.usable_build(target, target.parent.parent, target.parent.name)
    assert f"rm -r '{target.parent}'" in str(raised.value)
    assert target.exists()


def test_a_damaged_installed_module_asks_for_a_reinstall(built_module, tmp_path, monkeypatch):
    target = _damaged_folder(tmp_path, built_module, built_module.stat().st_size // 2, False)
    monkeypatch.setattr(_module_check, "_INSTALLED_ROOT", target.parent.parent.resolve())
    with pytest.raises(ImportError, match="Reinstall custom_op"):
        _module_check.usable_build(target, target.parent.parent, target.parent.name)
    assert target.exists()


def test_the_build_command_repairs_a_truncated_build(built_module, tmp_path):
    target = _damaged_folder(tmp_path, built_module, built_module.stat().st_size // 3, False)
    done = subprocess.run([sys.executable, "-m", "custom_op.build", "--into",
                           str(tmp_path / "builds")], capture_output=True, text=True,
                          timeout=1800, env=_env(tmp_path / "builds"))
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert "removed a damaged build" in done.stderr and "works" in done.stdout
    assert _module_check.damage(target) == "" and target.with_name(target.name + ".json").exists()
    decoded = subprocess.run([sys.executable, "-c", DECODE], capture_output=True, text=True,
                             timeout=600, env=_env(tmp_path / "builds"))
    assert "shape (3, 8, 16)" in decoded.stdout, decoded.stderr[-2000:]
