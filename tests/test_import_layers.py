"""Imports in custom_op/ run one way, downwards through the layers (issue 27; docs/design.md).

Walks every module of the package with ast and collects the custom_op modules it imports when
it runs: imports at module level and inside functions and classes count (a function-level
import is a circle that waits for its first call); those under ``if TYPE_CHECKING:`` do not
(they never run). Then: no circle anywhere, and no module imports one of a higher layer."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "custom_op"

#: Lowest first. A module may import its own layer or lower ones, never a higher one.
LAYERS = [
    ("core", ["custom_op._core"]),
    ("decode", ["custom_op._decode", "custom_op._index"]),
    ("torchvision v2", ["custom_op._torchvision"]),
    ("timm / torchvision v1", ["custom_op._timm"]),
    ("transforms", ["custom_op.transforms"]),
    ("sources", ["custom_op.datasets"]),
    ("batch lane", ["custom_op.lane"]),
    ("data tools", ["custom_op.ray", "custom_op.prepare"]),
    ("entry points", ["custom_op", "custom_op.build", "custom_op.check"]),
]
#: The public packages' own modules (their __init__): each is the face of its package and may
#: name what the other packages hold (custom_op.datasets forwards the names that moved to
#: custom_op.lane and custom_op.ray for one release), so they sit with the entry points.
PUBLIC_FACES = {"custom_op.datasets", "custom_op.lane", "custom_op.ray", "custom_op.prepare"}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer_of(module: str) -> int:
    """The index in LAYERS of the most specific prefix that names ``module``."""
    if module in PUBLIC_FACES:
        return len(LAYERS) - 1
    best, length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = index, len(prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS (and docs/design.md)"
    return best


class _RuntimeImports(ast.NodeVisitor):
    """The imported names of every import that runs, TYPE_CHECKING blocks left out."""

    def __init__(self) -> None:
        self.imports: list[ast.Import | ast.ImportFrom] = []

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.imports.append(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.imports.append(node)


def _imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The custom_op modules ``path`` imports at run time (``from . import x`` names the
    submodule x, not the package it is in)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    visitor = _RuntimeImports()
    visitor.visit(ast.parse(path.read_text()))
    found = set()
    for node in visitor.imports:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("custom_op"))
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        if base.startswith("custom_op"):
            submodules = {f"{base}.{alias.name}" for alias in node.names} & modules
            found.update(submodules or {base})
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")
               if not {"_build", "_prebuilt"} & set(path.relative_to(PACKAGE).parts)}
    names = set(modules)
    return {name: {target for target in _imports(path, names) if target in modules and target != name}
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


def test_the_walk_covers_the_whole_package() -> None:
    graph = _graph()
    assert len(graph) > 50
    for module in ("custom_op._core._loader", "custom_op._torchvision", "custom_op.lane._batch_lane",
                   "custom_op.prepare.cli", "custom_op.ray._decoder", "custom_op.check"):
        assert module in graph


def test_no_module_of_custom_op_is_on_an_import_circle() -> None:
    graph = _graph()
    circles = [cycle for module in sorted(graph) if (cycle := _cycle_through(graph, module))]
    assert circles == []


def test_no_module_imports_a_higher_layer() -> None:
    graph = _graph()
    upward = [f"{module} ({LAYERS[_layer_of(module)][0]}) imports {target} ({LAYERS[_layer_of(target)][0]})"
              for module, targets in sorted(graph.items()) for target in sorted(targets)
              if _layer_of(target) > _layer_of(module)]
    assert upward == []


def test_the_walk_finds_a_circle_when_there_is_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle_through(graph, "a") == ["a", "b", "c", "a"]
    assert _cycle_through(graph, "d") is None


def test_the_walk_counts_function_level_imports_and_skips_type_checking(tmp_path) -> None:
    package = tmp_path / "custom_op"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from . import c\n\ndef f():\n    from . import b\n")
    (package / "b.py").write_text("from .a import f\n")
    (package / "c.py").write_text("")
    graph = {name: targets for name, targets in _graph_of(package).items()}
    assert graph["custom_op.a"] == {"custom_op.b"}
    assert _cycle_through(graph, "custom_op.a") == ["custom_op.a", "custom_op.b", "custom_op.a"]


def _graph_of(package: pathlib.Path) -> dict[str, set[str]]:
    global PACKAGE
    saved, PACKAGE = PACKAGE, package
    try:
        return _graph()
    finally:
        PACKAGE = saved


@pytest.mark.parametrize("module,layer", [("custom_op._core._ops", "core"), ("custom_op._decode._single", "decode"),
                                          ("custom_op._torchvision._tv_kernels", "torchvision v2"),
                                          ("custom_op.lane._batch_lane", "batch lane"),
                                          ("custom_op.datasets._folder", "sources"),
                                          ("custom_op.datasets", "entry points"),
                                          ("custom_op.ray._steps", "data tools"),
                                          ("custom_op", "entry points")])
def test_layers_name_the_modules(module: str, layer: str) -> None:
    assert LAYERS[_layer_of(module)][0] == layer


def test_no_module_runs_anything_when_imported() -> None:
    """Importing any module prints nothing and exits nothing: a script (the build's, prepare's
    __main__) runs only under ``if __name__ == "__main__"``."""
    modules = sorted(_graph())
    code = ("import contextlib, importlib, io, sys\n"
            "for name in sys.argv[1:]:\n"
            "    out = io.StringIO()\n"
            "    try:\n"
            "        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):\n"
            "            importlib.import_module(name)\n"
            "    except SystemExit as exit:\n"
            "        print(name, 'exits', exit.code)\n"
            "    if out.getvalue():\n"
            "        print(name, 'prints', repr(out.getvalue()[:200]))\n")
    done = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True,
                          cwd=PACKAGE.parent, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
