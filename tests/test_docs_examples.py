"""The Python examples of README.md and docs/*.md run as written.

Each document's ```python blocks run in order in one namespace, in a folder
that holds the files they name: cat.jpg (a photo-like 533 x 800 JPEG), an
ImageFolder-style train/ tree, the same as tar shards in shards/, and a
COCO-style coco/ set, generated here.
A block that needs something else (a GPU, AWS) is marked in the document by
a first line ``# not run by the tests: <why>``.
"""

from __future__ import annotations

import io
import os
import pathlib
import re

import pytest
from PIL import Image

from synthetic import folder_samples, make_photo, write_coco_detection, write_jpeg_folder, write_shards

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCUMENTS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SKIP = "# not run by the tests:"


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


@pytest.mark.timeout(300)
@pytest.mark.parametrize("document", [d for d in DOCUMENTS if python_blocks(d)])
def test_examples_run(example_folder: pathlib.Path, document: str, monkeypatch) -> None:
    monkeypatch.chdir(example_folder)
    namespace: dict = {"__name__": "__example__"}
    for number, block in enumerate(python_blocks(document), start=1):
        code = compile(block, f"{document} (python block {number})", "exec")
        exec(code, namespace)  # noqa: S102 - the documents' own examples


def test_every_document_with_examples_is_found() -> None:
    assert "docs/torchvision.md" in [d for d in DOCUMENTS if python_blocks(d)]
    assert os.path.exists(ROOT / "README.md")
