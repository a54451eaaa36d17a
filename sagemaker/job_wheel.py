"""custom_op's wheel in a SageMaker job: found, checked against the image, staged in source_dir.

launch.py and launch_prepare.py put the wheel `make wheel` built (or
``--wheel PATH``) into the job's source_dir and name it in the staged
requirements.txt, which the container installs with pip before the entry
script starts. The wheel carries the native module, built with libjpeg-turbo
linked in: no apt-get, no compiler, no build at the job's start. Before
anything is uploaded, the wheel is checked against the image the job will
run: its Python tag, and the torch it runs on (the module's manifest,
``custom_op/_prebuilt/shipped.json``, see custom_op/_core/_shipped.py).
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DIST = REPO / "dist"
MANIFEST = "custom_op/_prebuilt/shipped.json"


def find_wheel(given: str | None) -> Path | None:
    """``given``, or the one custom_op wheel in dist/ (None when there is none).

    Raises:
        SystemExit: ``given`` does not exist, or dist/ holds several wheels.
    """
    if given:
        path = Path(given).expanduser().resolve()
        if not path.is_file():
            raise SystemExit(f"--wheel {given}: no such file")
        return path
    wheels = sorted(DIST.glob("custom_op-*.whl"))
    if len(wheels) > 1:
        raise SystemExit(f"{DIST} holds {len(wheels)} custom_op wheels; pass --wheel PATH")
    return wheels[0] if wheels else None


def manifest(wheel: Path) -> dict:
    """The wheel's module manifest (which torch it runs on, what libjpeg it links)."""
    with zipfile.ZipFile(wheel) as archive:
        try:
            return json.loads(archive.read(MANIFEST))
        except KeyError:
            raise SystemExit(f"{wheel} has no {MANIFEST}: it was not built by `make wheel` "
                             "(or carries no native module)") from None


def _version(text: str) -> tuple[int, ...]:
    """'2.13.0+cpu' -> (2, 13, 0)."""
    return tuple(int(part) for part in text.split("+")[0].split(".") if part.isdigit())


def image_problem(wheel: Path, torch_version: str, py_version: str) -> str:
    """Why the wheel cannot run in an image with that torch and Python ("" when it can).

    Args:
        wheel: the wheel file.
        torch_version: the image's PyTorch version, e.g. "2.10.0".
        py_version: the image's Python, as SageMaker names it, e.g. "py313".
    """
    _, _, python_tag, abi_tag, _ = wheel.name[:-len(".whl")].split("-", 4)
    image_python = py_version.replace("py", "cp", 1)
    if abi_tag == "abi3":
        if _version(image_python[2:3] + "." + image_python[3:]) < \
                _version(python_tag[2:3] + "." + python_tag[3:]):
            return f"the wheel needs CPython {python_tag} or newer, the image has {py_version}"
    elif python_tag != image_python:
        return f"the wheel is for CPython {python_tag} only, the image has {py_version}"
    described = manifest(wheel)
    minimum = described.get("torch_minimum")
    if minimum and _version(torch_version) < _version(minimum):
        return f"the wheel runs on torch {minimum} or newer, the image has {torch_version}"
    built = described.get("torch_built", "")
    if not minimum and _version(torch_version) != _version(built):
        return (f"the wheel's module runs only on the torch it was built against ({built}, "
                f"not on torch's stable ABI), the image has {torch_version}")
    return ""


def stage(wheel: Path, root: Path) -> None:
    """Copies the wheel into source_dir and adds it to the staged requirements.txt.

    pip runs the requirements file in source_dir, so the wheel is named by a
    path relative to it.
    """
    shutil.copy2(wheel, root / wheel.name)
    requirements = root / "requirements.txt"
    text = requirements.read_text() if requirements.exists() else ""
    requirements.write_text(text.rstrip("\n") + "\n# custom_op itself, with its native module "
                            f"(staged by launch.py):\n./{wheel.name}\n")
