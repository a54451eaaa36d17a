"""The ship part's install figures: the wheel's size, import and first decode after a fresh install,
against the first decode of a cold source checkout (a JIT build into an empty folder).

The fresh install is a venv (``--without-pip``) under a temporary folder whose
torch and torchvision are the running environment's, named by a ``.pth`` file
that points at a folder of links to that environment's packages (custom_op's
own entries left out, so the checkout's editable install cannot shadow the
wheel), as tests/test_wheel.py does. The running environment's pip installs
the wheel into it, nothing downloaded. Every measurement runs in a new
process from a folder outside the checkout, with no CUSTOM_OP_* variable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.machine import REPO_ROOT

#: What the loader prints when it compiles: a wheel install must never.
BUILD_LINE = "building the native extension"

#: Run in the fresh process: times torch's import, custom_op's and the first decode of argv[1].
PROBE = r'''
import json, sys, time
started = time.perf_counter()
import torch
torch_done = time.perf_counter()
import custom_op
imported = time.perf_counter()
custom_op.decode_and_crop_jpeg(open(sys.argv[1], "rb").read(), 0, 0, 64, 64)
decoded = time.perf_counter()
# The wheel's full decode against torchvision's (libjpeg-turbo 3.1 with SIMD too), one
# thread, the calls alternating, medians: well under 1 means the wheel's SIMD code is not
# running (the portable C path is several times slower).
import statistics, torchvision.io
torch.set_num_threads(1)
data = open(sys.argv[1], "rb").read()
tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
height, width, _ = custom_op.jpeg_size(data)
ours, theirs = [], []
for _ in range(3):
    custom_op.decode_and_crop_jpeg(tensor, 0, 0, height, width)
    torchvision.io.decode_jpeg(tensor)
for _ in range(int(sys.argv[2])):
    start = time.perf_counter_ns()
    custom_op.decode_and_crop_jpeg(tensor, 0, 0, height, width)
    middle = time.perf_counter_ns()
    torchvision.io.decode_jpeg(tensor)
    ours.append(middle - start)
    theirs.append(time.perf_counter_ns() - middle)
print(json.dumps({"torch_import_s": torch_done - started, "import_s": imported - torch_done,
                  "first_decode_s": decoded - imported, "libjpeg": custom_op.libjpeg_version(),
                  "module": sys.modules["custom_op._C"].__file__,
                  "full_decode_ms": statistics.median(ours) / 1e6,
                  "torchvision_full_decode_ms": statistics.median(theirs) / 1e6,
                  "full_decode_vs_torchvision": statistics.median(theirs) / statistics.median(ours)}))
'''

#: Timed full decodes per decoder in the wheel's speed check.
SPEED_CALLS = 25


def find_wheel(make: bool) -> tuple[Path | None, str]:
    """dist/custom_op-*.whl (made by ``make wheel`` first when ``make``), or None and why not."""
    wheels = sorted((REPO_ROOT / "dist").glob("custom_op-*.whl"))
    if not wheels and make:
        python = getattr(sys, "_base_executable", sys.executable)
        done = subprocess.run(["make", "wheel", f"PYTHON={python}"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=1800)
        if done.returncode != 0:
            return None, f"`make wheel` failed: {done.stderr.strip()[-400:]}"
        wheels = sorted((REPO_ROOT / "dist").glob("custom_op-*.whl"))
    if len(wheels) != 1:
        return None, (f"{len(wheels)} wheels in dist/ (expected one): run `make wheel` "
                      "(or pass --ship-make-wheel) for the wheel figures")
    return wheels[0], ""


def _clean_env(root: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("CUSTOM_OP_") and key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(XDG_CACHE_HOME=str(root / "cache"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _link_farm(farm: Path) -> Path:
    """Links to this environment's packages, custom_op's own entries and .pth files left out."""
    farm.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(("custom_op", "__editable__", "_custom_op")) and entry.suffix != ".pth":
            (farm / entry.name).symlink_to(entry)
    return farm


def _probe(python: str, jpeg: Path, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run([python, "-c", PROBE, str(jpeg), str(SPEED_CALLS)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"probe failed ({python}): {done.stderr.strip()[-1500:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - started
    result["compiled"] = BUILD_LINE in done.stderr
    return result


def fresh_install(wheel: Path, jpeg: Path, root: Path) -> dict[str, Any]:
    """Installs ``wheel`` into a new venv under ``root`` and times its import and first decode."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "_torch.pth").write_text(f"{_link_farm(root / 'farm')}\n")
    env = _clean_env(root)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index",
                    "--no-deps", str(wheel)], env=env, check=True, capture_output=True, timeout=600)
    install_s = time.perf_counter() - started
    return {"install_s": install_s, **_probe(str(python), jpeg, env, root)}


def cold_checkout(jpeg: Path, root: Path) -> dict[str, Any]:
    """The source checkout's first decode with an empty CUSTOM_OP_BUILD_DIR: the JIT build."""
    env = _clean_env(root)
    env.update(PYTHONPATH=str(REPO_ROOT), CUSTOM_OP_BUILD_DIR=str(root / "empty-build"))
    return _probe(sys.executable, jpeg, env, root)


def measure(jpeg: Path, make_wheel: bool, cold: bool) -> dict[str, Any]:
    """The wheel's size, a fresh install's import and first decode, and (if ``cold``) the cold JIT's."""
    wheel, why = find_wheel(make_wheel)
    figures: dict[str, Any] = {"wheel": None, "wheel_skipped": why, "cold_checkout": None}
    with tempfile.TemporaryDirectory(prefix="bench-ship-") as folder:
        root = Path(folder)
        if wheel is not None:
            (root / "wheel").mkdir()
            figures["wheel"] = {"file": wheel.name, "size_bytes": wheel.stat().st_size,
                                **fresh_install(wheel, jpeg, root / "wheel")}
        if cold:
            (root / "cold").mkdir()
            figures["cold_checkout"] = cold_checkout(jpeg, root / "cold")
    return figures
