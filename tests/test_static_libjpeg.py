"""libjpeg-turbo 3.1 linked statically, its symbols hidden (issue 23, item 2).

A build with CUSTOM_OP_JPEG_STATIC (what `make wheel` does) carries the
archive `make libjpeg-static` unpacks: it reports 3.1.0, its crop-width probe
finds no fault, it exports no jpeg_* symbol and needs no libjpeg.so, and it
decodes beside torchvision's and Pillow's own libjpeg in one process, in
either load order. The checkout's usual build links the system's library
(Debian's 2.1.5 here), whose fault the probe must still find.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from custom_op._core import _build_config, _loader

REPO = Path(__file__).resolve().parents[1]
STATIC = REPO / "build" / "libjpeg-turbo-static"

#: Loads the three decoders in the order given by argv[2] and decodes argv[1] with each.
COLOAD = r'''
import io, json, sys
order = sys.argv[2].split(",")
for name in order:
    if name == "custom_op":
        import custom_op
        custom_op.libjpeg_version()  # loads the module (and its libjpeg) now, in this order
    elif name == "torchvision":
        import torchvision.io
        import torch
        torchvision.io.decode_jpeg(torch.frombuffer(bytearray(open(sys.argv[1], "rb").read()),
                                                    dtype=torch.uint8))
    else:
        from PIL import Image
        Image.open(sys.argv[1]).load()
import numpy as np, torch, torchvision.io, custom_op
from PIL import Image
data = open(sys.argv[1], "rb").read()
tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
ours = custom_op.decode_and_crop_jpeg(tensor, 0, 0, 64, 96)
theirs = torchvision.io.decode_jpeg(tensor)
pillow = torch.from_numpy(np.array(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1)
print(json.dumps({
    "module": sys.modules["custom_op._C"].__file__,
    "version": custom_op.libjpeg_version(),
    "fault": sys.modules["custom_op._C"].libjpeg_crop_width_fault(),
    "vs_torchvision": (ours.int() - theirs.int()).abs().max().item(),
    "vs_pillow": (ours.int() - pillow.int()).abs().max().item(),
}))
'''


def _static_env(build_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTOM_OP_")}
    env.update(PYTHONPATH=str(REPO), CUSTOM_OP_BUILD_DIR=str(build_dir),
               CUSTOM_OP_JPEG_STATIC=str(STATIC))
    return env


@pytest.fixture(scope="module")
def static_build(tmp_path_factory) -> dict[str, str]:
    """A build of this checkout linked with the static archive (built once, about a minute)."""
    if not (STATIC / "lib" / "libjpeg.a").exists():
        made = subprocess.run(["make", "libjpeg-static"], cwd=REPO, capture_output=True,
                              text=True, timeout=1800)
        assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    env = _static_env(tmp_path_factory.mktemp("static-build"))
    built = subprocess.run([sys.executable, "-m", "custom_op.build"], env=env,
                           capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, built.stderr[-3000:]
    return env


@pytest.fixture(scope="module")
def photo(tmp_path_factory) -> Path:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(2)
    small = rng.integers(0, 256, (8, 12, 3), dtype=np.uint8)
    path = tmp_path_factory.mktemp("photo") / "photo.jpg"
    Image.fromarray(small).resize((96, 64), Image.BICUBIC).save(path, quality=92)
    return path


@pytest.mark.parametrize("order", ["custom_op,torchvision,pil", "pil,torchvision,custom_op",
                                   "torchvision,custom_op,pil"])
def test_the_static_build_decodes_beside_torchvision_and_pillow(static_build, photo, order):
    done = subprocess.run([sys.executable, "-c", COLOAD, str(photo), order], env=static_build,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["module"].startswith(static_build["CUSTOM_OP_BUILD_DIR"])
    assert result["version"] == "3.1.0"
    assert result["fault"] is False  # 3.0.0 fixed jpeg_crop_scanline's width
    # torchvision 0.29 and Pillow 12 bundle libjpeg-turbo 3.x: the same pixels.
    assert result["vs_torchvision"] == 0 and result["vs_pillow"] == 0


def test_the_static_build_exports_no_libjpeg_symbol_and_needs_no_libjpeg(static_build):
    module = next(Path(static_build["CUSTOM_OP_BUILD_DIR"]).glob("*/_C*.so"))
    exported = subprocess.run(["nm", "-D", "--defined-only", str(module)], capture_output=True,
                              text=True, check=True).stdout
    assert [line for line in exported.splitlines() if " jpeg_" in line or " jsimd" in line] == []
    needed = subprocess.run(["readelf", "-d", str(module)], capture_output=True, text=True,
                            check=True).stdout
    assert "libjpeg" not in needed


def test_the_key_says_which_libjpeg_is_linked(monkeypatch):
    monkeypatch.delenv(_build_config.STATIC_JPEG_VARIABLE, raising=False)
    system = _loader.current_build_key()
    assert _build_config.jpeg_link_identity() == "system"
    monkeypatch.setenv(_build_config.STATIC_JPEG_VARIABLE, str(STATIC))
    if not (STATIC / "lib" / "libjpeg.a").exists():
        pytest.fail("run `make libjpeg-static` first (the static_build fixture does)")
    assert _build_config.jpeg_link_identity().startswith("static 3.1.0 ")
    assert _loader.current_build_key() != system
    arguments = _build_config.extension_arguments("k")
    assert arguments["extra_objects"] == [str(STATIC / "lib" / "libjpeg.a")]
    assert arguments["libraries"] == [] and "-Wl,--exclude-libs,ALL" in arguments["extra_link_args"]
    assert arguments["include_dirs"][1] == str(STATIC / "include")


def test_the_same_archive_in_another_folder_is_the_same_build(monkeypatch, tmp_path):
    """Two checkouts unpack the archive in two folders: the key (compiled into the module) must
    not name the folder, or their wheels differ."""
    if not (STATIC / "lib" / "libjpeg.a").exists():
        pytest.fail("run `make libjpeg-static` first (the static_build fixture does)")
    other = tmp_path / "elsewhere"
    shutil.copytree(STATIC, other)
    monkeypatch.setenv(_build_config.STATIC_JPEG_VARIABLE, str(STATIC))
    here = _build_config.jpeg_link_identity()
    monkeypatch.setenv(_build_config.STATIC_JPEG_VARIABLE, str(other))
    assert _build_config.jpeg_link_identity() == here
    assert str(STATIC) not in here
    with open(other / "lib" / "libjpeg.a", "ab") as archive:
        archive.write(b"\0")
    assert _build_config.jpeg_link_identity() != here


def test_a_static_prefix_without_the_archive_is_refused(monkeypatch, tmp_path):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "jpeglib.h").write_text("")
    monkeypatch.setenv(_build_config.STATIC_JPEG_VARIABLE, str(tmp_path))
    with pytest.raises(_build_config.JpegPrefixError, match="lib/libjpeg.a"):
        _build_config.static_jpeg_prefix()


def test_the_system_build_still_guards_libjpeg_turbo_2(native_extension):
    module = sys.modules[_loader.MODULE_NAME]
    version = module.libjpeg_version()
    if os.environ.get(_build_config.STATIC_JPEG_VARIABLE):
        pytest.fail("run this test without CUSTOM_OP_JPEG_STATIC: it checks the system build")
    # Debian 12's libjpeg62-turbo is 2.1.5: the fault is there and must be found
    # (and a system with 3.x must not be sent down the slow path).
    assert module.libjpeg_crop_width_fault() is version.startswith(("1.", "2.")), version
