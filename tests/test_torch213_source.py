"""The source build works on the oldest torch the package declares (issue 31, item 12).

A checkout compiles its extension on first use against the torch it runs with. torch's stable
headers grow between releases (``torch::stable::permute`` is in 2.14's only), so a call through
a newer wrapper builds with the newest torch alone; binding/aten_calls.h calls such ATen
operators through the dispatcher by name instead. Here the checkout is built from source in
``.venv-torch213`` (torch 2.13.0+cpu, no torchvision: ``make wheel-test-venv``), into a build
folder of its own, and its decodes (the paths that call ATen by name: the HWC layout, the
resize, the batch) equal this environment's, decoded with the build this checkout loads (made
once per session: building it again here would compile the same key a second time).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import custom_op
from custom_op._core import _native

REPO = Path(__file__).resolve().parents[1]
TORCH213 = REPO / ".venv-torch213" / "bin" / "python"

#: Run in either environment: argv[1] is a JPEG file; prints the torch version and each
#: decode's pixels as one JSON line.
DECODES = r'''
import json, sys
import torch, custom_op
data = torch.frombuffer(bytearray(open(sys.argv[1], "rb").read()), dtype=torch.uint8)
results = {
    "crop": custom_op.decode_and_crop_jpeg(data, 5, 7, 30, 41),
    "crop_planes": custom_op.decode_and_crop_jpeg(data, 5, 7, 30, 41, contiguous=True),
    "resized": custom_op.decode_and_resized_crop_jpeg(data, 3, 2, 60, 70, (23, 17)),
    "scaled": custom_op.decode_and_resized_crop_jpeg(data, 0, 0, 64, 96, (8, 12)),
    "batch": custom_op.decode_and_crop_jpeg_batch([data, data], [(0, 0, 40, 40), (9, 9, 50, 60)],
                                                  size=(16, 20), hflips=[False, True]),
    "compiled": torch.compile(lambda t: custom_op.decode_and_crop_jpeg(t, 1, 2, 20, 30),
                              backend="aot_eager", fullgraph=True)(data),
}
print(json.dumps({"torch": torch.__version__, "build": custom_op._C.build_key,
                  **{name: [list(t.shape), t.stride(), t.flatten().tolist()]
                     for name, t in results.items()}}))
'''


def _decodes(python: Path, jpeg: Path, build_dir: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUSTOM_OP_BUILD_DIR": str(build_dir)}
    done = subprocess.run([str(python), "-c", DECODES, str(jpeg)], capture_output=True,
                          text=True, timeout=900, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def this_environments_build() -> Path:
    """The build folder of the module this checkout loads (built on first use if need be)."""
    return Path(_native.module().__file__).parent.parent


def test_source_build_on_torch_213_decodes_as_this_torch(tmp_path, this_environments_build) -> None:
    assert TORCH213.exists(), "make wheel-test-venv creates .venv-torch213"
    pixels = np.random.default_rng(12).integers(0, 256, (64, 96, 3), dtype=np.uint8)
    jpeg = tmp_path / "photo.jpg"
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    jpeg.write_bytes(buffer.getvalue())
    old = _decodes(TORCH213, jpeg, tmp_path / "build213")
    assert old["torch"].startswith("2.13.")
    assert any((tmp_path / "build213").rglob("_C*.so")), "the checkout was built from source"
    ours = _decodes(Path(sys.executable), jpeg, this_environments_build)
    old.pop("build"), ours.pop("build")  # each environment has its own build key
    assert ours["torch"] == torch.__version__ and ours.pop("torch") != old.pop("torch")
    assert old == ours
    assert custom_op.decode_and_crop_jpeg(jpeg.read_bytes(), 5, 7, 30, 41).flatten().tolist() \
        == ours["crop"][2]
