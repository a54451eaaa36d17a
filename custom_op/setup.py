"""Builds custom_op's native extension, ``custom_op._C``.

``import custom_op`` runs this file itself, once per environment (see
custom_op/_build.py), so you rarely need to. To build by hand:

    python custom_op/setup.py build_ext --build-lib BUILD_DIR --build-temp BUILD_DIR/obj

Sources and flags come from custom_op/_build_config.py, shared with the JIT build.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

import torch


def _load_build_config():
    # By path: importing the custom_op package would start a JIT build.
    path = Path(__file__).resolve().parent / "_build_config.py"
    spec = importlib.util.spec_from_file_location("custom_op_build_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


config = _load_build_config()
key = config.build_key(torch.__version__, torch.version.git_version or "",
                       bool(torch._C._GLIBCXX_USE_CXX11_ABI))

os.chdir(config.PACKAGE_DIR)

setup(
    name="custom_op_native",
    ext_modules=[
        CppExtension(
            name="custom_op._C",
            sources=list(config.SOURCES),
            include_dirs=config.include_dirs(),
            library_dirs=config.library_dirs(),
            libraries=list(config.LIBRARIES),
            extra_compile_args=list(config.EXTRA_COMPILE_ARGS),
            extra_link_args=config.extra_link_args(),
            define_macros=[("CUSTOM_OP_BUILD_KEY", key)],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
)
