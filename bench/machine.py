"""The machine a run happens on: CPU, cores, load, library versions and the commit.

Printed above every table and stored in every JSON file, because a timing
means nothing without the machine and the load it was taken under.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import platform
import re
import subprocess
from typing import Any

import numpy as np
import torch

import custom_op
from bench import THREADS_PINNED_BEFORE_TORCH

torch.set_num_threads(1)

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _cpu_model() -> str:
    """The first "model name" in /proc/cpuinfo, or what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Processor") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def git(*args: str) -> str | None:
    """The output of ``git -C <repo> ARGS``, or None when git fails."""
    try:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _version(module_name: str) -> str:
    try:
        module = __import__(module_name)
    except ImportError:
        return "not installed"
    return str(getattr(module, "__version__", "unknown"))


def _bundled_libjpeg_turbo(package: str) -> str:
    """The libjpeg-turbo version a wheel bundles (e.g. torchvision.libs/libjpeg*.so), read
    from the library's own version string; "unknown" if there is none to read."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return "not installed"
    package_dir = pathlib.Path(next(iter(spec.submodule_search_locations)))
    for folder in (package_dir.parent / f"{package}.libs", package_dir):
        for library in sorted(folder.glob("libjpeg*.so*")):
            match = re.search(rb"libjpeg-turbo version (\d+\.\d+\.\d+)", library.read_bytes())
            if match:
                return match.group(1).decode()
    return "unknown"


def describe_machine() -> dict[str, Any]:
    """CPU, core counts, library versions and the git commit, for the report and the JSON."""
    import PIL
    from PIL import features

    try:
        usable_cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable_cores = os.cpu_count()
    status = git("status", "--porcelain")
    return {
        "cpu": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        "torchvision_libjpeg": _bundled_libjpeg_turbo("torchvision"),
        "pillow": PIL.__version__,
        "pillow_libjpeg": features.version("libjpeg_turbo") or features.version("jpg"),
        "pillow_libjpeg_turbo": bool(features.check_feature("libjpeg_turbo")),
        "numpy": np.__version__,
        "custom_op": getattr(custom_op, "__version__", "unknown"),
        "custom_op_libjpeg": custom_op.libjpeg_version(),
        "torch_threads": torch.get_num_threads(),
        # Other work on the machine skews every timing; say how busy it was.
        "load_average_1_5_15": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "threads_pinned_before_torch": THREADS_PINNED_BEFORE_TORCH,
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
    }


def short_label(machine: dict[str, Any]) -> str:
    """One line naming the machine and the libraries, for chart titles."""
    return (f"{machine['cpu']} ({machine['usable_cores']} cores); torch {machine['torch']}, torchvision "
            f"{machine['torchvision']}, Pillow {machine['pillow']}, libjpeg-turbo "
            f"{machine['custom_op_libjpeg']} (custom_op); load average at start "
            f"{(machine.get('load_average_1_5_15') or [float('nan')])[0]:.2f}; commit "
            f"{(machine.get('git_commit') or 'unknown')[:10]}")


def format_machine(machine: dict[str, Any]) -> str:
    """A few lines naming the machine, printed above the tables."""
    commit = machine.get("git_commit") or "unknown"
    dirty = " (uncommitted changes)" if machine.get("git_dirty") else ""
    turbo = "libjpeg-turbo" if machine["pillow_libjpeg_turbo"] else "libjpeg"
    lines = [
        f"Machine: {machine['cpu']}, {machine['usable_cores']} usable of "
        f"{machine['logical_cores']} logical cores, {machine['platform']}",
        f"Python {machine['python']}, torch {machine['torch']}, torchvision {machine['torchvision']} "
        f"(libjpeg-turbo {machine['torchvision_libjpeg']}), Pillow {machine['pillow']} "
        f"({turbo} {machine['pillow_libjpeg']}), numpy {machine['numpy']}",
        f"custom_op {machine['custom_op']} built against libjpeg-turbo {machine['custom_op_libjpeg']}; "
        f"commit {commit[:12]}{dirty}",
    ]
    if machine.get("load_average_1_5_15"):
        one, five, _ = machine["load_average_1_5_15"]
        lines.append(f"Load average before the run: {one:.2f} (1 min), {five:.2f} (5 min)")
        if one > 0.5 * (machine["usable_cores"] or 1):
            lines.append("WARNING: the machine is busy with other work; timings will be noisy "
                         "and the benchmark will run longer")
    if not machine["threads_pinned_before_torch"]:
        lines.append("WARNING: torch was imported before the bench package pinned the thread counts")
    return "\n".join(lines)
