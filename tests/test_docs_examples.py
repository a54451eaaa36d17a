"""The Python examples of README.md and docs/*.md run as written.

Each document's ```python blocks run in order in one namespace, in a folder
that holds the files they name: cat.jpg (a photo-like 533 x 800 JPEG), an
ImageFolder-style train/ tree, the same as tar shards in shards/, and a
COCO-style coco/ set, generated here.
A block that needs something else (a GPU, AWS) is marked in the document by
a first line ``# not run by the tests: <why>``.

What an example promises is checked too: a line whose comment gives a dtype
and a shape (``crop = ...   # uint8 [3, 256, 256]``, ``for images, labels in
loader:   # uint8 [4, 3, 224, 224]``) must bind its first name to a tensor of
that dtype and shape, each time the line runs.
"""

from __future__ import annotations

import io
import os
import pathlib
import re

import pytest
import torch
from PIL import Image

from synthetic import folder_samples, make_photo, write_coco_detection, write_jpeg_folder, write_shards

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCUMENTS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SKIP = "# not run by the tests:"
#: A documented result: the dtype and the shape in a line's comment, of the value or, in a
#: dict's form (``{"image": uint8 [4, 3, 224, 224], ...}``), of one of its entries.
_PROMISE = re.compile(r"(?:\"(\w+)\": )?\b(uint8|float32|int64) \[(\d+(?:, \d+)*)\]")
#: The first name a line binds: ``name = ...``, ``name, other = ...``, ``for name, ... in``.
_BINDING = re.compile(r"^(\s*)(?:for\s+)?\(?([A-Za-z_]\w*)\b[^=#]*?(?:=(?!=)|\bin\b)")


def python_blocks(document: str) -> list[str]:
    text = (ROOT / document).read_text(encoding="utf-8")
    return [block for block in _BLOCK.findall(text) if not block.startswith(_SKIP)]


@pytest.fixture(scope="module")
def example_folder(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("examples")
    buffer = io.BytesIO()
    Image.fromarray(make_photo(533, 800, seed=1)).save(buffer, format="JPEG", quality=90)
    (folder / "cat.jpg").write_bytes(buffer.getvalue())
    write_jpeg_folder(folder / "train", 8, 300, 400, classes=("cat", "dog"), seed=2)
    write_coco_detection(folder / "coco", 4, 400, 600, seed=3)
    write_shards(folder_samples(folder / "train", seed=4)[1], folder / "shards", 4)
    return folder


def with_promise_checks(block: str) -> tuple[str, int]:
    """``block`` with a check after each line that documents its result, and their count.

    The check goes after an assignment, or first in the body of a ``for`` loop,
    so the example's line numbers stay those of the document for tracebacks
    (each check shares the line it follows, after a semicolon).
    """
    lines, count = block.splitlines(), 0
    for index, line in enumerate(lines):
        promises = _PROMISE.findall(line.split("#", 1)[1]) if "#" in line else []
        binding = _BINDING.match(line)
        if not promises or binding is None:
            continue
        name = binding.group(2)
        check = "; ".join(f"__promise__({name!r}, {name}, {key or None!r}, {dtype!r}, "
                          f"{[int(n) for n in shape.split(', ')]})" for key, dtype, shape in promises)
        if line.lstrip().startswith("for ") and index + 1 < len(lines):
            indent = len(lines[index + 1]) - len(lines[index + 1].lstrip())
            lines[index + 1] = " " * indent + check + "; " + lines[index + 1].lstrip()
        else:
            lines[index] = line.split("#", 1)[0].rstrip() + "; " + check
        count += 1
    return "\n".join(lines) + "\n", count


def _promise(name: str, value: object, key: str | None, dtype: str, shape: list[int]) -> None:
    if key is not None:
        name, value = f"{name}[{key!r}]", value[key]
    assert isinstance(value, torch.Tensor), f"{name} is a {type(value).__name__}, not a tensor"
    assert (str(value.dtype), list(value.shape)) == (f"torch.{dtype}", shape), (
        f"{name}: {value.dtype} {list(value.shape)}, the document says {dtype} {shape}")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("document", [d for d in DOCUMENTS if python_blocks(d)])
def test_examples_run(example_folder: pathlib.Path, document: str, monkeypatch) -> None:
    monkeypatch.chdir(example_folder)
    namespace: dict = {"__name__": "__example__", "__promise__": _promise}
    for number, block in enumerate(python_blocks(document), start=1):
        checked, _ = with_promise_checks(block)
        code = compile(checked, f"{document} (python block {number})", "exec")
        exec(code, namespace)  # noqa: S102 - the documents' own examples


def test_documented_results_are_checked() -> None:
    """The examples' promises are found (a parser that found none would check nothing)."""
    counts = {d: sum(with_promise_checks(b)[1] for b in python_blocks(d)) for d in DOCUMENTS}
    assert counts["README.md"] >= 2 and sum(counts.values()) >= 6, counts
    checked, count = with_promise_checks("x = f()   # uint8 [3, 4]\nfor a, b in g():  # x\n"
                                         "for c, d in h():   # float32 [2]\n    pass\n")
    assert count == 2
    assert "x = f(); __promise__('x', x, None, 'uint8', [3, 4])" in checked
    assert "    __promise__('c', c, None, 'float32', [2]); pass" in checked
    checked, count = with_promise_checks('b = g()  # {"image": uint8 [2, 3], "label": [2]}\n')
    assert count == 1 and "__promise__('b', b, 'image', 'uint8', [2, 3])" in checked


def test_every_document_with_examples_is_found() -> None:
    assert "docs/torchvision.md" in [d for d in DOCUMENTS if python_blocks(d)]
    assert os.path.exists(ROOT / "README.md")
