"""Stand-ins for the article's RandomMask, ConvertColor and Scale transforms.

The article (see /work/shared/SEED.md) applies three CPU transforms defined in
the previous article of its series and does not reprint them. These are our
own versions with a comparable amount of per-pixel work on a 256x256 crop:
a masked rectangle, a 3x3 colour matrix, and a conversion to normalised
float32. They exist only so that the DataLoader benchmark does realistic work
after decoding; they are not part of custom_op and make no claim to match the
originals. Run the benchmark that uses them with ``python -m bench pipeline``.

Each takes and returns a CHW tensor and draws its randomness from torch's
global generator, which DataLoader seeds differently in every worker.
"""

from __future__ import annotations

import torch

# JFIF (full-range BT.601) RGB -> YCbCr, the conversion JPEG itself uses.
_RGB_TO_YCBCR = torch.tensor([
    [0.299, 0.587, 0.114],
    [-0.168736, -0.331264, 0.5],
    [0.5, -0.418688, -0.081312],
], dtype=torch.float32)
_YCBCR_OFFSET = torch.tensor([0.0, 128.0, 128.0], dtype=torch.float32).view(3, 1, 1)

# Rough mean and spread of each YCbCr channel of natural photos, scaled to [0, 1].
_SCALE_MEAN = torch.tensor([0.45, 0.5, 0.5], dtype=torch.float32).view(3, 1, 1)
_SCALE_STD = torch.tensor([0.25, 0.1, 0.1], dtype=torch.float32).view(3, 1, 1)


class RandomMask(torch.nn.Module):
    """Stand-in for the article's RandomMask: zeroes one random rectangle.

    Each side of the rectangle is drawn uniformly between ``min_fraction``
    and ``max_fraction`` of the image's side, its position uniformly inside
    the image. Returns a new contiguous tensor; the input is not modified
    (it may be a view into a larger decoded image).
    """

    def __init__(self, min_fraction: float = 0.1, max_fraction: float = 0.5) -> None:
        super().__init__()
        self.min_fraction = min_fraction
        self.max_fraction = max_fraction

    def _side(self, length: int) -> int:
        low = max(1, int(length * self.min_fraction))
        high = max(low, int(length * self.max_fraction))
        return int(torch.randint(low, high + 1, ()))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        height, width = image.shape[-2:]
        mask_height, mask_width = self._side(height), self._side(width)
        top = int(torch.randint(0, height - mask_height + 1, ()))
        left = int(torch.randint(0, width - mask_width + 1, ()))
        masked = image.clone(memory_format=torch.contiguous_format)
        masked[..., top:top + mask_height, left:left + mask_width] = 0
        return masked


class ConvertColor(torch.nn.Module):
    """Stand-in for the article's ConvertColor: RGB to YCbCr (JFIF, full range).

    Takes a uint8 RGB CHW tensor, applies the 3x3 matrix in float32, rounds
    and clamps, and returns a uint8 YCbCr CHW tensor, so the next transform
    still sees 8-bit image data.
    """

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        channels, height, width = image.shape
        flat = image.reshape(channels, height * width).to(torch.float32)
        converted = torch.mm(_RGB_TO_YCBCR, flat).view(channels, height, width)
        converted += _YCBCR_OFFSET
        return converted.round_().clamp_(0, 255).to(torch.uint8)


class Scale(torch.nn.Module):
    """Stand-in for the article's Scale: uint8 to float32 in [0, 1], then normalised.

    Returns ``(image / 255 - mean) / std`` per channel, with fixed rough
    YCbCr statistics, as a float32 CHW tensor.
    """

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        scaled = image.to(torch.float32).div_(255.0)
        return scaled.sub_(_SCALE_MEAN).div_(_SCALE_STD)
