"""The batch lane on Ray Data against the threads lane and torchvision's uint8 DataLoader, one machine.

Run from the repository root:

    python -m bench ray                                   # generated and real photos, 2 sizes
    python -m bench ray --photos ~/photos --json ray.json  # your JPEGs as they are
    python -m bench ray --scaling                         # 1 node against 2: bench/ray_scaling.py

The question: what does the engine cost, once it runs, and what does it cost to
start? On a cluster Ray Data adds CPU machines; here, on one machine's 2
cores, the same RandomResizedCrop(224) + flip batches of 64 come from three
pipelines:

  ray_data           custom_op.ray.decode_epochs over read_binary_files: ONE Ray Data
                     execution of (rounds + 2) epochs' rows, each row drawn in its own epoch's
                     stream, 2 actors of 1 CPU each decoding blocks of 256, started once;
                     iter_torch_batches(batch_size=64) in the training process. Timed from its
                     first batch; its rounds are consecutive spans of one epoch's worth of
                     images each, the first left out as the warm-up and the last epoch
                     consumed untimed (the actors decode ahead: see _time_ray). Its start (from the
                     iteration's start to the first batch: the actors' processes, torch
                     imported in each, the first blocks read and decoded) is its own column,
                     startup s (the dataset's plan, made once, is plan_s in the JSON), and
                     "per-epoch start" is the rate a fresh execution per epoch would give
                     (an epoch's images over the start plus the epoch's steady time). Ray gets one logical CPU more than the actors take, for its
                     reading tasks, which would otherwise wait for ever
  lane_threads       custom_op.lane.lane_threads (torchdata.nodes), 2 threads
  torchvision_uint8  DatasetFolder with decode_jpeg(read_file(path), mode=RGB), DataLoader, 2 workers

lane_threads and torchvision_uint8 are timed interleaved as the lane part times
them (bench/loaders.py steady_runner: from an epoch's second batch), before Ray
starts, so that Ray's idle processes take nothing from them; Ray's phase runs
alone after them. Its ratios are therefore of medians, not paired by round.

Every row's batches go to the lane part's training-step consumer. CPU time per
image covers this process and every process below it (Ray's raylet, its
workers and actors; the DataLoader's workers) over the timed span: the
engine's overhead shows there; "per core" is its inverse, the images/s one
core's CPU time delivers, which a loaded machine's images/s (a share of the
cores, not the cores) does not show. Ray's actors run ahead of the training
loop (blocks wait in the object store): the timed span of ray_data starts and
ends with the pipeline full, an epoch before the execution ends, so that the
blocks decoded ahead at its start and at its end cancel. With ``--photos DIR`` the rows read
DIR's JPEGs as they are (every size found, one class), instead of files fitted
to --ray-sizes. ``--json
FILE`` writes ``{kind: {size: {ray_data, lane_threads, torchvision_uint8}}}``
(steady images/s), merged into the file if it exists. Print the load average
with the figures: the machine is shared.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import sys
import time
from typing import Any

import numpy as np

from bench import images, lane_bench, loaders, photos, ray_scaling, report

ROWS = ("ray_data", "lane_threads", "torchvision_uint8")
DEFAULT_SIZES = "375x500,533x800"
ACTORS = 2
#: Rows of a read block and of an actor's native call: the recipe's (docs/ray.md).
BLOCK_ROWS = 256


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("ray data")
    group.add_argument("--ray-sizes", default=DEFAULT_SIZES,
                       help=f"HxW of the files, comma-separated (default {DEFAULT_SIZES})")
    group.add_argument("--ray-rounds", type=int, default=2,
                       help="timed epochs of every row, interleaved (default 2)")
    group.add_argument("--scaling", action="store_true",
                       help="instead, decode throughput on a local cluster of 1 node against 2 "
                            "(bench/ray_scaling.py; not in make bench)")
    if not any(action.dest == "lane_files" for action in parser._actions):
        lane_bench.add_arguments(parser)  # files, epoch length, --photos, --json: the lane's
    ray_scaling.add_arguments(parser)


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


def _ray_dataset(tree: pathlib.Path, length: int, seed: int, epochs: int) -> Any:
    """The decoded dataset of one Ray Data execution: ``epochs`` epochs of ``length`` images
    each, the tree's files over and over as the other rows' samplers draw them."""
    import ray
    from custom_op.ray import decode_epochs

    paths = sorted(str(path) for path in tree.rglob("*.jpg"))
    # Ray's cost is per block (a read task, an actor task, the object store, the driver's
    # bookkeeping), so blocks of BLOCK_ROWS rows, one native call each; the training loop
    # still takes batches of 64 (iter_torch_batches slices the blocks without a copy).
    files = ray.data.read_binary_files((paths * (length // len(paths) + 1))[:length],
                                       include_paths=True,
                                       override_num_blocks=max(1, length // BLOCK_ROWS))
    decoded = decode_epochs({epoch: files for epoch in range(epochs)}, lane_bench._transform(),
                            seed=seed, batch_size=BLOCK_ROWS,
                            compute=ray.data.ActorPoolStrategy(size=ACTORS), num_cpus=1)
    return decoded


def _time_ray(tree: pathlib.Path, length: int, seed: int, rounds: int,
              consumer: Any) -> dict[str, Any]:
    """Ray's phase: its start (to the first batch), then the rate of each consecutive span of
    one epoch's worth of images: a warm-up span (timed from the first batch; the second actor
    may still be starting), ``rounds`` timed spans, and a last epoch consumed untimed. The
    actors decode ahead of the training loop, so the timed spans and their CPU (every process
    below this one) run from one full pipeline to another: ending the timing at the
    execution's end would count the blocks decoded ahead without their CPU."""
    start = time.perf_counter()
    decoded = _ray_dataset(tree, length, seed, rounds + 2)
    # The plan is made once, however many epochs; the start is every execution's.
    planned = time.perf_counter()
    first = None
    rates, span_start, images, done = [], 0.0, 0, 0
    cpu_marks, time_marks = [], []
    for batch in decoded.iter_torch_batches(batch_size=lane_bench.BATCH):
        consumer((batch["image"],))
        now, size = time.perf_counter(), int(batch["image"].shape[0])
        done += size
        if first is None:
            first = span_start = now
            continue
        images += size
        if done % length == 0 and len(rates) <= rounds:
            rates.append(images / (now - span_start))
            span_start, images = now, 0
            if len(rates) == 1 or len(rates) == rounds + 1:
                cpu_marks.append(_tree_cpu_seconds())
                time_marks.append(now)
    if len(rates) < rounds + 1:
        raise ValueError(f"bench ray: {done} images, need {rounds + 2} epochs of {length}")
    counted = rounds * length
    return {"plan_s": planned - start, "startup_s": first - planned, "rates": rates,
            "steady_images_per_s": counted / (time_marks[1] - time_marks[0]),
            "cpu_us_per_image": 1e6 * (cpu_marks[1] - cpu_marks[0]) / counted}


def _local_rows(args: argparse.Namespace, tree: pathlib.Path, length: int) -> dict[str, Any]:
    """lane_threads and torchvision_uint8 over ``tree``, timed interleaved; their loaders'
    workers stopped when this returns, before Ray starts."""
    import torch

    torch.manual_seed(args.seed)
    runners = {name: run for name, run in lane_bench._runners(
        tree, length, args.seed, args.lane_host_normalize).items() if name in ROWS}
    timed = loaders.time_interleaved(runners, args.ray_rounds)
    rows = {name: loaders.summarise(name, timed["per_round"][name], timed["warmup"][name])
            for name in runners}
    for name, row in rows.items():
        row["cpu_us_per_image"] = float(np.median(runners[name].cpu_us_per_image[1:]))
    return rows


def _ray_row(args: argparse.Namespace, tree: pathlib.Path, length: int) -> dict[str, Any]:
    """The ray_data row over ``tree``, in the Ray instance that runs."""
    consumer = lane_bench._TrainingStepOnHost(args.lane_host_normalize)
    measured = _time_ray(tree, length, args.seed, args.ray_rounds, consumer)
    ray_row = loaders.summarise("ray_data", measured["rates"][1:] or measured["rates"],
                                measured["rates"][0])
    ray_row.update(plan_s=measured["plan_s"], startup_s=measured["startup_s"],
                   cpu_us_per_image=measured["cpu_us_per_image"],
                   steady_images_per_s=measured["steady_images_per_s"],
                   per_epoch_start_images_per_s=length / (
                       measured["startup_s"] + length / ray_row["median_images_per_s"]))
    return ray_row


def _with_ratios(rows: dict[str, Any], tree: pathlib.Path, length: int) -> dict[str, Any]:
    for row in rows.values():
        for key, other in (("vs_torchvision_uint8", "torchvision_uint8"),
                           ("vs_lane_threads", "lane_threads")):
            row[key] = row["median_images_per_s"] / rows[other]["median_images_per_s"]
    # Ray's own cost per image: what the lane costs on Ray Data over what it costs alone.
    overhead = rows["ray_data"]["cpu_us_per_image"] - rows["lane_threads"]["cpu_us_per_image"]
    return {"tree": str(tree), "length": length, "load_average": os.getloadavg(),
            "ray_overhead_us_per_image": overhead, "configs": [rows[name] for name in ROWS]}


def _run_trees(args: argparse.Namespace, trees: dict[str, pathlib.Path],
               length: int) -> dict[str, Any]:
    """Every size's local rows first, then one Ray instance for every size's ray_data row."""
    import ray

    rows = {size: _local_rows(args, tree, length) for size, tree in trees.items()}
    if not trees:
        return {}
    # A Ray of its own (address="local"), never a cluster that happens to run on the machine.
    ray.init(address="local", num_cpus=ACTORS + 1, include_dashboard=False, log_to_driver=False)
    try:
        for size, tree in trees.items():
            rows[size]["ray_data"] = _ray_row(args, tree, length)
    finally:
        ray.shutdown()
    return {size: _with_ratios(rows[size], tree, length) for size, tree in trees.items()}


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    if args.scaling:
        return ray_scaling.run(args, source)
    if source.kind == "real" and args.photos is not None:
        trees = photos.trees_as_they_are(args.photos, args.cache, "ray")
    else:
        trees = {}
        for h, w in lane_bench._sizes(args.ray_sizes):
            try:
                trees[f"{h}x{w}"] = lane_bench._files(source, h, w, args.lane_files)
            except photos.PhotosUnavailable as error:
                print(f"ray: {h}x{w} on {source.kind} images skipped: {error}", flush=True)
    sizes = _run_trees(args, trees, args.lane_length)
    if args.json is not None:
        lane_bench._merge_json(args.json, f"ray-{source.kind}", sizes)
        _add_overheads(args.json, f"ray-{source.kind}", sizes)
    return {"config": {"images": source.kind, "rounds": args.ray_rounds, "actors": ACTORS},
            "sizes": sizes, "targets": _targets(sizes)}


def _add_overheads(path: pathlib.Path, kind: str, sizes: dict[str, Any]) -> None:
    """Each size's ray_overhead_us_per_image beside its rows in the --json file."""
    merged = json.loads(path.read_text(encoding="utf-8"))
    for size, result in sizes.items():
        if size in merged.get(kind, {}):
            merged[kind][size]["ray_overhead_us_per_image"] = round(
                result["ray_overhead_us_per_image"], 1)
    path.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")


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


def _startup_cells(row: dict[str, Any]) -> list[str]:
    """Ray's start and the rate a fresh execution per epoch would give; "-" for the others."""
    if "startup_s" not in row:
        return ["-", "-"]
    return [f"{row['startup_s']:.1f}", f"{row['per_epoch_start_images_per_s']:.0f}"]


def format_table(result: dict[str, Any]) -> str:
    if "ray_scaling" in result:
        return ray_scaling.format_table(result)
    config = result["config"]
    lines = [f"Ray Data on {config['images']} files, one machine: RandomResizedCrop(224) + flip, "
             f"uint8, batch 64, {config['actors']} actors / threads / workers; median of "
             f"{config['rounds']} epochs (ray_data: one execution, timed from its first batch)"]
    headers = ["row", "images/s", "min", "max", "spread", "CPU us/image", "per core", "startup s",
               "per-epoch start", "vs tv uint8", "vs lane threads"]
    for size, sized in result["sizes"].items():
        rows = [[*loaders.table_cells(row), f"{row['cpu_us_per_image']:.0f}",
                 f"{1e6 / row['cpu_us_per_image']:.0f}", *_startup_cells(row),
                 report.format_ratio(row["vs_torchvision_uint8"]),
                 report.format_ratio(row["vs_lane_threads"])] for row in sized["configs"]]
        load = ", ".join(f"{value:.2f}" for value in sized["load_average"])
        lines += ["", f"{size} ({sized['length']} images per epoch; load average {load} at "
                      "the end; Ray's overhead "
                      f"{sized['ray_overhead_us_per_image']:.0f} us of CPU per image):",
                  report.markdown_table(headers, rows, right=[False] + [True] * 10)]
    lines += ["Targets:", *report.format_targets(result["targets"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
