"""Prepared files: crops that cost what the crop covers, and what preparing costs.

Run from the repository root:

    python -m bench prepared                      # 800x533 baseline and progressive, 500x375, 2560x1600
    python -m bench prepared --prepared-images 20 --prepared-windows 4
    python -m bench.prepared_bench --help          # the same, without the chart

Four sets of JPEGs of each kind (generated and real, bench/images.py,
Pillow, quality 90, 4:2:0), width x height: 800x533 baseline (the operator
benchmark's files), 800x533 progressive, and 500x375 and 2560x1600 baseline
(the imagenet benchmark's files). Each
file is prepared in memory with custom_op.prepare_jpeg (timed: files/s and
MB/s of input, one thread; sizes compared).

Then, per set, with random 256x256 windows (--crop) and the same windows for
every method, each method run back to back per sample in a rotating order,
after one untimed warm-up per method and file (as in the other parts):

  full, original        custom_op.decode_and_crop_jpeg(original, whole image)
  full, prepared        the same on the prepared file
  crop, original        custom_op.decode_and_crop_jpeg(original, window)
  crop, prepared, no seek   the prepared file with seek=False: the ordinary path
  crop, prepared        the prepared file: restart-marker seeking
  torchvision + slice   torchvision.io.decode_jpeg(original)[:, window]

and for 500x375 and 2560x1600 also RandomResizedCrop(224) windows (drawn as
in the imagenet part) with custom_op.decode_and_resized_crop_jpeg on the original and
the prepared file, against torchvision's decode_jpeg + resized_crop
(antialiased) of the original and of the prepared file.

Last, python -m custom_op.prepare (prepare_tree) over the 800x533 baseline
files laid out as a folder and as tar shards (synthetic.write_shards, four
shards), with one worker and with two, runs interleaved: images/s and MB/s of
JPEG input, per core. Target: shards within 10% of the folder per core.

"x full" is the file's own full decode over the crop: how much of a decode
the crop saves. Targets: on prepared 800x533 baseline files a crop
at least 2.8x faster than a full decode of the same file, on prepared
2560x1600 files at least 20x, and RandomResizedCrop(224) on prepared 2560x1600
files at least 2.5x faster than torchvision, taking the faster of
torchvision's two times (on the original file or on the prepared one).
"""

from __future__ import annotations

import argparse
import math
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, NamedTuple

import numpy as np
import torch
from torchvision.transforms import v2

import custom_op
import synthetic
from bench import images, report, sampling, timing

FULL_ORIGINAL = "custom_op full, original"
FULL_PREPARED = "custom_op full, prepared"
CROP_ORIGINAL = "custom_op crop, original"
CROP_NO_SEEK = "custom_op crop, prepared, seek=False"
CROP_PREPARED = "custom_op crop, prepared"
TV_SLICE = "torchvision decode + slice, original"
RRC_ORIGINAL = "custom_op resized crop, original"
RRC_PREPARED = "custom_op resized crop, prepared"
TV_RRC_ORIGINAL = "torchvision decode + resized_crop, original"
TV_RRC_PREPARED = "torchvision decode + resized_crop, prepared"
CROP_METHODS = (FULL_ORIGINAL, FULL_PREPARED, CROP_ORIGINAL, CROP_NO_SEEK, CROP_PREPARED, TV_SLICE)
RRC_METHODS = (RRC_ORIGINAL, RRC_PREPARED, TV_RRC_ORIGINAL, TV_RRC_PREPARED)
RRC_SIZE = 224


class _Set(NamedTuple):
    label: str
    height: int
    width: int
    progressive: bool
    files_option: str
    crop_target: float | None  # crop vs full decode on prepared files
    rrc_target: float | None  # RandomResizedCrop vs torchvision on prepared files
    rrc: bool  # whether RandomResizedCrop windows are timed


SETS = (_Set("800x533 baseline", 533, 800, False, "prepared_images", 2.8, None, False),
        _Set("800x533 progressive", 533, 800, True, "prepared_images", None, None, False),
        _Set("500x375 baseline", 375, 500, False, "prepared_images", None, None, True),
        _Set("2560x1600 baseline", 1600, 2560, False, "prepared_large_images", 20.0, 2.5, True))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("prepared-files benchmark")
    group.add_argument("--prepared-images", type=int, default=20,
                       help="800x533 and 500x375 files per set (default 20)")
    group.add_argument("--prepared-large-images", type=int, default=4,
                       help="2560x1600 files (default 4)")
    group.add_argument("--prepared-tool-rounds", type=int, default=2,
                       help="runs of the prepare tool per layout and worker count (default 2)")
    group.add_argument("--prepared-windows", type=int, default=5,
                       help="windows per 800x533 file; 2560x1600 files get twice as many (default 5)")


def _prepare_all(originals: list[bytes]) -> tuple[list[bytes], dict[str, Any]]:
    """Prepares every file in memory; the time and the sizes."""
    prepared, seconds = [], []
    for data in originals:
        start = time.perf_counter()
        prepared.append(custom_op.prepare_jpeg(data))
        seconds.append(time.perf_counter() - start)
    ratios = [len(after) / len(before) for before, after in zip(originals, prepared)]
    total_in = sum(map(len, originals))
    return prepared, {
        "files_per_s": len(originals) / sum(seconds),
        "input_mb_per_s": total_in / 1e6 / sum(seconds),
        "median_ms_per_file": 1000 * statistics.median(seconds),
        "bytes_before": total_in, "bytes_after": sum(map(len, prepared)),
        "median_size_ratio": statistics.median(ratios), "max_size_ratio": max(ratios),
        "all_seekable": all(custom_op.seekable(data) for data in prepared),
    }


def _crop_methods() -> dict[str, Callable[..., Any]]:
    """Each takes (original, prepared, y, x, h, w) tensors and a window."""
    from torchvision.io import ImageReadMode, decode_jpeg

    def full(data):
        height, width, _ = custom_op.jpeg_size(data)
        return custom_op.decode_and_crop_jpeg(data, 0, 0, height, width)

    return {
        FULL_ORIGINAL: lambda original, prepared, *window: full(original),
        FULL_PREPARED: lambda original, prepared, *window: full(prepared),
        CROP_ORIGINAL: lambda original, prepared, *window: custom_op.decode_and_crop_jpeg(original, *window),
        CROP_NO_SEEK: lambda original, prepared, *window: custom_op.decode_and_crop_jpeg(prepared, *window,
                                                                                         seek=False),
        CROP_PREPARED: lambda original, prepared, *window: custom_op.decode_and_crop_jpeg(prepared, *window),
        TV_SLICE: lambda original, prepared, y, x, h, w: decode_jpeg(original, mode=ImageReadMode.RGB)[
            :, y:y + h, x:x + w],
    }


def _rrc_methods() -> dict[str, Callable[..., Any]]:
    import torchvision.transforms.v2.functional as F

    def tv(data, y, x, h, w):
        return F.resized_crop(images.torchvision_decode(data), y, x, h, w, [RRC_SIZE, RRC_SIZE], antialias=True)

    return {
        RRC_ORIGINAL: lambda original, prepared, *window: custom_op.decode_and_resized_crop_jpeg(
            original, *window, RRC_SIZE),
        RRC_PREPARED: lambda original, prepared, *window: custom_op.decode_and_resized_crop_jpeg(
            prepared, *window, RRC_SIZE),
        TV_RRC_ORIGINAL: lambda original, prepared, *window: tv(original, *window),
        TV_RRC_PREPARED: lambda original, prepared, *window: tv(prepared, *window),
    }


def _time(methods: dict[str, Callable[..., Any]], originals: list[torch.Tensor], prepared: list[torch.Tensor],
          plan: list[tuple[int, tuple[int, int, int, int]]]) -> dict[str, dict[str, float]]:
    """Median, p10 and p90 in ms per method over ``plan`` (file index, window)."""
    first_window = {}
    for index, window in plan:
        first_window.setdefault(index, window)
    for index, window in first_window.items():  # warm-up, untimed
        for call in methods.values():
            call(originals[index], prepared[index], *window)
    samples = timing.time_rotating(
        list(methods), plan, lambda name, item: methods[name](originals[item[0]], prepared[item[0]], *item[1]))
    return timing.milliseconds(samples)


def _crop_plan(rng: np.random.Generator, count: int, windows: int, height: int, width: int,
               crop: int) -> list[tuple[int, tuple[int, int, int, int]]]:
    plan = []
    for _ in range(windows):
        for index in range(count):
            y = int(rng.integers(0, height - crop + 1))
            x = int(rng.integers(0, width - crop + 1))
            plan.append((index, (y, x, crop, crop)))
    return plan


def _rows(stats: dict[str, dict[str, float]], full_name: str | None, tv_name: str) -> list[dict[str, Any]]:
    rows = []
    for name, stat in stats.items():
        rows.append({"method": name, "median_ms": stat["median"], "p10_ms": stat["p10"], "p90_ms": stat["p90"],
                     "samples": stat["n"],
                     "speedup_vs_full": (stats[full_name]["median"] / stat["median"]) if full_name else None,
                     "speedup_vs_torchvision": stats[tv_name]["median"] / stat["median"]})
    return rows


def _run_set(args: argparse.Namespace, source: images.ImageSource, spec: _Set) -> dict[str, Any]:
    height, width = spec.height, spec.width
    files = source.files(height, width, getattr(args, spec.files_option), progressive=spec.progressive)
    recipe, paths = files.description["recipe"], files.paths
    raw = [path.read_bytes() for path in paths]
    prepared_raw, preparation = _prepare_all(raw)
    originals = [torch.frombuffer(bytearray(data), dtype=torch.uint8) for data in raw]
    prepared = [torch.frombuffer(bytearray(data), dtype=torch.uint8) for data in prepared_raw]
    windows = args.prepared_windows * (2 if spec.files_option == "prepared_large_images" else 1)
    crop = min(args.crop, height, width)
    rng = np.random.default_rng(args.seed)
    crop_plan = _crop_plan(rng, len(raw), windows, height, width, crop)
    crop_stats = _time(_crop_methods(), originals, prepared, crop_plan)
    result = {"label": spec.label, "recipe": recipe, "files": len(raw), "height": height, "width": width,
              "progressive": spec.progressive, "crop": crop, "windows_per_file": windows,
              "mean_encoded_bytes": float(np.mean([len(data) for data in raw])),
              "preparation": preparation,
              "crop_methods": _rows(crop_stats, FULL_PREPARED, TV_SLICE),
              "crop_vs_full_prepared": crop_stats[FULL_PREPARED]["median"] / crop_stats[CROP_PREPARED]["median"],
              "crop_vs_full_original": crop_stats[FULL_ORIGINAL]["median"] / crop_stats[CROP_ORIGINAL]["median"]}
    if spec.rrc:
        torch.manual_seed(args.seed)
        sampler = v2.RandomResizedCrop(RRC_SIZE)
        rrc_plan = [(index, sampling.random_resized_crop(sampler, originals[index]))
                    for _ in range(windows) for index in range(len(raw))]
        rrc_stats = _time(_rrc_methods(), originals, prepared, rrc_plan)
        result["rrc_methods"] = _rows(rrc_stats, None, TV_RRC_ORIGINAL)
        faster_tv = min(rrc_stats[TV_RRC_ORIGINAL]["median"], rrc_stats[TV_RRC_PREPARED]["median"])
        result["rrc_prepared_vs_torchvision"] = faster_tv / rrc_stats[RRC_PREPARED]["median"]
    return result


TOOL_SHARDS = 4  # the files in four shards: two per worker with two workers
TOOL_TARGET = 0.9  # shards' throughput per core, as a fraction of the folder's


def _tool_throughput(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """prepare_tree over the same JPEGs as a folder and as tar shards, interleaved; medians."""
    from custom_op.prepare import prepare_tree

    spec = SETS[0]
    paths = source.files(spec.height, spec.width, args.prepared_images).paths
    jpeg_bytes = sum(path.stat().st_size for path in paths)
    seconds: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="custom_op-prepare-tool-") as scratch:
        root = pathlib.Path(scratch)
        (root / "folder").mkdir()
        for path in paths:
            shutil.copyfile(path, root / "folder" / path.name)
        synthetic.write_shards(((path.read_bytes(), 0) for path in paths), root / "shards",
                               math.ceil(len(paths) / TOOL_SHARDS))
        for round_number in range(args.prepared_tool_rounds):
            layouts = ("folder", "shards") if round_number % 2 == 0 else ("shards", "folder")
            for workers in (1, 2):
                for layout in layouts:
                    summary = prepare_tree(root / layout, root / "out", workers=workers, progress=False)
                    assert summary.prepared == len(paths) and summary.exit_code == 0, summary.report()
                    seconds.setdefault((layout, workers), []).append(summary.elapsed_seconds)
                    shutil.rmtree(root / "out")
    rows = []
    for (layout, workers), times in sorted(seconds.items(), key=lambda item: (item[0][1], item[0][0])):
        median = statistics.median(times)
        rows.append({"layout": layout, "workers": workers, "median_s": median, "runs": len(times),
                     "images_per_s": len(paths) / median, "mb_per_s": jpeg_bytes / 1e6 / median,
                     "images_per_s_per_core": len(paths) / median / workers})
    per_core = {(row["layout"], row["workers"]): row["images_per_s_per_core"] for row in rows}
    ratios = {workers: per_core[("shards", workers)] / per_core[("folder", workers)] for workers in (1, 2)}
    return {"files": len(paths), "shards": TOOL_SHARDS, "jpeg_bytes": jpeg_bytes, "rows": rows,
            "shards_vs_folder": {str(workers): ratio for workers, ratio in ratios.items()}}


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """Prepares and times every set of the source's files."""
    sets, targets = [], []
    for spec in SETS:
        result = _run_set(args, source, spec)
        sets.append(result)
        if spec.crop_target is not None:
            measured = result["crop_vs_full_prepared"]
            targets.append({"target": f"{spec.label} {source.kind}, prepared: {result['crop']}x{result['crop']} crop >= "
                                      f"{spec.crop_target}x faster than a full decode of the same file",
                            "required": spec.crop_target, "measured": measured,
                            "holds": measured >= spec.crop_target})
        if spec.rrc_target is not None:
            measured = result["rrc_prepared_vs_torchvision"]
            targets.append({"target": f"{spec.label} {source.kind}, prepared: RandomResizedCrop({RRC_SIZE}) >= "
                                      f"{spec.rrc_target}x faster than torchvision decode_jpeg + resized_crop",
                            "required": spec.rrc_target, "measured": measured,
                            "holds": measured >= spec.rrc_target})
    tool = _tool_throughput(args, source)
    for workers, measured in tool["shards_vs_folder"].items():
        targets.append({"target": f"prepare tool, {workers} worker(s), {source.kind}: shards >= "
                                  f"{TOOL_TARGET:.0%} of the folder's images/s per core",
                        "required": TOOL_TARGET, "measured": measured, "holds": measured >= TOOL_TARGET})
    return {"config": {"images": source.kind, "seed": args.seed, "quality": args.quality,
                       "subsampling": args.subsampling,
                       "threads": torch.get_num_threads()},
            "sets": sets, "prepare_tool": tool, "targets": targets}


def _method_table(rows: list[dict[str, Any]], with_full: bool) -> str:
    headers = ["method", "median ms", "p10 ms", "p90 ms"] + (["x full (prepared)"] if with_full else []) + \
        ["vs torchvision"]
    table = []
    for row in rows:
        cells = [row["method"], f"{row['median_ms']:.3f}", f"{row['p10_ms']:.3f}", f"{row['p90_ms']:.3f}"]
        if with_full:
            cells.append(report.format_ratio(row["speedup_vs_full"]))
        table.append(cells + [report.format_ratio(row["speedup_vs_torchvision"])])
    return report.markdown_table(headers, table, right=[False] + [True] * (len(headers) - 1))


def format_table(result: dict[str, Any]) -> str:
    """Preparation, then per set the crop table (and the RandomResizedCrop one), then the targets."""
    lines = [f"custom_op.prepare_jpeg on {result['config']['images']} files, one thread, in memory", ""]
    rows = []
    for item in result["sets"]:
        prep = item["preparation"]
        rows.append([item["label"], str(item["files"]), f"{item['mean_encoded_bytes'] / 1024:.0f}",
                     f"{prep['median_ms_per_file']:.1f}", f"{prep['files_per_s']:.0f}",
                     f"{prep['input_mb_per_s']:.1f}", f"{prep['bytes_after'] / prep['bytes_before']:.3f}",
                     f"{prep['median_size_ratio']:.3f}", f"{prep['max_size_ratio']:.3f}",
                     "yes" if prep["all_seekable"] else "NO"])
    lines += [report.markdown_table(
        ["set", "files", "KiB mean", "ms/file", "files/s", "MB/s in", "size after/before", "median ratio",
         "max ratio", "seekable"], rows, right=[False] + [True] * 9), ""]
    for item in result["sets"]:
        lines += [f"{item['label']} ({result['config']['images']}): {item['crop']}x{item['crop']} crops, {item['files']} files x "
                  f"{item['windows_per_file']} windows; crop vs full decode of the same file: "
                  f"{item['crop_vs_full_original']:.2f}x original, {item['crop_vs_full_prepared']:.2f}x prepared",
                  "", _method_table(item["crop_methods"], with_full=True), ""]
        if "rrc_methods" in item:
            lines += [f"{item['label']} ({result['config']['images']}): RandomResizedCrop({RRC_SIZE}) windows; prepared vs the faster "
                      f"torchvision: {item['rrc_prepared_vs_torchvision']:.2f}x", "",
                      _method_table(item["rrc_methods"], with_full=False), ""]
    tool = result["prepare_tool"]
    lines += [f"python -m custom_op.prepare over {tool['files']} 800x533 {result['config']['images']} files as a "
              f"folder and as {tool['shards']} tar shards (MB/s of JPEG input; medians)", "",
              report.markdown_table(
                  ["layout", "workers", "median s", "images/s", "MB/s", "images/s per core", "shards vs folder"],
                  [[row["layout"], str(row["workers"]), f"{row['median_s']:.3f}", f"{row['images_per_s']:.0f}",
                    f"{row['mb_per_s']:.1f}", f"{row['images_per_s_per_core']:.0f}",
                    report.format_ratio(tool["shards_vs_folder"][str(row["workers"])])
                    if row["layout"] == "shards" else ""] for row in tool["rows"]],
                  right=[False] + [True] * 6), ""]
    lines += ["Targets:", *report.format_targets(result["targets"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
