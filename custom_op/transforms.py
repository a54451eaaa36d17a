"""Transforms that take encoded JPEG bytes and return a decoded crop.

They are ``torch.nn.Module`` s, like torchvision's v2 transforms, so that
torchvision transforms on decoded uint8 CHW tensors can follow them in a
``Compose``::

    transform = torchvision.transforms.v2.Compose([
        custom_op.transforms.RandomCropJPEG(256),
        torchvision.transforms.v2.RandomHorizontalFlip(),
    ])
    image = transform(torchvision.io.read_file("cat.jpg"))  # uint8 [3, 256, 256]

The window is drawn with torch's global generator, as torchvision's
RandomCrop draws it, so DataLoader workers get distinct, reproducible
windows from torch.manual_seed.
"""

from __future__ import annotations

from typing import Sequence, Union

import torch

from ._decode import EncodedJpeg, decode_and_crop_jpeg, jpeg_size

Size = Union[int, Sequence[int]]


def _as_size(size: Size) -> tuple[int, int]:
    if isinstance(size, int) and not isinstance(size, bool):
        pair = (size, size)
    elif isinstance(size, Sequence) and len(size) in (1, 2):
        pair = (int(size[0]), int(size[-1]))
    else:
        raise TypeError(f"size must be an int or a (height, width) pair, got {size!r}")
    if min(pair) < 1:
        raise ValueError(f"size must be positive, got {size!r}")
    return pair


def _check_fits(height: int, width: int, crop: tuple[int, int], name: str) -> None:
    if crop[0] > height or crop[1] > width:
        raise ValueError(f"{name}: crop size {crop[0]} x {crop[1]} (height x width) is larger than "
                         f"the {height} x {width} image")


def _draw_offset(slack: int) -> int:
    """A uniform offset in [0, slack], drawing from torch's generator only when slack > 0."""
    if slack == 0:
        return 0
    return int(torch.randint(0, slack + 1, size=()))


class RandomCropJPEG(torch.nn.Module):
    """Decodes a random ``size`` window of a JPEG, and only that window.

    Equivalent to torchvision.transforms.v2.RandomCrop(size) after a full
    decode (the same window for the same generator state, and the same draws
    from it), without decoding the pixels thrown away.

    Args:
        size: ``int`` for a square crop or ``(height, width)``.
        mode: ``"rgb"``, ``"gray"`` or ``"unchanged"``, see
            :func:`custom_op.decode_and_crop_jpeg`.
        strict: see :func:`custom_op.decode_and_crop_jpeg`.

    Raises (when called):
        ValueError: the image is smaller than ``size``.
        JpegDecodeError: the bytes cannot be decoded.
    """

    def __init__(self, size: Size, *, mode: str = "rgb", strict: bool = True) -> None:
        super().__init__()
        self.size = _as_size(size)
        self.mode = mode
        self.strict = strict

    def get_params(self, data: EncodedJpeg) -> tuple[int, int, int, int]:
        """Draws ``(top, left, height, width)`` for this image.

        As torchvision.transforms.v2.RandomCrop does: top, then left, each
        drawn only when the image is larger than the crop on that side. (v1's
        RandomCrop.get_params also draws for a side that fits exactly, so it
        picks a different window when exactly one side fits.)
        """
        height, width, _ = jpeg_size(data)
        _check_fits(height, width, self.size, type(self).__name__)
        return (_draw_offset(height - self.size[0]), _draw_offset(width - self.size[1]),
                self.size[0], self.size[1])

    def forward(self, data: EncodedJpeg) -> torch.Tensor:
        top, left, height, width = self.get_params(data)
        return decode_and_crop_jpeg(data, top, left, height, width, mode=self.mode, strict=self.strict)

    def extra_repr(self) -> str:
        return f"size={self.size}, mode={self.mode!r}, strict={self.strict}"


class CenterCropJPEG(torch.nn.Module):
    """Decodes the central ``size`` window of a JPEG, placed as torchvision's CenterCrop places it.

    Args and raises as :class:`RandomCropJPEG`.
    """

    def __init__(self, size: Size, *, mode: str = "rgb", strict: bool = True) -> None:
        super().__init__()
        self.size = _as_size(size)
        self.mode = mode
        self.strict = strict

    def forward(self, data: EncodedJpeg) -> torch.Tensor:
        height, width, _ = jpeg_size(data)
        _check_fits(height, width, self.size, type(self).__name__)
        top = int(round((height - self.size[0]) / 2.0))
        left = int(round((width - self.size[1]) / 2.0))
        return decode_and_crop_jpeg(data, top, left, self.size[0], self.size[1], mode=self.mode,
                                    strict=self.strict)

    def extra_repr(self) -> str:
        return f"size={self.size}, mode={self.mode!r}, strict={self.strict}"
