"""A resize that waits for its crop: the evaluation recipe decoded as one window.

``v2.Resize(256)`` followed by ``v2.CenterCrop(224)`` resizes the whole image
and keeps its centre. A crop of a resized image is a rectangle of the
resize's output grid, and that rectangle depends only on the input pixels its
filter taps reach: the central window of the file, with a margin of the
filter's support. So a resize of an EncodedJpeg records the output size
(:class:`PendingResize`, the image's reported size becomes the resized size),
and what comes next decides:

- a crop (``crop``, ``center_crop``, ``RandomCrop``...) inside the resized
  image decodes only the window its rectangle needs (:func:`resized_rect`);
- anything else materialises the resize first (:func:`resized_whole`), which
  is what the resize alone did before: decode and resize the whole image.

Bilinear resizes (torchvision's default) fuse; other interpolations and sizes
beyond what the native core takes (over 65535, e.g. ``Resize(256)`` of a
300 x 1 file) decode the whole image and let torchvision resize it, so the
result is torchvision's. With ``exact=True`` the rectangle comes out bit for
bit as torchvision's decode_jpeg + resize + crop (csrc/grid_resample.h
resamples exactly as ATen does, on the window only); without it, windows at
least twice the output decode at 1/2, 1/4 or 1/8 DCT scale (docs/benchmarks.md,
eval, gives the measured difference).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import torch
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as F

from .._core import _native as _C
from .._decode._single import choose_scale, decode_and_resized_crop_jpeg
from .._index._jpeg_index import as_index

if TYPE_CHECKING:
    from ._encoded_jpeg import EncodedJpeg

#: The native core's largest output side (a JPEG's own limit).
_NATIVE_MAX_SIDE = 65535


@dataclasses.dataclass(frozen=True)
class PendingResize:
    """A resize of the whole image recorded on an EncodedJpeg, not yet computed.

    Attributes:
        size: The output ``(height, width)``, as torchvision computed it from
            the resize's ``size`` and ``max_size``.
        interpolation: torchvision's InterpolationMode.
        antialias: As torchvision's resize takes it (None counts as False).
        exact: Whether the options of the file when it was resized asked for
            ``exact``: the resize stays exact when a crop with other options
            (``CenterCropJPEG`` after ``ResizeJPEG(exact=True)``) computes it.
    """

    size: tuple[int, int]
    interpolation: InterpolationMode
    antialias: bool
    exact: bool = False


def _exact(encoded: "EncodedJpeg") -> bool:
    pending = encoded.pending_resize
    return encoded.options.exact or (pending is not None and pending.exact)


def _native_arguments(encoded: "EncodedJpeg") -> dict[str, Any]:
    options = encoded.options
    return {"mode": {"rgb": 0, "gray": 1, "unchanged": 2}[options.mode], "strict": options.strict,
            "max_pixels": options.max_pixels, "max_scans": options.max_scans,
            "seek": options.seek, "contiguous": options.contiguous,
            "max_memory": options.max_memory}


def native_size(size: tuple[int, int]) -> bool:
    """Whether the native core takes this output size; torchvision decides the others (it
    resizes to 76800 x 256, and refuses 0 x 40, which Resize(20, max_size=40) asks of a 1 x 300
    image, with its own error)."""
    return 1 <= min(size) and max(size) <= _NATIVE_MAX_SIDE


def _fuses(pending: PendingResize) -> bool:
    """Whether the native core computes this resize (else: full decode + torchvision)."""
    return pending.interpolation == InterpolationMode.BILINEAR and native_size(pending.size)


def resized_window(encoded: "EncodedJpeg", top: int, left: int, height: int, width: int,
                   size: tuple[int, int], interpolation: InterpolationMode,
                   antialias: bool) -> tv_tensors.Image:
    """The window (inside the file's image) resized to ``size``, as torchvision resizes a crop.

    Bilinear resizes decode the window at a reduced DCT scale when the output
    is at most half of it (unless the options ask for ``exact``), else at
    full scale resized by the ATen kernel torchvision uses. Other
    interpolations and outsize outputs decode the exact window and hand it
    to torchvision's resize. Only antialiased resizes take a reduced scale
    (_decode.choose_scale, the one rule for every path).
    """
    if interpolation != InterpolationMode.BILINEAR or not native_size(size):
        return _torchvision_resize(encoded, top, left, height, width, size, interpolation,
                                   antialias)
    scale = 8 if _exact(encoded) else choose_scale(height, width, size, antialias)
    if encoded.orientation != 1:  # a turned file: _turned_window decides
        return _turned_window(encoded, top, left, height, width, size, antialias, scale)
    with encoded.errors_named():
        pixels = _C.decode_and_resized_crop_jpeg(
            encoded.encoded_bytes(), top, left, height, width, size[0], size[1], scale,
            antialias, **_native_arguments(encoded),
            index=as_index("decode_and_resized_crop_jpeg", encoded.window_index(height)))
    return tv_tensors.Image(pixels)


def _torchvision_resize(encoded: "EncodedJpeg", top: int, left: int, height: int, width: int,
                        size: tuple[int, int], interpolation: InterpolationMode,
                        antialias: bool) -> tv_tensors.Image:
    """The exact window resized by torchvision, given in decode_jpeg's layout (HWC memory).

    That is the layout torchvision's pipeline resizes, so its pixels and layout are the
    decoded pipeline's; contiguous CHW uint8 would also hit an ATen internal assert for 1 x 1
    outputs. ``contiguous`` in the options then makes planes of the result.
    """
    window = encoded.decode_file_window(top, left, height, width, contiguous=False)
    resized = F.resize(window, list(size), interpolation=interpolation, antialias=antialias)
    if encoded.options.contiguous:
        return tv_tensors.Image(resized.as_subclass(torch.Tensor).contiguous())
    return resized


def _turned_window(encoded: "EncodedJpeg", top: int, left: int, height: int, width: int,
                   size: tuple[int, int], antialias: bool, scale: int) -> tv_tensors.Image:
    """resized_window of a file whose EXIF orientation turns it (the window is the displayed
    image's): at full scale the exact window, turned, resized by torchvision (its pixels for
    the turned image); at reduced scales the stored window resized, then turned."""
    if scale == 8:
        return _torchvision_resize(encoded, top, left, height, width, size,
                                   InterpolationMode.BILINEAR, antialias)
    with encoded.errors_named():
        pixels = decode_and_resized_crop_jpeg(encoded.encoded_bytes(), top, left, height, width,
                                              size, antialias=antialias,
                                              **encoded.options.decode_arguments())
    return tv_tensors.Image(pixels)


def resized_whole(encoded: "EncodedJpeg") -> tv_tensors.Image:
    """The pending resize of the whole image, computed (what Resize alone returns)."""
    pending = encoded.pending_resize
    height, width = encoded.file_size
    return resized_window(encoded, 0, 0, height, width, pending.size, pending.interpolation,
                          pending.antialias)


def _reach(grid: int, full: int, first: int, count: int, margin: float) -> tuple[int, int, float]:
    """The file's span that output samples [first, first + count) of a full -> grid axis read.

    Returns the span's start and length and the rectangle's start inside it
    (fractional), with ``margin`` file pixels of filter support either side.
    """
    step = full / grid
    start = first * step
    low = max(0, math.floor(start - margin))
    high = min(full, math.ceil((first + count) * step + margin))
    return low, high - low, start - low


def _scaled_rect(encoded: "EncodedJpeg", top: int, left: int, height: int, width: int,
                 scale: int) -> tv_tensors.Image:
    """The rectangle decoded at ``scale``/8 from the window it reaches (not exact)."""
    pending = encoded.pending_resize
    (grid_height, grid_width), (file_height, file_width) = pending.size, encoded.file_size
    # The triangle's half-width, in file pixels, plus a scaled pixel of rounding either way.
    pixel = 8 / scale
    margin_y = max(file_height / grid_height, pixel) + 2 * pixel
    margin_x = max(file_width / grid_width, pixel) + 2 * pixel
    y, rows, box_y = _reach(grid_height, file_height, top, height, margin_y)
    x, cols, box_x = _reach(grid_width, file_width, left, width, margin_x)
    box = [box_y, box_x, height * file_height / grid_height, width * file_width / grid_width]
    with encoded.errors_named():
        pixels = _C.decode_box_resized(encoded.encoded_bytes(), y, x, rows, cols, box,
                                       height, width, scale, pending.antialias,
                                       **_native_arguments(encoded))
    return tv_tensors.Image(pixels)


def resized_rect(encoded: "EncodedJpeg", top: int, left: int, height: int,
                 width: int) -> tv_tensors.Image:
    """The rectangle of the pending resize's output (it must lie inside), decoding only its reach.

    Equals ``F.crop(resized_whole(encoded), top, left, height, width)``: bit for
    bit with ``exact=True`` or when no DCT scale is small enough, close
    otherwise.
    """
    pending = encoded.pending_resize
    if not _fuses(pending) or encoded.orientation != 1:  # a turned file: resized in full
        return F.crop(resized_whole(encoded), top, left, height, width)
    (grid_height, grid_width), (file_height, file_width) = pending.size, encoded.file_size
    if not _exact(encoded):
        scale = choose_scale(height * file_height / grid_height, width * file_width / grid_width,
                             (height, width), pending.antialias)
        if scale < 8:
            return _scaled_rect(encoded, top, left, height, width, scale)
    with encoded.errors_named():
        pixels = _C.decode_grid_crop(encoded.encoded_bytes(), grid_height, grid_width,
                                     top, left, height, width, pending.antialias,
                                     **_native_arguments(encoded))
    return tv_tensors.Image(pixels)
