"""The native extension's build and loading (custom_op/_core/_loader.py, _build.py,
_build_config.py, build.py): lazy, once per key, safe under concurrency and
kill -9, loud and remembered on failure, loadable without a compiler."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from custom_op._core import _build, _build_config, _build_diagnosis, _loader

REPO = Path(__file__).resolve().parents[1]
BUILD_LINE = "building the native extension"
FIRST_CALL = "import custom_op; print('version', custom_op.libjpeg_version())"


def _env(build_dir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env["CUSTOM_OP_BUILD_DIR"] = str(build_dir)
    env.update(extra)
    return env


def _start(build_dir: Path, code: str = FIRST_CALL, **extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], env=_env(build_dir, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _run(build_dir: Path, code: str = FIRST_CALL, timeout: float = 600,
         **extra: str) -> tuple[int, str]:
    process = _start(build_dir, code, **extra)
    output = process.communicate(timeout=timeout)[0]
    return process.returncode, output


def _built_modules(build_dir: Path) -> list[Path]:
    return sorted(build_dir.glob("*/_C*.so"))


def _fake_compiler(folder: Path, attempts: Path) -> Path:
    """A compiler that answers like the real one but fails, and counts, every compilation."""
    fake = folder / "fake-cc"
    fake.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case " $* " in *" -c "*)
            echo attempt >> {attempts}
            echo "decode_and_crop_jpeg.cpp:1:10: fatal error: jpeglib.h: No such file or directory" >&2
            exit 1;;
        esac
        exec c++ "$@"
        """))
    fake.chmod(0o755)
    return fake


# --------------------------------------------------------------------------
# A cold build folder, filled once as DataLoader workers fill it: the first
# call to build is killed halfway (the OOM killer, a cancelled job), eight more
# first calls start at that moment, and exactly one of them builds, removing
# what the killed one left. The warm tests below load from it.
# --------------------------------------------------------------------------

def _wait_for_compiler(build_dir: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 300
    while not list(build_dir.glob("tmp-*/obj")):
        assert time.monotonic() < deadline and process.poll() is None, "the build never started"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    build_dir = tmp_path_factory.mktemp("cold")
    victim = _start(build_dir)
    _wait_for_compiler(build_dir, victim)
    processes = [_start(build_dir) for _ in range(8)]
    os.killpg(victim.pid, signal.SIGKILL)  # The process and its compiler, mid-build.
    victim.communicate(timeout=60)
    assert _built_modules(build_dir) == [], "a killed build must not leave a module"
    outputs = [p.communicate(timeout=900)[0] for p in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output
        assert "version 2." in output or "version 3." in output, output
    assert sum(output.count(BUILD_LINE) for output in outputs) == 1, "\n".join(outputs)
    return build_dir


def test_concurrent_cold_first_calls_build_once_after_a_killed_build(built):
    assert len(_built_modules(built)) == 1
    assert not list(built.glob("tmp-*")), "the killed build's temporary folder was left behind"
    assert not list(built.glob("*.failed"))


def test_warm_first_call_loads_without_building(built):
    code, output = _run(built, timeout=120)
    assert code == 0 and BUILD_LINE not in output, output


def test_import_in_a_cold_checkout_builds_nothing_and_defines_the_operators(tmp_path):
    """Pure-Python parts import, and transforms are built, with no build and no compiler; the
    public operators exist all the same (defined in Python, their kernels build on first use)."""
    attempts = tmp_path / "attempts"
    fake = _fake_compiler(tmp_path, attempts)
    code, output = _run(tmp_path / "empty", textwrap.dedent("""\
        import sys, torch
        import custom_op, custom_op.datasets, custom_op.transforms
        custom_op.transforms.RandomCropJPEG(8)
        ops = torch.ops.custom_op_jpeg
        print(hasattr(ops, "decode_and_crop_jpeg"), hasattr(ops, "decode_and_resized_crop_jpeg"),
              "custom_op._C" in sys.modules)
        """), timeout=120, CC=str(fake), CXX=str(fake))
    assert code == 0, output
    assert "True True False" in output
    assert BUILD_LINE not in output and not attempts.exists()
    assert not (tmp_path / "empty").exists()


def test_import_loads_an_existing_build(built):
    """With a build for the key, ``import custom_op`` loads it (its operators registered), and
    starts no build."""
    code, output = _run(built, textwrap.dedent("""\
        import sys, torch, custom_op
        print("custom_op._C" in sys.modules, hasattr(torch.ops.custom_op_jpeg, "_decode_batch"))
        """), timeout=120)
    assert code == 0 and "True True" in output and BUILD_LINE not in output, output


def test_warm_first_call_starts_no_process(built):
    # An audit hook sees every way Python starts a process.
    code, output = _run(built, textwrap.dedent("""\
        import sys, time, torch
        events = []
        def hook(event, args):
            if event in ("subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.fork",
                         "os.spawn"):
                events.append(event)
        sys.addaudithook(hook)
        import custom_op, custom_op.build
        data = torch.frombuffer(bytearray(custom_op.build._PROBE_JPEG), dtype=torch.uint8)
        print("size", custom_op.jpeg_size(data))
        print("events", events)
        """), timeout=120)
    assert code == 0, output
    assert "size (8, 16, 3)" in output and "events []" in output, output


def test_build_loads_without_a_compiler(built, tmp_path):
    """A slim image drops its compiler after the build: the key and the load must not need it."""
    empty_path = tmp_path / "bin"
    empty_path.mkdir()
    code, output = _run(built, FIRST_CALL, timeout=120, CC="/nonexistent/cc",
                        CXX="/nonexistent/c++", LDSHARED="/nonexistent/cc -shared",
                        PATH=str(empty_path))
    assert code == 0 and BUILD_LINE not in output, output
    assert shutil.which("c++", path=str(empty_path)) is None


def test_build_command_verifies_a_build(built):
    done = subprocess.run([sys.executable, "-m", "custom_op.build", "--verify", "--into",
                           str(built)], env=_env(Path("/nonexistent")), capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "works (libjpeg-turbo" in done.stdout and str(built) in done.stdout


def test_build_command_verify_without_build_fails(tmp_path):
    done = subprocess.run([sys.executable, "-m", "custom_op.build", "--verify", "--into",
                           str(tmp_path)], env=_env(tmp_path), capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 1
    assert "no build for key" in done.stderr and "python -m custom_op.build" in done.stderr
    assert list(tmp_path.iterdir()) == []


def _slow_compiler(folder: Path, pids: Path) -> Path:
    """A compiler that records its pid and then compiles for ever (a sleep in its place)."""
    fake = folder / "slow-cc"
    fake.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case " $* " in *" -c "*)
            echo $$ >> {pids}
            exec sleep 300;;
        esac
        exec c++ "$@"
        """))
    fake.chmod(0o755)
    return fake


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_compiler_dies_with_a_killed_builder(tmp_path):
    """kill -9 of the process that builds (not of its group): its compiler must not go on."""
    pids = tmp_path / "compiler-pids"
    fake = _slow_compiler(tmp_path, pids)
    builder = _start(tmp_path / "build", CC=str(fake), CXX=str(fake))
    compilers: list[int] = []
    try:
        deadline = time.monotonic() + 300
        while not pids.exists() or not pids.read_text().strip():
            assert time.monotonic() < deadline and builder.poll() is None, "no compiler started"
            time.sleep(0.05)
        compilers = [int(line) for line in pids.read_text().split()]
        os.kill(builder.pid, signal.SIGKILL)
        builder.communicate(timeout=60)
        deadline = time.monotonic() + 15
        while any(_running(pid) for pid in compilers):
            assert time.monotonic() < deadline, "the compiler outlived its builder"
            time.sleep(0.05)
    finally:
        for pid in compilers:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
        if builder.poll() is None:
            builder.kill()


# --------------------------------------------------------------------------
# Failures: said clearly, remembered per key, retried when something changed.
# --------------------------------------------------------------------------

def test_failed_build_is_remembered_across_processes(tmp_path):
    attempts = tmp_path / "attempts"
    fake = _fake_compiler(tmp_path, attempts)
    build_dir = tmp_path / "build"
    processes = [_start(build_dir, CC=str(fake), CXX=str(fake)) for _ in range(4)]
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    assert attempts.read_text().count("attempt") == 1, "\n".join(outputs)
    for process, output in zip(processes, outputs):
        assert process.returncode != 0
        assert "ImportError: custom_op: building the native extension failed" in output, output
        assert "jpeglib.h: No such file or directory" in output  # The compiler's own words...
        assert "apt-get install libjpeg62-turbo-dev" in output  # ...and what to do about them.
        assert ".log)" in output and str(build_dir) in output
    assert _built_modules(build_dir) == []
    marker = next(build_dir.glob("*.failed"))
    assert "jpeglib.h" in json.loads(marker.read_text())["message"]

    # Later, in another process: the same error at once, no compile.
    code, output = _run(build_dir, CC=str(fake), CXX=str(fake))
    assert code != 0 and "is not tried again" in output and str(marker) in output
    assert attempts.read_text().count("attempt") == 1

    # Other compiler settings try again; so does removing the marker.
    code, output = _run(build_dir, CC=str(fake), CXX=str(fake), CXXFLAGS="-O2")
    assert code != 0 and attempts.read_text().count("attempt") == 2
    marker.unlink()
    code, output = _run(build_dir, CC=str(fake), CXX=str(fake))
    assert code != 0 and attempts.read_text().count("attempt") == 3

    # The build command always tries again, and says why it failed.
    done = subprocess.run([sys.executable, "-m", "custom_op.build", "--into", str(build_dir)],
                          env=_env(Path("/nonexistent"), CC=str(fake), CXX=str(fake)),
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 1 and attempts.read_text().count("attempt") == 4
    assert "jpeglib.h: No such file or directory" in done.stderr, done.stderr


def test_the_build_command_in_this_process_says_why_a_compile_failed(tmp_path, monkeypatch,
                                                                     capsys):
    """``python -m custom_op.build``'s main() in this process (the test above runs it as a
    command): a compile that fails is reported with the compiler's words and what to install,
    remembered in its marker, tried again by the command; --verify without a build says what
    to run. Nothing is built (the compiler fails), so make test-quick runs it."""
    import custom_op.build

    attempts = tmp_path / "attempts"
    fake = _fake_compiler(tmp_path, attempts)
    monkeypatch.setenv("CC", str(fake))
    monkeypatch.setenv("CXX", str(fake))
    build_dir = tmp_path / "build"
    for attempt in (1, 2):
        assert custom_op.build.main(["--into", str(build_dir)]) == 1
        error = capsys.readouterr().err
        assert "building the native extension failed" in error, error
        assert "jpeglib.h: No such file or directory" in error and "libjpeg62-turbo-dev" in error
        assert attempts.read_text().count("attempt") == attempt
    assert _built_modules(build_dir) == [] and not list(build_dir.glob("tmp-*"))
    marker = next(build_dir.glob("*.failed"))
    assert "jpeglib.h" in json.loads(marker.read_text())["message"]
    assert custom_op.build.main(["--verify", "--into", str(tmp_path / "none")]) == 1
    assert "no build for key" in capsys.readouterr().err
    assert attempts.read_text().count("attempt") == 2


@pytest.mark.parametrize("output, expected", [
    ("error: command 'g++' failed: No such file or directory", "No C++ compiler"),
    ("x.cpp:1:10: fatal error: Python.h: No such file or directory", "python3-dev"),
    ("x.cpp:1:10: fatal error: jpeglib.h: No such file or directory", "libjpeg62-turbo-dev"),
    ("#error custom_op needs libjpeg-turbo 2.0.6 or newer", "too old"),
    ("/usr/bin/ld: cannot find -ljpeg", "libjpeg.so"),
    ("x.cpp:3:1: error: expected ';'", ""),
], ids=["compiler", "python-headers", "jpeglib", "old-libjpeg", "libjpeg-so", "unknown"])
def test_failure_hints(output, expected):
    hint = _build_diagnosis.hint_for(output)
    assert (expected in hint) if expected else hint == ""


def test_missing_compiler_is_reported_before_compiling(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    message = _build_diagnosis.missing_requirements([])
    assert "No C/C++ compiler" in message and "/nonexistent/c++" in message
    assert "apt-get install g++" in message


def test_missing_python_headers_are_reported(monkeypatch, tmp_path):
    paths = dict(_build_diagnosis.sysconfig.get_paths(), include=str(tmp_path))
    monkeypatch.setattr(_build_diagnosis.sysconfig, "get_paths", lambda: paths)
    message = _build_diagnosis.missing_requirements([])
    assert "Python.h" in message and "python3-dev" in message


def test_missing_jpeg_headers_are_reported(monkeypatch, tmp_path):
    failing = tmp_path / "cc"
    failing.write_text("#!/bin/sh\necho 'fatal error: jpeglib.h: No such file' >&2\nexit 1\n")
    failing.chmod(0o755)
    monkeypatch.setenv("CC", str(failing))
    monkeypatch.setenv("CXX", str(failing))
    assert "libjpeg-turbo8-dev" in _build_diagnosis.missing_requirements([])


def test_requirements_present_here():
    assert _build_diagnosis.missing_requirements(_build_config.include_dirs()) == ""


# --------------------------------------------------------------------------
# The build key, library discovery and where builds go.
# --------------------------------------------------------------------------

def test_build_key_starts_no_process_and_ignores_the_compiler(monkeypatch):
    key = _loader.current_build_key()

    def refuse(*args, **kwargs):
        raise AssertionError("the build key started a process")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    for variable in ("CC", "CXX", "LDSHARED"):
        monkeypatch.setenv(variable, "/nonexistent/compiler")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert _loader.current_build_key() == key


def test_build_key_does_not_depend_on_torch():
    """The module is on torch's stable ABI: another torch's environment computes the same key,
    so it finds and loads the same build. The key is computed there as the build does, by
    loading _build_config by path with that environment's Python and its torch importable."""
    python = REPO / ".venv-torch213" / "bin" / "python"
    assert python.exists(), "make wheel-test-venv makes the torch 2.13 environment"
    code = textwrap.dedent(f"""\
        import importlib.util, torch
        spec = importlib.util.spec_from_file_location("config", {str(_build_config.__file__)!r})
        config = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(config)
        print(torch.__version__, config.build_key())
        """)
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0, done.stderr
    other_torch, other_key = done.stdout.split()
    import torch

    assert other_torch.split("+")[0] != torch.__version__.split("+")[0]
    assert other_key == _build_config.build_key() == _loader.current_build_key()


def test_build_key_covers_the_stable_abi_target(monkeypatch):
    base = _build_config.build_key()
    assert ("TORCH_TARGET_VERSION", "0x020a000000000000") in _build_config.define_macros(base)
    monkeypatch.setattr(_build_config, "TORCH_TARGET_VERSION", (2, 12))
    assert _build_config.build_key() != base


def test_build_key_covers_the_jpeg_prefix(monkeypatch, tmp_path):
    base = _build_config.build_key()
    monkeypatch.setenv("CUSTOM_OP_JPEG_PREFIX", str(tmp_path))
    assert _build_config.build_key() != base


def test_module_is_abi3_and_uses_only_torch_c_shims(built):
    """One binary for every torch and CPython: the module is named abi3 and imports no C++
    symbol of torch's (only the stable C shims, aoti_torch_* and torch_*) and no CPython
    symbol outside the limited API's functions."""
    [module] = _built_modules(built)
    assert module.name == "_C.abi3.so"
    done = subprocess.run(["nm", "-D", "--undefined-only", str(module)], capture_output=True,
                          text=True, check=True)
    symbols = [line.split()[-1] for line in done.stdout.splitlines()]
    torch_cxx = [s for s in symbols if s.startswith(("_ZN3c10", "_ZN2at", "_ZN5torch", "_ZNK3c10",
                                                     "_ZNK2at", "_ZN8pybind11"))]
    assert torch_cxx == []
    assert any(s.startswith("torch_call_dispatcher") for s in symbols)


def test_build_key_covers_every_header():
    """A header left out of the key would let an edit to it load the stale build."""
    headers = {str(path.relative_to(_build_config.PACKAGE_DIR))
               for folder in ("csrc", "binding")
               for path in (_build_config.PACKAGE_DIR / folder).glob("*.h")}
    assert set(_build_config.HEADERS) == headers


def test_jpeg_prefix_is_used(monkeypatch, tmp_path):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "jpeglib.h").write_text("")
    monkeypatch.setenv("CUSTOM_OP_JPEG_PREFIX", str(tmp_path))
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    arguments = _build_config.extension_arguments("k")
    assert str(tmp_path / "include") in arguments["include_dirs"]
    assert arguments["library_dirs"][0] == str(tmp_path / "lib")
    assert f"-Wl,-rpath,{tmp_path / 'lib'}" in arguments["extra_link_args"]


def test_jpeg_prefix_without_headers_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("CUSTOM_OP_JPEG_PREFIX", str(tmp_path))
    with pytest.raises(_build_config.JpegPrefixError, match="has no include/jpeglib.h"):
        _build_config.include_dirs()


def test_pkg_config_dirs_are_used(monkeypatch):
    def pkg_config(argv, **kwargs):
        assert argv[0] == "pkg-config" and argv[-1] == "libjpeg"
        return subprocess.CompletedProcess(argv, 0, "-I/opt/jpeg/include -L/opt/jpeg/lib\n", "")

    monkeypatch.delenv("CUSTOM_OP_JPEG_PREFIX", raising=False)
    monkeypatch.setattr(_build_config.subprocess, "run", pkg_config)
    assert "/opt/jpeg/include" in _build_config.include_dirs()
    assert _build_config.library_dirs() == ["/opt/jpeg/lib"]


def test_build_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("CUSTOM_OP_BUILD_DIR", str(tmp_path / "override"))
    assert _loader.build_root() == tmp_path / "override"
    monkeypatch.delenv("CUSTOM_OP_BUILD_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert _loader.build_root() == _build_config.PACKAGE_DIR / "_build"  # this checkout
    monkeypatch.setattr(_loader.os, "access", lambda path, mode: False)
    assert _loader.build_root() == tmp_path / "cache" / "custom_op"


def test_installed_package_never_builds_inside_itself(monkeypatch, tmp_path):
    monkeypatch.delenv("CUSTOM_OP_BUILD_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(_loader, "is_installed_package", lambda: True)
    assert _loader.build_root() == tmp_path / "cache" / "custom_op"


def test_checkout_is_not_an_installed_package():
    assert not _loader.is_installed_package()


def test_warm_import_and_first_call_cost_less_than_importing_torch(built):
    # A guard against a rebuild or a slow key computation on every start, measured against
    # torch's own import in the same process, so that the machine's speed and load cancel out
    # (make bench measures speed; a build takes many times torch's import).
    code, output = _run(built, "import time; t = time.perf_counter(); import torch; "
                               "torch_s = time.perf_counter() - t; t = time.perf_counter(); "
                               "import custom_op; custom_op.libjpeg_version(); "
                               "print(torch_s, time.perf_counter() - t)",
                        timeout=300)
    assert code == 0, output
    torch_seconds, ours = map(float, output.split()[-2:])
    assert ours < torch_seconds, output


def test_two_checkouts_at_different_paths_build_the_same_module(tmp_path):
    """The same sources and flags build the same bytes wherever the checkout lies: no folder of
    the checkout or of torch is compiled into the module (the headers' __FILE__ in torch's checks
    was). Both copies are made from one read of the sources, which others may be editing, and
    each is built by ``python -m custom_op.build`` from its own folder, as a checkout builds."""
    sources = subprocess.run(["git", "ls-files", "custom_op"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.split()
    contents = {name: (REPO / name).read_bytes() for name in sources if (REPO / name).is_file()}
    modules = []
    for folder in (tmp_path / "a", tmp_path / "somewhere" / "else" / "b"):
        for name, data in contents.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
        build_dir = folder.parent / f"{folder.name}-build"
        done = subprocess.run([sys.executable, "-m", "custom_op.build", "--into", str(build_dir)],
                              cwd=folder, capture_output=True, text=True, timeout=900,
                              env=dict(_env(build_dir), PYTHONPATH=str(folder)))
        assert done.returncode == 0, done.stdout + done.stderr
        [module] = _built_modules(build_dir)
        modules.append(module.read_bytes())
        leaked = str(folder).encode() in modules[-1]
        assert not leaked, f"the module built in {folder} holds that folder's path"
    import torch

    torch_folder = str(Path(torch.__file__).parent)
    leaked = torch_folder.encode() in modules[0]
    assert not leaked, f"the module holds the path of torch's folder, {torch_folder}"
    same = modules[0] == modules[1]
    assert same, "two checkouts at different paths built different modules"
