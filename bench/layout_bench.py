"""Output layout: custom_op's default CHW view of HWC memory against contiguous=True.

Run from the repository root, on real photos fitted to the sizes (folders named
WIDTHxHEIGHT holding JPEG files, e.g. made from Debian's lomiri-wallpapers-16.04
and scikit-learn's sample images with Pillow, quality 90, 4:2:0):

    PYTHONPATH=. python bench/layout_bench.py PHOTOS_DIR [--rounds 11]

One thread (pinned before torch loads). Each round times every method over
every file, methods interleaved; the table gives the median over rounds of the
mean time per call, and the ratio of the first row's time over each row's
(above 1 is faster than the first row). Cases:

- full decode: torchvision.io.decode_jpeg(data) against
  decode_and_crop_jpeg(data, 0, 0, H, W) in both layouts;
- 256 x 256 crops (4 random windows per file);
- decode_and_resized_crop_jpeg to 224 on RandomResizedCrop windows;
- a DataLoader-style tail: horizontal flip of 64 resized crops and
  default_collate of them, alone and with the decode.

Prints the machine's load average, which says how noisy the figures are.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import pathlib  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Callable, Sequence  # noqa: E402

import torch  # noqa: E402
import torchvision  # noqa: E402
from torch.utils.data import default_collate  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

import custom_op  # noqa: E402

torch.set_num_threads(1)


def _median_us(methods: dict[str, Callable], items: Sequence[tuple], rounds: int) -> dict[str, float]:
    for method in methods.values():  # warm-up
        for item in items[:3]:
            method(*item)
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(rounds):
        for name, method in methods.items():
            start = time.perf_counter_ns()
            for item in items:
                method(*item)
            times[name].append((time.perf_counter_ns() - start) / len(items) / 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def _print(title: str, medians: dict[str, float]) -> None:
    first = next(iter(medians.values()))
    print(f"\n{title}\n")
    print("| method | median us per call | vs first row |\n|:--|--:|--:|")
    for name, value in medians.items():
        print(f"| {name} | {value:.0f} | {first / value:.2f}x |")


def _crop(contiguous: bool) -> Callable:
    return lambda d, y, x, h, w: custom_op.decode_and_crop_jpeg(d, y, x, h, w, contiguous=contiguous)


def _resized(contiguous: bool) -> Callable:
    return lambda d, y, x, h, w: custom_op.decode_and_resized_crop_jpeg(d, y, x, h, w, 224,
                                                                        contiguous=contiguous)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("photos", type=pathlib.Path)
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    rng = random.Random(0)
    torch.manual_seed(0)
    for folder in sorted(args.photos.iterdir()):
        files = [torchvision.io.read_file(str(p)) for p in sorted(folder.glob("*.jpg"))]
        sizes = [custom_op.jpeg_size(f)[:2] for f in files]
        whole = [(f, 0, 0, h, w) for f, (h, w) in zip(files, sizes)]
        _print(f"full decode, {len(files)} photos of {folder.name}", _median_us({
            "torchvision.io.decode_jpeg": lambda d, *_: torchvision.io.decode_jpeg(d),
            "custom_op (view of HWC, default)": _crop(False),
            "custom_op contiguous=True": _crop(True)}, whole, args.rounds))
        if min(min(s) for s in sizes) < 256 or max(max(s) for s in sizes) > 1000:
            continue
        crops = [(f, rng.randrange(h - 255), rng.randrange(w - 255), 256, 256)
                 for f, (h, w) in zip(files, sizes) for _ in range(4)]
        _print(f"256 x 256 crops of {folder.name}", _median_us({
            "custom_op (view of HWC, default)": _crop(False),
            "custom_op contiguous=True": _crop(True)}, crops, args.rounds))
        windows = []
        for f, (h, w) in zip(files, sizes):
            for _ in range(4):
                params = v2.RandomResizedCrop(224).make_params([torch.empty(3, h, w)])
                windows.append((f, params["top"], params["left"], params["height"], params["width"]))
        _print(f"resized crops to 224 (RandomResizedCrop windows) of {folder.name}", _median_us({
            "custom_op (view of HWC, default)": _resized(False),
            "custom_op contiguous=True": _resized(True)}, windows, args.rounds))
        batch = (windows * 64)[:64]
        decoded = {c: [_resized(c)(*item) for item in batch] for c in (False, True)}

        def tail(contiguous: bool, decode: bool) -> None:
            images = [_resized(contiguous)(*item) for item in batch] if decode else decoded[contiguous]
            default_collate([(v2.functional.horizontal_flip(image), 0) for image in images])

        _print(f"flip + default_collate of 64 resized crops of {folder.name}, per batch", _median_us({
            "view of HWC (default)": lambda: tail(False, False),
            "contiguous=True": lambda: tail(True, False),
            "decode + flip + collate, view": lambda: tail(False, True),
            "decode + flip + collate, contiguous": lambda: tail(True, True)}, [()], args.rounds))
    print(f"\nload average (1, 5, 15 min): {os.getloadavg()}; torch {torch.__version__}, "
          f"torchvision {torchvision.__version__}, libjpeg-turbo {custom_op.libjpeg_version()}, "
          f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
