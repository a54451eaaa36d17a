"""The wheel `make wheel` builds, installed where there is no compiler (issue 23, item 3), and
what it ships (issue 32): libjpeg-turbo's licences, manylinux_2_28 (glibc 2.28 and GCC 8's
libstdc++ at most, for every imported symbol), no path of the build machine, libjpeg-turbo 3.1
with its SIMD code, and dependencies that leave the installed torch alone.

One wheel, built once per session (against this environment's torch 2.14.1,
on torch's stable ABI, libjpeg-turbo 3.1 linked in), goes into two fresh venvs
whose PATH has no cc, c++, gcc or g++:

- torch 2.13.0+cpu alone (no torchvision: the decode functions and the
  operators must not need it);
- torch 2.14.1 with torchvision 0.29.1 (this checkout's own environment).

In each, the decode functions, the registered operator and torch.compile run
and nothing is compiled; in the second, a torchvision v2 pipeline too. Then
torch is swapped under the installed wheel, 2.13 -> 2.14 -> 2.13, and it keeps
working with nothing compiled. (Built against 2.14 and run on 2.13 is the
stable ABI's promise: the module asks only for what its TORCH_TARGET_VERSION
has.)

Making those venvs costs nothing: a venv's own site-packages holds only the
installed wheel, and a .pth file adds a folder of links to another
environment's packages (custom_op's own entries left out, so that the
checkout's editable install cannot shadow the wheel). Swapping that .pth is
what upgrading torch changes for custom_op: another torch on sys.path, same
installed package. (A real `pip install torch==2.14.1` would download and
unpack 5.5 GB for the same result.)

Running on another torch than the one a module was built against needs the
binding on torch's stable ABI; a wheel whose manifest does not say so
(torch_minimum null) must fail cleanly there, and those cases then report as
expected failures.
"""

from __future__ import annotations

import email.parser
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
TORCH213_VENV = REPO / ".venv-torch213"
COMPILERS = ("cc", "c++", "gcc", "g++", "clang", "clang++")
#: What a build would print; nothing may be built in these venvs.
BUILD_LINE = "building the native extension"

#: Run inside a venv: decodes the file given in argv[1] through each path and
#: prints one JSON line. Compiles with the aot_eager backend: inductor would
#: generate and compile C++, which needs the compiler these venvs lack.
CHECK = r'''
import json, sys, time
started = time.perf_counter()
import torch
import custom_op
imported = time.perf_counter()
data = open(sys.argv[1], "rb").read()
tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
from_bytes = custom_op.decode_and_crop_jpeg(data, 8, 16, 32, 48)
first = time.perf_counter()
from_operator = custom_op.decode_and_crop_jpeg(tensor, 8, 16, 32, 48)
compiled = torch.compile(lambda t: custom_op.decode_and_crop_jpeg(t, 8, 16, 32, 48).float(),
                         backend="aot_eager", fullgraph=True)(tensor)
# A window near the bottom right from the file's MCU index: cut out with the bundled libjpeg.
height, width, _ = custom_op.jpeg_size(data)
window = (height - 40, width - 72, 24, 48)
stats_before = custom_op.index_stats()
indexed = custom_op.decode_and_crop_jpeg(data, *window, index=custom_op.jpeg_index(data))
index_outcomes = {outcome: count - stats_before[outcome]
                  for outcome, count in custom_op.index_stats().items() if count != stats_before[outcome]}
# The core needs torch alone (no numpy in the 2.13 venv): the same window of the prepared file,
# and the EXIF-aware header read of a tensor.
prepared = custom_op.prepare_jpeg(tensor)
displayed = custom_op.jpeg_size(tensor, apply_exif_orientation=True)
result = {
    "torch": torch.__version__, "libjpeg": custom_op.libjpeg_version(),
    "module": sys.modules["custom_op._C"].__file__,
    "has_operator": hasattr(torch.ops.custom_op_jpeg, "decode_and_crop_jpeg"),
    "bytes_equal_operator": torch.equal(from_bytes, from_operator),
    "compiled_equal": torch.equal(compiled, from_bytes.float()),
    "index_equal": torch.equal(indexed, custom_op.decode_and_crop_jpeg(data, *window)),
    "index_outcomes": index_outcomes,
    "prepared_equal": torch.equal(custom_op.decode_and_crop_jpeg(prepared, *window), indexed),
    "displayed_size": list(displayed) == [height, width, 3],
    "torchvision": "torchvision" in sys.modules,
    "pixels": from_bytes.flatten().tolist(), "shape": list(from_bytes.shape),
    "import_s": imported - started, "first_decode_s": first - imported,
}
if "--torchvision" in sys.argv:
    from torchvision.transforms import v2
    import custom_op.transforms as T
    pipeline = v2.Compose([T.CenterCropJPEG((32, 48)), v2.ToDtype(torch.float32, scale=True)])
    out = pipeline(tensor)
    full = custom_op.decode_and_crop_jpeg(data, 0, 0, height, width)
    expected = v2.ToDtype(torch.float32, scale=True)(v2.CenterCrop((32, 48))(full))
    result["v2_equal"] = torch.equal(out, expected)
    # torchvision's and Pillow's own libjpeg in the same process as the wheel's static one.
    import io, numpy, torchvision.io
    from PIL import Image
    pillow = torch.from_numpy(numpy.array(Image.open(io.BytesIO(data)).convert("RGB")))
    result["coload_equal"] = (torch.equal(torchvision.io.decode_jpeg(tensor), full)
                              and torch.equal(pillow.permute(2, 0, 1), full))
print(json.dumps(result))
'''


def _site_packages(python: Path) -> Path:
    return Path(subprocess.run([str(python), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())


def _link_farm(site: Path, farm: Path) -> Path:
    """A folder of links to every package in ``site`` except custom_op's own entries."""
    farm.mkdir()
    for entry in site.iterdir():
        own = entry.name.startswith(("custom_op", "__editable__", "_custom_op"))
        if not own and entry.suffix != ".pth":
            (farm / entry.name).symlink_to(entry)
    return farm


def _no_compiler_path(tmp: Path) -> str:
    """A PATH with the tools a Python process may run, and no C or C++ compiler."""
    tools = tmp / "tools"
    tools.mkdir()
    for name in ("sh", "uname", "ldconfig", "cat", "ls"):
        found = shutil.which(name)
        if found:
            (tools / name).symlink_to(found)
    path = str(tools)
    assert not any(shutil.which(c, path=path) for c in COMPILERS)
    return path


class WheelVenv:
    """A fresh venv whose torch comes from a link farm named by ``_torch.pth``."""

    def __init__(self, root: Path, packages: Path, env: dict[str, str]) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                       timeout=120)
        self.python = root / "bin" / "python"
        self.site = _site_packages(self.python)
        self.env = env
        self.use(packages)

    def use(self, packages: Path) -> None:
        """Puts another environment's packages (another torch) under the installed wheel."""
        (self.site / "_torch.pth").write_text(f"{packages}\n")

    def install(self, wheel: Path | str, *options: str) -> subprocess.CompletedProcess:
        # This environment's pip acting on the venv; nothing downloaded. Without --no-deps,
        # pip resolves the wheel's dependencies against what the venv has: any that the venv
        # does not satisfy would have to be downloaded, which --no-index turns into a failure.
        return subprocess.run([sys.executable, "-m", "pip", "--python", str(self.python),
                               "install", "--no-index", *options, str(wheel)],
                              env=self.env, capture_output=True, text=True, timeout=600)

    def run(self, code: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.python), "-c", code], env=self.env, cwd=self.site.parent,
                              capture_output=True, text=True, timeout=600)

    def torch_version(self) -> str:
        done = self.run("import torch; print(torch.__version__)")
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip()

    def check(self, jpeg: Path, *flags: str) -> tuple[subprocess.CompletedProcess, dict]:
        done = subprocess.run([str(self.python), "-c", CHECK, str(jpeg), *flags], env=self.env,
                              cwd=jpeg.parent, capture_output=True, text=True, timeout=600)
        lines = done.stdout.strip().splitlines()
        return done, (json.loads(lines[-1]) if done.returncode == 0 and lines else {})


@pytest.fixture(scope="session")
def wheel() -> Path:
    """The wheel in dist/, made by `make wheel` (which does nothing when it is up to date)."""
    python = getattr(sys, "_base_executable", sys.executable)
    made = subprocess.run(["make", "wheel", "wheel-test-venv", f"PYTHON={python}"], cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    wheels = sorted((REPO / "dist").glob("custom_op-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="session")
def manifest(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as archive:
        return json.loads(archive.read("custom_op/_prebuilt/shipped.json"))


@pytest.fixture(scope="session")
def farms(tmp_path_factory, wheel) -> dict[str, Path]:
    """Link farms of torch 2.13.0+cpu (make wheel-test-venv) and of this environment."""
    root = tmp_path_factory.mktemp("farms")
    site_213 = next((TORCH213_VENV / "lib").glob("python3*/site-packages"))
    return {"2.13": _link_farm(site_213, root / "t213"),
            "2.14": _link_farm(Path(sysconfig.get_paths()["purelib"]), root / "t214")}


@pytest.fixture(scope="session")
def jpeg(tmp_path_factory) -> Path:
    """A 256 x 384 photo-like 4:2:0 JPEG, and Pillow's decode of it beside it."""
    rng = np.random.default_rng(23)
    small = rng.integers(0, 256, (32, 48, 3), dtype=np.uint8)
    pixels = np.asarray(Image.fromarray(small).resize((384, 256), Image.BICUBIC))
    path = tmp_path_factory.mktemp("jpeg") / "photo.jpg"
    Image.fromarray(pixels).save(path, quality=90, subsampling="4:2:0")
    return path


def _venv(tmp_path_factory, name: str, packages: Path) -> WheelVenv:
    tmp = tmp_path_factory.mktemp(name)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUSTOM_OP_", "CC", "CXX")) and k not in ("PYTHONPATH",
                                                                          "VIRTUAL_ENV")}
    env.update(PATH=_no_compiler_path(tmp), XDG_CACHE_HOME=str(tmp / "cache"),
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    return WheelVenv(tmp / "venv", packages, env)


def _pillow_window(jpeg: Path) -> np.ndarray:
    return np.asarray(Image.open(jpeg).convert("RGB"))[8:40, 16:64].transpose(2, 0, 1)


def _assert_works(done: subprocess.CompletedProcess, result: dict, venv: WheelVenv, jpeg: Path,
                  torch_version: str) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    assert BUILD_LINE not in done.stderr, done.stderr[-3000:]
    assert result["torch"].startswith(torch_version)
    assert result["module"].startswith(str(venv.site / "custom_op" / "_prebuilt"))
    assert result["libjpeg"] == "3.1.0"
    assert result["has_operator"] and result["bytes_equal_operator"] and result["compiled_equal"]
    # The MCU index works with the bundled libjpeg-turbo: cut out, not a fallback.
    assert result["index_equal"] and result["index_outcomes"] == {"indexed": 1}, result
    assert result["prepared_equal"] and result["displayed_size"], result
    # Pillow 12 bundles libjpeg-turbo 3.x too: same IDCT and upsampling, so
    # the pixels agree; 1 level allows another SIMD path's rounding.
    ours = np.array(result["pixels"], dtype=np.int16).reshape(result["shape"])
    assert np.abs(ours - _pillow_window(jpeg)).max() <= 1
    built = list((Path(venv.env["XDG_CACHE_HOME"]) / "custom_op").glob("*/_C*"))
    assert built == [], "a module was built"


def test_the_wheel_declares_its_stable_abi_floor(manifest):
    """The module is built on torch's stable ABI for every torch from its floor on, not for the
    torch it was compiled against alone."""
    from custom_op._core._build_config import TORCH_TARGET_VERSION

    assert manifest.get("torch_minimum") == ".".join(map(str, TORCH_TARGET_VERSION)), manifest


def _install_as_a_user(venv: WheelVenv, requirement: str) -> None:
    """``pip install`` with dependencies, after a dry run whose report must list the wheel alone."""
    torch_before = venv.torch_version()
    report = venv.site.parent / "pip-report.json"
    planned = venv.install(requirement, "--dry-run", "--report", str(report))
    assert planned.returncode == 0, planned.stdout + planned.stderr
    # Compared normalized (PEP 503): metadata 2.4 keeps the name as the project spells it.
    names = [re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower()
             for item in json.loads(report.read_text())["install"]]
    assert names == ["custom-op"], names
    installed = venv.install(requirement)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert venv.torch_version() == torch_before


@pytest.fixture(scope="session")
def venv_213(tmp_path_factory, wheel, farms) -> WheelVenv:
    """torch 2.13.0+cpu and no torchvision: the wheel installs with its dependencies resolved."""
    venv = _venv(tmp_path_factory, "venv213", farms["2.13"])
    _install_as_a_user(venv, str(wheel))
    return venv


@pytest.fixture(scope="session")
def venv_214(tmp_path_factory, wheel, farms) -> WheelVenv:
    """torch 2.14.1 and torchvision 0.29.1: the wheel with its torchvision extra."""
    venv = _venv(tmp_path_factory, "venv214", farms["2.14"])
    _install_as_a_user(venv, f"custom_op[torchvision] @ {wheel.as_uri()}")
    return venv


def test_the_wheel_links_libjpeg_turbo_statically_and_only_torch_outside(wheel, manifest,
                                                                         tmp_path):
    assert "manylinux" in wheel.name
    assert manifest["libjpeg"].startswith("static 3.1.0")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path)
    module = tmp_path / "custom_op" / "_prebuilt" / manifest["module"]
    needed = subprocess.run(["readelf", "-d", str(module)], capture_output=True, text=True,
                            check=True).stdout
    libraries = sorted(line.split("[")[1].rstrip("]") for line in needed.splitlines()
                       if "(NEEDED)" in line)
    runtime = ("libstdc++.so", "libgcc_s.so", "libc.so", "libm.so", "ld-linux", "libpthread",
               "libdl.so", "librt.so")
    torch_libraries = ("libc10.so", "libtorch", "libshm.so")
    assert [name for name in libraries if not name.startswith(runtime + torch_libraries)] == []
    exported = subprocess.run(["nm", "-D", "--defined-only", str(module)], capture_output=True,
                              text=True, check=True).stdout
    assert not [line for line in exported.splitlines() if " jpeg_" in line or " jsimd" in line]


def test_the_wheel_works_on_torch_213_without_torchvision_or_compiler(venv_213, jpeg):
    done, result = venv_213.check(jpeg)
    _assert_works(done, result, venv_213, jpeg, "2.13.0")
    assert result["torchvision"] is False


@pytest.mark.parametrize("code", [
    "import custom_op; custom_op.EncodedJpeg",
    "from custom_op.datasets import JpegFolder",
    "import custom_op.transforms",
], ids=["EncodedJpeg", "JpegFolder", "transforms"])
def test_the_integrations_without_torchvision_name_the_extra(venv_213, code):
    done = venv_213.run(code)
    assert done.returncode == 1
    assert "ImportError: " in done.stderr, done.stderr[-2000:]
    assert "pip install 'custom_op[torchvision]'" in done.stderr, done.stderr[-2000:]


def test_the_missing_extra_names_the_command_that_keeps_torch(venv_213):
    """The ImportError names the installed torch (2.13.0+cpu here): with it on the command line
    pip picks the torchvision made for that torch instead of replacing it."""
    done = venv_213.run("import custom_op; custom_op.EncodedJpeg")
    assert done.returncode == 1
    assert "pip install 'custom_op[torchvision]' 'torch==2.13.0+cpu'" in done.stderr, \
        done.stderr[-2000:]


def _fake_wheel(folder: Path, name: str, version: str, *requires: str) -> None:
    """A wheel of nothing but metadata, for pip's resolver to choose from without a download."""
    dist_info = f"{name}-{version}.dist-info"
    metadata = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                        *(f"Requires-Dist: {requirement}\n" for requirement in requires)])
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as archive:
        archive.writestr(f"{dist_info}/METADATA", metadata)
        archive.writestr(f"{dist_info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
                                               "Tag: py3-none-any\n")
        archive.writestr(f"{dist_info}/RECORD", "")


def _planned(venv: WheelVenv, index: Path, report: Path, *requirements: str) -> dict[str, str]:
    """What ``pip install`` would install in the venv from ``index`` alone: name -> version."""
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv.python), "install",
                           "--dry-run", "--no-index", "--find-links", str(index), "--report",
                           str(report), *requirements], env=venv.env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return {re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower(): item["metadata"]["version"]
            for item in json.loads(report.read_text())["install"]}


def test_the_documented_command_keeps_torch_where_the_extra_alone_replaces_it(venv_213, wheel,
                                                                               tmp_path):
    """As on PyPI, each torchvision asks for its own torch or newer: asked for the extra alone,
    pip replaces torch 2.13 with the newest torch to have the newest torchvision; the command
    the ImportError and docs/install.md give keeps it and takes the torchvision made for it."""
    index = tmp_path / "index"
    index.mkdir()
    _fake_wheel(index, "torch", "2.14.1")
    _fake_wheel(index, "torchvision", "0.28.0", "torch>=2.13.0", "numpy")
    _fake_wheel(index, "torchvision", "0.29.1", "torch>=2.14.0", "numpy")
    _fake_wheel(index, "numpy", "2.3.0")
    extra = f"custom_op[torchvision] @ {wheel.as_uri()}"
    alone = _planned(venv_213, index, tmp_path / "alone.json", extra)
    assert alone.get("torch") == "2.14.1", alone
    printed = venv_213.run("from custom_op._core._extras import install_command; "
                           "print(install_command('torchvision', 'custom_op'))")
    assert printed.returncode == 0, printed.stderr[-2000:]
    command = shlex.split(printed.stdout.strip())
    assert command[:3] == ["pip", "install", "custom_op[torchvision]"], command
    kept = _planned(venv_213, index, tmp_path / "kept.json", extra, *command[3:])
    assert "torch" not in kept and kept.get("torchvision") == "0.28.0", kept
    assert venv_213.torch_version() == "2.13.0+cpu"
    install_doc = (REPO / "docs" / "install.md").read_text()
    assert "\"torch==$(python -c 'from importlib.metadata import version; " \
           "print(version(\"torch\"))')\"" in install_doc


#: Each licence of libjpeg-turbo (its LICENSE.md) and a sentence of its text.
LIBJPEG_LICENCES = {
    "libjpeg-turbo-LICENSE-IJG.txt": "this software is based in part on the work of",
    "libjpeg-turbo-LICENSE-BSD-3-Clause.txt": "Redistributions in binary form must reproduce",
    "libjpeg-turbo-LICENSE-Zlib.txt": "This notice may not be removed or altered",
}


def _dist_info(archive: zipfile.ZipFile) -> str:
    return next(n.split("/")[0] for n in archive.namelist()
                if n.split("/")[0].endswith(".dist-info"))


def _license_files(archive: zipfile.ZipFile) -> list[str]:
    """The License-File fields of the wheel's METADATA (its headers, not its description)."""
    metadata = email.parser.Parser().parsestr(
        archive.read(f"{_dist_info(archive)}/METADATA").decode(), headersonly=True)
    return metadata.get_all("License-File") or []


@pytest.mark.parametrize("name", sorted(LIBJPEG_LICENCES))
def test_the_wheel_carries_libjpeg_turbos_licences(wheel, name):
    with zipfile.ZipFile(wheel) as archive:
        dist_info = _dist_info(archive)
        [listed] = [path for path in _license_files(archive) if path.endswith("/" + name)]
        text = archive.read(f"{dist_info}/licenses/{listed}").decode()
        assert f"{dist_info}/licenses/LICENSE" in archive.namelist()
    assert LIBJPEG_LICENCES[name] in " ".join(text.split())
    assert "Copyright" in text or "copyright" in text


def test_every_license_file_of_the_metadata_is_in_the_wheels_licenses_folder(wheel):
    """Core metadata 2.4 (PEP 639): each License-File is a path relative to the project, and the
    file is in the wheel at that path under the dist-info's licenses/ folder; nothing else is
    there. (setuptools before 77 listed the paths but put the files at the dist-info's top.)"""
    with zipfile.ZipFile(wheel) as archive:
        dist_info = _dist_info(archive)
        listed = _license_files(archive)
        metadata = email.parser.Parser().parsestr(
            archive.read(f"{dist_info}/METADATA").decode(), headersonly=True)
        folder = f"{dist_info}/licenses/"
        shipped = sorted(name[len(folder):] for name in archive.namelist()
                         if name.startswith(folder) and not name.endswith("/"))
    version = tuple(int(part) for part in metadata["Metadata-Version"].split("."))
    assert version >= (2, 4), metadata["Metadata-Version"]
    assert "LICENSE" in listed and len(listed) == 1 + len(LIBJPEG_LICENCES), listed
    assert all(not path.startswith("/") and ".." not in path.split("/") for path in listed)
    assert shipped == sorted(listed)


@pytest.fixture(scope="session")
def module(wheel, manifest, tmp_path_factory) -> Path:
    """The repaired wheel's native module, unpacked."""
    root = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(root)
    return root / "custom_op" / "_prebuilt" / manifest["module"]


def _versions(text: str, prefix: str) -> list[tuple[int, ...]]:
    return sorted({tuple(int(part) for part in found.split("."))
                   for found in re.findall(rf"\b{prefix}_([0-9]+(?:\.[0-9]+)*)\b", text)})


def test_the_wheel_is_manylinux_2_28_and_needs_glibc_228_at_most(wheel, module):
    assert wheel.name.endswith(f"-cp310-abi3-manylinux_2_28_{platform.machine()}.whl"), wheel.name
    dynamic = subprocess.run(["objdump", "-T", str(module)], capture_output=True, text=True,
                             check=True).stdout
    glibc = _versions(dynamic, "GLIBC")
    assert glibc and max(glibc) <= (2, 28), max(glibc)
    # The C++ runtime of GCC 8 (RHEL 8's) or older: torch's wheels bring their own needs.
    assert max(_versions(dynamic, "GLIBCXX")) <= (3, 4, 25)


#: The newest version node of each runtime library that the oldest system of the wheel's tag
#: provides: glibc 2.28 and GCC 8's libstdc++ and libgcc_s (RHEL 8, Ubuntu 20.04 has newer).
NEWEST_RUNTIME_VERSIONS = {"GLIBC": (2, 28), "GLIBCXX": (3, 4, 25), "CXXABI": (1, 3, 11),
                           "GCC": (8, 0, 0)}
#: The C and C++ runtime libraries the module may bind to, as the build machine has them.
RUNTIME_LIBRARIES = ("libstdc++.so.6", "libgcc_s.so.1", "libc.so.6", "libm.so.6",
                     "libpthread.so.0", "libdl.so.2", "librt.so.1",
                     f"ld-linux-{platform.machine().replace('_', '-')}.so.2")


def _dynamic_symbols(path: Path) -> list[tuple[str, str | None, bool, bool]]:
    """(name, version node or None, defined, weak) of each symbol in an ELF file's dynamic table."""
    text = subprocess.run(["readelf", "--dyn-syms", "--wide", str(path)], capture_output=True,
                          text=True, check=True).stdout
    symbols = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8 or not parts[0].endswith(":") or not parts[0][:-1].isdigit():
            continue
        name, _, version = parts[7].replace("@@", "@").partition("@")
        symbols.append((name, version or None, parts[6] != "UND", parts[4] == "WEAK"))
    return symbols


def _definitions(paths) -> dict[str, set[str | None]]:
    """Every symbol the files define, with the version nodes at which they define it."""
    defined: dict[str, set[str | None]] = {}
    for path in paths:
        for name, version, is_defined, _ in _dynamic_symbols(path):
            if is_defined:
                defined.setdefault(name, set()).add(version)
    return defined


def _version_node(node: str | None) -> tuple[str, tuple[int, ...]] | None:
    """("GLIBCXX", (3, 4, 25)) for "GLIBCXX_3.4.25"; None for a node that is not a release."""
    found = re.fullmatch(r"([A-Z]+)_([0-9]+(?:\.[0-9]+)*)", node or "")
    return (found[1], tuple(int(part) for part in found[2].split("."))) if found else None


def _allowed(node: str | None) -> bool:
    parsed = _version_node(node)
    return (parsed is not None and parsed[0] in NEWEST_RUNTIME_VERSIONS
            and parsed[1] <= NEWEST_RUNTIME_VERSIONS[parsed[0]])


def _runtime_library(name: str) -> Path:
    """The runtime library the wheel's build links against (the Makefile's WHEEL_CXX_HOST's)."""
    found = subprocess.run([os.environ.get("WHEEL_CXX_HOST", "g++"), f"-print-file-name={name}"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.isabs(found), f"the C++ compiler does not know where {name} is"
    return Path(found).resolve()


def _torch_libraries(site: Path) -> list[Path]:
    return sorted(path for path in (site / "torch" / "lib").glob("lib*.so*") if path.is_file())


def _python_libraries() -> list[Path]:
    """The interpreter and its libpython, which define the C API an abi3 module calls."""
    files = [Path(getattr(sys, "_base_executable", sys.executable)).resolve()]
    shared = Path(sysconfig.get_config_var("LIBDIR") or "/") / (
        sysconfig.get_config_var("INSTSONAME") or "")
    return files + ([shared] if shared.is_file() else [])


def test_every_import_of_the_module_resolves_on_the_oldest_runtime_of_its_tag(module):
    """Each symbol the module imports exists in glibc 2.28, GCC 8's libstdc++ and libgcc_s,
    every torch the tests install, or Python: none needs a newer system than the tag says.

    A reference without a version node binds to whatever library defines the name first, so it
    is judged by the oldest node at which this machine's runtime defines that name: a C++ runtime
    function that only a newer libstdc++ has would be missing there, even when some torch's
    libraries happen to carry a copy of it. A versioned reference must name an allowed node that
    the runtime library defines. Names the runtime does not define must come from torch (every
    installed torch) or from Python.
    """
    runtime = _definitions(_runtime_library(name) for name in RUNTIME_LIBRARIES)
    torch_sites = [Path(sysconfig.get_paths()["purelib"]),
                   next((TORCH213_VENV / "lib").glob("python3*/site-packages"))]
    in_every_torch = set.intersection(*(set(_definitions(_torch_libraries(site)))
                                        for site in torch_sites))
    python = _definitions(_python_libraries())
    symbols = _dynamic_symbols(module)
    failures = []
    for name, version, defined, weak in symbols:
        if defined or not name:
            continue
        nodes = runtime.get(name, set())
        if version is not None:
            if not _allowed(version) or version not in nodes:
                failures.append((name, f"needs {version}"))
        elif nodes:
            if not any(_allowed(node) for node in nodes):
                oldest = min((node for node in nodes if _version_node(node)),
                             key=lambda node: _version_node(node), default=None)
                failures.append((name, f"unversioned, defined from {oldest} on"))
        elif name not in in_every_torch and name not in python:
            failures.append((name, "defined by no runtime library, torch or Python"))
    demangled = subprocess.run(["c++filt"], input="\n".join(name for name, _ in failures),
                               capture_output=True, text=True).stdout.splitlines()
    assert not failures, "\n".join(f"{shown}: {why}" for shown, (_, why) in zip(demangled,
                                                                                 failures))
    # The module's own copies of runtime functions stay inside it: it exports its entry point.
    assert [name for name, _, defined, _ in symbols if defined] == ["PyInit__C"]


def test_the_wheel_holds_no_path_of_the_build_machine(module):
    dynamic = subprocess.run(["readelf", "-d", str(module)], capture_output=True, text=True,
                             check=True).stdout
    paths = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines()
             if "(RUNPATH)" in line or "(RPATH)" in line]
    assert all(entry.startswith("$ORIGIN") for path in paths for entry in path.split(":")), paths


def test_the_bundled_code_is_libjpeg_turbo_31_with_simd(module):
    data = module.read_bytes()
    assert re.search(rb"libjpeg-turbo version 3\.1\.[0-9]+", data)
    symbols = subprocess.run(["nm", str(module)], capture_output=True, text=True,
                             check=True).stdout.split()
    # The SIMD dispatch and its kernels (AVX2 on x86-64, Neon on Arm): libjpeg-turbo built
    # with SIMD. Whether they run is for bench/ship_bench.py to show (a decode's speed).
    simd = [name for name in symbols if name.startswith("jsimd_")]
    kernels = "_avx2" if platform.machine() == "x86_64" else "_neon"
    assert "jsimd_can_idct_islow" in simd and any(kernels in name for name in simd), simd[:20]


def test_the_wheel_works_on_torch_214_with_torchvision(venv_214, jpeg):
    done, result = venv_214.check(jpeg, "--torchvision")
    _assert_works(done, result, venv_214, jpeg, "2.14.1")
    assert result["v2_equal"] and result["coload_equal"]


def test_swapping_torch_under_the_installed_wheel_compiles_nothing(tmp_path_factory, wheel, farms,
                                                                   jpeg):
    venv = _venv(tmp_path_factory, "venvswap", farms["2.13"])
    installed = venv.install(wheel, "--no-deps")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    for version, full_version in (("2.13", "2.13.0"), ("2.14", "2.14.1"), ("2.13", "2.13.0")):
        venv.use(farms[version])
        done, result = venv.check(jpeg)
        _assert_works(done, result, venv, jpeg, full_version)
