"""libjpeg-turbo's headers inside a SageMaker job: found, or installed with apt-get.

custom_op's extension is built at the job's start and needs ``jpeglib.h``.
SageMaker's PyTorch images are Ubuntu-based and may lack it; train.py
(``--install-jpeg-headers 1``) and prepare_job.py (``--install-jpeg-headers``)
call :func:`install_jpeg_headers` before the build. It imports nothing beyond
the standard library and filelock (torch requires filelock, so every PyTorch
image has it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from typing import Callable


def have_jpeg_headers() -> bool:
    """Whether the C compiler finds jpeglib.h."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        return False
    probe = subprocess.run([compiler, "-E", "-x", "c", "-"],
                           input="#include <stdio.h>\n#include <jpeglib.h>\n", text=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return probe.returncode == 0


def install_jpeg_headers(log: Callable[[str], None]) -> None:
    """apt-get installs libjpeg-turbo's headers if missing; one process per machine does it.

    Args:
        log: Where to say what happened (one line per call).

    Example:
        >>> install_jpeg_headers(print)
        libjpeg-turbo headers: present
    """
    import filelock

    with filelock.FileLock(os.path.join(tempfile.gettempdir(), "custom_op-jpeg-headers.lock")):
        if have_jpeg_headers():
            log("libjpeg-turbo headers: present")
            return
        if not shutil.which("apt-get") or os.geteuid() != 0:
            log("libjpeg-turbo headers are missing and apt-get cannot run here (not root, "
                "or no apt-get); the custom_op build will say what to install")
            return
        log("libjpeg-turbo headers are missing: installing them with apt-get")
        started = time.monotonic()
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        for package in ("libjpeg-turbo8-dev", "libjpeg62-turbo-dev"):  # Ubuntu, then Debian
            done = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                                   package], env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
            if done.returncode == 0:
                log(f"installed {package} in {time.monotonic() - started:.1f} s")
                return
        log("apt-get could not install libjpeg-turbo's headers")
