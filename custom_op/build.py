"""python -m custom_op.build: build (or verify) the native extension ahead of time.

    python -m custom_op.build                 # build into the build folder, then verify
    python -m custom_op.build --into DIR      # build into DIR (use with CUSTOM_OP_BUILD_DIR=DIR)
    python -m custom_op.build --verify        # build nothing: find the build, load it, decode

A Dockerfile runs it so that the image carries the build (and can then drop
the compiler); a cluster runs it once on a shared folder before its ranks
start. An explicit build always retries, even after a remembered failure.
It prints the build key, the module's path, and how long loading took.
Exit status: 0 when a working build is there, 1 otherwise (with the reason).
"""

from __future__ import annotations

import argparse
import base64
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from ._core import _build, _loader
from ._decode._single import decode_and_crop_jpeg

#: A 16 x 8 baseline JPEG of one colour, RGB (200, 30, 60): enough to show
#: that the loaded module decodes.
_PROBE_JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8UHRofHh0aHBwgJC4nICIs"
    "IxwcKDcpLDAxNDQ0Hyc5PTgyPC4zNDL/2wBDAQkJCQwLDBgNDRgyIRwhMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIy"
    "MjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjL/wAARCAAIABADASIAAhEBAxEB/8QAFQABAQAAAAAAAAAAAAAAAAAA"
    "AAb/xAAUEAEAAAAAAAAAAAAAAAAAAAAA/8QAFQEBAQAAAAAAAAAAAAAAAAAABAf/xAAUEQEAAAAAAAAAAAAAAAAA"
    "AAAA/9oADAMBAAIRAxEAPwCTADUp/9k=")
_PROBE_COLOUR = (200, 30, 60)
#: JPEG's quantisation moves a flat colour by a few levels.
_PROBE_TOLERANCE = 8


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m custom_op.build",
        description="Build custom_op's native extension for this environment (Python, torch, "
                    "libjpeg-turbo), or verify that a build is there and works.")
    parser.add_argument("--into", metavar="DIR", type=Path, default=None,
                        help="build folder to use instead of the default one (set "
                             "CUSTOM_OP_BUILD_DIR=DIR where the build is used)")
    parser.add_argument("--verify", action="store_true",
                        help="build nothing: find the build, load it and decode a small JPEG")
    return parser


def _roots(into: Path | None) -> list[Path]:
    return [into] if into is not None else [_loader.PREBUILT_DIR, _loader.build_root()]


def verify(path: Path, key: str) -> str:
    """Loads the build at ``path`` (or uses it, when it is the module this process loaded) and
    decodes a probe image; returns a report line.

    Raises:
        ImportError: the module is not loadable, was built for another key, or another build
            is loaded in this process (see :func:`main`, which then checks in a new process).
        RuntimeError: it loaded but decoded the probe wrongly.
    """
    started = time.perf_counter()
    module = _loaded_from(path) or _loader.load_module(path, key)
    loaded = time.perf_counter() - started
    pixel = decode_and_crop_jpeg(torch.frombuffer(bytearray(_PROBE_JPEG), dtype=torch.uint8),
                                 0, 0, 8, 16)[:, 4, 8].tolist()
    if any(abs(got - want) > _PROBE_TOLERANCE for got, want in zip(pixel, _PROBE_COLOUR)):
        raise RuntimeError(f"custom_op: {path} decoded the probe JPEG as {pixel}, expected about "
                           f"{list(_PROBE_COLOUR)} (this is a bug in custom_op)")
    return (f"custom_op: build {key} at {path} works (libjpeg-turbo "
            f"{module.libjpeg_version()}, loaded in {loaded * 1000:.1f} ms)")


def _loaded_from(path: Path):
    """The module this process loaded, if it was loaded from ``path``."""
    module = sys.modules.get(_loader.MODULE_NAME)
    if module is not None and Path(module.__file__).resolve() == path.resolve():
        return module
    return None


#: Set in the process that checks a build for :func:`main`, which must not start another.
_CHILD_VARIABLE = "_CUSTOM_OP_BUILD_CHECK_CHILD"


def _verify_in_new_process(root: Path) -> int:
    """Checks the build in ``root`` in a new process, whose import loads that build.

    ``import custom_op`` loaded this environment's build already, and a process can hold one
    copy of the module (_loader.load_module); the new process finds the build in ``root`` first
    (CUSTOM_OP_BUILD_DIR), as the job that uses the folder will.
    """
    env = {**os.environ, "CUSTOM_OP_BUILD_DIR": str(root), _CHILD_VARIABLE: "1"}
    return subprocess.run([sys.executable, "-m", "custom_op.build", "--verify", "--into",
                           str(root)], env=env).returncode


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    key = _loader.current_build_key()
    path = _loader.find_build(key, _roots(args.into))
    try:
        if path is None and args.verify:
            raise ImportError(f"custom_op: no build for key {key} in "
                              f"{', '.join(map(str, _roots(args.into)))}; run "
                              "python -m custom_op.build")
        if path is None:
            root = args.into if args.into is not None else _loader.build_root()
            path = _build.build(root, key, retry_failed=True)
        if _loader.MODULE_NAME in sys.modules and _loaded_from(path) is None:
            if os.environ.get(_CHILD_VARIABLE):
                loaded = sys.modules[_loader.MODULE_NAME].__file__
                raise ImportError(f"custom_op: this process loaded {loaded} at import, ahead "
                                  f"of {path}: a job would use that one, not {path}")
            return _verify_in_new_process(path.parent.parent)
        print(verify(path, key))
    except (ImportError, RuntimeError) as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
