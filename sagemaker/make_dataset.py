#!/usr/bin/env python3
"""Writes a small ImageFolder tree of photo-like JPEGs for trying train.py.

    python sagemaker/make_dataset.py DATA_DIR [--images 64] [--height 180] [--width 240]

The images come from the repository's ``synthetic`` package (numpy and
Pillow only). It does not import custom_op, whose native extension
run_local.sh wants built inside the training job.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Run as a script, this file's folder is on the path, not the repository root that holds
# synthetic/ (tests and bench get the root from pytest's pythonpath and from `python -m`).
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import synthetic  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="folder to write <class>/<index>.jpg into")
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--height", type=int, default=180)
    parser.add_argument("--width", type=int, default=240)
    parser.add_argument("--classes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    classes = tuple(f"class_{chr(ord('a') + i)}" for i in range(args.classes))
    paths = synthetic.write_jpeg_folder(args.root, args.images, args.height, args.width,
                                        classes=classes, seed=args.seed)
    print(f"make_dataset.py: {len(paths)} JPEGs of {args.height} x {args.width} in "
          f"{len(classes)} classes under {args.root}", flush=True)


if __name__ == "__main__":
    main()
