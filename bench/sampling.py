"""RandomResizedCrop windows for the parts that time single calls, drawn by torchvision's own code.

The windows every method of a part decodes are drawn once, before timing,
exactly as ``torchvision.transforms.v2.RandomResizedCrop`` draws them for an
image of the file's size (its ``make_params``, with the size read from the
JPEG header through ``custom_op.EncodedJpeg``), so the benchmark times the
windows a training pipeline would ask for.
"""

from __future__ import annotations

import torch
from torchvision.transforms import v2

import custom_op


def random_resized_crop(transform: v2.RandomResizedCrop, data: torch.Tensor) -> tuple[int, int, int, int]:
    """One ``(top, left, height, width)`` window for the JPEG ``data``, from torch's global generator."""
    params = transform.make_params([custom_op.EncodedJpeg(data)])
    return int(params["top"]), int(params["left"]), int(params["height"]), int(params["width"])
