"""The article's DataLoader experiment: input-pipeline throughput in images/second.

Run from the repository root:

    python -m bench pipeline                          # defaults: 2 workers, batch 32
    python -m bench pipeline --workers 2 --batch-size 64 --length 10000 --rounds 5
    python -m bench.pipeline_bench --help              # the same, without the chart

Three Datasets of ``--length`` file names, cycling over the same JPEG files,
each item a (float32 [3, crop, crop], random int target) pair:

  PIL            Image.open(path), then Compose([PILToTensor(), RandomCrop(crop),
                 RandomMask(), ConvertColor(), Scale()]): the article's baseline
  custom_op      the file's bytes as a uint8 tensor, a random window from
                 jpeg_size's height and width, decode_and_crop_jpeg, then
                 RandomMask, ConvertColor, Scale: the article's new __getitem__
  torchvision    the same bytes, torchvision.io.decode_jpeg, the same random
                 window by slicing, then the same three transforms

RandomMask, ConvertColor and Scale are our stand-ins (bench/seed_transforms.py).
Each Dataset gets its own torch.utils.data.DataLoader (shuffle, persistent
workers), timed as bench/loaders.py describes (a warm-up epoch, then
``--rounds`` interleaved epochs). No training step: this measures how fast
the input pipeline can feed one.
"""

from __future__ import annotations

import argparse
import pathlib
import random
import sys
from typing import Any, Callable

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms
from torchvision.io import ImageReadMode, decode_jpeg

import custom_op
from bench import images, loaders, report
from bench.seed_transforms import ConvertColor, RandomMask, Scale

PIL_CONFIG = "PIL (article baseline)"
CUSTOM_CONFIG = "custom_op decode_and_crop_jpeg"
TORCHVISION_CONFIG = "torchvision decode_jpeg + slice"
NUM_CLASSES = 1000


class _FakeDataset(Dataset):
    """``length`` file names cycling over ``paths``, with random int targets."""

    def __init__(self, paths: list[pathlib.Path], length: int, crop: int, seed: int) -> None:
        self.paths = [str(path) for path in paths]
        self.length = length
        self.crop = crop
        generator = torch.Generator().manual_seed(seed)
        self.targets = torch.randint(0, NUM_CLASSES, (length,), generator=generator)
        self.after_crop = transforms.Compose([RandomMask(), ConvertColor(), Scale()])

    def __len__(self) -> int:
        return self.length

    def path(self, index: int) -> str:
        return self.paths[index % len(self.paths)]


class PilDataset(_FakeDataset):
    """The article's baseline: decode the whole file with Pillow, then crop."""

    def __init__(self, paths: list[pathlib.Path], length: int, crop: int, seed: int) -> None:
        super().__init__(paths, length, crop, seed)
        self.transform = transforms.Compose([
            transforms.PILToTensor(), transforms.RandomCrop(crop), RandomMask(), ConvertColor(), Scale(),
        ])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = Image.open(self.path(index))
        return self.transform(image), self.targets[index]


class CustomOpDataset(_FakeDataset):
    """The article's new __getitem__: decode only the random window."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        data = images.read_encoded(self.path(index))
        height, width, _ = custom_op.jpeg_size(data)
        y = random.randint(0, height - self.crop)
        x = random.randint(0, width - self.crop)
        image = custom_op.decode_and_crop_jpeg(data, y, x, self.crop, self.crop)
        return self.after_crop(image), self.targets[index]


class TorchvisionDataset(_FakeDataset):
    """torchvision's decoder on the same bytes, then the same random window."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        data = images.read_encoded(self.path(index))
        image = decode_jpeg(data, mode=ImageReadMode.RGB)
        height, width = image.shape[-2:]
        y = random.randint(0, height - self.crop)
        x = random.randint(0, width - self.crop)
        image = image[:, y:y + self.crop, x:x + self.crop]
        return self.after_crop(image), self.targets[index]


CONFIGS: dict[str, Callable[..., _FakeDataset]] = {
    PIL_CONFIG: PilDataset,
    CUSTOM_CONFIG: CustomOpDataset,
    TORCHVISION_CONFIG: TorchvisionDataset,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("pipeline benchmark")
    group.add_argument("--workers", type=int, default=2, help="DataLoader num_workers (default 2)")
    group.add_argument("--batch-size", type=int, default=32, help="DataLoader batch_size (default 32)")
    group.add_argument("--length", type=int, default=512,
                       help="file names in each Dataset, i.e. images per epoch (default 512; the article: 10000)")
    group.add_argument("--rounds", type=int, default=2,
                       help="timed epochs of every configuration, interleaved (default 2)")


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """Times interleaved epochs of the three loaders; returns throughputs and ratios."""
    corpus = images.corpus(args, source)
    # RandomCrop and the datasets' randint draw from the global generators; seed
    # them so the main process (and, through it, the workers' seeds) repeats.
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    runners = {}
    for name, dataset_class in CONFIGS.items():
        dataset = dataset_class(corpus.paths, args.length, args.crop, args.seed)
        runners[name] = loaders.epoch_runner(DataLoader(
            dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
            persistent_workers=args.workers > 0))
    timed = loaders.time_interleaved(runners, args.rounds)
    del runners  # stops the persistent workers

    rows = [loaders.summarise(name, timed["per_round"][name], timed["warmup"][name]) for name in CONFIGS]
    baseline = rows[0]["median_images_per_s"]
    for row in rows:
        row["speedup_vs_pil"] = row["median_images_per_s"] / baseline
    return {
        "config": {"workers": args.workers, "batch_size": args.batch_size, "length": args.length,
                   "rounds": args.rounds, "crop": args.crop, "seed": args.seed, "round_orders": timed["orders"],
                   "transforms_after_crop": "RandomMask, ConvertColor, Scale (bench/seed_transforms.py stand-ins)",
                   "corpus": corpus.description},
        "configs": rows,
    }


def format_table(result: dict[str, Any]) -> str:
    """The pipeline results as an aligned markdown table."""
    headers = ["pipeline", "images/s (median)", "min", "max", "spread", "vs PIL"]
    rows = [[row["config"], f"{row['median_images_per_s']:.1f}", f"{row['min_images_per_s']:.1f}",
             f"{row['max_images_per_s']:.1f}", f"{100 * row['spread']:.0f}%",
             report.format_ratio(row["speedup_vs_pil"])]
            for row in result["configs"]]
    config = result["config"]
    title = (f"The article's DataLoader on {images.summary(config['corpus'])}:\n"
             f"{config['crop']}x{config['crop']} crops + 3 transforms, "
             f"num_workers={config['workers']}, batch_size={config['batch_size']}, "
             f"{config['length']} images per epoch, median of {config['rounds']} interleaved epochs "
             f"after one warm-up epoch")
    table = report.markdown_table(headers, rows, right=[False, True, True, True, True, True])
    return "\n".join([title, "", table])


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
