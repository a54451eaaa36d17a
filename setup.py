"""``pip install``: the custom_op package with its native extension built for this environment.

The extension is compiled against the torch that is already installed, so
install with ``pip install --no-build-isolation .`` (an isolated build
environment would download a different, multi-GB torch). It goes into the
package as ``custom_op/_prebuilt/<build key>/``, where the loader finds it,
and ``pip uninstall`` removes it with the rest.

If the compiler, Python.h or libjpeg-turbo's headers are missing, the install
fails and says what to install: better at install time than inside a
training job that is already billing. ``CUSTOM_OP_SKIP_BUILD=1`` installs the
Python code alone, for images that bring their build another way
(``python -m custom_op.build --into DIR`` and ``CUSTOM_OP_BUILD_DIR``); the
first decoding call then builds, or finds that build. Editable installs
(``pip install -e .``) build nothing either: a checkout's sources change, so
it builds just in time into ``custom_op/_build/``.

``make wheel`` runs this file too (``pip wheel``, with CUSTOM_OP_JPEG_STATIC
set: libjpeg-turbo linked in). Beside the module it writes the module's
record (size, SHA-256: custom_op/_core/_module_check.py) and
``_prebuilt/shipped.json``, the manifest by which the installed package finds
the module without recomputing its key (custom_op/_core/_shipped.py); for a module
on CPython's limited API the wheel is tagged abi3.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from setuptools import setup

PACKAGE = Path(__file__).resolve().parent / "custom_op"
SKIP_VARIABLE = "CUSTOM_OP_SKIP_BUILD"


def _load_by_path(name: str):
    # By path: importing the custom_op package here would need its dependencies.
    spec = importlib.util.spec_from_file_location(f"custom_op_setup_{name}",
                                                  PACKAGE / "_core" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fail(reason: str) -> None:
    sys.exit(f"custom_op: {reason}\n(To install without the native extension and build it "
             f"later, set {SKIP_VARIABLE}=1; see docs/install.md.)")


def _version_text(version) -> str | None:
    """(2, 11) or "2.11" as "2.11"; None stays None."""
    return ".".join(map(str, version)) if isinstance(version, (tuple, list)) else version


def _describe_module(module: Path, key: str) -> None:
    """Writes the module's record (size, hash) and the manifest the installed loader reads.

    The manifest's fields are described in custom_op/_core/_shipped.py, which reads it.
    """
    import torch

    config = _load_by_path("_build_config")
    _load_by_path("_module_check").write_record(module)
    prebuilt = module.parent.parent
    manifest = {
        "key": key,
        "module": module.relative_to(prebuilt).as_posix(),
        "torch_built": torch.__version__,
        "torch_git": torch.version.git_version or "",
        # A module on torch's stable ABI runs on every torch from its target on;
        # one on the C++ API only on the torch it was built against.
        "torch_minimum": _version_text(getattr(config, "TORCH_TARGET_VERSION", None)),
        "libjpeg": config.jpeg_link_identity().split(" /")[0],
    }
    (prebuilt / "shipped.json").write_text(json.dumps(manifest, indent=1) + "\n")


def _native_build() -> dict:
    """setup() arguments that build the extension, or none when skipped."""
    if os.environ.get(SKIP_VARIABLE) == "1":
        print(f"custom_op: {SKIP_VARIABLE}=1: installing without the native extension",
              file=sys.stderr)
        return {}
    try:
        import torch
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError as error:
        _fail(f"the native extension is built against the installed torch, which this build "
              f"cannot import ({error}). Install torch first, then run "
              "pip install --no-build-isolation .")
    config = _load_by_path("_build_config")
    diagnosis = _load_by_path("_build_diagnosis")
    key = config.build_key()
    name = f"custom_op._prebuilt.{key}._C"

    class BuildExtensionUnlessEditable(BuildExtension.with_options(use_ninja=False)):
        def run(self) -> None:
            if self.editable_mode:
                print("custom_op: editable install: the extension is built on first use",
                      file=sys.stderr)
                return
            try:
                arguments = config.extension_arguments(key, "custom_op/")
            except config.JpegPrefixError as error:
                _fail(str(error))
            missing = diagnosis.missing_requirements(arguments["include_dirs"])
            if missing:
                _fail(f"cannot build the native extension. {missing}")
            extension = self.extensions[0]
            for field, values in arguments.items():
                if isinstance(values, list) and field != "sources":
                    getattr(extension, field).extend(values)
                elif field != "sources":  # a flag, e.g. py_limited_api
                    setattr(extension, field, values)
            super().run()
            _describe_module(Path(self.get_ext_fullpath(extension.name)), key)

    # run() adds libjpeg-turbo's folders and our flags, so that library
    # discovery (which runs pkg-config) and its errors happen only when
    # something is built, not when pip asks for metadata.
    # py_limited_api: an abi3 module (custom_op/_core/_build_config.py, the binding on torch's stable ABI).
    extension = CppExtension(name=name, sources=[f"custom_op/{s}" for s in config.SOURCES],
                             py_limited_api=True)
    # One module for every CPython from torch's floor (3.10) on: the wheel is tagged so.
    return {"ext_modules": [extension], "cmdclass": {"build_ext": BuildExtensionUnlessEditable},
            "options": {"bdist_wheel": {"py_limited_api": "cp310"}},
            "distclass": _with_licence_files(_bundled_licences(config))}


def _with_licence_files(extra: list[str]) -> type:
    """A setuptools Distribution whose licence files include ``extra``.

    pyproject.toml's (default) licence files replace a ``license_files``
    argument of setup(), so the extra ones are added after the configuration
    files are read.
    """
    from setuptools.dist import Distribution

    class WithLicenceFiles(Distribution):
        def parse_config_files(self, *args, **kwargs) -> None:
            super().parse_config_files(*args, **kwargs)
            listed = list(self.metadata.license_files or [])
            self.metadata.license_files = listed + [f for f in extra if f not in listed]

    return WithLicenceFiles


#: The first setuptools that writes licence files where core metadata 2.4 (PEP 639) puts them:
#: each License-File line of METADATA is a path relative to the project, and the file is in the
#: wheel at that path under the dist-info's licenses/ folder. Older ones copy each file to the
#: top of the dist-info under its bare name, so that the paths METADATA lists name no file.
LICENCE_LAYOUT_SETUPTOOLS = (77, 0, 3)
#: Where the notices of a libjpeg-turbo outside this folder are copied: a License-File path must
#: stay inside the project (no "..", not absolute).
OUTSIDE_LICENCES = Path("build") / "bundled-licenses" / "libjpeg-turbo"


def _setuptools_version() -> tuple[int, ...]:
    import setuptools

    return tuple(int(part) for part in setuptools.__version__.split(".")[:3] if part.isdigit())


def _bundled_licences(config) -> list[str]:
    """The licence files of a statically linked libjpeg-turbo, relative to this folder.

    A module that carries libjpeg-turbo's code must carry its notices too:
    ``make wheel`` writes them into the archive's ``licenses/`` folder
    (packaging/libjpeg_licenses.py), and they go into the wheel's dist-info
    beside our own LICENSE. A build without them is refused rather than
    shipped without, and so is one whose setuptools would put them where the
    metadata does not say.
    """
    try:
        static = config.static_jpeg_prefix()
    except config.JpegPrefixError:
        return []  # run() reports it
    if static is None:
        return []
    found = sorted((static / "licenses").glob("*.txt"))
    if not found:
        _fail(f"{static}/licenses holds no licence file of the libjpeg-turbo linked in; "
              "make libjpeg-static writes them (packaging/libjpeg_licenses.py)")
    if _setuptools_version() < LICENCE_LAYOUT_SETUPTOOLS:
        needed = ".".join(map(str, LICENCE_LAYOUT_SETUPTOOLS))
        import setuptools

        _fail(f"setuptools {setuptools.__version__} would put libjpeg-turbo's licence files "
              f"elsewhere in the wheel than its METADATA says; setuptools {needed} or newer "
              f"puts them where core metadata 2.4 requires. Upgrade it in the build "
              f"environment: pip install 'setuptools>={needed}' (make wheel does)")
    here = Path(__file__).resolve().parent
    listed = []
    for path in found:
        if not path.resolve().is_relative_to(here):
            copy = here / OUTSIDE_LICENCES / path.name
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(path.read_bytes())
            path = copy
        listed.append(Path(os.path.relpath(path, here)).as_posix())
    return listed


setup(**_native_build())
