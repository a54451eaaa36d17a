#!/usr/bin/env python3
"""Writes a small dataset of photo-like JPEGs for trying train.py: a folder, or tar shards.

    python sagemaker/make_dataset.py DATA_DIR [--images 64] [--height 180] [--width 240]
    python sagemaker/make_dataset.py DATA_DIR --shards [--samples-per-shard 16]
    python sagemaker/make_dataset.py DATA_DIR --shards --from IMAGEFOLDER_TREE

Without --shards it writes an ImageFolder tree DATA_DIR/<class>/<index>.jpg.
With --shards it writes WebDataset-style shards DATA_DIR/train-000000.tar, ...
(KEY.jpg and KEY.cls per sample), of the same generated images or of the
JPEGs of an existing ImageFolder-style tree (--from).

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


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="folder to write <class>/<index>.jpg (or the shards) into")
    parser.add_argument("--images", type=_positive, default=64)
    parser.add_argument("--height", type=_positive, default=180)
    parser.add_argument("--width", type=_positive, default=240)
    parser.add_argument("--classes", type=_positive, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shards", action="store_true",
                        help="write tar shards (KEY.jpg + KEY.cls) instead of a folder")
    parser.add_argument("--samples-per-shard", type=_positive, default=16, metavar="N",
                        help="samples per shard (default %(default)s)")
    parser.add_argument("--prefix", default="train",
                        help="shard names: PREFIX-000000.tar, ... (default %(default)s)")
    parser.add_argument("--from", dest="source", type=Path, metavar="TREE",
                        help="with --shards: shard the JPEGs of this ImageFolder-style tree "
                             "instead of generated images")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.source is not None and not args.shards:
        parser.error("--from needs --shards")
    if args.source is not None:
        # Shuffled (by --seed), so that each shard mixes classes, as WebDataset advises.
        class_names, samples = synthetic.folder_samples(args.source, seed=args.seed)
        what = f"the JPEGs of {args.source}"
    else:
        class_names = [f"class_{chr(ord('a') + i)}" for i in range(args.classes)]
        samples = synthetic.generated_samples(args.images, args.height, args.width,
                                              args.classes, seed=args.seed)
        what = f"{args.images} JPEGs of {args.height} x {args.width}"
    if args.shards:
        paths = synthetic.write_shards(samples, args.root, args.samples_per_shard,
                                       prefix=args.prefix)
        print(f"make_dataset.py: {what} in {len(class_names)} classes, as {len(paths)} shards "
              f"of up to {args.samples_per_shard} samples under {args.root}", flush=True)
        return
    paths = synthetic.write_jpeg_folder(args.root, args.images, args.height, args.width,
                                        classes=tuple(class_names), seed=args.seed)
    print(f"make_dataset.py: {len(paths)} JPEGs of {args.height} x {args.width} in "
          f"{len(class_names)} classes under {args.root}", flush=True)


if __name__ == "__main__":
    main()
