"""Building custom_op's native extension into a build folder, once per key.

custom_op/_core/_loader.py calls :func:`build` when no build exists for the current
key (see _build_config.build_key), and so does ``python -m custom_op.build``.

Concurrency. Any number of processes (DataLoader workers, torchrun ranks) may
need the extension at once. A finished build is a single file that appears by
an atomic rename, so a process that sees it loads it without locking. Without
it, processes take an exclusive file lock (flock, which the kernel releases
when its holder dies, even by kill -9); the first one builds in a private
temporary folder and renames the result into place, the others wait, see the
file, and load it. A build killed halfway leaves only a temporary folder,
removed by the next build, never a half-written module, and no compiler: the
compiler runs under custom_op/_core/_build_guard.py, which kills it when the
process that started the build dies, even by kill -9.

Failures are remembered. A failed build leaves ``<key>.failed`` beside its
log ``<key>.log``; every later attempt for the same key, in any process, with
the same compiler settings, raises the same ImportError at once instead of
compiling again (eight DataLoader workers must not mean eight failed
compiles). Changing the key (sources, flags, libjpeg prefix) or the compiler
settings (CC, CXX, flags, PATH), removing the marker, or running
``python -m custom_op.build`` tries again.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import _build_config, _module_check
from ._build_diagnosis import hint_for

#: How long a process waits for another one's build before giving up.
LOCK_TIMEOUT_SECONDS = float(os.environ.get("CUSTOM_OP_BUILD_TIMEOUT", "1800"))
#: Variables that change how the compiler runs: a failure remembered under
#: other values of these is tried again.
COMPILER_VARIABLES = ("CC", "CXX", "LDSHARED", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS",
                      "CPATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "PKG_CONFIG_PATH", "PATH")


def build(root: Path, key: str, *, retry_failed: bool = False) -> Path:
    """Builds the extension for ``key`` under ``root`` unless it is there.

    Args:
        root: the build folder (CUSTOM_OP_BUILD_DIR, the user cache, ...).
        key: the current build key.
        retry_failed: ignore (and replace) a remembered failure.

    Returns:
        The path of the built module.

    Raises:
        ImportError: the build failed now or, with the same settings, before.
    """
    target = _build_config.module_path(root, key)
    if not retry_failed:
        _raise_if_failed_before(root, key)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ImportError(f"custom_op: cannot create the build folder {root}: {error}. "
                         "Set CUSTOM_OP_BUILD_DIR to a writable folder.") from error
    import filelock  # Only building needs it; a warm start should not pay for its import.

    lock = filelock.FileLock(str(root / f"{key}.lock"))
    _acquire(lock, root)
    try:
        if target.exists():  # Another process built it while we waited.
            return target
        if not retry_failed:  # ...or failed to, while we waited.
            _raise_if_failed_before(root, key)
        _remove_stale_temporaries(root, key)
        _compile(root, key, target)
    finally:
        lock.release()
    return target


def _acquire(lock, root: Path) -> None:
    import filelock

    try:
        lock.acquire(timeout=0)
        return
    except filelock.Timeout:
        log(f"waiting for another process to finish building the extension in {root} ...")
    try:
        lock.acquire(timeout=LOCK_TIMEOUT_SECONDS)
    except filelock.Timeout as error:
        raise ImportError(
            f"custom_op: gave up after {LOCK_TIMEOUT_SECONDS:.0f} s waiting for the build lock "
            f"{lock.lock_file} (CUSTOM_OP_BUILD_TIMEOUT sets the limit)") from error


def _remove_stale_temporaries(root: Path, key: str) -> None:
    # Only builds killed halfway leave these; we hold the lock, so none is in use.
    for stale in root.glob(f"tmp-{key}-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _compile(root: Path, key: str, target: Path) -> None:
    log(f"building the native extension in {root / key} (once per environment: it serves "
        "every torch from its stable-ABI target on) ...")
    started = time.monotonic()
    log_path = root / f"{key}.log"
    work = Path(tempfile.mkdtemp(prefix=f"tmp-{key}-", dir=root))
    try:
        command = [sys.executable, str(_build_config.PACKAGE_DIR / "_core" / "_build_script.py"), "build_ext",
                   "--build-lib", str(work / "lib"), "--build-temp", str(work / "obj")]
        done = _run_guarded(command)
        log_path.write_text(f"$ {' '.join(command)}\n{_build_config.compiler_identity()}\n\n"
                            f"{done.stdout}")
        if done.returncode != 0:
            _fail(root, key, _failure_message(done.stdout, log_path))
        built = list((work / "lib" / "custom_op").glob("_C*"))
        if len(built) != 1:
            _fail(root, key, f"custom_op: the build produced {built}, expected one module "
                             f"(this is a bug in custom_op); log: {log_path}")
        target.parent.mkdir(parents=True, exist_ok=True)
        _module_check.write_record(built[0], target)  # What the loader checks before loading.
        os.replace(built[0], target)  # Atomic: readers see no module or a whole one.
        failure_marker(root, key).unlink(missing_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"built in {time.monotonic() - started:.1f} s")


def _run_guarded(command: list[str]) -> subprocess.CompletedProcess:
    """Runs ``command`` (its output captured) so that it and its compilers die with this process.

    On POSIX the command runs under _build_guard.py in a process group of its
    own: the guard kills the group when this process dies, and this process
    kills it when it is interrupted (Ctrl-C, an exception). Elsewhere it runs
    as a plain child.
    """
    guarded = os.name == "posix"
    if guarded:
        command = [sys.executable, "-I", str(Path(__file__).resolve().with_name("_build_guard.py")),
                   str(os.getpid()), *command]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, cwd=str(_build_config.PACKAGE_DIR),
                               start_new_session=guarded)
    try:
        output, _ = process.communicate()
    except BaseException:
        if guarded:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
        process.wait()
        raise
    return subprocess.CompletedProcess(command, process.returncode, output)


def _failure_message(output: str, log_path: Path) -> str:
    return (f"custom_op: building the native extension failed (full log: {log_path}).\n"
            f"{hint_for(output)}--- compiler output (end) ---\n{output[-6000:]}")


def failure_marker(root: Path, key: str) -> Path:
    """The file that remembers a failed build for ``key``."""
    return root / f"{key}.failed"


def _compiler_settings() -> dict[str, str]:
    return {name: os.environ.get(name, "") for name in COMPILER_VARIABLES}


def _fail(root: Path, key: str, message: str) -> None:
    """Remembers the failure for other processes, then raises it."""
    marker = failure_marker(root, key)
    record = {"message": message, "settings": _compiler_settings(), "time": time.time()}
    partial = marker.with_name(f"{marker.name}.{os.getpid()}")
    try:
        partial.write_text(json.dumps(record))
        os.replace(partial, marker)  # Atomic: readers see no marker or a whole one.
    except OSError as error:  # Not remembering must not hide the build's own error.
        log(f"could not write {marker}: {error}")
    raise ImportError(message)


def _raise_if_failed_before(root: Path, key: str) -> None:
    marker = failure_marker(root, key)
    try:
        record = json.loads(marker.read_text())
    except (OSError, ValueError):
        return  # No marker, or one cut short: build again.
    if record.get("settings") != _compiler_settings():
        return
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.get("time", 0)))
    raise ImportError(f"{record.get('message', '')}\n"
                     f"(This build failed at {when} and is not tried again with the same "
                     f"settings. Fix the cause, then remove {marker} or run "
                     "`python -m custom_op.build`.)")


def log(message: str) -> None:
    """One line on stderr, with the process id: several workers may be building."""
    print(f"custom_op [pid {os.getpid()}]: {message}", file=sys.stderr, flush=True)
