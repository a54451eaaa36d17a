"""Training input pipelines for classification: the usual recipes against custom_op's, in images/s.

Run from the repository root:

    python -m bench classification                    # generated and real files
    python -m bench classification --images real --classification-rounds 5
    python -m bench.classification_bench --help        # the same, without the charts

The question: what does a user's DataLoader deliver with custom_op, against
the recipes people use today? The data: --classification-files 500x375 files
of each encoding, baseline and progressive (Pillow, quality 90, 4:2:0; the
two encodings are the two classes of one ImageFolder tree of symbolic links
into the image sets), and the same tree prepared with ``python -m
custom_op.prepare``. Every pipeline: DataLoader, 2 workers, batch 64, a
random sampler over --classification-length images per epoch,
RandomResizedCrop(224) + RandomHorizontalFlip, then a tail:

  float32  ToDtype(float32, scale=True) + Normalize(ImageNet mean, std) per
           image in the workers (Pillow: ToImage first), as most training
           scripts do
  uint8    nothing: the batch leaves the loader as uint8 and is normalised
           once per batch on the device after the transfer
           (custom_op.transforms.NormalizeBatch); that step is not timed here

Rows:
  Pillow            torchvision.datasets.ImageFolder, v2 transforms on PIL images
  torchvision       DatasetFolder loading decode_jpeg(read_file(path), mode=RGB), v2 transforms
                    (the float32 row is the usual recipe: the 1.00x reference)
  custom_op RRCJPEG custom_op.datasets.JpegFolder + custom_op.transforms.RandomResizedCropJPEG
                    + v2.RandomHorizontalFlip, on the original and the prepared tree
  EncodedJpeg       JpegFolder yielding custom_op.EncodedJpeg under torchvision's own
                    v2.RandomResizedCrop + v2.RandomHorizontalFlip (only the window is decoded)
  tar shards        the same files as WebDataset tar shards (8 shards, written by
                    synthetic.write_shards; prepared by the same command), read with a
                    webdataset pipeline (each worker drawing shards at random:
                    ResampledShards, with_epoch for its share of a pass) whose members are
                    read by custom_op.datasets.TarSamples and shuffled in a buffer of 32
                    (wds.shuffle), each an EncodedJpeg under the same transforms; the last
                    shard row reads them with webdataset's own wds.tarfile_to_samples
                    (Python's tarfile) instead. The shards are written from the files in a
                    shuffled order, as WebDataset advises
  decoder alone     custom_op.decode_and_crop_jpeg_batch(size=224, num_threads=2) over the
                    original files' bytes in memory, one process, the same number of images
                    and RandomResizedCrop windows: an upper bound for 2 cores

All pipelines of one kind of image are timed interleaved (bench/loaders.py:
one warm-up epoch each, then --classification-rounds rounds in rotating
order); a row's spread is the range of its rounds over their median, the
run-to-run noise. Ratios: against the usual recipe, and for uint8 rows
against the uint8 torchvision row.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import sys
import time
from typing import Any, Callable

import torch
import torchvision
from torch.utils.data import DataLoader, RandomSampler
from torchvision.io import read_file
from torchvision.transforms import v2

import custom_op
import synthetic
from bench import images, loaders, report, sampling
from custom_op.datasets import JpegFolder, TarSamples
from custom_op.transforms import RandomResizedCropJPEG

HEIGHT, WIDTH, SIZE = 375, 500, 224
WORKERS, BATCH = 2, 64
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
ENCODINGS = {"baseline": False, "progressive": True}

PIL_FLOAT = "Pillow ImageFolder, float32"
TV_FLOAT = "torchvision decode_jpeg, float32 (usual recipe)"
CUSTOM_FLOAT = "custom_op RandomResizedCropJPEG, float32"
CUSTOM_FLOAT_PREPARED = "custom_op RandomResizedCropJPEG, float32, prepared"
TV_UINT8 = "torchvision decode_jpeg, uint8"
CUSTOM_UINT8 = "custom_op RandomResizedCropJPEG, uint8"
CUSTOM_UINT8_PREPARED = "custom_op RandomResizedCropJPEG, uint8, prepared"
ENCODED_UINT8 = "custom_op.EncodedJpeg + v2.RandomResizedCrop, uint8"
ENCODED_UINT8_PREPARED = "custom_op.EncodedJpeg + v2.RandomResizedCrop, uint8, prepared"
SHARDS_UINT8 = "custom_op.EncodedJpeg + v2.RandomResizedCrop, uint8, tar shards"
SHARDS_UINT8_PREPARED = "custom_op.EncodedJpeg + v2.RandomResizedCrop, uint8, tar shards, prepared"
SHARDS_UINT8_PREPARED_TARFILE = ("custom_op.EncodedJpeg + v2.RandomResizedCrop, uint8, tar shards, prepared, "
                                 "wds.tarfile_to_samples")
DECODER = "decoder alone, 1 process x 2 threads (upper bound)"
UINT8_ROWS = (TV_UINT8, CUSTOM_UINT8, CUSTOM_UINT8_PREPARED, ENCODED_UINT8, ENCODED_UINT8_PREPARED,
              SHARDS_UINT8, SHARDS_UINT8_PREPARED, SHARDS_UINT8_PREPARED_TARFILE, DECODER)
#: The tree in this many tar shards: several per DataLoader worker.
SHARDS = 8
#: Samples each worker shuffles among (wds.shuffle), as a training pipeline over shards does.
#: Small, because the buffer reads ahead once per pass: a training epoch of a million images
#: amortises a buffer of 1000; a 512-image pass per worker here would read 1.5 times its images
#: with a buffer of 256 (the shards are written from shuffled files, so classes are mixed anyway).
SHUFFLE_BUFFER = 32


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("classification pipelines")
    group.add_argument("--classification-files", type=int, default=120,
                       help="500x375 files of each encoding, baseline and progressive (default 120)")
    group.add_argument("--classification-length", type=int, default=320,
                       help="images per epoch (default 320: 5 batches of 64)")
    group.add_argument("--classification-rounds", type=int, default=2,
                       help="timed epochs of every pipeline, interleaved (default 2)")


def _float_tail() -> list[torch.nn.Module]:
    return [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]


def _augment(crop: torch.nn.Module, tail: list[torch.nn.Module]) -> v2.Compose:
    return v2.Compose([crop, v2.RandomHorizontalFlip(), *tail])


def _torchvision_loader(path: str) -> torch.Tensor:
    """The usual recipe's loader: the file's bytes, decoded by torchvision in full."""
    return images.torchvision_decode(read_file(path))


def _link_tree(root: pathlib.Path, sets: dict[str, images.ImageSet]) -> pathlib.Path:
    """root/<encoding>/<index>.jpg, symbolic links to the sets' files (the tree to prepare and read)."""
    for encoding, image_set in sets.items():
        folder = root / encoding
        folder.mkdir(parents=True, exist_ok=True)
        for index, path in enumerate(image_set.paths):
            link = folder / f"{index:05d}.jpg"
            if not link.is_symlink() or pathlib.Path(os.readlink(link)) != path.resolve():
                link.unlink(missing_ok=True)
                link.symlink_to(path.resolve())
    return root


def _datasets(original: pathlib.Path, prepared: pathlib.Path) -> dict[str, Any]:
    """Every row's Dataset, each with its own transform objects."""
    crop = v2.RandomResizedCrop(SIZE)
    pillow_tail = [v2.ToImage(), *_float_tail()]
    datasets = {
        PIL_FLOAT: torchvision.datasets.ImageFolder(str(original), transform=_augment(crop, pillow_tail)),
        TV_FLOAT: torchvision.datasets.DatasetFolder(str(original), _torchvision_loader, extensions=(".jpg",),
                                                     transform=_augment(crop, _float_tail())),
    }
    for name, root, tail in ((CUSTOM_FLOAT, original, _float_tail()), (CUSTOM_FLOAT_PREPARED, prepared, _float_tail()),
                             (CUSTOM_UINT8, original, []), (CUSTOM_UINT8_PREPARED, prepared, [])):
        datasets[name] = JpegFolder(str(root), transform=_augment(RandomResizedCropJPEG(SIZE), tail))
    datasets[TV_UINT8] = torchvision.datasets.DatasetFolder(str(original), _torchvision_loader,
                                                            extensions=(".jpg",), transform=_augment(crop, []))
    for name, root in ((ENCODED_UINT8, original), (ENCODED_UINT8_PREPARED, prepared)):
        datasets[name] = JpegFolder(str(root), transform=_augment(crop, []))
    return datasets


def _decoder_runner(paths: list[pathlib.Path], length: int, seed: int) -> loaders.Runner:
    """``length`` RandomResizedCrop windows decoded by the batched call, 64 at a time, bytes in memory."""
    tensors = images.as_tensors(paths)
    generator = torch.Generator().manual_seed(seed)
    order = torch.randint(0, len(tensors), (length,), generator=generator).tolist()
    torch.manual_seed(seed)
    sampler = v2.RandomResizedCrop(SIZE)
    plan = [(tensors[index], sampling.random_resized_crop(sampler, tensors[index])) for index in order]
    batches = [plan[start:start + BATCH] for start in range(0, length, BATCH)]

    def run() -> tuple[int, int]:
        start = time.perf_counter_ns()
        for batch in batches:
            custom_op.decode_and_crop_jpeg_batch([data for data, _ in batch], [box for _, box in batch],
                                                 size=SIZE, num_threads=WORKERS)
        return length, time.perf_counter_ns() - start
    return run


def _shards(tree: pathlib.Path, seed: int) -> pathlib.Path:
    """The tree's files as tar shards (key.jpg + key.cls), in a shuffled order (each shard mixes
    both encodings, as a folder's random sampler does), written once beside it."""
    folder = tree.with_name(f"{tree.name}-shards-shuffled-{seed}")
    if not any(folder.glob("*.tar")):
        classes, samples = synthetic.folder_samples(tree, seed=seed)
        count = sum(1 for _ in tree.glob("*/*.jpg"))
        synthetic.write_shards(samples, folder, math.ceil(count / SHARDS))
    return folder


class _ShardSample:
    """A shard's sample -> (the transformed EncodedJpeg of its .jpg member, its class)."""

    def __init__(self, transform: v2.Compose) -> None:
        self.transform = transform

    def __call__(self, sample: dict) -> tuple[torch.Tensor, int]:
        return self.transform(custom_op.EncodedJpeg(sample["jpg"])), int(sample["cls"])


def _shard_loader(folder: pathlib.Path, reader: Callable, length: int, seed: int) -> DataLoader:
    """webdataset over the shards, batched in the workers, ``length`` images per pass.

    Each worker draws shards at random, with replacement (``ResampledShards``,
    webdataset's way of streaming without epochs), so that no batch is cut
    short at the end of a shard; ``with_epoch`` ends each worker's pass
    after its share of the batches, so that a pass ends as a folder's epoch
    does, with nothing prefetched to throw away.
    """
    import webdataset as wds
    from torch.utils.data import default_collate

    urls = [str(path) for path in sorted(folder.glob("*.tar"))]
    pipeline = wds.DataPipeline(
        wds.ResampledShards(urls, seed=seed), reader, wds.shuffle(SHUFFLE_BUFFER),
        wds.map(_ShardSample(_augment(v2.RandomResizedCrop(SIZE), []))),
        wds.batched(BATCH, collation_fn=default_collate, partial=False),
    ).with_epoch(length // BATCH // WORKERS)
    return DataLoader(pipeline, batch_size=None, num_workers=WORKERS, persistent_workers=True)


def _loader(dataset: Any, length: int) -> DataLoader:
    return DataLoader(dataset, batch_size=BATCH, sampler=RandomSampler(dataset, num_samples=length),
                      num_workers=WORKERS, persistent_workers=True)


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """Makes the trees, times every pipeline interleaved; rows with medians, spreads and ratios."""
    sets = {encoding: source.files(HEIGHT, WIDTH, args.classification_files, progressive=progressive)
            for encoding, progressive in ENCODINGS.items()}
    original = _link_tree(args.cache / f"classification-{source.recipe(HEIGHT, WIDTH, False)}"
                                       f"-{args.classification_files}", sets)
    prepared, prepare_seconds = images.prepared_copy(original, WORKERS)
    datasets = _datasets(original, prepared)
    torch.manual_seed(args.seed)
    runners: dict[str, Callable[[], tuple[int, int]]] = {
        name: loaders.epoch_runner(_loader(dataset, args.classification_length)) for name, dataset in datasets.items()}
    shards = _shards(original, args.seed)
    prepared_shards, _ = images.prepared_copy(shards, WORKERS)
    import webdataset as wds
    for name, folder, reader in ((SHARDS_UINT8, shards, TarSamples()),
                                 (SHARDS_UINT8_PREPARED, prepared_shards, TarSamples()),
                                 (SHARDS_UINT8_PREPARED_TARFILE, prepared_shards, wds.tarfile_to_samples())):
        runners[name] = loaders.epoch_runner(
            _shard_loader(folder, reader, args.classification_length, args.seed))
    runners[DECODER] = _decoder_runner([path for image_set in sets.values() for path in image_set.paths],
                                       args.classification_length, args.seed)
    timed = loaders.time_interleaved(runners, args.classification_rounds)
    del runners  # stops the persistent workers

    order = (PIL_FLOAT, TV_FLOAT, CUSTOM_FLOAT, CUSTOM_FLOAT_PREPARED, TV_UINT8, CUSTOM_UINT8,
             CUSTOM_UINT8_PREPARED, ENCODED_UINT8, ENCODED_UINT8_PREPARED, SHARDS_UINT8,
             SHARDS_UINT8_PREPARED, SHARDS_UINT8_PREPARED_TARFILE, DECODER)
    rows = [loaders.summarise(name, timed["per_round"][name], timed["warmup"][name])
            for name in order if name in timed["per_round"]]
    rate = {row["config"]: row["median_images_per_s"] for row in rows}
    for row in rows:
        row["vs_usual_recipe"] = row["median_images_per_s"] / rate[TV_FLOAT]
        row["vs_torchvision_uint8"] = (row["median_images_per_s"] / rate[TV_UINT8]
                                       if row["config"] in UINT8_ROWS else None)
    return {"config": {"images": source.kind, "height": HEIGHT, "width": WIDTH, "size": SIZE,
                       "workers": WORKERS, "batch_size": BATCH, "length": args.classification_length,
                       "rounds": args.classification_rounds, "round_orders": timed["orders"],
                       "files_per_encoding": args.classification_files, "tree": str(original),
                       "prepared_tree": str(prepared), "prepare_seconds": prepare_seconds,
                       "sets": {encoding: image_set.description for encoding, image_set in sets.items()}},
            "configs": rows, "targets": _targets(rows)}


def _targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The encoded type under torchvision's own transforms is no slower than RandomResizedCropJPEG,
    and tar shards no slower than the folder, within the noise: a row's median over its
    reference's, against 1 - the larger of the two spreads."""
    by_name = {row["config"]: row for row in rows}
    targets = []
    for encoded, reference in ((ENCODED_UINT8, CUSTOM_UINT8), (ENCODED_UINT8_PREPARED, CUSTOM_UINT8_PREPARED),
                               (SHARDS_UINT8, ENCODED_UINT8), (SHARDS_UINT8_PREPARED, ENCODED_UINT8_PREPARED)):
        if encoded in by_name:
            measured = by_name[encoded]["median_images_per_s"] / by_name[reference]["median_images_per_s"]
            noise = max(by_name[encoded]["spread"], by_name[reference]["spread"])
            targets.append({"target": f"{encoded} >= {reference} within the noise ({100 * noise:.0f}%)",
                            "required": 1 - noise, "measured": measured, "holds": measured >= 1 - noise})
    return targets


def format_table(result: dict[str, Any]) -> str:
    """The pipelines as a markdown table, the noise and the targets."""
    config = result["config"]
    sets = config["sets"]
    density = ", ".join(f"{encoding} {info['mean_encoded_bytes'] / 1024:.0f} KiB "
                        f"({info['mean_bits_per_pixel']:.2f} bits/pixel)" for encoding, info in sets.items())
    headers = ["pipeline", "images/s", "min", "max", "spread", "vs usual recipe", "vs tv uint8"]
    rows = [[*loaders.table_cells(row), report.format_ratio(row["vs_usual_recipe"]),
             report.format_ratio(row["vs_torchvision_uint8"])]
            for row in result["configs"]]
    spreads = sorted(row["spread"] for row in result["configs"])
    lines = [f"Classification pipelines on {config['images']} {config['width']}x{config['height']} files "
             f"({config['files_per_encoding']} baseline + {config['files_per_encoding']} progressive; {density}):",
             f"DataLoader, {config['workers']} workers, batch {config['batch_size']}, {config['length']} images "
             f"per epoch, RandomResizedCrop({config['size']}) + flip; median of {config['rounds']} interleaved "
             f"epochs after a warm-up; uint8 rows are normalised on the device (not timed)", "",
             report.markdown_table(headers, rows, right=[False] + [True] * 6), "",
             f"Run-to-run noise (spread of a row's rounds): median {100 * spreads[len(spreads) // 2]:.0f}%, "
             f"largest {100 * spreads[-1]:.0f}%. Preparing the tree took {config['prepare_seconds']:.1f} s "
             f"(python -m custom_op.prepare --workers {config['workers']}; a finished tree is skipped)."]
    if result["targets"]:
        lines += ["Targets:", *report.format_targets(result["targets"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
