"""The worst pixel difference of each mode from torchvision's pixels, on real and generated photos.

Run from the repository:  python bench/worst_error.py [--seeds 20]

For every photo in /usr/share/backgrounds (and two generated ones) it compares,
as uint8 images against torchvision's own pipeline on the decoded image:
- RandomResizedCrop(224) on an EncodedJpeg, default (DCT scaling) and exact=True;
- the evaluation recipe Resize(256) + CenterCrop(224), exact=False and the default;
- timm's train transform through ComposeJPEG (use_prefetcher: uint8), default and exact,
  against timm on Pillow's image.
It prints the largest absolute difference (levels) and the lowest PSNR for each; these are
the figures docs/torchvision.md and docs/timm.md state.
"""

from __future__ import annotations

import argparse
import glob
import io
import math
import random
import sys
import warnings

import numpy as np
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

sys.path.insert(0, "tests")
import custom_op  # noqa: E402
from custom_op import EncodedJpeg  # noqa: E402
from custom_op.transforms import CenterCropJPEG, ComposeJPEG, ResizeJPEG  # noqa: E402


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = (a.double() - b.double()).pow(2).mean().item()
    return math.inf if mse == 0 else 10 * math.log10(255 ** 2 / mse)


def photos() -> dict[str, bytes]:
    from synthetic import make_photo

    found = {path.rsplit("/", 1)[1][:24]: open(path, "rb").read()
             for path in sorted(glob.glob("/usr/share/backgrounds/*.jpg"))}
    for height, width in ((533, 800), (1600, 2560)):
        buffer = io.BytesIO()
        Image.fromarray(make_photo(height, width, seed=4)).save(buffer, format="JPEG", quality=90)
        found[f"generated-{width}x{height}"] = buffer.getvalue()
    return found


def compare(worst: dict, name: str, ours: torch.Tensor, theirs: torch.Tensor) -> None:
    levels = (ours.int() - theirs.int()).abs().max().item()
    level, low = worst.get(name, (0, math.inf))
    worst[name] = (max(level, levels), min(low, psnr(ours, theirs)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    seeds = range(parser.parse_args().seeds)
    import timm.data

    timm_train = timm.data.create_transform(224, is_training=True, use_prefetcher=True)
    worst: dict[str, tuple[int, float]] = {}
    for label, data in photos().items():
        full = tv_tensors.Image(custom_op.decode_and_crop_jpeg(data, 0, 0,
                                                               *custom_op.jpeg_size(data)[:2]))
        for seed in seeds:
            for exact in (False, True):
                torch.manual_seed(seed)
                theirs = v2.RandomResizedCrop(224)(full)
                torch.manual_seed(seed)
                ours = v2.RandomResizedCrop(224)(EncodedJpeg(data, exact=exact))
                compare(worst, f"v2 RandomResizedCrop(224), exact={exact}", ours, theirs)
                random.seed(seed)
                torch.manual_seed(seed)
                pil = timm_train(Image.open(io.BytesIO(data)).convert("RGB"))
                random.seed(seed)
                torch.manual_seed(seed)
                ours = ComposeJPEG(timm_train, exact=exact)(data)
                compare(worst, f"timm train (ComposeJPEG), exact={exact}", ours, pil)
        reference = v2.CenterCrop(224)(v2.Resize(256)(full))
        for exact in (False, True):
            ours = CenterCropJPEG(224)(ResizeJPEG(256, exact=exact)(EncodedJpeg(data)))
            compare(worst, f"Resize(256) + CenterCrop(224), exact={exact}", ours, reference)
        print(label, file=sys.stderr)
    print(f"{'mode':52} {'max |diff|':>10} {'min PSNR dB':>12}")
    for name, (levels, low) in sorted(worst.items()):
        print(f"{name:52} {levels:10d} {low:12.1f}")


if __name__ == "__main__":
    warnings.simplefilter("ignore", DeprecationWarning)
    main()
