"""Imports in custom_op/ run one way (issue 27): no module imports, at import time, a module
that imports it back. Walks every module's top-level imports (those under TYPE_CHECKING and
inside functions run later, or never, and are left out)."""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "custom_op"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The custom_op modules ``path`` imports when it is imported (``from . import x`` names
    the submodule x, not the package it is in, which is already being imported)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.parse(path.read_text()).body:  # top level only: not functions, not classes
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import):
                found.update(alias.name for alias in inner.names if alias.name.startswith("custom_op"))
            elif isinstance(inner, ast.ImportFrom):
                base = inner.module or ""
                if inner.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - inner.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                if base.startswith("custom_op"):
                    submodules = {f"{base}.{alias.name}" for alias in inner.names} & modules
                    found.update(submodules or {base})
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py") if "_build" not in path.parts}
    names = set(modules)
    return {name: {target for target in _top_level_imports(path, names)
                   if target in modules and target != name}
            for name, path in modules.items()}


def _cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    stack = [(start, [start])]
    seen = set()
    while stack:
        node, trail = stack.pop()
        for target in graph.get(node, ()):
            if target == start:
                return trail + [start]
            if target not in seen:
                seen.add(target)
                stack.append((target, trail + [target]))
    return None


INTEGRATION = ["custom_op._torchvision._encoded_jpeg", "custom_op._torchvision._tv_kernels", "custom_op._torchvision._fused_resize",
               "custom_op._timm._compose_jpeg", "custom_op._orientation", "custom_op._torchvision._tv_geometry",
               "custom_op.transforms"]


@pytest.mark.parametrize("module", INTEGRATION)
def test_the_torchvision_integration_has_no_import_circle(module: str) -> None:
    graph = _graph()
    assert module in graph
    assert _cycle_through(graph, module) is None


def test_the_walk_finds_a_circle_when_there_is_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle_through(graph, "a") == ["a", "b", "c", "a"]
    assert _cycle_through(graph, "d") is None


def test_the_walk_sees_relative_imports() -> None:
    graph = _graph()
    assert "custom_op._torchvision._tv_kernels" in graph["custom_op._torchvision"]
    assert "custom_op._torchvision._encoded_jpeg" not in graph["custom_op._torchvision._tv_kernels"]
