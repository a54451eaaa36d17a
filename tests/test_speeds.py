"""tests/_speeds.py, the rule of make test-quick: every file and pattern it names is a test of
the suite (a renamed test would leave the quick suite silently), and a slow test is marked so."""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import _speeds

TESTS = Path(__file__).resolve().parent


def _test_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]


def test_every_slow_file_exists():
    missing = sorted(name for name in _speeds.SLOW_FILES if not (TESTS / name).is_file())
    assert not missing, f"tests/_speeds.py names files that are gone: {missing}"


def test_every_slow_pattern_names_a_test_of_its_file():
    unmatched = []
    for name, patterns in _speeds.SLOW_TESTS.items():
        assert name not in _speeds.SLOW_FILES, f"{name} is slow as a whole and test by test"
        functions = _test_functions(TESTS / name)
        for pattern in patterns:
            # The function name the pattern starts with (before a parameter's "[").
            stem = pattern.split("[", 1)[0]
            if not any(fnmatch.fnmatchcase(function, stem) for function in functions):
                unmatched.append(f"{name}: {pattern}")
    assert not unmatched, f"patterns that name no test: {unmatched}"


def test_the_slow_mark_follows_the_rule(request):
    items = request.session.items
    slow = {item.nodeid for item in items if item.get_closest_marker("slow")}
    assert slow == {item.nodeid for item in items if _speeds.is_slow(item)}
    assert request.node.nodeid not in slow
