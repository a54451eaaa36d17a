"""The integrations name the extra to install when their dependencies are missing (issue 32).

tests/test_wheel.py installs the wheel beside a torch without torchvision and checks the message
there; here the same check runs in this environment, torchvision hidden from the import system.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
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


PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]


def _extra_names(extra: str) -> set[str]:
    """The distributions an extra brings, the extras it includes (custom_op[...]) resolved."""
    names = set()
    for requirement in PROJECT["optional-dependencies"][extra]:
        included = re.fullmatch(r"custom_op\[(\w+)\]", requirement)
        names |= _extra_names(included[1]) if included else {_name(requirement)}
    return names


def test_the_core_needs_torch_alone_and_the_extras_match_pyproject():
    names = [_name(requirement) for requirement in PROJECT["dependencies"]]
    # filelock and setuptools: a source install builds on first use; neither brings a torch.
    assert names == ["torch", "filelock", "setuptools"]
    # The distribution that provides each module custom_op imports, where the names differ.
    providers = {"streaming": "mosaicml-streaming"}
    for extra, modules in _extras.EXTRAS.items():
        brought = _extra_names(extra)
        assert all(providers.get(module, module) in brought for module in modules), (extra, brought)


def test_the_lane_extra_brings_torchdata_and_the_readme_recipe_names_it():
    """lane_threads runs on torchdata.nodes: the README's lane recipe needs an extra with it."""
    assert {"torchdata", "torchvision", "numpy"} <= _extra_names("lane")
    assert "torchdata" in _extras.EXTRAS["lane"]
    readme = (REPO / "README.md").read_text()
    recipe = readme[readme.index("**The batch lane**"):readme.index("lane_threads(lane")]
    assert "pip install 'custom_op[lane]'" in recipe


@pytest.mark.parametrize("extra", ["torchvision", "lane", "mds", "litdata"])
def test_a_missing_torchvision_names_the_command_that_keeps_the_installed_torch(monkeypatch,
                                                                                extra):
    """pip, asked for an extra with torchvision alone, may replace the installed torch; with the
    installed torch named on the same command line it keeps it."""
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torchvision" else found(name, *a))
    installed = importlib.metadata.version("torch")
    with pytest.raises(ImportError) as raised:
        _extras.require(extra, "custom_op.something")
    assert f"pip install 'custom_op[{extra}]' 'torch=={installed}'" in str(raised.value)
    assert "keeps it" in str(raised.value)


def test_an_extra_without_torchvision_pins_no_torch(monkeypatch):
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tqdm" else found(name, *a))
    with pytest.raises(ImportError) as raised:
        _extras.require("prepare", "custom_op.prepare")
    assert "pip install 'custom_op[prepare]'." in str(raised.value)
    assert "torch==" not in str(raised.value)


def test_the_install_guide_gives_the_command_that_keeps_torch_and_the_pairs():
    guide = (REPO / "docs" / "install.md").read_text()
    assert ("\"torch==$(python -c 'from importlib.metadata import version; "
            "print(version(\"torch\"))')\"") in guide
    for torch_release, torchvision_release in (("2.13", "0.28"), ("2.14", "0.29.1"),
                                               ("2.15", "0.29.2")):
        assert re.search(rf"^\| {re.escape(torch_release)} \| {re.escape(torchvision_release)} \|",
                         guide, flags=re.M), torch_release
