"""What a build of the native extension lacks, and how to install it.

Both setup scripts (custom_op/_core/_build_script.py, which the just-in-time build runs, and
the repository's setup.py, which ``pip install`` runs) call
:func:`missing_requirements` before compiling, and the just-in-time build
reads a failed compile's output with :func:`hint_for`, so a user reads the
package to install rather than a wall of compiler errors. It imports neither torch nor custom_op, so setup.py can load it by
path.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sysconfig
from pathlib import Path

_INSTALL_JPEG = (
    "  Debian:        apt-get install libjpeg62-turbo-dev\n"
    "  Ubuntu:        apt-get install libjpeg-turbo8-dev\n"
    "  Fedora/RHEL:   dnf install libjpeg-turbo-devel\n"
    "  macOS:         brew install jpeg-turbo, then CUSTOM_OP_JPEG_PREFIX=$(brew --prefix jpeg-turbo)\n"
    "  conda:         conda install -c conda-forge libjpeg-turbo  (with the environment activated)\n"
    "  elsewhere:     CUSTOM_OP_JPEG_PREFIX=<folder with include/jpeglib.h and lib/>\n")
_INSTALL_COMPILER = (
    "  Debian/Ubuntu: apt-get install g++\n"
    "  Fedora/RHEL:   dnf install gcc-c++\n"
    "  conda:         conda install -c conda-forge cxx-compiler\n"
    "  or set CXX (and CC) to a C++17 compiler\n")
_INSTALL_PYTHON_HEADERS = (
    "  Debian/Ubuntu: apt-get install python3-dev (python3.X-dev for another Python 3.X)\n"
    "  Fedora/RHEL:   dnf install python3-devel\n")

#: (text that identifies the cause in the compiler's output, what to say).
#: The first match wins, so a missing compiler is reported before the errors
#: that follow from it.
_CAUSES = (
    (("command '", "failed: No such file or directory"),
     "No C++ compiler was found. Install one:\n" + _INSTALL_COMPILER),
    (("unable to execute",),
     "No C++ compiler was found. Install one:\n" + _INSTALL_COMPILER),
    (("Python.h: No such file",),
     "Python's development headers (Python.h) were not found. Install them:\n"
     + _INSTALL_PYTHON_HEADERS),
    (("jpeglib.h: No such file",),
     "libjpeg-turbo's development headers (jpeglib.h) were not found. Install them:\n"
     + _INSTALL_JPEG),
    (("libjpeg-turbo 2.0.6 or newer",),
     "The installed libjpeg-turbo is too old; install 2.0.6 or newer:\n" + _INSTALL_JPEG),
    (("cannot find -ljpeg",),
     "The libjpeg-turbo library (libjpeg.so) was not found. Install it:\n" + _INSTALL_JPEG),
)


def hint_for(output: str) -> str:
    """What to install, judged from a failed build's output ("" when unknown).

    Args:
        output: the compiler's and setuptools' combined output.

    Returns:
        One paragraph ending in a newline, or "".

    Example:
        >>> hint_for("x.cpp:1:10: fatal error: jpeglib.h: No such file or directory")[:40]
        "libjpeg-turbo's development headers (jp"
    """
    for needles, hint in _CAUSES:
        if all(needle in output for needle in needles):
            return hint
    return ""


def _command(variable: str) -> list[str]:
    """The command setuptools runs for CC or CXX: the environment's, else Python's own."""
    return shlex.split(os.environ.get(variable) or sysconfig.get_config_var(variable) or "")


def missing_requirements(include_dirs: list[str]) -> str:
    """What the build lacks, checked before compiling ("" when nothing is missing).

    Checks, in order, the C and C++ compilers setuptools will run, Python.h,
    and that jpeglib.h preprocesses with the given include folders.

    Args:
        include_dirs: the build's include folders (libjpeg-turbo's prefixes).

    Returns:
        A message that says what is missing and how to install it, or "".

    Example:
        >>> missing_requirements([]) == "" or "install" in missing_requirements([])
        True
    """
    for variable in ("CC", "CXX"):
        command = _command(variable)
        if not command or shutil.which(command[0]) is None:
            return (f"No C/C++ compiler was found ({variable}={' '.join(command)!r} is not on "
                    "PATH). Install one:\n" + _INSTALL_COMPILER)
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        return (f"Python's development headers ({include}/Python.h) were not found. Install "
                "them:\n" + _INSTALL_PYTHON_HEADERS)
    probe = _command("CC") + ["-E", "-x", "c", "-"] + [f"-I{d}" for d in include_dirs]
    try:
        done = subprocess.run(probe, input="#include <stdio.h>\n#include <jpeglib.h>\n",
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as error:
        return f"Running the C compiler ({' '.join(probe)}) failed: {error}\n"
    if done.returncode != 0:
        return ("libjpeg-turbo's development headers (jpeglib.h) were not found. Install "
                "them:\n" + _INSTALL_JPEG)
    return ""
