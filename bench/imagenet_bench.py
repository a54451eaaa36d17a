"""ImageNet-style benchmark: RandomResizedCrop(224) straight from the encoded JPEG.

Run from the repository root:

    python -m bench imagenet                      # 40 files of 500x375 and 8 of 2560x1600, each kind
    python -m bench imagenet --windows 20 --batch-rounds 20
    python -m bench.imagenet_bench --help          # the same, without the chart

Generated and real JPEGs (bench/images.py, quality 90, 4:2:0 unless told
otherwise) of two sizes, width x height: 500x375 (a typical ImageNet file)
and 2560x1600.
Each file gets --windows windows drawn with a fixed torch seed by
torchvision.transforms.v2.RandomResizedCrop(224) itself (bench/sampling.py).
Every method gets the same windows; the encoded bytes are in memory before
timing starts.

Methods (one thread; the bench package pins the thread counts before torch loads):
  custom_op            custom_op.decode_and_resized_crop_jpeg(data, *window, 224): the transform's
                       work minus the sampling (window decoded at a reduced DCT scale when it can)
  custom_op crop + tv  F.resize(custom_op.decode_and_crop_jpeg(data, *window), [224, 224]):
                       exact crop then torchvision's resize, to show what the DCT scaling buys
  torchvision          F.resized_crop(torchvision.io.decode_jpeg(data), *window, [224, 224])
  PIL                  Image.open(BytesIO(b)).convert("RGB").resize((224, 224), BILINEAR,
                       box=window) -> tensor (PIL's resize with a box is its RandomResizedCrop)
  floor                custom_op._C.decode_and_crop_jpeg(data, top + h - 1, left, 1, 1, gray):
                       a 1x1 gray window on the window's last row, so libjpeg entropy-decodes
                       (skips) every row above it and decodes one iMCU row; approximates an
                       entropy-only pass down to the window's bottom, which no method can beat
                       by much without skipping entropy decoding altogether
F is torchvision.transforms.v2.functional; resizes are antialiased bilinear.

As in the operator benchmark, the methods run back to back for each sample in
an order that rotates from sample to sample, after one untimed warm-up call per
method and file; each call is timed with time.perf_counter_ns with the garbage
collector off, freeing the result included. Ratios are of medians: "vs
torchvision" is torchvision's median over the method's, so above 1 is faster.

Then the batched call, custom_op.decode_and_crop_jpeg_batch(datas, boxes,
size=224, num_threads=t) for t = 1 and 2 (C++ threads, GIL released), over a
batch of --batch files of 500x375 and over the 2560x1600 files, one window
each: images per second from the median of --batch-rounds timed calls; once
with torch pinned to one thread and once with torch's default (one per core).
"""

from __future__ import annotations

import argparse
import collections
import gc
import io
import os
import sys
import time
from typing import Any, Callable

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import v2

import custom_op
from bench import images, report, sampling, timing
from custom_op._decode import _single as _decode

SIZE = 224
CUSTOM = "custom_op resized crop"
CUSTOM_EXACT = "custom_op exact crop + tv resize"
TORCHVISION = "torchvision decode + resized_crop"
PILLOW = "PIL open/convert/resize(box)"
FLOOR = "floor (entropy pass to window bottom)"
METHOD_ORDER = (CUSTOM, CUSTOM_EXACT, TORCHVISION, PILLOW, FLOOR)
FLOOR_NOTE = ("floor = custom_op._C.decode_and_crop_jpeg(data, top+h-1, left, 1, 1, gray): libjpeg skips "
              "(entropy-decodes) all rows above the window's last row and decodes one iMCU row")
SCALE_LABELS = {1: "1/8", 2: "1/4", 4: "1/2", 8: "1"}

# (label, height, width, option naming the file count, target speed-up vs torchvision)
CASES = (("500x375", 375, 500, "small_images", 1.4),
         ("2560x1600", 1600, 2560, "large_images", 2.0))
BATCH_THREADS = (1, 2)
BATCH_TARGET = 1.7
#: torch's own intra-op threads while the batch runs: pinned to 1 as in every
#: benchmark, and torch's default (one per core), under which the batch's
#: threads must still each run ATen's resize on themselves (no N x N threads).
BATCH_TORCH_THREADS = ((1, BATCH_TARGET), (os.cpu_count() or 1, 1.8))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("imagenet benchmark")
    group.add_argument("--windows", type=int, default=8,
                       help="RandomResizedCrop windows per file (default 8)")
    group.add_argument("--small-images", type=int, default=40, help="500x375 files (default 40)")
    group.add_argument("--large-images", type=int, default=8, help="2560x1600 files (default 8)")
    group.add_argument("--batch", type=int, default=32,
                       help="files of 500x375 in one batched call, reused cyclically (default 32)")
    group.add_argument("--batch-rounds", type=int, default=8,
                       help="timed batched calls per thread count (default 8)")


def _methods() -> dict[str, Callable[..., Any]]:
    """Each takes (tensor, bytes, top, left, height, width) and returns a 3 x 224 x 224 tensor."""
    import torchvision.transforms.v2.functional as F

    def custom(data, _raw, top, left, height, width):
        return custom_op.decode_and_resized_crop_jpeg(data, top, left, height, width, SIZE)

    def custom_exact(data, _raw, top, left, height, width):
        return F.resize(custom_op.decode_and_crop_jpeg(data, top, left, height, width), [SIZE, SIZE],
                        antialias=True)

    def torchvision(data, _raw, top, left, height, width):
        return F.resized_crop(images.torchvision_decode(data), top, left, height, width, [SIZE, SIZE], antialias=True)

    def pillow(_data, raw, top, left, height, width):
        image = Image.open(io.BytesIO(raw)).convert("RGB")
        resized = image.resize((SIZE, SIZE), Image.BILINEAR, box=(left, top, left + width, top + height))
        return torch.from_numpy(np.array(resized)).permute(2, 0, 1)

    def floor(data, _raw, top, left, height, width):
        return custom_op._C.decode_and_crop_jpeg(data, top + height - 1, left, 1, 1, 1, True, 1 << 28, 256)

    return {CUSTOM: custom, CUSTOM_EXACT: custom_exact, TORCHVISION: torchvision, PILLOW: pillow,
            FLOOR: floor}


def _time_case(args: argparse.Namespace, source: images.ImageSource, label: str, height: int, width: int,
               count: int, methods: dict[str, Callable[..., Any]]) -> dict[str, Any]:
    files = source.files(height, width, count)
    recipe, paths = files.description["recipe"], files.paths
    tensors = images.as_tensors(paths)
    raws = [path.read_bytes() for path in paths]

    torch.manual_seed(args.seed)
    sampler = v2.RandomResizedCrop(SIZE)
    windows = [[sampling.random_resized_crop(sampler, data) for _ in range(args.windows)]
               for data in tensors]
    # Window-major order: every file once, then every file again with its next window.
    plan = [(index, windows[index][number]) for number in range(args.windows) for index in range(len(paths))]

    names = list(METHOD_ORDER)
    for index, file_windows in enumerate(windows):  # warm-up, untimed
        for name in names:
            methods[name](tensors[index], raws[index], *file_windows[0])

    samples = timing.time_rotating(
        names, plan, lambda name, item: methods[name](tensors[item[0]], raws[item[0]], *item[1]))
    stats = timing.milliseconds(samples)
    floor_ms = stats[FLOOR]["median"]
    rows = []
    for name in names:
        median = stats[name]["median"]
        rows.append({"method": name, "median_ms": median, "p10_ms": stats[name]["p10"],
                     "p90_ms": stats[name]["p90"], "samples": stats[name]["n"],
                     "speedup_vs_torchvision": stats[TORCHVISION]["median"] / median,
                     "speedup_vs_pillow": stats[PILLOW]["median"] / median,
                     "times_floor": median / floor_ms})
    scales = collections.Counter(_decode.choose_scale(h, w, (SIZE, SIZE), True) for _, (_, _, h, w) in plan)
    areas = [h * w / (height * width) for _, (_, _, h, w) in plan]
    return {"label": label, "height": height, "width": width, "files": len(paths), "recipe": recipe,
            "folder": files.description["folder"], "images": files.description,
            "mean_encoded_bytes": float(np.mean([len(raw) for raw in raws])),
            "windows_per_file": args.windows, "samples_per_method": len(plan),
            "mean_area_fraction": float(np.mean(areas)),
            "dct_scale_counts": {SCALE_LABELS.get(n, f"{n}/8"): scales[n] for n in sorted(scales)},
            "floor_median_ms": floor_ms, "methods": rows, "_tensors": tensors, "_windows": windows}


def _time_batch(label: str, tensors: list, windows: list, batch: int, rounds: int,
                torch_threads: int) -> dict[str, Any]:
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(torch_threads)
    try:
        return _time_batch_calls(label, tensors, windows, batch, rounds) | {"torch_threads": torch_threads}
    finally:
        torch.set_num_threads(previous_threads)


def _time_batch_calls(label: str, tensors: list, windows: list, batch: int, rounds: int) -> dict[str, Any]:
    datas = [tensors[i % len(tensors)] for i in range(batch)]
    boxes = [windows[i % len(windows)][0] for i in range(batch)]
    for threads in BATCH_THREADS:  # warm-up (also starts the threads)
        custom_op.decode_and_crop_jpeg_batch(datas, boxes, size=SIZE, num_threads=threads)
    times: dict[int, list[int]] = {threads: [] for threads in BATCH_THREADS}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for number in range(rounds):
            order = BATCH_THREADS if number % 2 == 0 else BATCH_THREADS[::-1]
            for threads in order:
                start = time.perf_counter_ns()
                result = custom_op.decode_and_crop_jpeg_batch(datas, boxes, size=SIZE, num_threads=threads)
                del result
                times[threads].append(time.perf_counter_ns() - start)
    finally:
        if gc_was_enabled:
            gc.enable()
    rows = []
    for threads in BATCH_THREADS:
        median_s = float(np.median(times[threads])) / 1e9
        rows.append({"threads": threads, "median_s": median_s, "images_per_s": batch / median_s})
    ratio = rows[-1]["images_per_s"] / rows[0]["images_per_s"]
    return {"label": label, "batch": batch, "distinct_files": min(batch, len(tensors)), "rounds": rounds,
            "threads": rows, "ratio_2_vs_1": ratio}


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """Times the methods on both image sizes, then the batched call, on the source's files."""
    methods = _methods()
    cases, batches, targets = [], [], []
    for label, height, width, option, target in CASES:
        case = _time_case(args, source, label, height, width, getattr(args, option), methods)
        tensors, windows = case.pop("_tensors"), case.pop("_windows")
        cases.append(case)
        batch = args.batch if label == "500x375" else len(tensors)
        for torch_threads, batch_target in BATCH_TORCH_THREADS:
            batches.append(_time_batch(label, tensors, windows, batch, args.batch_rounds, torch_threads)
                           | {"target": batch_target})
        measured = next(row for row in case["methods"] if row["method"] == CUSTOM)["speedup_vs_torchvision"]
        targets.append({"target": f"custom_op >= {target}x vs torchvision at {label} ({source.kind})",
                        "required": target, "measured": measured, "holds": measured >= target})
    for batch in batches:
        targets.append({"target": f"batch of {batch['batch']} x {batch['label']} with "
                                  f"{batch['torch_threads']} torch thread(s): 2 threads >= "
                                  f"{batch['target']}x the 1-thread throughput",
                        "required": batch["target"], "measured": batch["ratio_2_vs_1"],
                        "holds": batch["ratio_2_vs_1"] >= batch["target"]})
    return {"config": {"images": source.kind, "size": SIZE, "windows": args.windows, "seed": args.seed,
                       "quality": args.quality,
                       "subsampling": args.subsampling, "threads": torch.get_num_threads(),
                       "batch": args.batch, "batch_rounds": args.batch_rounds, "floor_note": FLOOR_NOTE,
                       "load_average_after_1_5_15": list(os.getloadavg())},
            "cases": cases, "batch": batches, "targets": targets}


def format_table(result: dict[str, Any]) -> str:
    """One table per image size, the batch table and the targets."""
    config = result["config"]
    headers = ["method", "median ms", "p10 ms", "p90 ms", "vs torchvision", "vs PIL", "x floor"]
    lines = []
    for case in result["cases"]:
        rows = [[row["method"], f"{row['median_ms']:.3f}", f"{row['p10_ms']:.3f}", f"{row['p90_ms']:.3f}",
                 report.format_ratio(row["speedup_vs_torchvision"]), report.format_ratio(row["speedup_vs_pillow"]),
                 report.format_ratio(row["times_floor"])] for row in case["methods"]]
        scales = ", ".join(f"{scale}: {count}" for scale, count in case["dct_scale_counts"].items())
        lines += [f"RandomResizedCrop({config['size']}) on {case['files']} {config['images']} files of {case['label']} "
                  f"(width x height, {case['mean_encoded_bytes'] / 1024:.0f} KiB mean), one thread, "
                  f"{case['samples_per_method']} samples per method ({case['files']} files x "
                  f"{case['windows_per_file']} windows)",
                  f"mean window area {100 * case['mean_area_fraction']:.0f}% of the image; DCT scale chosen "
                  f"(windows): {scales}; floor median {case['floor_median_ms']:.3f} ms", "",
                  report.markdown_table(headers, rows, right=[False] + [True] * 6), ""]
    lines.append(FLOOR_NOTE + "; 'x floor' = method's median / floor's median.")
    lines.append("")
    rows = []
    for batch in result["batch"]:
        for row in batch["threads"]:
            rows.append([f"{batch['batch']} x {batch['label']}", str(batch["torch_threads"]),
                         str(row["threads"]),
                         f"{1000 * row['median_s']:.1f}", f"{row['images_per_s']:.0f}",
                         report.format_ratio(row["images_per_s"] / batch["threads"][0]["images_per_s"])])
    lines += [f"decode_and_crop_jpeg_batch(size={config['size']}) on {config['images']} files, one window per file, median of "
              f"{config['batch_rounds']} calls", "",
              report.markdown_table(["batch", "torch threads", "threads", "median ms", "images/s",
                                     "vs 1 thread"], rows,
                                    right=[False, True, True, True, True, True]), "", "Targets:",
              *report.format_targets(result["targets"])]
    one, five, _ = config["load_average_after_1_5_15"]
    lines.append(f"Load average after this part: {one:.2f} (1 min), {five:.2f} (5 min)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
