"""What the native extension is built from, defined once.

Both build paths read this module: ``custom_op/setup.py`` (ahead of time) and
the just-in-time build in ``custom_op/_build.py`` (which runs that setup.py),
so the sources, flags and build key cannot drift apart. It imports neither
torch nor custom_op, so setup.py can load it by path.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent

#: The one translation unit, relative to the package folder.
SOURCES = ("decode_and_crop_jpeg.cpp",)
#: Headers it includes; they are part of the build key.
HEADERS = ("csrc/jpeg_errors.h", "csrc/limits.h", "csrc/pixel_formats.h", "csrc/region.h",
           "csrc/resample.h", "csrc/row_sinks.h", "csrc/restart_seek.h", "csrc/jpeg_phases.h",
           "csrc/jpeg_decoder.h", "csrc/prepare.h", "binding/encoded_bytes.h",
           "binding/python_errors.h", "binding/thread_pool.h")
#: Python files whose content decides how the extension is built.
BUILD_FILES = ("setup.py", "_build_config.py")

LIBRARIES = ("jpeg",)
#: These come after Python's own CFLAGS and override them. -g0 drops the debug
#: information they ask for: it is most of the compile time and of the
#: module's size, and nobody debugs a cold-cache training job with gdb.
#: -fno-wrapv undoes CPython's -fwrapv, which stops GCC from vectorising the
#: loops that split pixels into planes (measured: a full 375 x 500 decode took
#: 2.0 ms with it, 1.55 ms without).
EXTRA_COMPILE_ARGS = ("-O3", "-g0", "-fno-wrapv", "-fvisibility=hidden")


def jpeg_prefixes() -> list[Path]:
    """Install prefixes that may hold libjpeg-turbo besides the system's.

    A conda environment ships its own libjpeg-turbo; building against it keeps
    headers and library in step.
    """
    prefixes = []
    conda = os.environ.get("CONDA_PREFIX")
    if conda and (Path(conda) / "include" / "jpeglib.h").exists():
        prefixes.append(Path(conda))
    return prefixes


def include_dirs() -> list[str]:
    return [str(PACKAGE_DIR)] + [str(p / "include") for p in jpeg_prefixes()]


def library_dirs() -> list[str]:
    return [str(p / "lib") for p in jpeg_prefixes()]


def extra_link_args() -> list[str]:
    # An rpath, so that the module finds the conda libjpeg it was built against.
    return [f"-Wl,-rpath,{d}" for d in library_dirs()]


def compiler_commands() -> list[str]:
    """The compiler and linker commands setuptools will run."""
    names = []
    for var in ("CC", "CXX", "LDSHARED"):
        value = os.environ.get(var) or sysconfig.get_config_var(var) or ""
        names.append(value)
    return names


def _compiler_identity(command: str) -> str:
    """`command --version` output: a different compiler means a rebuild."""
    argv = shlex.split(command)[:1]
    if not argv:
        return ""
    try:
        done = subprocess.run(argv + ["--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        return f"unavailable: {error}"
    return done.stdout


def build_key(torch_version: str, torch_git_version: str, cxx11_abi: bool) -> str:
    """A hash of everything that makes one build differ from another.

    Sources, headers, build files, flags, Python ABI, torch version and ABI,
    and the compilers' identities. Equal keys mean the existing build can be
    loaded as it is.
    """
    digest = hashlib.sha256()

    def add(text: str | bytes) -> None:
        data = text.encode() if isinstance(text, str) else text
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)

    for name in SOURCES + HEADERS + BUILD_FILES:
        add(name)
        add((PACKAGE_DIR / name).read_bytes())
    for part in (torch_version, torch_git_version, str(cxx11_abi), sys.version,
                 sysconfig.get_config_var("EXT_SUFFIX") or "", platform.machine()):
        add(part)
    for part in EXTRA_COMPILE_ARGS + LIBRARIES + tuple(include_dirs()) + tuple(library_dirs()):
        add(part)
    for command in compiler_commands():
        add(command)
        add(_compiler_identity(command))
    return digest.hexdigest()[:20]
