"""Builds custom_op's native extension, ``custom_op._C``, into a build folder.

The just-in-time build (custom_op/_core/_build.py) runs this file; so does
``python -m custom_op.build``, which is how to build by hand. ``pip install``
uses the repository's setup.py instead, which builds the same extension into
the installed package. Sources, flags and the build key come from
custom_op/_core/_build_config.py, shared by all of them.

    python custom_op/_core/_build_script.py build_ext --build-lib BUILD_DIR --build-temp BUILD_DIR/obj
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE_DIR = HERE.parent


def _load_by_path(name: str):
    # By path: importing the custom_op package would import torch-bound modules.
    spec = importlib.util.spec_from_file_location(f"custom_op_setup_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    config = _load_by_path("_build_config")
    diagnosis = _load_by_path("_build_diagnosis")
    key = config.build_key()
    try:
        arguments = config.extension_arguments(key)
    except config.JpegPrefixError as error:
        sys.exit(f"custom_op: {error}")
    missing = diagnosis.missing_requirements(arguments["include_dirs"])
    if missing:
        sys.exit(f"custom_op: cannot build the native extension. {missing}")

    os.chdir(PACKAGE_DIR)  # the sources are named relative to the package folder
    setup(
        name="custom_op_native",
        ext_modules=[CppExtension(name="custom_op._C", **arguments)],
        cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
    )


if __name__ == "__main__":
    main()
