"""EXIF orientation: the displayed image of a file whose pixels are stored turned or mirrored.

Phones store a photo as the sensor read it and record in the Exif APP1 segment
how to turn it for display (tag 0x0112, Orientation, 1 to 8). Pillow's
``ImageOps.exif_transpose``, Hugging Face ``datasets``' ``Image()`` and
torchvision's ``decode_jpeg(apply_exif_orientation=True)`` show the turned
image. Each orientation is a transposition of the stored image after flips:

    displayed = transpose?(flip_x?(flip_y?(stored)))

so a window of the displayed image is a window of the stored one (swapped
sides when transposed, mirrored offsets when flipped): only that window is
decoded, then flipped and transposed, which moves pixels without changing
any, so the result equals decode-then-turn bit for bit.

Nothing here raises on bad data: a missing, truncated or nonsensical Exif
segment means orientation 1 (as stored), as it does for Pillow and torchvision.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Union

import torch

from .._core._native import tensor_bytes

#: The Exif tag that holds the orientation, and the TIFF types it may be stored as.
_ORIENTATION_TAG = 0x0112
_SHORT, _LONG = 3, 4
#: Reading stops after this many bytes of the file or this many marker segments, whatever the
#: file holds: the Exif segment comes right after SOI (APP0/APP1) in every writer we know.
_SCAN_BYTES = 1 << 20
_SCAN_SEGMENTS = 64
_EXIF_HEADER = b"Exif\x00\x00"


class Turn(NamedTuple):
    """How the displayed image comes from the stored one: flips first, then a transposition."""

    flip_y: bool
    flip_x: bool
    transpose: bool


#: EXIF orientation -> Turn. 6 (rotate 90 clockwise for display) is the stored image flipped
#: upside down, then transposed; 8 (90 counter-clockwise) mirrored, then transposed.
TURNS = {
    1: Turn(False, False, False),
    2: Turn(False, True, False),
    3: Turn(True, True, False),
    4: Turn(True, False, False),
    5: Turn(False, False, True),
    6: Turn(True, False, True),
    7: Turn(True, True, True),
    8: Turn(False, True, True),
}


def _as_bytes(data: Union[torch.Tensor, bytes, bytearray, memoryview]) -> memoryview:
    """The file's first _SCAN_BYTES as a byte memoryview (a copy of them for a tensor)."""
    if isinstance(data, torch.Tensor):
        return memoryview(tensor_bytes(data, _SCAN_BYTES))
    return memoryview(data).cast("B")[:_SCAN_BYTES]


def _tiff_orientation(tiff: memoryview) -> int:
    """The Orientation entry of a TIFF structure's first IFD, or 1."""
    if len(tiff) < 8 or bytes(tiff[:2]) not in (b"II", b"MM"):
        return 1
    order = "<" if bytes(tiff[:2]) == b"II" else ">"
    magic, ifd = struct.unpack_from(order + "HI", tiff, 2)
    if magic != 42 or ifd + 2 > len(tiff):
        return 1
    (count,) = struct.unpack_from(order + "H", tiff, ifd)
    for index in range(count):
        entry = ifd + 2 + 12 * index
        if entry + 12 > len(tiff):
            return 1
        tag, kind, number = struct.unpack_from(order + "HHI", tiff, entry)
        if tag != _ORIENTATION_TAG:
            continue
        if number != 1 or kind not in (_SHORT, _LONG):
            return 1
        value = struct.unpack_from(order + ("H" if kind == _SHORT else "I"), tiff, entry + 8)[0]
        return value if value in TURNS else 1
    return 1


def exif_orientation(data: Union[torch.Tensor, bytes, bytearray, memoryview]) -> int:
    """The EXIF orientation (1 to 8) of an encoded JPEG; 1 when it has none or a bad one.

    Reads the marker segments before the first scan (at most _SCAN_SEGMENTS of them, in the
    first _SCAN_BYTES), and the first Exif APP1 among them, as Pillow does. Never raises.
    """
    try:
        return _scan_for_orientation(_as_bytes(data))
    except (struct.error, ValueError, TypeError):  # junk the bounds checks did not foresee
        return 1


def _scan_for_orientation(head: memoryview) -> int:
    if bytes(head[:2]) != b"\xff\xd8":
        return 1
    offset = 2
    for _ in range(_SCAN_SEGMENTS):
        while offset < len(head) and head[offset] == 0xFF and offset + 1 < len(head) \
                and head[offset + 1] == 0xFF:
            offset += 1  # fill bytes before a marker
        if offset + 4 > len(head) or head[offset] != 0xFF:
            return 1
        marker = head[offset + 1]
        if marker in (0xDA, 0xD9):  # start of scan, end of image: no Exif before the pixels
            return 1
        (length,) = struct.unpack_from(">H", head, offset + 2)
        if length < 2:
            return 1
        payload = head[offset + 4: offset + 2 + length]
        if marker == 0xE1 and bytes(payload[:len(_EXIF_HEADER)]) == _EXIF_HEADER:
            return _tiff_orientation(payload[len(_EXIF_HEADER):])
        offset += 2 + length
    return 1


def displayed_size(orientation: int, height: int, width: int) -> tuple[int, int]:
    """The displayed image's (height, width) for a stored ``height`` x ``width``."""
    return (width, height) if TURNS[orientation].transpose else (height, width)


def stored_window(orientation: int, stored_height: int, stored_width: int, top: int, left: int,
                  height: int, width: int) -> tuple[int, int, int, int]:
    """The stored image's window whose turn is the displayed window (top, left, height, width).

    ``stored_height`` x ``stored_width`` is the file's own (header) size. The window must lie
    inside the displayed image; the result then lies inside the stored one.
    """
    turn = TURNS[orientation]
    if turn.transpose:  # the flipped image's window has the sides swapped
        top, left, height, width = left, top, width, height
    if turn.flip_y:
        top = stored_height - top - height
    if turn.flip_x:
        left = stored_width - left - width
    return top, left, height, width


def stored_size(orientation: int, size: tuple[int, int]) -> tuple[int, int]:
    """The stored image's resize output whose turn has the displayed ``size``."""
    return (size[1], size[0]) if TURNS[orientation].transpose else tuple(size)


def turn(pixels: torch.Tensor, orientation: int, *, contiguous: bool) -> torch.Tensor:
    """The decoded stored window ``pixels`` ([C, H, W]) turned for display.

    The result has the decode functions' layout: contiguous CHW planes with
    ``contiguous``, else a CHW view of contiguous HWC memory (decode_jpeg's).
    """
    how = TURNS[orientation]
    if orientation == 1:
        return pixels
    flips = [dim for dim, flip in ((-2, how.flip_y), (-1, how.flip_x)) if flip]
    turned = pixels.flip(flips) if flips else pixels
    if how.transpose:
        turned = turned.transpose(-2, -1)
    return in_layout(turned, contiguous=contiguous)


def in_layout(image: torch.Tensor, *, contiguous: bool) -> torch.Tensor:
    """``image`` ([C, H, W]) in the decode functions' layout, with the very strides a new tensor
    of that layout has (copied only when it has others).

    ``.contiguous()`` is not enough: a side of 1 may carry any stride and the tensor still
    counts as contiguous, and a turn leaves such strides (a transposed window 1 pixel wide).
    ATen's uint8 resize reads its input by the strides of every side, so it would read past
    the window into memory never written, different on every call.
    """
    channels, height, width = image.shape
    fresh = (height * width, width, 1) if contiguous else (1, width * channels, channels)
    if image.stride() == fresh:
        return image
    if contiguous:
        return torch.empty((channels, height, width), dtype=image.dtype).copy_(image)
    hwc = torch.empty((height, width, channels), dtype=image.dtype)
    return hwc.permute(2, 0, 1).copy_(image)


def checked_stored_window(function: str, orientation: int, stored: tuple[int, int], top: int,
                          left: int, height: int, width: int) -> tuple[int, int, int, int]:
    """stored_window, after checking that the window lies inside the displayed image (a
    ValueError naming the displayed size otherwise, as the decode names the stored one)."""
    shown_height, shown_width = displayed_size(orientation, *stored)
    if top + height > shown_height or left + width > shown_width:
        raise ValueError(f"{function}(): the window (crop_y={top}, crop_x={left}, "
                         f"crop_height={height}, crop_width={width}) does not fit in the "
                         f"displayed image of {shown_height} x {shown_width} (EXIF orientation "
                         f"{orientation}; stored {stored[0]} x {stored[1]})")
    return stored_window(orientation, *stored, top, left, height, width)


def resize_as_torchvision(image: torch.Tensor, size: tuple[int, int], antialias: bool, *,
                          contiguous: bool) -> torch.Tensor:
    """A uint8 [C, H, W] image resized (bilinear) as torchvision's v2 resize does on the CPU.

    The same ATen call on the layout torchvision resizes decode_jpeg's output in: fresh HWC
    memory (in_layout), as a channels-last batch of one (torchvision restrides it so,
    pytorch/pytorch#68430). Every layout gives the same pixels, but ATen's uint8 kernel
    handed contiguous 3-channel planes to resize to 1 x 1 fails an internal assert, whatever
    the ``contiguous`` asked for the result.
    """
    if tuple(size) != tuple(image.shape[-2:]):
        channels, height, width = image.shape
        hwc = in_layout(image, contiguous=False)
        batch = hwc.unsqueeze(0).as_strided((1, channels, height, width),
                                            (hwc.numel(), *hwc.stride()))
        image = torch.nn.functional.interpolate(batch, size=list(size), mode="bilinear",
                                                align_corners=False, antialias=antialias)[0]
    return in_layout(image, contiguous=contiguous)
