"""The just-in-time build of custom_op's native extension.

``import custom_op`` calls :func:`load_extension`, which returns the compiled
module ``custom_op._C``, building it first if this environment has no build
for the current build key (sources, torch version and ABI, compiler: see
_build_config.build_key).

Concurrency. Any number of processes (DataLoader workers, torchrun ranks) may
import at once. A finished build is a single file that appears by an atomic
rename, so a process that sees it can load it without locking: that is the
warm path. On the cold path, processes take an exclusive file lock (flock,
which the kernel releases when its holder dies, even by kill -9); the first
one builds in a private temporary folder and renames the result into place,
the others wait, see the file, and load it. A build killed halfway leaves only
a temporary folder, removed by the next build, never a half-written module.

Where. CUSTOM_OP_BUILD_DIR if set; else the ``_build`` folder inside the
package when the package folder is writable; else a per-user cache folder
($XDG_CACHE_HOME/custom_op, by default ~/.cache/custom_op).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import ModuleType

import filelock
import torch

from . import _build_config

MODULE_NAME = "custom_op._C"
#: How long a process waits for another one's build before giving up.
LOCK_TIMEOUT_SECONDS = float(os.environ.get("CUSTOM_OP_BUILD_TIMEOUT", "1800"))

_MISSING_JPEG_HINT = (
    "libjpeg-turbo's development headers (jpeglib.h) were not found. Install them:\n"
    "  Debian:        apt-get install libjpeg62-turbo-dev\n"
    "  Ubuntu:        apt-get install libjpeg-turbo8-dev\n"
    "  Fedora/RHEL:   dnf install libjpeg-turbo-devel\n"
    "  conda:         conda install -c conda-forge libjpeg-turbo  (with the environment activated)\n"
)


def current_build_key() -> str:
    return _build_config.build_key(torch.__version__, torch.version.git_version or "",
                                   bool(torch._C._GLIBCXX_USE_CXX11_ABI))


def build_root() -> Path:
    """The folder that holds builds: see the module docstring."""
    override = os.environ.get("CUSTOM_OP_BUILD_DIR")
    if override:
        return Path(override).expanduser()
    package_dir = _build_config.PACKAGE_DIR
    if os.access(package_dir, os.W_OK):
        return package_dir / "_build"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "custom_op"


def module_path(root: Path, key: str) -> Path:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return root / key / f"_C{suffix}"


def load_extension() -> ModuleType:
    """Returns custom_op._C, building it once per build key if needed."""
    key = current_build_key()
    root = build_root()
    target = module_path(root, key)
    if not target.exists():
        _build_under_lock(root, key, target)
    return _load(target, key)


def _build_under_lock(root: Path, key: str, target: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ImportError(f"custom_op: cannot create the build folder {root}: {error}. "
                          "Set CUSTOM_OP_BUILD_DIR to a writable folder.") from error
    lock = filelock.FileLock(str(root / f"{key}.lock"))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        _log(f"waiting for another process to finish building the extension in {root} ...")
        try:
            lock.acquire(timeout=LOCK_TIMEOUT_SECONDS)
        except filelock.Timeout as error:
            raise ImportError(
                f"custom_op: gave up after {LOCK_TIMEOUT_SECONDS:.0f} s waiting for the build lock "
                f"{lock.lock_file} (CUSTOM_OP_BUILD_TIMEOUT sets the limit)") from error
    try:
        if not target.exists():  # Another process may have built it while we waited.
            _remove_stale_temporaries(root, key)
            _build(root, key, target)
    finally:
        lock.release()


def _remove_stale_temporaries(root: Path, key: str) -> None:
    # Only builds killed halfway leave these; we hold the lock, so none is in use.
    for stale in root.glob(f"tmp-{key}-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _build(root: Path, key: str, target: Path) -> None:
    _log(f"building the native extension in {root / key} (once per environment and torch version) ...")
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"tmp-{key}-", dir=root))
    try:
        command = [sys.executable, str(_build_config.PACKAGE_DIR / "setup.py"), "build_ext",
                   "--build-lib", str(work / "lib"), "--build-temp", str(work / "obj")]
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              cwd=str(_build_config.PACKAGE_DIR))
        log_path = root / f"{key}.log"
        log_path.write_text(done.stdout)
        if done.returncode != 0:
            raise ImportError(_failure_message(done.stdout, log_path))
        built = list((work / "lib" / "custom_op").glob("_C*"))
        if len(built) != 1:
            raise ImportError(f"custom_op: the build produced {built}, expected one module "
                              f"(this is a bug in custom_op); log: {log_path}")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(built[0], target)  # Atomic: readers see no module or a whole one.
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _log(f"built in {time.monotonic() - started:.1f} s")


def _failure_message(output: str, log_path: Path) -> str:
    hint = ""
    if "jpeglib.h" in output and "No such file" in output:
        hint = _MISSING_JPEG_HINT
    elif "libjpeg-turbo 2.0.6 or newer" in output:
        hint = ("The installed libjpeg-turbo is too old; install 2.0.6 or newer.\n" +
                _MISSING_JPEG_HINT)
    elif "cannot find -ljpeg" in output:
        hint = "The libjpeg-turbo library (libjpeg.so) was not found.\n" + _MISSING_JPEG_HINT
    tail = output[-6000:]
    return (f"custom_op: building the native extension failed (full log: {log_path}).\n"
            f"{hint}--- compiler output (end) ---\n{tail}")


def _load(path: Path, key: str) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    if getattr(module, "build_key", None) != key:
        raise ImportError(f"custom_op: {path} was built for key {getattr(module, 'build_key', None)!r}, "
                          f"expected {key!r} (this is a bug in custom_op)")
    sys.modules[MODULE_NAME] = module
    return module


def _log(message: str) -> None:
    print(f"custom_op [pid {os.getpid()}]: {message}", file=sys.stderr, flush=True)
