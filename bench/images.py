"""The images a benchmark part reads: generated photo-like files or real photos, cached.

Two kinds of image set, chosen with ``--images`` (both by default), each at
the sizes a part asks for, encoded by Pillow at ``--quality`` and
``--subsampling``, baseline or progressive:

  generated  synthetic.make_photo (dead leaves with texture): dense
             files, about 5 bits per pixel at quality 90
  real       camera photos fitted to the size (bench/photos.py): lomiri
             wallpapers and scikit-learn's two sample images

Each set lives in ``<cache>/<kind>-<H>x<W>-q<Q>-<SSS>[-prog]-seed<N>/<class>/<index>.jpg``
(an ImageFolder tree), is written once and reused; a part asking for fewer
files than a set holds reads the first ones. ``--data DIR`` replaces the
operator and pipeline parts' images with a folder of the user's own JPEGs.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

import custom_op
from bench import photos
from bench.machine import REPO_ROOT

DEFAULT_CACHE = REPO_ROOT / "bench" / "data"
KINDS = ("generated", "real")
JPEG_SUFFIXES = (".jpg", ".jpeg")
CLASSES = ("class_a", "class_b")


@dataclass
class ImageSet:
    """JPEG files with their (height, width) and how they were made."""

    paths: list[pathlib.Path]
    sizes: list[tuple[int, int]]
    description: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.description.get("source", "unknown")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose the images; every part shares them."""
    group = parser.add_argument_group("images")
    group.add_argument("--images", default="both", choices=("both", *KINDS),
                       help="generated photo-like files, real photos, or both (default both)")
    group.add_argument("--data", type=pathlib.Path, default=None,
                       help="folder of your own JPEGs for the operator and pipeline parts, searched recursively")
    group.add_argument("--num-images", type=int, default=60,
                       help="files in the operator and pipeline parts' set, or at most from --data (default 60)")
    group.add_argument("--crop", type=int, default=256, help="crop side in pixels (default 256)")
    group.add_argument("--height", type=int, default=533, help="height of the operator/pipeline files (default 533)")
    group.add_argument("--width", type=int, default=800, help="width of the operator/pipeline files (default 800)")
    group.add_argument("--quality", type=int, default=90, help="JPEG quality of the files (default 90)")
    group.add_argument("--subsampling", default="4:2:0", choices=("4:4:4", "4:2:2", "4:2:0"),
                       help="chroma subsampling of the files (default 4:2:0)")
    group.add_argument("--cache", type=pathlib.Path, default=DEFAULT_CACHE,
                       help=f"where the files are kept and reused (default {DEFAULT_CACHE})")
    group.add_argument("--seed", type=int, default=0, help="seed of the images, windows and targets")
    group.add_argument("--photos", type=pathlib.Path, default=None,
                       help="a folder of your JPEGs, measured as they are, one set per size found "
                            "(sub-folders are classes), in place of the real images of the lane, "
                            "ray and index parts")
    group.add_argument("--json", type=pathlib.Path, default=None,
                       help="also write the lane, ray and index parts' headline figures to this "
                            "file (merged)")


def kinds(args: argparse.Namespace) -> tuple[str, ...]:
    """The kinds of image that ``--images`` asks for."""
    return KINDS if args.images == "both" else (args.images,)


class ImageSource:
    """Makes (or reuses) sets of one kind at any size, with the run's quality and seed."""

    def __init__(self, kind: str, args: argparse.Namespace) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown kind of image {kind!r}; expected one of {KINDS}")
        self.kind = kind
        self.cache = args.cache
        self.quality = args.quality
        self.subsampling = args.subsampling
        self.seed = args.seed

    def recipe(self, height: int, width: int, progressive: bool) -> str:
        """The set's folder name: kind-HxW-qQ-SSS[-prog]-seedN."""
        return (f"{self.kind}-{height}x{width}-q{self.quality}-{self.subsampling.replace(':', '')}"
                f"{'-prog' if progressive else ''}-seed{self.seed}")

    def files(self, height: int, width: int, count: int, *, progressive: bool = False) -> ImageSet:
        """``count`` files of height x width: the set's first ones, written if missing."""
        recipe = self.recipe(height, width, progressive)
        folder = self.cache / recipe
        options = dict(classes=CLASSES, quality=self.quality, subsampling=self.subsampling, seed=self.seed,
                       progressive=progressive)
        if self.kind == "real":
            sources = photos.source_photos(self.cache)
            paths = photos.write_photo_folder(folder, sources, count, height, width, **options)
            how = {"photos": [path.name for path in photos.usable_photos(sources, height, width)],
                   "fitting": "bench/photos.py: a window of the file's aspect, Lanczos, Pillow encoder"}
        else:
            import synthetic

            paths = synthetic.write_jpeg_folder(folder, count, height, width, **options)
            how = {"generator": "synthetic.make_photo (dead leaves), encoded by Pillow"}
        return describe(ImageSet(paths, [(height, width)] * len(paths), {
            "source": self.kind, "folder": str(folder), "recipe": recipe, "height": height, "width": width,
            "quality": self.quality, "subsampling": self.subsampling, "progressive": progressive, **how}))


def _folder_set(args: argparse.Namespace) -> ImageSet:
    """Your own files: RGB (3-channel) JPEGs at least as large as the crop, in path order."""
    candidates = sorted(path for path in args.data.rglob("*")
                        if path.suffix.lower() in JPEG_SUFFIXES and path.is_file())
    paths, sizes, skipped = [], [], {"unreadable": 0, "not_3_channels": 0, "smaller_than_crop": 0}
    for path in candidates:
        if len(paths) >= args.num_images:
            break
        try:
            height, width, channels = custom_op.jpeg_size(path.read_bytes())
        except (OSError, ValueError, RuntimeError):
            skipped["unreadable"] += 1
            continue
        if channels != 3:
            # The article's PIL pipeline would give 1- or 4-channel tensors that do not stack.
            skipped["not_3_channels"] += 1
        elif height < args.crop or width < args.crop:
            skipped["smaller_than_crop"] += 1
        else:
            paths.append(path)
            sizes.append((height, width))
    return ImageSet(paths, sizes, {"source": "folder", "folder": str(args.data),
                                   "files_found": len(candidates), "skipped": skipped})


def corpus(args: argparse.Namespace, source: ImageSource) -> ImageSet:
    """The operator and pipeline parts' files: ``--data`` if given, else the source's set."""
    if args.data is None:
        return source.files(args.height, args.width, args.num_images)
    found = _folder_set(args)
    if not found.paths:
        raise SystemExit(f"no usable JPEG files (at least {args.crop}x{args.crop}, 3 channels) under {args.data}")
    return describe(found)


def describe(images: ImageSet) -> ImageSet:
    """Adds the file count, mean size and bits per pixel to the set's description."""
    encoded_bytes = [path.stat().st_size for path in images.paths]
    pixels = [height * width for height, width in images.sizes]
    images.description.update({
        "num_files": len(images.paths),
        "mean_encoded_bytes": float(np.mean(encoded_bytes)),
        "mean_bits_per_pixel": float(8 * np.sum(encoded_bytes) / np.sum(pixels)),
        "mean_height": float(np.mean([size[0] for size in images.sizes])),
        "mean_width": float(np.mean([size[1] for size in images.sizes])),
    })
    return images


def summary(info: dict[str, Any]) -> str:
    """One line from a set's description: how many files of which kind, their size and density."""
    where = info.get("recipe") or info.get("folder")
    text = (f"{info['num_files']} {info['source']} files ({where}), mean "
            f"{info['mean_height']:.0f}x{info['mean_width']:.0f} px, "
            f"{info['mean_encoded_bytes'] / 1024:.0f} KiB, {info['mean_bits_per_pixel']:.2f} bits/pixel")
    skipped = {reason: count for reason, count in info.get("skipped", {}).items() if count}
    if skipped:
        text += "; skipped " + ", ".join(f"{count} {reason.replace('_', ' ')}" for reason, count in skipped.items())
    return text


def torchvision_decode(data: torch.Tensor) -> torch.Tensor:
    """torchvision's decode as every part's baseline runs it: ``decode_jpeg`` in RGB, so that
    a folder's gray and CMYK files come out with three channels and stack, as custom_op's do
    (a real folder holds both kinds)."""
    from torchvision.io import ImageReadMode, decode_jpeg

    return decode_jpeg(data, mode=ImageReadMode.RGB)


def read_encoded(path: str | os.PathLike[str]) -> torch.Tensor:
    """The file's bytes as a 1-D uint8 tensor, read once into a buffer the tensor shares."""
    with open(path, "rb", buffering=0) as file:
        buffer = bytearray(os.fstat(file.fileno()).st_size)
        view, filled = memoryview(buffer), 0
        while filled < len(buffer):
            count = file.readinto(view[filled:])
            if not count:
                raise OSError(f"{path}: file shrank while being read")
            filled += count
    return torch.frombuffer(buffer, dtype=torch.uint8)


def as_tensors(paths: Sequence[pathlib.Path]) -> list[torch.Tensor]:
    """Every file's bytes in memory, as 1-D uint8 tensors."""
    return [read_encoded(path) for path in paths]


def prepared_copy(folder: pathlib.Path, workers: int = 2) -> tuple[pathlib.Path, float]:
    """``folder`` prepared for seeking by the command users run, into ``<folder>-prepared``.

    Returns the prepared folder and the seconds the command took; the tool
    skips files prepared by an earlier run, so a finished folder costs a listing.

    Raises:
        RuntimeError: the command failed; the message holds its output.
    """
    prepared = folder.with_name(folder.name + "-prepared")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "custom_op.prepare", str(folder), str(prepared),
                           "--workers", str(workers), "--quiet"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"python -m custom_op.prepare {folder} {prepared} failed:\n{done.stdout}{done.stderr}")
    return prepared, time.perf_counter() - start
