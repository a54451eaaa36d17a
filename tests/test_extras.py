"""The integrations name the extra to install when their dependencies are missing (issue 32).

tests/test_wheel.py installs the wheel beside a torch without torchvision and checks the message
there; here the same check runs in this environment, torchvision hidden from the import system.
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

from custom_op._core import _extras

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("extra, module", [("torchvision", "torchvision"),
                                           ("torchvision", "numpy"), ("prepare", "tqdm")])
def test_a_missing_module_names_its_extra(monkeypatch, extra, module):
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == module else found(name, *a))
    with pytest.raises(ImportError, match=rf"pip install 'custom_op\[{extra}\]'") as raised:
        _extras.require(extra, "custom_op.something")
    assert raised.value.name == module
    assert "custom_op.something needs " + module in str(raised.value)


def test_nothing_is_raised_when_the_extra_is_installed():
    for extra in _extras.EXTRAS:
        _extras.require(extra, "custom_op")


def test_the_core_needs_torch_alone_and_the_extras_match_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = [requirement.split(">")[0].split("=")[0].split("<")[0].strip()
             for requirement in project["dependencies"]]
    # filelock and setuptools: a source install builds on first use; neither brings a torch.
    assert names == ["torch", "filelock", "setuptools"]
    for extra, modules in _extras.EXTRAS.items():
        declared = " ".join(project["optional-dependencies"][extra])
        assert all(module in declared for module in modules), (extra, declared)
