"""timm's train transform in a DataLoader: ImageFolder against JpegFolder (ComposeJPEG), in images/s.

Run from the repository root:

    python -m bench timm                              # generated and real files, about 60 s
    python -m bench timm --images real --timm-rounds 5
    python -m bench.timm_bench --help                 # the same, without the charts

The question: how much faster does a timm training pipeline read JPEGs when
the same ``timm.data.create_transform(224, is_training=True)`` object is
handed to custom_op.JpegFolder instead of torchvision's ImageFolder? The
data and the loader are the classification part's (bench/classification_bench.py):
500x375 files, baseline and progressive (the two classes of one ImageFolder
tree), DataLoader with 2 workers, batch 64, a random sampler over
--timm-length images per epoch. Rows:

  float32  timm's default train transform: RandomResizedCropAndInterpolation(224),
           RandomHorizontalFlip, ColorJitter(0.4) on PIL images,
           MaybeToTensor, Normalize, in the workers
  uint8    the same with use_prefetcher=True (timm's own recipe for
           normalising on the device): ends with MaybePILToTensor, so the batch
           leaves the loader as uint8 (normalised on the device, not timed)

ImageFolder decodes every file in full with Pillow; JpegFolder wraps the
transform in custom_op.transforms.ComposeJPEG, whose first transform decodes
only the window it keeps (same draws), resized by ATen; the rest is timm's, on
PIL images. One more float32 row reads the tree prepared with restart
markers (python -m custom_op.prepare, shared with the classification part),
where a window's decode also skips the entropy decoding of the rows above it.
Timed interleaved (bench/loaders.py); ratios against the ImageFolder row of
the same tail.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torchvision
from torch.utils.data import DataLoader, RandomSampler

from bench import images, loaders, report
from bench.classification_bench import BATCH, ENCODINGS, HEIGHT, WIDTH, WORKERS, _link_tree
from custom_op.datasets import JpegFolder

SIZE = 224
IMAGEFOLDER_FLOAT = "ImageFolder + timm train transform, float32"
JPEGFOLDER_FLOAT = "JpegFolder + the same transform (ComposeJPEG), float32"
JPEGFOLDER_FLOAT_PREPARED = "JpegFolder + the same transform (ComposeJPEG), float32, prepared files"
IMAGEFOLDER_UINT8 = "ImageFolder + timm train transform, use_prefetcher=True, uint8"
JPEGFOLDER_UINT8 = "JpegFolder + the same transform (ComposeJPEG), uint8"
#: Each row's reference.
REFERENCES = {IMAGEFOLDER_FLOAT: IMAGEFOLDER_FLOAT, JPEGFOLDER_FLOAT: IMAGEFOLDER_FLOAT,
              JPEGFOLDER_FLOAT_PREPARED: IMAGEFOLDER_FLOAT,
              IMAGEFOLDER_UINT8: IMAGEFOLDER_UINT8, JPEGFOLDER_UINT8: IMAGEFOLDER_UINT8}
#: The issue's target for the float32 pipeline.
TARGET = 1.3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("timm pipelines")
    group.add_argument("--timm-files", type=int, default=120,
                       help="500x375 files of each encoding (default 120: the classification part's files)")
    group.add_argument("--timm-length", type=int, default=256,
                       help="images per epoch (default 256: 4 batches of 64)")
    group.add_argument("--timm-rounds", type=int, default=2,
                       help="timed epochs of every pipeline, interleaved (default 2)")


def _datasets(tree: str, prepared: str) -> dict[str, Any]:
    """Every row's Dataset, each with its own timm transform object."""
    from timm.data import create_transform

    def train(use_prefetcher: bool):
        return create_transform(SIZE, is_training=True, use_prefetcher=use_prefetcher)

    return {
        IMAGEFOLDER_FLOAT: torchvision.datasets.ImageFolder(tree, transform=train(False)),
        JPEGFOLDER_FLOAT: JpegFolder(tree, transform=train(False)),
        JPEGFOLDER_FLOAT_PREPARED: JpegFolder(prepared, transform=train(False)),
        IMAGEFOLDER_UINT8: torchvision.datasets.ImageFolder(tree, transform=train(True)),
        JPEGFOLDER_UINT8: JpegFolder(tree, transform=train(True)),
    }


def _loader(dataset: Any, length: int) -> DataLoader:
    return DataLoader(dataset, batch_size=BATCH, sampler=RandomSampler(dataset, num_samples=length),
                      num_workers=WORKERS, persistent_workers=True)


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """Times the four pipelines interleaved on the classification part's tree."""
    import timm

    sets = {encoding: source.files(HEIGHT, WIDTH, args.timm_files, progressive=progressive)
            for encoding, progressive in ENCODINGS.items()}
    tree = _link_tree(args.cache / f"classification-{source.recipe(HEIGHT, WIDTH, False)}-{args.timm_files}",
                      sets)
    prepared, prepare_seconds = images.prepared_copy(tree, WORKERS)
    runners = {name: loaders.epoch_runner(_loader(dataset, args.timm_length))
               for name, dataset in _datasets(str(tree), str(prepared)).items()}
    timed = loaders.time_interleaved(runners, args.timm_rounds)
    del runners  # stops the persistent workers
    rows = [loaders.summarise(name, timed["per_round"][name], timed["warmup"][name]) for name in REFERENCES]
    rate = {row["config"]: row["median_images_per_s"] for row in rows}
    for row in rows:
        row["vs_imagefolder"] = row["median_images_per_s"] / rate[REFERENCES[row["config"]]]
    by_name = {row["config"]: row for row in rows}
    targets = [{"target": f"{JPEGFOLDER_FLOAT} >= {TARGET}x {IMAGEFOLDER_FLOAT}", "required": TARGET,
                "measured": by_name[JPEGFOLDER_FLOAT]["vs_imagefolder"],
                "holds": by_name[JPEGFOLDER_FLOAT]["vs_imagefolder"] >= TARGET}]
    return {"config": {"images": source.kind, "height": HEIGHT, "width": WIDTH, "size": SIZE,
                       "workers": WORKERS, "batch_size": BATCH, "length": args.timm_length,
                       "rounds": args.timm_rounds, "round_orders": timed["orders"],
                       "files_per_encoding": args.timm_files, "tree": str(tree), "prepared_tree": str(prepared),
                       "prepare_seconds": prepare_seconds, "timm": timm.__version__,
                       "sets": {encoding: image_set.description for encoding, image_set in sets.items()}},
            "configs": rows, "targets": targets}


def format_table(result: dict[str, Any]) -> str:
    """The pipelines as a markdown table, the noise and the target."""
    config = result["config"]
    headers = ["pipeline", "images/s", "min", "max", "spread", "vs ImageFolder"]
    rows = [[*loaders.table_cells(row), report.format_ratio(row["vs_imagefolder"])]
            for row in result["configs"]]
    lines = [f"timm {config['timm']} train transform on {config['images']} {config['width']}x{config['height']} "
             f"files ({config['files_per_encoding']} baseline + {config['files_per_encoding']} progressive):",
             f"DataLoader, {config['workers']} workers, batch {config['batch_size']}, {config['length']} images "
             f"per epoch; median of {config['rounds']} interleaved epochs after a warm-up", "",
             report.markdown_table(headers, rows, right=[False] + [True] * 5), "",
             "Targets:", *report.format_targets(result["targets"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
