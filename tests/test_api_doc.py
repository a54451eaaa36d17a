"""docs/api.md against the code: every public name is listed, and every signature written out
there names only real parameters, with the real defaults (none stale, none missing)."""

from __future__ import annotations

import inspect
import pathlib
import re

import pytest

import custom_op
import custom_op.datasets
import custom_op.lane
import custom_op.transforms

API = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()
BLOCK = API.split("```python", 1)[1].split("```", 1)[0]

PUBLIC = ([f"custom_op.{name}" for name in custom_op.__all__]
          + [f"custom_op.transforms.{name}" for name in custom_op.transforms.__all__]
          + [f"custom_op.datasets.{name}" for name in custom_op.datasets.__all__]
          + [f"custom_op.lane.{name}" for name in custom_op.lane.__all__])


def _listed_names() -> set[str]:
    """Qualified names the block lists, also in lines like ``custom_op.transforms.A, B, C``."""
    names = set()
    for line in BLOCK.splitlines():
        code = line.split("#", 1)[0]
        for match in re.finditer(r"(custom_op(?:\.\w+)*)\.(\w+)((?:,\s*\w+)*)", code):
            names.add(f"{match.group(1)}.{match.group(2)}")
            names.update(f"{match.group(1)}.{extra.strip()}"
                         for extra in match.group(3).split(",") if extra.strip())
    return names


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_is_listed(name: str) -> None:
    """Listed under this name, or (a module) by its members, or (a re-export, e.g.
    custom_op.datasets.JpegFolder) under another name of the same object."""
    listed = _listed_names()
    if name in listed or any(other.startswith(name + ".") for other in listed):
        return
    value = _resolve(name)
    assert any(_resolve(other) is value for other in listed if _resolvable(other)), name


def _resolvable(qualified: str) -> bool:
    try:
        _resolve(qualified)
    except (AttributeError, ImportError):
        return False
    return True


def _signatures() -> dict[str, str]:
    """Documented name -> the text between its parentheses (across lines)."""
    found = {}
    for match in re.finditer(r"(custom_op(?:\.\w+)+)\(", BLOCK):
        depth, index = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(BLOCK[index], 0)
            index += 1
        found[match.group(1)] = BLOCK[match.end():index - 1]
    return found


def _resolve(qualified: str):
    """The object a dotted name documents, importing submodules (custom_op.prepare) on the way."""
    import importlib

    value = custom_op
    parts = qualified.split(".")
    for index, part in enumerate(parts[1:], start=2):
        try:
            value = getattr(value, part)
        except AttributeError:
            value = importlib.import_module(".".join(parts[:index]))
    return value


def _documented_parameters(text: str) -> dict[str, str | None]:
    text = re.sub(r"#[^\n]*", "", text)
    parameters = {}
    for part in re.split(r",(?![^()\[\]]*[)\]])", text):
        part = part.strip()
        if not part or part == "*" or part.startswith("...") or part.startswith("**"):
            continue
        name, _, default = part.partition("=")
        parameters[name.strip()] = default.strip() or None
    return parameters


SIGNATURES = _signatures()


def test_the_block_has_signatures() -> None:
    assert "custom_op.decode_and_crop_jpeg" in SIGNATURES and len(SIGNATURES) >= 10


@pytest.mark.parametrize("qualified", sorted(SIGNATURES))
def test_documented_signatures_are_real(qualified: str) -> None:
    target = _resolve(qualified)
    if qualified.endswith("EncodedJpeg"):
        real = inspect.signature(target.__new__)
    elif inspect.isclass(target) and not qualified.endswith("DecodeOptions"):
        real = inspect.signature(target.__init__)
    else:
        real = inspect.signature(target)
    real_parameters = {name: parameter for name, parameter in real.parameters.items()
                       if name not in ("self", "cls") and parameter.kind not in (
                           parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL)}
    documented = _documented_parameters(SIGNATURES[qualified])
    stale = set(documented) - set(real_parameters)
    assert not stale, f"{qualified}: documented but not real: {sorted(stale)}"
    text = SIGNATURES[qualified]
    if "..." not in text:
        missing = set(real_parameters) - set(documented)
        assert not missing, f"{qualified}: real but not documented: {sorted(missing)}"
    for name, default in documented.items():
        if default is None or not re.fullmatch(r"[\w.*\"'()\-]+", default):
            continue
        try:
            expected = eval(default, {"HF_OPTIONS": getattr(custom_op.datasets._huggingface,
                                                            "HF_OPTIONS", None),
                                      "DecodeOptions": custom_op.DecodeOptions})
        except Exception:  # a name the page explains in words
            continue
        assert real_parameters[name].default == expected, f"{qualified}: {name}={default}"


def test_a_stale_parameter_would_be_caught() -> None:
    """The comparison can fail: a renamed parameter is reported."""
    documented = _documented_parameters('data, top, left, crop_height, crop_width, *, mode="rgb"')
    real = inspect.signature(custom_op.decode_and_crop_jpeg).parameters
    assert set(documented) - set(real) == {"top", "left"}
