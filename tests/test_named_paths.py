"""Every repository path and custom_op module named in the docs and in comments exists.

Files move (the binding's errors moved to _core/, the operators to binding/); a comment or a doc page
that still points at the old place sends the next reader to nothing. Paths are found as text
(``custom_op/_core/_errors.py``, ``docs/api.md``, ``bench/lane_bench.py``), dotted names as
``custom_op.x.y`` and resolved the way Python would: a module, then attributes of it.
"""

from __future__ import annotations

import importlib
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Folders of the repository whose paths are named as ``folder/...``.
TOP_FOLDERS = ("custom_op", "docs", "bench", "tests", "fuzz", "sagemaker", "packaging", "synthetic")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./+-]*[\w+])" % "|".join(TOP_FOLDERS))
# Not after a quote or a bracket: a string that starts with the name is data (a stream's domain, a
# generated module's name, an error's tag), not a reference to read.
DOTTED = re.compile(r"""(?<![\w./'"[-])(custom_op(?:\.[A-Za-z_]\w*)+)""")
#: Names that look like paths but are not ours: generated at run time or on another machine.
GENERATED = ("custom_op/_build", "custom_op/_prebuilt", "fuzz/out", "bench/results", "bench/data",
             "sagemaker/out")
TEXT_SUFFIXES = {".py", ".md", ".h", ".cpp", ".cc", ".mk", ".toml", ".txt", ".sh"}


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    files = []
    for name in listed.stdout.splitlines():
        path = ROOT / name
        if (path.suffix in TEXT_SUFFIXES or path.name in ("Makefile", "Dockerfile", "run")) and path.is_file():
            files.append(path)
    return files


def _is_pattern(name: str) -> bool:
    return any(mark in name for mark in ("*", "<", "{", "...")) or name.endswith("/")


def _named(pattern: re.Pattern, *, skip_tests: bool = False) -> dict[str, list[str]]:
    """Each name the pattern finds, with the files that name it."""
    found: dict[str, list[str]] = {}
    for path in _tracked_text_files():
        if path == Path(__file__).resolve() or (skip_tests and path.parent.name == "tests"):
            continue
        for match in pattern.finditer(path.read_text(errors="replace")):
            name = match.group(1).rstrip(".")
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def _path_exists(name: str) -> bool:
    if _is_pattern(name) or name.startswith(GENERATED):
        return True
    path = ROOT / name
    # A name that is the start of file names (``fuzz/regressions/crash-...``) names those files,
    # which may not exist yet.
    if path.parent.is_dir() and name.endswith(("/crash", "/leak", "/timeout", "/oom")) or any(
            path.parent.glob(path.name + "-*")):
        return True
    # A name in prose may end where the sentence does, or name a module of a folder without ``.py``.
    return path.exists() or path.with_suffix(".py").exists() or Path(str(path) + ".py").exists()


def _resolves(name: str) -> bool:
    """Whether ``name`` is reached as Python reaches it: attributes first, then submodules."""
    parts = name.split(".")
    target = importlib.import_module(parts[0])
    for depth, part in enumerate(parts[1:], start=2):
        if hasattr(target, part):
            target = getattr(target, part)
            continue
        try:
            target = importlib.import_module(".".join(parts[:depth]))
        except ImportError:
            return False
    return True


def test_named_paths_exist():
    missing = {name: files for name, files in _named(PATH).items() if not _path_exists(name)}
    assert not missing, f"paths named but not in the repository: {missing}"


def test_named_modules_resolve():
    # The tests name made-up modules and patched attributes on purpose.
    missing = {name: files for name, files in _named(DOTTED, skip_tests=True).items()
               if not name.endswith((".py", ".h", ".cpp", ".whl", ".md")) and not _resolves(name)}
    assert not missing, f"custom_op names that do not resolve: {missing}"


@pytest.mark.parametrize("text, expected", [("see custom_op/_core/_errors.py.", ["custom_op/_core/_errors.py"]),
                                            ("(docs/api.md#modes)", ["docs/api.md"]),
                                            ("the_custom_op/x.py", [])])
def test_path_pattern(text, expected):
    assert [match.group(1).rstrip(".") for match in PATH.finditer(text)] == [
        name.split("#")[0] for name in expected]
