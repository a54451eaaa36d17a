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
  2 workers, store  lane_dataloader with 2 workers, not persistent (new processes every epoch),
                    each with an empty cache over one new node store (a temporary folder): a
                    sample builds on its first cropped decode, in whichever worker, and every
                    later lookup of it, in either worker, hits the store

The ways of the threads lane keep their indexes in the process (store=None). For the 2 workers
way, the share of each epoch's lookups answered without a build (the workers' hits over hits
and misses, from loader.index_stats()) is kept too; ``epoch2_hit_rate`` is epoch 2's, the
lower of the two crops' (target, issue 42: at least 0.95).

Also each file's index, built alone: its size and build time, and from them what the cache
of 100,000 such files holds (indexes plus the cache's per-entry estimate).
"""

from __future__ import annotations

import functools
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
from custom_op.lane import BatchLane, LaneBatchSampler, lane_dataloader, lane_threads
from custom_op.prepare.index_only import index_tree

from bench import images

#: (height, width, files per epoch as a multiple of --index-epoch-images).
SIZES = ((1600, 2560, 1), (375, 500, 4))
EPOCHS = 3
BATCH = 8
THREADS = 2
CROPS = {"RRC(224)": (0.08, 1.0), "RRC(224), scale 0.02-0.1": (0.02, 0.1)}
WORKERS_WAY = "2 workers, store"
WAYS = {"no index": dict(max_bytes=0), "cache, 1st touch": dict(build_on_touch=1, store=None),
        "cache, default": dict(store=None), "sidecars": dict(store=None),
        "prepared files": dict(max_bytes=0), "torchvision uint8": dict(max_bytes=0),
        WORKERS_WAY: dict(store=None)}  # the workers name their store (_use_store)


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


def _transform(scale: tuple[float, float]) -> v2.Transform:
    return v2.Compose([v2.RandomResizedCrop(224, scale=scale), v2.RandomHorizontalFlip()])


def _epoch_seconds(root: pathlib.Path, way: str, scale: tuple[float, float],
                   seed: int) -> list[float]:
    """Seconds of each of EPOCHS epochs of a new loader of ``way`` over ``root``."""
    loader = _loader(root, way, _transform(scale), seed)
    seconds = []
    for _ in range(EPOCHS):
        start = time.perf_counter()
        for _batch in loader:
            pass
        seconds.append(time.perf_counter() - start)
    return seconds


def _use_store(store: str, worker_id: int) -> None:
    """Each worker's cache over the store, whatever the start method (a forked worker would
    inherit the main process's setting; a spawned one would not)."""
    custom_op.configure_index_cache(store=store)


def _hit_rate(before: dict[str, int], after: dict[str, int]) -> float:
    hits = after["hits"] - before["hits"]
    return hits / max(1, hits + after["misses"] - before["misses"])


def _worker_epochs(root: pathlib.Path, scale: tuple[float, float],
                   seed: int) -> tuple[list[float], list[float]]:
    """Seconds and hit rate of each of EPOCHS epochs of lane_dataloader with THREADS workers
    (not persistent) over ``root``, with a new node store."""
    with tempfile.TemporaryDirectory(prefix="custom_op-index-store-") as store:
        lane = BatchLane(JpegFolder(root), _transform(scale), seed=seed)
        loader = lane_dataloader(lane, LaneBatchSampler(len(lane), BATCH, seed=seed),
                                 num_workers=THREADS,
                                 worker_init_fn=functools.partial(_use_store, store))
        seconds, rates = [], []
        for _ in range(EPOCHS):
            before = loader.index_stats()
            start = time.perf_counter()
            for _batch in loader:
                pass
            seconds.append(time.perf_counter() - start)
            rates.append(_hit_rate(before, loader.index_stats()))
    return seconds, rates


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
        hit_rates: dict[str, list[float]] = {}
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
                if way == WORKERS_WAY:
                    seconds, hit_rates[crop] = _worker_epochs(root, scale, seed)
                else:
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
            "cache_mib_for_100k_files": 100_000 * (index_bytes + ENTRY_OVERHEAD) / 2**20,
            "workers_hit_rate_per_epoch": hit_rates,
            "epoch2_hit_rate": min(rates[1] for rates in hit_rates.values())}


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
    return [f"Threads lane (torchvision and {WORKERS_WAY!r}: DataLoader, {result['threads']} "
            "workers), "
            f"{result['files']} files of {result['size']}, batches of "
            f"{result['batch']}, {result['threads']} threads: ms per image, fastest of "
            f"{result['rounds']} rounds", "",
            report.markdown_table(["crop: indexes", "epoch 1", "epoch 2", "epoch 3"], rows,
                                  right=[False, True, True, True]), "",
            f"index: {result['index_bytes_per_image']:.0f} bytes per image, built in "
            f"{result['index_build_ms_median']:.2f} ms; --index-only "
            f"{result['index_only_ms_per_image']:.2f} ms per image; a cache of 100,000 such "
            f"files: {result['cache_mib_for_100k_files']:.0f} MiB", "",
            f"{WORKERS_WAY}: hit rate per epoch " + "; ".join(
                f"{crop} " + " / ".join(f"{rate:.0%}" for rate in rates)
                for crop, rates in result["workers_hit_rate_per_epoch"].items()), ""]
