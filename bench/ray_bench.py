"""The batch lane on Ray Data against the threads lane and torchvision's uint8 DataLoader, one machine.

Run from the repository root:

    python -m bench ray                                   # generated and real photos, 2 sizes
    python -m bench ray --photos ~/photos --json ray.json  # your JPEGs as they are

The question: what does the engine cost? On a cluster Ray Data adds CPU
machines; here, on one machine's 2 cores, the same RandomResizedCrop(224) +
flip batches of 64 come from three pipelines, timed interleaved as the lane
part times its rows (bench/loaders.py), but over whole epochs, each
pipeline's start included: Ray Data decodes blocks ahead of the consumer, so
timing from the second batch (the lane part's way) would time the consumer
alone. Ray's start per epoch (its actors) is part of its cost here and
weighs less in a longer epoch (--lane-length):

  ray_data           custom_op.datasets.lane_map_batches over read_binary_files: 2 actors of
                     1 CPU each decoding whole batches, iter_torch_batches(batch_size=64) in the
                     training process; a fresh pipeline per epoch (its epoch's streams), in
                     the files' order (Ray's random_shuffle would move every file's bytes
                     through a shuffle first); Ray gets one logical CPU more than the actors
                     take, for its reading tasks, which would otherwise wait for ever
  lane_threads       custom_op.datasets.lane_threads (torchdata.nodes), 2 threads
  torchvision_uint8  DatasetFolder with decode_jpeg(read_file(path)), DataLoader, 2 workers

Every row's batches go to the lane part's training-step consumer. CPU time per
image covers this process and every process below it (Ray's raylet, its
workers and actors; the DataLoader's workers): the engine's overhead shows
there. With ``--photos DIR`` the rows read DIR's JPEGs as they are (every
size found, one class), instead of files fitted to --ray-sizes. ``--json
FILE`` writes ``{kind: {size: {ray_data, lane_threads, torchvision_uint8}}}``
(images/s), merged into the file if it exists.
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import sys
from typing import Any

import numpy as np

from bench import images, lane_bench, loaders, report

ROWS = ("ray_data", "lane_threads", "torchvision_uint8")
DEFAULT_SIZES = "375x500,533x800"
ACTORS = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("ray data")
    group.add_argument("--ray-sizes", default=DEFAULT_SIZES,
                       help=f"HxW of the files, comma-separated (default {DEFAULT_SIZES})")
    group.add_argument("--ray-rounds", type=int, default=3,
                       help="timed epochs of every row, interleaved (default 3)")
    if not any(action.dest == "lane_files" for action in parser._actions):
        lane_bench.add_arguments(parser)  # files, epoch length, --photos, --json: the lane's


def _tree_cpu_seconds() -> float:
    """CPU time so far of this process and every live process below it (Linux)."""
    children: dict[str, list[str]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                    parent = stat.read().rsplit(")", 1)[1].split()[1]
            except (OSError, IndexError):
                continue
            children[parent].append(entry)
    total, todo = sum(os.times()[:2]), [str(os.getpid())]
    while todo:
        for child in children[todo.pop()]:
            total += loaders._child_cpu_seconds(child)
            todo.append(child)
    return total


def _ray_runner(tree: pathlib.Path, length: int, seed: int, consumer: Any) -> loaders.Runner:
    """One epoch of the Ray Data pipeline per call, timed from its second batch (steady_runner):
    ``length`` images, the tree's files over and over as the other rows' samplers draw them."""
    import ray
    from custom_op.datasets import lane_map_batches

    paths = sorted(str(path) for path in tree.rglob("*.jpg"))
    # A block per batch, so that both actors have work from the start.
    files = ray.data.read_binary_files((paths * (length // len(paths) + 1))[:length],
                                       include_paths=True,
                                       override_num_blocks=max(1, length // lane_bench.BATCH))
    epochs = iter(range(1 << 30))

    class _Epochs:
        def __iter__(self):
            decoded = lane_map_batches(files, lane_bench._transform(),
                                       seed=seed, epoch=next(epochs), batch_size=lane_bench.BATCH,
                                       concurrency=ACTORS, num_cpus=1)
            for batch in decoded.iter_torch_batches(batch_size=lane_bench.BATCH):
                yield (batch["image"],)

    return loaders.epoch_runner(_Epochs(), consumer)


def _with_tree_cpu(run: loaders.Runner) -> loaders.Runner:
    """``run`` whose CPU per image counts every process below this one (Ray's live there)."""
    def timed() -> tuple[int, int]:
        before = _tree_cpu_seconds()
        images_done, elapsed = run()
        # Whole epochs, as timed: every process's CPU from the pipeline's start to its end.
        timed.cpu_us_per_image.append(1e6 * (_tree_cpu_seconds() - before) / images_done)
        return images_done, elapsed
    timed.cpu_us_per_image = []  # type: ignore[attr-defined]
    return timed


def _photo_tree(args: argparse.Namespace) -> dict[str, pathlib.Path]:
    """--photos DIR's JPEGs as they are: one ImageFolder tree of links per size found."""
    from PIL import Image

    by_size: dict[str, list[pathlib.Path]] = collections.defaultdict(list)
    for path in sorted(args.photos.rglob("*")):
        if path.suffix.lower() in images.JPEG_SUFFIXES:
            with Image.open(path) as image:
                by_size[f"{image.height}x{image.width}"].append(path.resolve())
    trees = {}
    for size, paths in by_size.items():
        tree = args.cache / f"ray-{args.photos.name}-{size}" / "photos"
        tree.mkdir(parents=True, exist_ok=True)
        for index, path in enumerate(paths):
            link = tree / f"{index:06d}.jpg"
            if not link.exists():
                link.symlink_to(path)
        trees[size] = tree.parent
    return trees


def _run_tree(args: argparse.Namespace, tree: pathlib.Path, length: int) -> dict[str, Any]:
    import ray
    import torch

    consumer = lane_bench._TrainingStepOnHost(args.lane_host_normalize)
    torch.manual_seed(args.seed)
    # A Ray of its own (address="local"), never a cluster that happens to run on the machine.
    ray.init(address="local", num_cpus=ACTORS + 1, include_dashboard=False, log_to_driver=False)
    try:
        threads_and_torchvision = lane_bench._runners(tree, length, args.seed,
                                                      args.lane_host_normalize)
        lane_loader, torchvision_loader = (threads_and_torchvision[name].loader
                                           for name in ("lane_threads", "torchvision_uint8"))
        runners = {"ray_data": _with_tree_cpu(_ray_runner(tree, length, args.seed, consumer)),
                   "lane_threads": _with_tree_cpu(loaders.epoch_runner(lane_loader, consumer)),
                   "torchvision_uint8": _with_tree_cpu(loaders.epoch_runner(torchvision_loader,
                                                                            consumer))}
        del threads_and_torchvision
        timed = loaders.time_interleaved(runners, args.ray_rounds)
    finally:
        ray.shutdown()
    rows = [loaders.summarise(name, timed["per_round"][name], timed["warmup"][name])
            for name in ROWS]
    rates = {row["config"]: row["per_round_images_per_s"] for row in rows}
    for row in rows:
        row["cpu_us_per_image"] = float(np.median(runners[row["config"]].cpu_us_per_image[1:]))
        row["vs_torchvision_uint8"] = lane_bench._paired_ratio(rates[row["config"]],
                                                               rates["torchvision_uint8"])
        row["vs_lane_threads"] = lane_bench._paired_ratio(rates[row["config"]],
                                                          rates["lane_threads"])
    return {"tree": str(tree), "length": length, "configs": rows}


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    if source.kind == "real" and args.photos is not None:
        trees = _photo_tree(args)
    else:
        trees = {f"{h}x{w}": lane_bench._files(args, source, h, w, args.lane_files)
                 for h, w in lane_bench._sizes(args.ray_sizes)}
    sizes = {size: _run_tree(args, tree, args.lane_length) for size, tree in trees.items()}
    if args.json is not None:
        lane_bench._merge_json(args.json, f"ray-{source.kind}", sizes)
    return {"config": {"images": source.kind, "rounds": args.ray_rounds, "actors": ACTORS},
            "sizes": sizes, "targets": _targets(sizes)}


def _targets(sizes: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 33's target: Ray Data keeps at least 1.3x torchvision's uint8 DataLoader at 500x375."""
    targets = []
    for size, result in sizes.items():
        if size == "375x500":
            ray_row = next(row for row in result["configs"] if row["config"] == "ray_data")
            targets.append({"target": f"{size}: ray_data >= 1.3x torchvision uint8",
                            "required": 1.3, "measured": ray_row["vs_torchvision_uint8"],
                            "holds": ray_row["vs_torchvision_uint8"] >= 1.3})
    return targets


def format_table(result: dict[str, Any]) -> str:
    config = result["config"]
    lines = [f"Ray Data on {config['images']} files, one machine: RandomResizedCrop(224) + flip, "
             f"uint8, batch 64, {config['actors']} actors / threads / workers; median of "
             f"{config['rounds']} interleaved epochs"]
    headers = ["row", "images/s", "min", "max", "spread", "CPU us/image", "vs tv uint8",
               "vs lane threads"]
    for size, sized in result["sizes"].items():
        rows = [[*loaders.table_cells(row), f"{row['cpu_us_per_image']:.0f}",
                 report.format_ratio(row["vs_torchvision_uint8"]),
                 report.format_ratio(row["vs_lane_threads"])] for row in sized["configs"]]
        lines += ["", f"{size} ({sized['length']} images per epoch):",
                  report.markdown_table(headers, rows, right=[False] + [True] * 7)]
    lines += ["Targets:", *report.format_targets(result["targets"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
