"""Epochs of the threads lane with MCU-row indexes from the index cache, from sidecars, or none,
against prepared files and torchvision's uint8 DataLoader.

A part of the index benchmark (bench/index_bench.py): for 2560x1600 and 500x375 files, a
JpegFolder (a copy of the run's set, so that sidecars can be written beside it), read by
``custom_op.lane.lane_threads`` (2 threads, batches of 8, ``v2.RandomResizedCrop(224)``
with its default scales, or with scales 0.02-0.1 (small windows, whose indexes pay soonest),
+ ``v2.RandomHorizontalFlip()``), three epochs in a row per
way, each way with a new loader and a new cache, the ways taken in turn ``--index-rounds``
times (the fastest epoch of each kept):

  no index          configure_index_cache(max_bytes=0)
  cache, 1st touch  configure_index_cache(build_on_touch=1): built on the first cropped decode
  cache, default    configure_index_cache(): built once the decodes would have saved a build
  sidecars          written once by --index-only (timed apart), read on the first miss
  prepared files    the files rewritten by custom_op.prepare_jpeg (restart markers), no index
  torchvision uint8 DatasetFolder with decode_jpeg(read_file(path), mode=RGB), the same transform,
                    DataLoader with 2 workers (persistent), batches of 8

Also each file's index, built alone: its size and build time, and from them what the cache
of 100,000 such files holds (indexes plus the cache's per-entry estimate).
"""

from __future__ import annotations

import itertools
import pathlib
import shutil
import statistics
import tempfile
import time
from typing import Any

from torchvision.transforms import v2

import custom_op
from custom_op._index._cache import ENTRY_OVERHEAD
from custom_op.datasets import JpegFolder
from custom_op.lane import BatchLane, LaneBatchSampler, lane_threads
from custom_op.prepare.index_only import index_tree

from bench import images

#: (height, width, files per epoch as a multiple of --index-epoch-images).
SIZES = ((1600, 2560, 1), (375, 500, 4))
EPOCHS = 3
BATCH = 8
THREADS = 2
CROPS = {"RRC(224)": (0.08, 1.0), "RRC(224), scale 0.02-0.1": (0.02, 0.1)}
WAYS = {"no index": dict(max_bytes=0), "cache, 1st touch": dict(build_on_touch=1),
        "cache, default": {}, "sidecars": {},
        "prepared files": dict(max_bytes=0), "torchvision uint8": dict(max_bytes=0)}


def _copy(paths: list[pathlib.Path], root: pathlib.Path, prepare: bool = False) -> None:
    for number, path in enumerate(paths):
        target = root / f"class_{number % 2}" / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if prepare:
            target.write_bytes(custom_op.prepare_jpeg(path.read_bytes()))
        else:
            shutil.copyfile(path, target)


def _loader(root: pathlib.Path, way: str, transform: v2.Transform, seed: int) -> Any:
    """The way's loader over ``root``: the threads lane, or torchvision's uint8 DataLoader."""
    if way == "torchvision uint8":
        import torch
        import torchvision
        from torchvision.io import read_file

        folder = torchvision.datasets.DatasetFolder(
            str(root), lambda path: images.torchvision_decode(read_file(path)), extensions=(".jpg",),
            transform=transform)
        return torch.utils.data.DataLoader(folder, batch_size=BATCH, shuffle=True,
                                           num_workers=THREADS, persistent_workers=True,
                                           generator=torch.Generator().manual_seed(seed))
    lane = BatchLane(JpegFolder(root), transform, seed=seed)
    return lane_threads(lane, LaneBatchSampler(len(lane), BATCH, seed=seed), threads=THREADS)


def _epoch_seconds(root: pathlib.Path, way: str, scale: tuple[float, float],
                   seed: int) -> list[float]:
    """Seconds of each of EPOCHS epochs of a new loader of ``way`` over ``root``."""
    transform = v2.Compose([v2.RandomResizedCrop(224, scale=scale), v2.RandomHorizontalFlip()])
    loader = _loader(root, way, transform, seed)
    seconds = []
    for _ in range(EPOCHS):
        start = time.perf_counter()
        for _batch in loader:
            pass
        seconds.append(time.perf_counter() - start)
    return seconds


def _index_sizes(paths: list[pathlib.Path]) -> tuple[list[int], list[float]]:
    sizes, seconds = [], []
    for path in paths:
        data = path.read_bytes()
        start = time.perf_counter()
        index = custom_op.jpeg_index(data)
        seconds.append(time.perf_counter() - start)
        sizes.append(len(index or b""))
    return sizes, seconds


def _size_epochs(source: Any, height: int, width: int, count: int, rounds: int,
                 seed: int) -> dict[str, Any]:
    """One size's figures (see the module's note); ms are per image."""
    files = source.files(height, width, count)
    sizes, build_seconds = _index_sizes(files.paths)
    with tempfile.TemporaryDirectory(prefix="custom_op-index-epochs-") as folder:
        root = pathlib.Path(folder) / "train"
        prepared_root = pathlib.Path(folder) / "prepared"
        _copy(files.paths, root)
        _copy(files.paths, prepared_root, prepare=True)
        best: dict[tuple[str, str], list[float]] = {}
        sidecar_seconds = []
        for _ in range(rounds):
            for (crop, scale), (way, settings) in itertools.product(CROPS.items(), WAYS.items()):
                for sidecar in root.rglob("*.cjmi"):
                    sidecar.unlink()
                if way == "sidecars":
                    start = time.perf_counter()
                    index_tree(str(root))
                    sidecar_seconds.append(time.perf_counter() - start)
                custom_op.configure_index_cache(**settings)
                seconds = _epoch_seconds(prepared_root if way == "prepared files" else root,
                                         way, scale, seed)
                key = (crop, way)
                best[key] = [min(pair) for pair in zip(best.get(key, seconds), seconds)]
        custom_op.configure_index_cache()
    per_image = {f"{crop}: {way}": [1000 * s / count for s in seconds]
                 for (crop, way), seconds in best.items()}
    index_bytes = statistics.mean(sizes)
    return {"files": count, "size": f"{width}x{height}", "batch": BATCH, "threads": THREADS,
            "rounds": rounds, "epoch_ms_per_image": per_image,
            "index_bytes_per_image": index_bytes,
            "index_build_ms_median": 1000 * statistics.median(build_seconds),
            "index_only_ms_per_image": 1000 * min(sidecar_seconds) / count,
            "cache_mib_for_100k_files": 100_000 * (index_bytes + ENTRY_OVERHEAD) / 2**20}


def run_epochs(source: Any, count: int, rounds: int, seed: int) -> list[dict[str, Any]]:
    """Every size's figures: ``count`` files at 2560x1600, more of the smaller size."""
    return [_size_epochs(source, height, width, count * multiple, rounds, seed)
            for height, width, multiple in SIZES]


def format_epochs(results: list[dict[str, Any]]) -> list[str]:
    """The part's lines of the index benchmark's table, one table per size."""
    return [line for result in results for line in _format_size(result)]


def _format_size(result: dict[str, Any]) -> list[str]:
    from bench import report

    rows = [[way, *(f"{ms:.2f}" for ms in epochs)]
            for way, epochs in result["epoch_ms_per_image"].items()]
    return [f"Threads lane (torchvision: DataLoader, {result['threads']} workers), "
            f"{result['files']} files of {result['size']}, batches of "
            f"{result['batch']}, {result['threads']} threads: ms per image, fastest of "
            f"{result['rounds']} rounds", "",
            report.markdown_table(["crop: indexes", "epoch 1", "epoch 2", "epoch 3"], rows,
                                  right=[False, True, True, True]), "",
            f"index: {result['index_bytes_per_image']:.0f} bytes per image, built in "
            f"{result['index_build_ms_median']:.2f} ms; --index-only "
            f"{result['index_only_ms_per_image']:.2f} ms per image; a cache of 100,000 such "
            f"files: {result['cache_mib_for_100k_files']:.0f} MiB", ""]
