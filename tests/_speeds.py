"""The suite's two speeds, decided here and nowhere else.

``make test`` runs every test. ``make test-quick`` runs ``pytest --quick``: every test but the
infrastructure ones, which build and start what a user's machine builds once (cold builds, venvs,
wheels, local SageMaker jobs, Ray clusters). A test is slow when its file is in SLOW_FILES, or
when it asks for one of SLOW_FIXTURES; conftest.py gives each the ``slow`` mark at collection
(so ``-m "not slow"`` selects the same set) and ``--quick`` deselects them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: Files whose every test builds or starts infrastructure.
SLOW_FILES = frozenset({
    "test_ray_data.py",
    "test_ray_train.py",
    "test_sagemaker.py",
    "test_sagemaker_processing.py",
    "test_sagemaker_offline.py",
    "test_sagemaker_wheel.py",
    "test_build.py",
    "test_install.py",
    "test_wheel.py",
    "test_static_libjpeg.py",
    "test_torch213_source.py",
    "test_prepare_ray.py",
})

#: Fixtures that make infrastructure: a test asking for one is slow wherever it is.
SLOW_FIXTURES: frozenset[str] = frozenset()


def add_option(parser: pytest.Parser) -> None:
    parser.addoption("--quick", action="store_true",
                     help="the inner loop's suite (make test-quick): no slow test "
                          "(tests/_speeds.py says which)")


def quick(config: pytest.Config) -> bool:
    return bool(config.getoption("quick", False))


def is_slow(item: pytest.Item) -> bool:
    if Path(str(item.path)).name in SLOW_FILES:
        return True
    return bool(SLOW_FIXTURES & set(getattr(item, "fixturenames", ())))


def mark_slow_tests(items: list[pytest.Item]) -> None:
    """Adds the ``slow`` mark to every slow test (before ``-m`` deselects)."""
    for item in items:
        if is_slow(item):
            item.add_marker(pytest.mark.slow)


def keep_the_quick_ones(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --quick, deselects the slow tests (reported as deselected, not skipped)."""
    if not quick(config):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
