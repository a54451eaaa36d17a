"""The just-in-time build (custom_op/_build.py): once per key, safe under
concurrency and kill -9, loud on failure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from custom_op import _build, _build_config

REPO = Path(__file__).resolve().parents[1]
BUILD_LINE = "building the native extension"


def _env(build_dir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env["CUSTOM_OP_BUILD_DIR"] = str(build_dir)
    env.update(extra)
    return env


def _start_import(build_dir: Path, code: str = "import custom_op", **extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], env=_env(build_dir, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _built_modules(build_dir: Path) -> list[Path]:
    return sorted(build_dir.glob("*/_C*.so"))


def test_concurrent_cold_imports_build_once(tmp_path):
    code = "import custom_op; print('version', custom_op.libjpeg_version())"
    processes = [_start_import(tmp_path, code) for _ in range(8)]
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output
        assert "version 2." in output or "version 3." in output, output
    builds = sum(output.count(BUILD_LINE) for output in outputs)
    assert builds == 1, "\n".join(outputs)
    assert len(_built_modules(tmp_path)) == 1
    assert not list(tmp_path.glob("tmp-*")), "temporary build folders left behind"

    # Warm: a new process loads the existing build without building again.
    warm = _start_import(tmp_path, code)
    output = warm.communicate(timeout=120)[0]
    assert warm.returncode == 0 and BUILD_LINE not in output, output


def test_build_killed_halfway_does_not_break_later_imports(tmp_path):
    victim = _start_import(tmp_path)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("tmp-*/obj")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.glob("tmp-*")), "the build never started"
    os.killpg(victim.pid, signal.SIGKILL)  # The importer and its compiler, mid-build.
    victim.communicate(timeout=60)
    assert _built_modules(tmp_path) == [], "a killed build must not leave a module"

    survivor = _start_import(tmp_path, "import custom_op; print(custom_op.jpeg_size)")
    output = survivor.communicate(timeout=600)[0]
    assert survivor.returncode == 0, output
    assert output.count(BUILD_LINE) == 1, output
    assert len(_built_modules(tmp_path)) == 1
    assert not list(tmp_path.glob("tmp-*")), "the stale temporary folder was not removed"


def test_failed_build_raises_importerror_with_compiler_output(tmp_path):
    fake = tmp_path / "fake-cc"
    fake.write_text(textwrap.dedent("""\
        #!/bin/sh
        # Answers version queries like the real compiler, fails every compilation.
        case " $* " in *" -c "*)
            echo "decode_and_crop_jpeg.cpp:1:10: fatal error: jpeglib.h: No such file or directory" >&2
            exit 1;;
        esac
        exec c++ "$@"
        """))
    fake.chmod(0o755)
    process = _start_import(tmp_path / "build", CC=str(fake), CXX=str(fake))
    output = process.communicate(timeout=300)[0]
    assert process.returncode != 0
    assert "ImportError" in output
    assert "jpeglib.h: No such file or directory" in output  # The compiler's own words...
    assert "apt-get install libjpeg62-turbo-dev" in output  # ...and what to do about them.
    assert _built_modules(tmp_path / "build") == []


def test_build_key_covers_the_compiler(monkeypatch):
    key = _build.current_build_key()
    assert key == _build.current_build_key()
    monkeypatch.setenv("CXX", "/nonexistent/other-c++")
    assert _build.current_build_key() != key


def test_build_key_covers_torch_version_and_abi():
    base = _build_config.build_key("2.14.1", "abc", True)
    assert _build_config.build_key("2.14.2", "abc", True) != base
    assert _build_config.build_key("2.14.1", "abc", False) != base


def test_build_key_covers_every_header():
    """A header left out of the key would let an edit to it load the stale build."""
    headers = {str(path.relative_to(_build_config.PACKAGE_DIR))
               for folder in ("csrc", "binding")
               for path in (_build_config.PACKAGE_DIR / folder).glob("*.h")}
    assert set(_build_config.HEADERS) == headers


def test_build_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("CUSTOM_OP_BUILD_DIR", str(tmp_path / "override"))
    assert _build.build_root() == tmp_path / "override"
    monkeypatch.delenv("CUSTOM_OP_BUILD_DIR")
    monkeypatch.setattr(_build.os, "access", lambda path, mode: False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert _build.build_root() == tmp_path / "cache" / "custom_op"


def test_warm_import_is_fast():
    # A generous guard against a rebuild or a slow key computation on every import.
    code = ("import time, torch; t = time.perf_counter(); import custom_op; "
            "print(time.perf_counter() - t)")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.split()[-1]) < 1.0
