"""Transforms that take encoded JPEG bytes and return a decoded crop.

They are ``torch.nn.Module`` s, like torchvision's v2 transforms, so that
torchvision transforms on decoded uint8 CHW tensors can follow them in a
``Compose``::

    transform = torchvision.transforms.v2.Compose([
        custom_op.transforms.RandomResizedCropJPEG(224),
        torchvision.transforms.v2.RandomHorizontalFlip(),
    ])
    image = transform(torchvision.io.read_file("cat.jpg"))  # uint8 [3, 224, 224]

Every transform takes either of two inputs:

- encoded bytes (a 1-D uint8 tensor, bytes, bytearray, memoryview or 1-D
  uint8 numpy array): the size comes from the JPEG header and only the window
  is decoded;
- an already decoded uint8 ``[C, H, W]`` tensor (e.g. a PNG that
  :class:`custom_op.datasets.JpegFolder` decoded in full): the same window is
  cut from it with ``torchvision.transforms.v2.functional``, which must then be
  installed.

The window is drawn with torch's global generator, as torchvision draws it, so
DataLoader workers get distinct, reproducible windows from torch.manual_seed,
and the same seed picks the same window for both kinds of input.
"""

from __future__ import annotations

import math
import warnings
from typing import Sequence, Union

import torch

from ._decode import (MODES, EncodedJpeg, _normalize_mode, decode_and_crop_jpeg,
                      decode_and_resized_crop_jpeg, jpeg_size)

Size = Union[int, Sequence[int]]
#: What the transforms take: encoded JPEG bytes, or a decoded uint8 [C, H, W] tensor.
JpegOrImage = Union[EncodedJpeg, torch.Tensor]


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


def _decoded(data: JpegOrImage, name: str) -> torch.Tensor | None:
    """The decoded image if ``data`` is a 3-D tensor, None if it holds encoded bytes.

    Anything that is not a tensor is left to the decoder, which accepts bytes,
    bytearray, memoryview and numpy arrays and names what it got otherwise.
    """
    if not isinstance(data, torch.Tensor):
        return None
    if data.dim() == 1:
        if data.dtype != torch.uint8:
            raise TypeError(f"{name}: a 1-D tensor must hold encoded JPEG bytes as uint8, "
                            f"got dtype {data.dtype}")
        return None
    if data.dim() == 3:
        if data.dtype != torch.uint8:
            raise TypeError(f"{name}: a decoded [C, H, W] image must be uint8, "
                            f"got dtype {data.dtype}")
        return data
    raise ValueError(f"{name}: expected a 1-D uint8 tensor of encoded JPEG bytes or a decoded "
                     f"uint8 [C, H, W] image, got a {data.dim()}-D tensor of shape "
                     f"{tuple(data.shape)}")


def _image_size(data: JpegOrImage, name: str) -> tuple[int, int]:
    """``(height, width)`` of either kind of input; reads only the header of encoded bytes."""
    image = _decoded(data, name)
    if image is None:
        height, width, _ = jpeg_size(data)
        return height, width
    return image.shape[-2], image.shape[-1]


def _functional():
    """torchvision.transforms.v2.functional, imported on first use of a decoded input."""
    try:
        from torchvision.transforms.v2 import functional
    except ImportError as error:
        raise ImportError("custom_op.transforms: decoded [C, H, W] tensors are cropped with "
                          "torchvision.transforms.v2.functional, and torchvision is not "
                          "installed; install it or pass encoded JPEG bytes") from error
    return functional


def _to_mode(image: torch.Tensor, mode: str, name: str) -> torch.Tensor:
    """Gives a decoded window the channels ``mode`` promises, as the decoder would.

    "rgb" repeats a single gray channel three times; "gray" applies
    torchvision's rgb_to_grayscale (0.2989 R + 0.587 G + 0.114 B, truncated)
    to three channels; "unchanged" keeps the channels. Run on the window, not
    the whole image, since the window is usually smaller.
    """
    code = _normalize_mode(name, mode)
    channels = image.shape[0]
    if code == MODES["unchanged"]:
        return image
    if channels not in (1, 3):
        raise ValueError(f"{name}: mode={mode!r} needs a decoded image with 1 or 3 channels, "
                         f"got {channels} channels (shape {tuple(image.shape)})")
    if code == MODES["rgb"]:
        return image if channels == 3 else image.repeat(3, 1, 1)
    return image if channels == 1 else _functional().rgb_to_grayscale(image, num_output_channels=1)


class RandomCropJPEG(torch.nn.Module):
    """Decodes a random ``size`` window of a JPEG, and only that window.

    Equivalent to torchvision.transforms.v2.RandomCrop(size) after a full
    decode (the same window for the same generator state, and the same draws
    from it), without decoding the pixels thrown away.

    Input, either:
        - encoded JPEG bytes: a 1-D uint8 tensor, bytes, bytearray, memoryview
          or 1-D uint8 numpy array. Only the window is decoded.
        - a decoded uint8 ``[C, H, W]`` tensor: the same window is cut with
          ``torchvision.transforms.v2.functional.crop``, and its channels are
          made to match ``mode`` (see Returns).

    Args:
        size: ``int`` for a square crop or ``(height, width)``.
        mode: ``"rgb"``, ``"gray"`` or ``"unchanged"``, see
            :func:`custom_op.decode_and_crop_jpeg`.
        strict: see :func:`custom_op.decode_and_crop_jpeg`.

    Returns (when called):
        A uint8 ``[C, height, width]`` tensor. For encoded input it is
        contiguous, with C as ``mode`` gives. For a decoded input it is a view
        of that tensor, as torchvision's crop returns, except when the
        channels change: ``"rgb"`` repeats a 1-channel image to 3,
        ``"gray"`` turns 3 channels into 1 with torchvision's
        rgb_to_grayscale, ``"unchanged"`` keeps them.

    Raises (when called):
        TypeError, ValueError: the input is neither kind (e.g. a float tensor,
            a 2-D tensor), or a decoded image has channels ``mode`` cannot
            convert (e.g. 4 channels with ``mode="rgb"``).
        ValueError: the image is smaller than ``size``.
        JpegDecodeError: the bytes cannot be decoded.
    """

    def __init__(self, size: Size, *, mode: str = "rgb", strict: bool = True) -> None:
        super().__init__()
        self.size = _as_size(size)
        self.mode = mode
        self.strict = strict

    def get_params(self, data: JpegOrImage) -> tuple[int, int, int, int]:
        """Draws ``(top, left, height, width)`` for this image (either kind of input).

        As torchvision.transforms.v2.RandomCrop does: top, then left, each
        drawn only when the image is larger than the crop on that side. (v1's
        RandomCrop.get_params also draws for a side that fits exactly, so it
        picks a different window when exactly one side fits.)
        """
        height, width = _image_size(data, type(self).__name__)
        _check_fits(height, width, self.size, type(self).__name__)
        return (_draw_offset(height - self.size[0]), _draw_offset(width - self.size[1]),
                self.size[0], self.size[1])

    def forward(self, data: JpegOrImage) -> torch.Tensor:
        image = _decoded(data, type(self).__name__)
        top, left, height, width = self.get_params(data)
        if image is None:
            return decode_and_crop_jpeg(data, top, left, height, width, mode=self.mode,
                                        strict=self.strict)
        window = _functional().crop(image, top, left, height, width)
        return _to_mode(window, self.mode, type(self).__name__)

    def extra_repr(self) -> str:
        return f"size={self.size}, mode={self.mode!r}, strict={self.strict}"


class CenterCropJPEG(torch.nn.Module):
    """Decodes the central ``size`` window of a JPEG, placed as torchvision's CenterCrop places it.

    Takes encoded bytes or a decoded uint8 ``[C, H, W]`` tensor (cut with
    ``torchvision.transforms.v2.functional.center_crop``). Args, returns and
    raises as :class:`RandomCropJPEG`: an image smaller than ``size`` raises
    ValueError rather than being padded.
    """

    def __init__(self, size: Size, *, mode: str = "rgb", strict: bool = True) -> None:
        super().__init__()
        self.size = _as_size(size)
        self.mode = mode
        self.strict = strict

    def forward(self, data: JpegOrImage) -> torch.Tensor:
        name = type(self).__name__
        image = _decoded(data, name)
        height, width = _image_size(data, name)
        _check_fits(height, width, self.size, name)
        if image is not None:
            return _to_mode(_functional().center_crop(image, list(self.size)), self.mode, name)
        top = int(round((height - self.size[0]) / 2.0))
        left = int(round((width - self.size[1]) / 2.0))
        return decode_and_crop_jpeg(data, top, left, self.size[0], self.size[1], mode=self.mode,
                                    strict=self.strict)

    def extra_repr(self) -> str:
        return f"size={self.size}, mode={self.mode!r}, strict={self.strict}"


def _as_range(value: Sequence[float], name: str) -> tuple[float, float]:
    if not isinstance(value, Sequence) or len(value) != 2:
        raise TypeError(f"{name} should be a sequence of two floats, got {value!r}")
    return value[0], value[1]


class RandomResizedCropJPEG(torch.nn.Module):
    """Decodes a random window of random area and aspect ratio, resized to ``size``.

    The window is drawn exactly as torchvision.transforms.v2.RandomResizedCrop
    draws it: up to 10 attempts, each drawing an area fraction in ``scale``
    and a log-uniform aspect ratio in ``ratio``, then top and left when the
    window fits; else a central window clamped to ``ratio``. The same
    generator state gives the same window and leaves the generator in the same
    state. :func:`custom_op.decode_and_resized_crop_jpeg` then decodes the
    window at the smallest libjpeg DCT scale (1/8, 1/4, 1/2 or 1) that keeps
    it at least ``size``, and resizes it with (antialiased) bilinear
    interpolation: bit for bit torchvision's resized_crop of a full decode
    when no scaling applies (the window is less than twice ``size``), close
    to it otherwise.

    Input, either:
        - encoded JPEG bytes: a 1-D uint8 tensor, bytes, bytearray, memoryview
          or 1-D uint8 numpy array. The size comes from the header.
        - a decoded uint8 ``[C, H, W]`` tensor: the same window is cut and
          resized with ``torchvision.transforms.v2.functional.resized_crop``
          (bilinear, ``antialias``), equal to v2.RandomResizedCrop's output,
          then its channels are made to match ``mode`` as in
          :class:`RandomCropJPEG`.

    Args:
        size: ``int`` for a square output or ``(height, width)``.
        scale: ``(min, max)`` area of the window as a fraction of the image's.
        ratio: ``(min, max)`` aspect ratio (width / height) of the window.
        mode: ``"rgb"``, ``"gray"`` or ``"unchanged"``, see
            :func:`custom_op.decode_and_crop_jpeg`.
        antialias: Whether downscaling is antialiased, as in torchvision.
        strict: see :func:`custom_op.decode_and_crop_jpeg`.

    Returns (when called):
        A uint8 ``[C, size[0], size[1]]`` tensor, C as ``mode`` gives.

    Raises:
        TypeError: ``scale`` or ``ratio`` is not a sequence of two numbers
            (when constructed, as torchvision); the input is neither kind.
        UserWarning: (a warning, when constructed) ``scale`` or ``ratio`` is
            not ``(min, max)``, as torchvision warns; drawing then raises
            RuntimeError from torch's uniform_, as torchvision's does.
        JpegDecodeError: the bytes cannot be decoded (when called).

    Example:
        >>> transform = RandomResizedCropJPEG(224)
        >>> transform(torchvision.io.read_file("cat.jpg")).shape
        torch.Size([3, 224, 224])
    """

    def __init__(self, size: Size, scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0), *, mode: str = "rgb",
                 antialias: bool = True, strict: bool = True) -> None:
        super().__init__()
        self.size = _as_size(size)
        self.scale = _as_range(scale, "scale")
        self.ratio = _as_range(ratio, "ratio")
        if self.scale[0] > self.scale[1] or self.ratio[0] > self.ratio[1]:
            # torchvision's own text, so that warning filters written for it apply here too.
            warnings.warn("Scale and ratio should be of kind (min, max)")
        # Computed as torchvision computes it (a tensor of the default dtype), so that the
        # aspect-ratio draws below see the same bounds, bit for bit.
        self._log_ratio = tuple(torch.log(torch.tensor(self.ratio)).tolist())
        self.mode = mode
        self.antialias = antialias
        self.strict = strict

    def get_params(self, data: JpegOrImage) -> tuple[int, int, int, int]:
        """Draws ``(top, left, height, width)`` for this image (either kind of input).

        Each attempt draws ``torch.empty(1).uniform_`` for the area, then
        ``torch.exp`` of another for the aspect ratio, then, once the window
        fits, ``torch.randint(0, H - h + 1, size=(1,))`` for top and the same
        for left, like torchvision's v1 and v2 RandomResizedCrop. After 10
        attempts that do not fit, the window is central and draws nothing more.
        """
        height, width = _image_size(data, type(self).__name__)
        area = height * width
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(self.scale[0], self.scale[1]).item()
            # torch.exp on float32, not math.exp: the rounding below must see torchvision's value.
            log_aspect = torch.empty(1).uniform_(self._log_ratio[0], self._log_ratio[1])
            aspect = torch.exp(log_aspect).item()
            crop_width = int(round(math.sqrt(target_area * aspect)))
            crop_height = int(round(math.sqrt(target_area / aspect)))
            if 0 < crop_width <= width and 0 < crop_height <= height:
                top = int(torch.randint(0, height - crop_height + 1, size=(1,)).item())
                left = int(torch.randint(0, width - crop_width + 1, size=(1,)).item())
                return top, left, crop_height, crop_width
        # No attempt fitted: the largest central window whose aspect ratio is within `ratio`.
        image_ratio = float(width) / float(height)
        if image_ratio < min(self.ratio):
            crop_width = width
            crop_height = int(round(crop_width / min(self.ratio)))
        elif image_ratio > max(self.ratio):
            crop_height = height
            crop_width = int(round(crop_height * max(self.ratio)))
        else:
            crop_height, crop_width = height, width
        return (height - crop_height) // 2, (width - crop_width) // 2, crop_height, crop_width

    def forward(self, data: JpegOrImage) -> torch.Tensor:
        name = type(self).__name__
        image = _decoded(data, name)
        top, left, height, width = self.get_params(data)
        if image is None:
            return decode_and_resized_crop_jpeg(
                data, top, left, height, width, self.size, mode=self.mode,
                antialias=self.antialias, strict=self.strict)
        resized = _functional().resized_crop(image, top, left, height, width, list(self.size),
                                             antialias=self.antialias)
        return _to_mode(resized, self.mode, name)

    def extra_repr(self) -> str:
        return (f"size={self.size}, scale={self.scale}, ratio={self.ratio}, mode={self.mode!r}, "
                f"antialias={self.antialias}, strict={self.strict}")
