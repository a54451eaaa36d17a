"""A detection input pipeline: torchvision's v2 box-aware transforms on decoded images and on encoded JPEGs.

Run from the repository root:

    python -m bench detection                     # generated and real files
    python -m bench detection --images real --detection-rounds 5
    python -m bench.detection_bench --help         # the same, without the charts

The question: does a detection pipeline, whose crop depends on the boxes,
gain from decoding only the window, and do the boxes still follow? The
data: --detection-files 800x533 files (the operator part's set) with a
COCO-style annotation file written beside them (1 to 8 random boxes per
image, 80 categories, seeded), and the same files prepared with ``python -m
custom_op.prepare``. Every pipeline: DataLoader, 2 workers, batch 32, a
random sampler over --detection-length images per epoch, and the transforms
of an SSD-style recipe at torchvision's ssdlite320 input size:

    v2.Compose([v2.RandomIoUCrop(), v2.Resize((320, 320)), v2.SanitizeBoundingBoxes()])

applied to (image, {"boxes": BoundingBoxes XYXY, "labels", "image_id"}),
uint8 out, images stacked and targets kept as a list. Rows:

  torchvision CocoDetection  torchvision.datasets.wrap_dataset_for_transforms_v2(
                             CocoDetection(root, annFile, transforms=...)): the stock
                             recipe, images decoded in full by Pillow (+ v2.ToImage() at
                             the end, to deliver tensors)
  torchvision decode_jpeg    the same samples from a small Dataset of ours that decodes
                             each file in full with torchvision.io.decode_jpeg into a
                             tv_tensors.Image: the faster torchvision decoder, and the
                             1.00x reference
  custom_op                  wrap_dataset_for_transforms_v2(custom_op.datasets.CocoJpegDetection(
                             root, annFile, transforms=...)): the same samples with a
                             custom_op.EncodedJpeg in place of the image, so RandomIoUCrop
                             decodes only its window (original and prepared files)

torchvision's CocoDetection and CocoJpegDetection read the annotations with
pycocotools (``make bench`` installs it).

Timed as in the classification part (bench/loaders.py: warm-up, then
--detection-rounds interleaved epochs; spread = range of the rounds over
their median).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import pathlib
import sys
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler
from torchvision import tv_tensors
from torchvision.datasets import CocoDetection, wrap_dataset_for_transforms_v2
from torchvision.io import read_file
from torchvision.transforms import v2

import synthetic
from bench import images, loaders, report
from custom_op.datasets import CocoJpegDetection

HEIGHT, WIDTH, SIZE = 533, 800, 320
WORKERS, BATCH = 2, 32
CATEGORIES = 80
STOCK = "torchvision CocoDetection (Pillow), wrapped for v2"
TORCHVISION = "torchvision decode_jpeg, the same samples"
CUSTOM = "custom_op CocoJpegDetection (EncodedJpeg), wrapped for v2"
CUSTOM_PREPARED = "custom_op CocoJpegDetection, prepared files"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("detection pipeline")
    group.add_argument("--detection-files", type=int, default=60, help="800x533 files (default 60)")
    group.add_argument("--detection-length", type=int, default=128,
                       help="images per epoch (default 128: 4 batches of 32)")
    group.add_argument("--detection-rounds", type=int, default=2,
                       help="timed epochs of every pipeline, interleaved (default 2)")


def write_annotations(path: pathlib.Path, image_folder: pathlib.Path, files: list[pathlib.Path],
                      seed: int) -> pathlib.Path:
    """A COCO-style annotation file for ``files``: 1 to 8 random boxes each, 80 categories."""
    return synthetic.write_coco_annotations(
        path, image_folder, files, HEIGHT, WIDTH, boxes_per_image=(1, 8),
        categories=[f"category_{number}" for number in range(1, CATEGORIES + 1)], seed=seed)


class DecodedCoco(Dataset):
    """The torchvision side: each file decoded in full by decode_jpeg, boxes as tv_tensors."""

    def __init__(self, image_folder: pathlib.Path, annotation_file: pathlib.Path, transforms: Any) -> None:
        coco = json.loads(annotation_file.read_text(encoding="utf-8"))
        boxes: dict[int, list] = {image["id"]: [] for image in coco["images"]}
        for annotation in coco["annotations"]:
            boxes[annotation["image_id"]].append(annotation)
        # Boxes and labels as tensors once, so that an item costs its decode and transforms only.
        self.items = [(str(image_folder / image["file_name"]), image["id"], (image["height"], image["width"]),
                       _xyxy(boxes[image["id"]]), torch.tensor([a["category_id"] for a in boxes[image["id"]]]))
                      for image in coco["images"]]
        self.transforms = transforms

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[Any, dict[str, Any]]:
        path, image_id, canvas_size, boxes, labels = self.items[index]
        image = tv_tensors.Image(images.torchvision_decode(read_file(path)))
        target = {"boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=canvas_size),
                  "labels": labels, "image_id": image_id}
        return self.transforms(image, target)


def _xyxy(annotations: list[dict[str, Any]]) -> torch.Tensor:
    """COCO's [x, y, width, height] boxes as an [N, 4] float tensor of [x1, y1, x2, y2]."""
    boxes = torch.tensor([annotation["bbox"] for annotation in annotations], dtype=torch.float32).reshape(-1, 4)
    boxes[:, 2:] += boxes[:, :2]
    return boxes


def _collate(batch: list[tuple[Any, dict[str, Any]]]) -> tuple[torch.Tensor, list[dict[str, Any]]]:
    """Images of one size stacked (as tensors), targets kept as a list, as detection models take them."""
    return torch.stack([image.as_subclass(torch.Tensor) for image, _ in batch]), [target for _, target in batch]


def _transforms(*, from_pil: bool = False) -> v2.Compose:
    """The recipe; Pillow images also need ToImage at the end to become tensors in the workers."""
    tail = [v2.ToImage()] if from_pil else []
    return v2.Compose([v2.RandomIoUCrop(), v2.Resize((SIZE, SIZE)), v2.SanitizeBoundingBoxes(), *tail])


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """Writes the annotations, times the pipelines interleaved; rows with medians, spreads and ratios."""
    files = source.files(HEIGHT, WIDTH, args.detection_files)
    folder = pathlib.Path(files.description["folder"])
    annotations = write_annotations(args.cache / f"detection-{files.description['recipe']}-"
                                                 f"{args.detection_files}.json", folder, files.paths, args.seed)
    prepared, _ = images.prepared_copy(folder, WORKERS)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints as it indexes the file
        datasets: dict[str, Dataset] = {
            STOCK: wrap_dataset_for_transforms_v2(CocoDetection(str(folder), str(annotations),
                                                                transforms=_transforms(from_pil=True))),
            TORCHVISION: DecodedCoco(folder, annotations, _transforms()),
            CUSTOM: wrap_dataset_for_transforms_v2(CocoJpegDetection(str(folder), str(annotations),
                                                                     transforms=_transforms())),
            CUSTOM_PREPARED: wrap_dataset_for_transforms_v2(CocoJpegDetection(str(prepared), str(annotations),
                                                                              transforms=_transforms())),
        }
    torch.manual_seed(args.seed)
    runners = {name: loaders.epoch_runner(DataLoader(
        dataset, batch_size=BATCH, sampler=RandomSampler(dataset, num_samples=args.detection_length),
        num_workers=WORKERS, persistent_workers=True, collate_fn=_collate)) for name, dataset in datasets.items()}
    timed = loaders.time_interleaved(runners, args.detection_rounds)
    del runners  # stops the persistent workers

    rows = [loaders.summarise(name, timed["per_round"][name], timed["warmup"][name]) for name in datasets]
    reference = timed["per_round"][TORCHVISION]
    for row in rows:
        row["vs_torchvision"] = row["median_images_per_s"] / float(np.median(reference))
    return {"config": {"images": source.kind, "height": HEIGHT, "width": WIDTH, "size": SIZE,
                       "workers": WORKERS, "batch_size": BATCH, "length": args.detection_length,
                       "rounds": args.detection_rounds, "round_orders": timed["orders"],
                       "annotations": str(annotations), "set": files.description},
            "configs": rows}


def format_table(result: dict[str, Any]) -> str:
    config = result["config"]
    info = config["set"]
    headers = ["pipeline", "images/s", "min", "max", "spread", "vs decode_jpeg"]
    rows = [[*loaders.table_cells(row), report.format_ratio(row["vs_torchvision"])]
            for row in result["configs"]]
    lines = [f"Detection pipeline on {info['num_files']} {config['images']} {config['width']}x{config['height']} files "
             f"({info['mean_encoded_bytes'] / 1024:.0f} KiB, {info['mean_bits_per_pixel']:.2f} bits/pixel) with "
             f"COCO-style boxes:",
             f"DataLoader, {config['workers']} workers, batch {config['batch_size']}, {config['length']} images per "
             f"epoch, RandomIoUCrop + Resize({config['size']}, {config['size']}) + SanitizeBoundingBoxes, uint8 out; "
             f"median of {config['rounds']} interleaved epochs after a warm-up", "",
             report.markdown_table(headers, rows, right=[False] + [True] * 5)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
