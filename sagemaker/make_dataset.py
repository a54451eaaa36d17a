#!/usr/bin/env python3
"""Writes a small ImageFolder tree of photo-like JPEGs for trying train.py.

    python sagemaker/make_dataset.py DATA_DIR [--images 64] [--height 180] [--width 240]

It loads custom_op/synthetic.py by its path rather than importing the
custom_op package: ``import custom_op`` would build the native extension,
and run_local.sh wants that build to happen inside the training job.
synthetic.py needs only numpy and Pillow.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def load_synthetic():
    path = REPO / "custom_op" / "synthetic.py"
    if not path.is_file():
        raise SystemExit(f"make_dataset.py: {path} is missing")
    spec = importlib.util.spec_from_file_location("custom_op_synthetic_standalone", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and the like look modules up by name
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="folder to write <class>/<index>.jpg into")
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--height", type=int, default=180)
    parser.add_argument("--width", type=int, default=240)
    parser.add_argument("--classes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    synthetic = load_synthetic()
    classes = tuple(f"class_{chr(ord('a') + i)}" for i in range(args.classes))
    paths = synthetic.write_jpeg_folder(args.root, args.images, args.height, args.width,
                                        classes=classes, seed=args.seed)
    print(f"make_dataset.py: {len(paths)} JPEGs of {args.height} x {args.width} in "
          f"{len(classes)} classes under {args.root}", flush=True)


if __name__ == "__main__":
    main()
