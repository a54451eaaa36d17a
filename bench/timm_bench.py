"""timm's train transform in a DataLoader: ImageFolder against JpegFolder (ComposeJPEG), in images/s.

Run from the repository root:

    python -m bench timm                              # generated and real files, about 60 s
    python -m bench timm --images real --timm-rounds 5
    python -m bench timm --photos ~/photos --json timm.json   # your JPEGs as they are
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

With ``--photos DIR`` the real kind reads DIR's JPEGs as they are instead
(bench/photos.py ``trees_as_they_are``: sub-folders are classes; gray, CMYK,
progressive and restart-marker files alike), one table per size found, each
with every row above (the prepared row reads that tree prepared afresh);
--timm-files does not apply there. ``--json FILE`` also writes each row's
images/s as ``{"timm-<kind>": {size: {per_sample, torchvision,
per_sample_prepared, per_sample_uint8, torchvision_uint8}}}``, merged into
the file if it exists: ``per_sample`` is JpegFolder + the timm transform
(float32), ``torchvision`` torchvision's ImageFolder + the same transform, the
recipe timm users run (its loader decodes with Pillow: timm's transform takes
PIL images); the ``_uint8`` keys are the use_prefetcher=True rows.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

import torchvision
from torch.utils.data import DataLoader, RandomSampler

from bench import images, loaders, photos, report
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
#: --json FILE's key for each row.
JSON_KEYS = {JPEGFOLDER_FLOAT: "per_sample", IMAGEFOLDER_FLOAT: "torchvision",
             JPEGFOLDER_FLOAT_PREPARED: "per_sample_prepared", JPEGFOLDER_UINT8: "per_sample_uint8",
             IMAGEFOLDER_UINT8: "torchvision_uint8"}


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


def _time_tree(args: argparse.Namespace, tree: pathlib.Path) -> dict[str, Any]:
    """Every row over ``tree`` (and its prepared copy), timed interleaved; rows with ratios."""
    prepared, prepare_seconds = images.prepared_copy(tree, WORKERS)
    runners = {name: loaders.epoch_runner(_loader(dataset, args.timm_length))
               for name, dataset in _datasets(str(tree), str(prepared)).items()}
    timed = loaders.time_interleaved(runners, args.timm_rounds)
    del runners  # stops the persistent workers
    rows = [loaders.summarise(name, timed["per_round"][name], timed["warmup"][name]) for name in REFERENCES]
    rate = {row["config"]: row["median_images_per_s"] for row in rows}
    for row in rows:
        row["vs_imagefolder"] = row["median_images_per_s"] / rate[REFERENCES[row["config"]]]
    return {"tree": str(tree), "prepared_tree": str(prepared), "prepare_seconds": prepare_seconds,
            "round_orders": timed["orders"], "configs": rows}


def _target(rows: list[dict[str, Any]], prefix: str = "") -> dict[str, Any]:
    measured = next(row for row in rows if row["config"] == JPEGFOLDER_FLOAT)["vs_imagefolder"]
    return {"target": f"{prefix}{JPEGFOLDER_FLOAT} >= {TARGET}x {IMAGEFOLDER_FLOAT}", "required": TARGET,
            "measured": measured, "holds": measured >= TARGET}


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """Times the pipelines interleaved on the classification part's tree, or with --photos (real
    kind) on each size's tree of the folder as it is; --json merged."""
    import timm

    config = {"images": source.kind, "size": SIZE, "workers": WORKERS, "batch_size": BATCH,
              "length": args.timm_length, "rounds": args.timm_rounds, "timm": timm.__version__}
    if source.kind == "real" and getattr(args, "photos", None) is not None:
        sizes = {}
        for size, tree in photos.trees_as_they_are(args.photos, args.cache, "timm").items():
            files = sum(1 for path in tree.glob("*/*") if path.is_symlink())
            sizes[size] = {"files": files, **_time_tree(args, tree)}
        if getattr(args, "json", None) is not None:
            _merge_json(args.json, source.kind, sizes)
        return {"config": {**config, "photos": str(args.photos)}, "sizes": sizes,
                "targets": [_target(result["configs"], f"{size}: ") for size, result in sizes.items()]}
    sets = {encoding: source.files(HEIGHT, WIDTH, args.timm_files, progressive=progressive)
            for encoding, progressive in ENCODINGS.items()}
    tree = _link_tree(args.cache / f"classification-{source.recipe(HEIGHT, WIDTH, False)}-{args.timm_files}",
                      sets)
    timed = _time_tree(args, tree)
    if getattr(args, "json", None) is not None:
        _merge_json(args.json, source.kind, {f"{HEIGHT}x{WIDTH}": timed})
    return {"config": {**config, "height": HEIGHT, "width": WIDTH, "round_orders": timed["round_orders"],
                       "files_per_encoding": args.timm_files, "tree": timed["tree"],
                       "prepared_tree": timed["prepared_tree"], "prepare_seconds": timed["prepare_seconds"],
                       "sets": {encoding: image_set.description for encoding, image_set in sets.items()}},
            "configs": timed["configs"], "targets": [_target(timed["configs"])]}


def _merge_json(path: pathlib.Path, kind: str, sizes: dict[str, Any]) -> None:
    """Writes {"timm-<kind>": {size: {key: images/s}}} into ``path`` (merged with what it holds)."""
    existing = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    existing[f"timm-{kind}"] = {size: {JSON_KEYS[row["config"]]: round(row["median_images_per_s"], 1)
                                       for row in result["configs"]}
                                for size, result in sizes.items()}
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(existing, indent=2), encoding="utf-8")
    temporary.replace(path)


def _rows_table(rows: list[dict[str, Any]]) -> str:
    headers = ["pipeline", "images/s", "min", "max", "spread", "vs ImageFolder"]
    cells = [[*loaders.table_cells(row), report.format_ratio(row["vs_imagefolder"])] for row in rows]
    return report.markdown_table(headers, cells, right=[False] + [True] * 5)


def format_table(result: dict[str, Any]) -> str:
    """The pipelines as a markdown table (one per size with --photos), the noise and the target."""
    config = result["config"]
    loader = (f"DataLoader, {config['workers']} workers, batch {config['batch_size']}, {config['length']} "
              f"images per epoch; median of {config['rounds']} interleaved epochs after a warm-up")
    if "sizes" in result:
        lines = [f"timm {config['timm']} train transform on the JPEGs of {config['photos']} as they are "
                 f"({config['images']} kind):", loader]
        for size, sized in result["sizes"].items():
            lines += ["", f"{size} ({sized['files']} files):", _rows_table(sized["configs"])]
        return "\n".join([*lines, "", "Targets:", *report.format_targets(result["targets"])])
    lines = [f"timm {config['timm']} train transform on {config['images']} {config['width']}x{config['height']} "
             f"files ({config['files_per_encoding']} baseline + {config['files_per_encoding']} progressive):",
             loader, "", _rows_table(result["configs"]), "",
             "Targets:", *report.format_targets(result["targets"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
