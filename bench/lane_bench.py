"""The batch lane against the per-sample pipeline, torchvision's uint8 DataLoader and the decode ceiling.

Run from the repository root:

    python -m bench lane                                   # generated and real photos, 3 sizes
    python -m bench lane --photos ~/photos --json lane.json  # your photos, as they are
    python -m bench lane --images real --lane-sizes 375x500 --lane-rounds 5

The question: how close does a training input pipeline get to the decoder's
own speed? Every row delivers batches of 64 uint8 RandomResizedCrop(224) +
RandomHorizontalFlip windows from an ImageFolder tree (--lane-files files per
size; real photos are the wallpapers fitted to the size as bench/photos.py does,
a size no wallpaper is large enough for skipped alone; with --photos DIR, the
JPEGs under DIR as they are, one row set per size found, in place of the sizes),
--lane-length images per epoch drawn by a random sampler, on 2 cores:

  per_sample         today's recipe: custom_op.JpegFolder (EncodedJpeg) + v2 transforms,
                     DataLoader, 2 workers, batch 64
  torchvision_uint8  DatasetFolder with decode_jpeg(read_file(path), mode=RGB), the same v2 transforms,
                     DataLoader, 2 workers
  lane_workers       custom_op.lane.BatchLane through lane_dataloader: a batch sampler,
                     batch_size=None, 2 worker processes each decoding whole batches
  lane_threads       the same lane through lane_threads (torchdata.nodes): one process,
                     2 threads reading, 2 threads decoding
  ceiling            custom_op.decode_and_crop_jpeg_batch(size=224, num_threads=2) over the
                     files' bytes already in memory, windows drawn beforehand: decode only
  dali_cpu           (with --lane-dali PYTHON) NVIDIA DALI's CPU pipeline on 2 threads: file
                     reader + decoders.image_random_crop + resize + flip (bench/dali_epoch.py,
                     in DALI's own venv; no consumer: its batches stay in its process)

Each row gives images/s and the CPU time per image over the same span (this
process's threads and its DataLoader workers, loaders.cpu_seconds): what the
pipeline costs the cores beside what it delivers.

Every pipeline row's batches go to a consumer doing what a training step does
with a batch: copy it into a reused pinned buffer (a plain one without CUDA),
send it to the GPU and normalise it there (custom_op.transforms.NormalizeBatch);
without a GPU, ``--lane-host-normalize`` normalises on the host instead, so that
loading and the training loop share the cores as they would. The ceiling
has no consumer. Rows are timed interleaved (bench/loaders.py), each epoch
from its second batch's arrival to its last (loaders.steady_runner): a
training epoch's thousands of batches hide the fill before the first batches
(threads started, a pipeline of work) that weighs on a benchmark's dozen
(DALI's row, timed in its own process, is whole epochs). Ratios are medians
of the ratios within each round (rows of a round ran back to back); read
them within one run only. ``--json FILE`` also writes the images/s of each row as
``{kind: {size: {lane_workers, lane_threads, per_sample, torchvision_uint8,
ceiling}}}``, merged into the file if it exists.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

import numpy as np
import torch
import torchvision
from torch.utils.data import BatchSampler, DataLoader, RandomSampler
from torchvision.io import read_file
from torchvision.transforms import v2

import custom_op
from bench import images, loaders, photos, report, sampling
from custom_op.datasets import JpegFolder
from custom_op.lane import BatchLane, lane_dataloader, lane_threads
from custom_op.transforms import NormalizeBatch

SIZE, BATCH, WORKERS = 224, 64, 2
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
ROWS = ("lane_workers", "lane_threads", "per_sample", "torchvision_uint8", "ceiling")
DEFAULT_SIZES = "375x500,533x800,1600x2560"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("batch lane")
    group.add_argument("--lane-sizes", default=DEFAULT_SIZES,
                       help=f"HxW of the files, comma-separated (default {DEFAULT_SIZES})")
    group.add_argument("--lane-files", type=int, default=96,
                       help="files per size; a quarter of it for sizes over 2 megapixels (default 96)")
    group.add_argument("--lane-length", type=int, default=768,
                       help="images per epoch; a quarter (at least 256) over 2 megapixels (default 768)")
    group.add_argument("--lane-rounds", type=int, default=2,
                       help="timed epochs of every row, interleaved (default 2)")
    group.add_argument("--lane-dali", type=pathlib.Path, default=None,
                       help="a Python with nvidia-dali-cuda120 (e.g. a venv's bin/python): adds "
                            "DALI's CPU pipeline as the dali_cpu row (bench/dali_epoch.py)")
    group.add_argument("--lane-host-normalize", action="store_true",
                       help="without a GPU, normalise each batch to float32 on the host too")


def _sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for item in text.split(","):
        height, _, width = item.strip().partition("x")
        sizes.append((int(height), int(width)))
    return sizes


def _files(source: images.ImageSource, height: int, width: int, count: int) -> pathlib.Path:
    """The ImageFolder tree of ``count`` files of height x width for this kind."""
    return pathlib.Path(source.files(height, width, count).description["folder"])


def _transform() -> v2.Compose:
    return v2.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip()])


class _TrainingStepOnHost:
    """What a training step does with a batch before the model: copy it into a reused pinned
    buffer (a plain one without CUDA), send it to the GPU and normalise it there; on a machine
    without a GPU the normalisation runs on the host only with ``host_normalize`` (it then costs
    more than the decode: 64 x 3 x 224 x 224 to float32 is about 0.1 s on one core).

    The copy runs on one thread (numpy's), as it runs in a GPU job: DataLoader's pin-memory
    thread copies with torch.set_num_threads(1), and ``.to("cuda")`` from pinned memory is a
    DMA. A torch copy_ in the main thread runs on ATen's OpenMP team, whose threads spin
    after it on the cores the loader decodes on (lane_threads at 500 x 375: 0.96x,
    docs/batch_lane.md, "Sharing the cores")."""

    def __init__(self, host_normalize: bool) -> None:
        self.cuda = torch.cuda.is_available()
        self.buffer = torch.empty((BATCH, 3, SIZE, SIZE), dtype=torch.uint8, pin_memory=self.cuda)
        self.normalize = NormalizeBatch(MEAN, STD)
        self.host_normalize = host_normalize

    def __call__(self, batch: Any) -> None:
        images_in = batch[0]
        target = self.buffer[:images_in.shape[0]]
        np.copyto(target.numpy(), images_in.numpy())
        if self.cuda:
            self.normalize(target.to("cuda", non_blocking=True))
            torch.cuda.synchronize()
        elif self.host_normalize:
            self.normalize(target)


def _ceiling(tree: pathlib.Path, length: int, seed: int) -> loaders.Runner:
    """``length`` windows decoded by the batched call on 2 threads, bytes and windows ready."""
    paths = sorted(tree.glob("*/*.jpg"))
    tensors = images.as_tensors(paths)
    generator = torch.Generator().manual_seed(seed)
    order = torch.randint(0, len(tensors), (length,), generator=generator).tolist()
    crop = v2.RandomResizedCrop(SIZE)
    plan = [(tensors[i], sampling.random_resized_crop(crop, tensors[i])) for i in order]
    batches = [plan[start:start + BATCH] for start in range(0, length, BATCH)]

    def decoded() -> Any:
        for batch in batches:
            yield custom_op.decode_and_crop_jpeg_batch([data for data, _ in batch],
                                                       [box for _, box in batch], size=SIZE,
                                                       num_threads=WORKERS)
    return loaders.steady_runner(_Reiterable(decoded))


class _Reiterable:
    """A generator function as an iterable a runner can go through once per round."""

    def __init__(self, make: Any) -> None:
        self.make = make

    def __iter__(self) -> Any:
        return self.make()


def _dali_runner(python: pathlib.Path, tree: pathlib.Path, length: int) -> loaders.Runner:
    """DALI's CPU pipeline in its own process (its own venv), an epoch per request."""
    import subprocess

    script = pathlib.Path(__file__).with_name("dali_epoch.py")
    process = subprocess.Popen([str(python), str(script), str(tree), str(BATCH), str(WORKERS),
                                str(length)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)

    def run() -> tuple[int, int]:
        process.stdin.write("go\n")
        process.stdin.flush()
        reply = process.stdout.readline().split()
        if len(reply) != 2:
            raise RuntimeError(f"bench/dali_epoch.py stopped (exit status {process.poll()})")
        return int(reply[0]), int(reply[1])
    run.process = process  # type: ignore[attr-defined]
    return run


def _stop(process: Any) -> None:
    """Ends the DALI process: stdin closed, then killed if it has not left within 30 s."""
    import subprocess

    process.stdin.close()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _runners(tree: pathlib.Path, length: int, seed: int,
             host_normalize: bool) -> dict[str, loaders.Runner]:
    consumer = _TrainingStepOnHost(host_normalize)
    folder = JpegFolder(str(tree), transform=_transform())
    torchvision_folder = torchvision.datasets.DatasetFolder(
        str(tree), lambda path: images.torchvision_decode(read_file(path)), extensions=(".jpg",),
        transform=_transform())

    def per_image(dataset) -> DataLoader:
        return DataLoader(dataset, batch_size=BATCH, num_workers=WORKERS, persistent_workers=True,
                          sampler=RandomSampler(dataset, num_samples=length))

    def batches() -> BatchSampler:
        return BatchSampler(RandomSampler(folder, num_samples=length), BATCH, drop_last=False)

    lane = BatchLane(JpegFolder(str(tree)), _transform())
    return {
        "lane_workers": loaders.steady_runner(
            lane_dataloader(lane, batches(), num_workers=WORKERS, persistent_workers=True), consumer),
        "lane_threads": loaders.steady_runner(lane_threads(lane, batches(), threads=WORKERS),
                                              consumer),
        "per_sample": loaders.steady_runner(per_image(folder), consumer),
        "torchvision_uint8": loaders.steady_runner(per_image(torchvision_folder), consumer),
        "ceiling": _ceiling(tree, length, seed),
    }


def _epoch_length(args: argparse.Namespace, height: int, width: int) -> int:
    """Images per epoch: an even number of batches at the defaults (loaders.steady_runner leaves
    out the first two, and 2 loaders deliver in pairs); over 2 megapixels a quarter, at least 4
    batches (an epoch of such files takes seconds, not a fraction of one)."""
    large = height * width > 2_000_000
    return max(4 * BATCH, args.lane_length // 4) if large else args.lane_length


def _run_size(args: argparse.Namespace, source: images.ImageSource, height: int,
              width: int) -> dict[str, Any]:
    large = height * width > 2_000_000
    files = max(8, args.lane_files // 4) if large else args.lane_files
    try:
        tree = _files(source, height, width, files)
    except photos.PhotosUnavailable as error:
        print(f"lane: {height}x{width} on {source.kind} images skipped: {error}", flush=True)
        return {"height": height, "width": width, "skipped": str(error)}
    return _run_tree(args, tree, height, width, files)


def _run_tree(args: argparse.Namespace, tree: pathlib.Path, height: int, width: int,
              files: int) -> dict[str, Any]:
    """Every row over the files of ``tree``, timed interleaved."""
    length = _epoch_length(args, height, width)
    torch.manual_seed(args.seed)
    runners = _runners(tree, length, args.seed, args.lane_host_normalize)
    if args.lane_dali is not None:
        runners["dali_cpu"] = _dali_runner(args.lane_dali, tree, length)
    try:
        timed = loaders.time_interleaved(runners, args.lane_rounds)
    finally:
        if "dali_cpu" in runners:
            _stop(runners["dali_cpu"].process)
    # The timed rounds' CPU per image (the warm-up epoch came first); DALI's runner has none.
    cpu = {name: getattr(run, "cpu_us_per_image", [])[1:] for name, run in runners.items()}
    del runners  # stops the persistent workers
    rows = [loaders.summarise(name, timed["per_round"][name], timed["warmup"][name])
            for name in (*ROWS, "dali_cpu") if name in timed["per_round"]]
    for row in rows:
        row["cpu_us_per_image"] = float(np.median(cpu[row["config"]])) if cpu[row["config"]] \
            else None
    rounds = {row["config"]: row["per_round_images_per_s"] for row in rows}
    for row in rows:
        for key, other in (("vs_ceiling", "ceiling"), ("vs_torchvision_uint8", "torchvision_uint8"),
                           ("vs_per_sample", "per_sample")):
            row[key] = _paired_ratio(rounds[row["config"]], rounds[other])
    return {"height": height, "width": width, "files": files, "length": length, "tree": str(tree),
            "round_orders": timed["orders"], "configs": rows}


def _paired_ratio(rates: list[float], others: list[float]) -> float:
    """The median over rounds of one row's rate over another's in the same round: a round's
    rows ran back to back, so a machine slower in one round (a neighbour, the clock) divides
    out, where the ratio of two medians keeps it."""
    return float(np.median([rate / other for rate, other in zip(rates, others)]))


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """Every size of this kind, each timed interleaved; rows with ratios; --json merged. With
    --photos, the real kind is the folder's files as they are, one entry per size found."""
    if source.kind == "real" and args.photos is not None:
        sizes = {}
        for size, tree in photos.trees_as_they_are(args.photos, args.cache, "lane").items():
            height, width = _sizes(size)[0]
            sizes[size] = _run_tree(args, tree, height, width, sum(1 for _ in tree.glob("*/*")))
    else:
        sizes = {f"{height}x{width}": _run_size(args, source, height, width)
                 for height, width in _sizes(args.lane_sizes)}
    if args.json is not None:
        _merge_json(args.json, source.kind, sizes)
    return {"config": {"images": source.kind, "size": SIZE, "batch_size": BATCH,
                       "workers": WORKERS, "rounds": args.lane_rounds,
                       "consumer": ("pinned copy, GPU normalise" if torch.cuda.is_available() else
                                    "copy, host normalise" if args.lane_host_normalize else
                                    "copy (no GPU: normalise skipped)"),
                       "photos": str(args.photos) if args.photos else None},
            "sizes": sizes, "targets": _targets(sizes)}


def _merge_json(path: pathlib.Path, kind: str, sizes: dict[str, Any]) -> None:
    existing = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    existing[kind] = {size: {row["config"]: round(row["median_images_per_s"], 1)
                             for row in result["configs"]}
                      for size, result in sizes.items() if "skipped" not in result}
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(existing, indent=2), encoding="utf-8")
    temporary.replace(path)


def _targets(sizes: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 25's targets: lane >= 90% of the ceiling, >= 1.5x torchvision uint8 at 500x375,
    and no slower than per-sample, at every size."""
    targets = []
    for size, result in sizes.items():
        if "skipped" in result:
            continue
        rows = {row["config"]: row for row in result["configs"]}
        lanes = [rows["lane_workers"], rows["lane_threads"]]
        checks = [(f"{size}: best lane >= 90% of the ceiling", 0.9,
                   max(row["vs_ceiling"] for row in lanes)),
                  (f"{size}: best lane >= per-sample", 1.0,
                   max(row["vs_per_sample"] for row in lanes))]
        if size == "375x500":
            checks.append((f"{size}: best lane >= 1.5x torchvision uint8", 1.5,
                           max(row["vs_torchvision_uint8"] for row in lanes)))
        targets += [{"target": text, "required": required, "measured": measured,
                     "holds": measured >= required} for text, required, measured in checks]
    return targets


def _cpu_cell(row: dict[str, Any]) -> str:
    """The row's CPU time per image (process and workers), "-" where none was measured."""
    cpu = row.get("cpu_us_per_image")
    return "-" if cpu is None else f"{cpu:.0f}"


def format_table(result: dict[str, Any]) -> str:
    config = result["config"]
    lines = [f"Batch lane on {config['images']} files: RandomResizedCrop({config['size']}) + flip, "
             f"uint8, batch {config['batch_size']}, {config['workers']} workers / threads; "
             f"pipelines feed a training step ({config['consumer']}); median of "
             f"{config['rounds']} interleaved epochs"]
    headers = ["row", "images/s", "min", "max", "spread", "CPU us/image", "vs ceiling",
               "vs tv uint8", "vs per-sample"]
    for size, sized in result["sizes"].items():
        if "skipped" in sized:
            lines += ["", f"{size}: skipped ({sized['skipped']})"]
            continue
        rows = [[*loaders.table_cells(row), _cpu_cell(row), report.format_ratio(row["vs_ceiling"]),
                 report.format_ratio(row["vs_torchvision_uint8"]),
                 report.format_ratio(row["vs_per_sample"])] for row in sized["configs"]]
        lines += ["", f"{size} ({sized['files']} files, {sized['length']} images per epoch):",
                  report.markdown_table(headers, rows, right=[False] + [True] * 8)]
    lines += ["Targets:", *report.format_targets(result["targets"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
