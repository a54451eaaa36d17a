"""The public decoding functions: argument checks in Python, pixels in C++."""

from __future__ import annotations

from typing import Tuple, Union

import torch

from .._core import _native as _C
from .._core import _deferred_errors, _ops
from . import _orientation
from .._index._jpeg_index import as_index
from ._arguments import (JpegData, _as_encoded, _as_limit, _as_size, _as_window, _check_flags,
                         _normalize_mode)

#: What every JPEG file starts with: SOI (FF D8), then another marker's FF. The datasets and
#: prepare tell JPEG files by it rather than by name (ImageNet's n02105855_2933.JPEG is a PNG).
JPEG_SIGNATURE = b"\xff\xd8\xff"

#: Default limits; see decode_and_crop_jpeg's docstring.
DEFAULT_MAX_PIXELS = 1 << 28
DEFAULT_MAX_SCANS = 256
#: 256 MiB; docs/design.md says why. The native core's own default (csrc/limits.h,
#: custom_op._C.DEFAULT_MAX_MEMORY) is the same number, which a test checks: reading it from
#: the module here would need the extension built before anything imports.
DEFAULT_MAX_MEMORY = 256 << 20



def jpeg_size(data: JpegData, *, apply_exif_orientation: bool = False) -> tuple[int, int, int]:
    """Reads a JPEG's size from its header, without decoding any pixel.

    Use it to choose a random crop before decoding: real datasets do not have
    one fixed image size.

    Args:
        data: The encoded file: a 1-D uint8 CPU tensor, bytes, bytearray,
            memoryview or 1-D uint8 numpy array. Not copied.
        apply_exif_orientation: If True, the size of the image as displayed:
            height and width swapped when the file's EXIF orientation (5 to 8)
            transposes it. False (the default): the stored image's size.

    Returns:
        ``(height, width, channels)``, where channels is what
        ``mode="unchanged"`` gives: 1 for grayscale, 3 for colour (YCbCr or
        RGB), 4 for CMYK and YCCK files.

    Raises:
        TypeError, ValueError: ``data`` is of the wrong type or shape.
        JpegDecodeError: the header cannot be read (not a JPEG, truncated
            header, 12-bit or lossless data, unsupported colour space).

    Example:
        >>> height, width, _ = custom_op.jpeg_size(open("cat.jpg", "rb").read())
    """
    if torch.compiler.is_compiling():
        result = _deferred_errors.checked_in_graph(
            lambda: _jpeg_size(data, apply_exif_orientation), (1, 1, 3))
        return tuple(result.shape) if isinstance(result, torch.Tensor) else result
    return _jpeg_size(data, apply_exif_orientation)


def _jpeg_size(data: JpegData, apply_exif_orientation: bool) -> tuple[int, int, int]:
    encoded = _as_encoded(data, "jpeg_size")
    _check_flags("jpeg_size", apply_exif_orientation=apply_exif_orientation)
    height, width, channels = _C.jpeg_size(encoded)
    if apply_exif_orientation:
        height, width = _orientation.displayed_size(_orientation.exif_orientation(encoded),
                                                    height, width)
    return height, width, channels


def decode_and_crop_jpeg(
    data: JpegData,
    crop_y: int,
    crop_x: int,
    crop_height: int,
    crop_width: int,
    *,
    mode: str = "rgb",
    strict: bool = True,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_scans: int = DEFAULT_MAX_SCANS,
    seek: bool = True,
    contiguous: bool = False,
    max_memory: int = DEFAULT_MAX_MEMORY,
    apply_exif_orientation: bool = False,
    index: JpegData | None = None,
) -> torch.Tensor:
    """Decodes only the window ``[crop_y, crop_y + crop_height) x [crop_x, crop_x + crop_width)``.

    Rows above the window are entropy-decoded and skipped, rows below it are
    never read, and columns outside it are not inverse-DCT'd or colour
    converted. The result equals, bit for bit, the same window of a full
    decode by the same libjpeg-turbo (libjpeg's default "islow" IDCT and smooth
    chroma upsampling), for every window of every file. The GIL is released
    while decoding.

    Args:
        data: The encoded file: a 1-D uint8 CPU tensor, bytes, bytearray,
            memoryview or 1-D uint8 numpy array. Not copied.
        crop_y, crop_x: The window's top-left pixel, >= 0.
        crop_height, crop_width: The window's size, >= 1; the window must lie
            inside the image (see :func:`jpeg_size`).
        mode: ``"rgb"`` (3 channels for every file, so batches of grayscale,
            colour and CMYK files stack), ``"gray"`` (1 channel: the JPEG's luma
            for colour files, BT.601 luma of the RGB conversion for CMYK) or
            ``"unchanged"`` (1 for grayscale, 3 RGB for colour, 4 for CMYK/YCCK:
            the CMYK samples as stored, Adobe-inverted, 255 meaning no ink).
            Case-insensitive. CMYK becomes RGB as Pillow converts it:
            R = C * K / 255 on the stored (inverted) samples, rounded.
        strict: If True (the default), libjpeg warnings that mean damaged or
            missing data in the rows decoded raise JpegDecodeError; if False,
            libjpeg goes on and the damaged blocks come out gray or smeared.
            Warnings that cannot change a pixel (e.g. "extraneous bytes before
            marker") never raise. Damage below the window goes unseen in
            baseline files, since those rows are never read.
        max_pixels: Images with more pixels than this (by their header) raise
            JpegDecodeError before anything large is allocated.
        max_scans: Progressive files with more scans than this raise
            JpegDecodeError. A scan counts once per 2 megapixels it decodes
            in full, so a large image's scans count more (the message names
            the value that accepts the file); see docs/design.md, Limits.
        max_memory: Bytes of working memory the decode may use (libjpeg's
            buffers and custom_op's, not the result). Progressive and
            multi-scan files need libjpeg's whole-image coefficient buffer,
            2 bytes per pixel and component (3 bytes per pixel for 4:2:0
            colour); a file that needs more than this raises JpegDecodeError,
            naming the value needed, before anything large is allocated. The
            default, 256 MiB, decodes progressive 4:2:0 photos of up to 89
            megapixels (4:4:4: 44) and refuses what a 16384 x 16384
            progressive header asks for (768 MiB).
        seek: If True (the default) and the file has usable restart markers
            (files rewritten by ``python -m custom_op.prepare``, see
            :func:`prepare_jpeg`), only the entropy-coded segments that cover
            the window are decoded, instead of every row above it. The pixels
            are the same either way; damaged or inconsistent markers make it
            fall back to the ordinary decode. False always takes the ordinary
            decode (for comparisons).
        contiguous: If False (the default), the result is a CHW view of HWC
            memory (``permute(2, 0, 1)`` of a contiguous ``[H, W, C]``
            tensor), as ``torchvision.io.decode_jpeg`` returns: libjpeg writes
            that layout, so nothing is rearranged. True gives contiguous CHW
            memory (one plane per channel), at the cost of that split. The
            pixels are the same either way; with one channel the two coincide.
        apply_exif_orientation: If True, the file's EXIF orientation tag (1 to
            8, read from its Exif APP1 segment; missing or invalid means 1) is
            applied: the window is in the displayed image's coordinates, only
            the matching window of the stored image is decoded, and it comes
            out flipped and transposed for display, bit for bit what
            decoding in full and then turning gives (Pillow's
            ``ImageOps.exif_transpose``). False (the default, as
            ``torchvision.io.decode_jpeg``): the image as stored.
        index: The file's MCU-row index from :func:`jpeg_index`, or None (the
            default). With it, a baseline file without restart markers is
            decoded from the MCU row the window needs: the rows above it are
            not even Huffman-decoded. The pixels are the same either way; an
            index that is damaged or belongs to another file (or another
            version of it) is refused and the ordinary decode runs, counted
            in :func:`index_stats`.

    Returns:
        A ``torch.uint8`` tensor of shape ``[C, crop_height, crop_width]``,
        with C as given by ``mode``: a view of HWC memory, or contiguous CHW
        with ``contiguous=True``.

    Raises:
        TypeError: an argument has the wrong type (e.g. a float tensor, a float
            crop_y).
        ValueError: an argument has a bad value (negative or zero sizes, a
            window outside the image, an unknown mode, a 2-D tensor, an empty
            index).
        JpegDecodeError: the data cannot be decoded, or exceeds a limit
            (max_pixels, max_scans, max_memory); the message carries libjpeg's
            own text, or names the limit and the value needed.
        MemoryError: an allocation failed (the data may be fine).
        RuntimeError: an internal failure (a bug in custom_op or below).

    A tensor ``data`` is read with the GIL released: its storage is held for
    the call, so another thread may ``set_()`` it or drop it meanwhile, but
    must not ``resize_()`` it or write to it until the call returns (the
    same contract as every PyTorch operator reading a tensor).

    Example:
        >>> data = torchvision.io.read_file("cat.jpg")
        >>> height, width, _ = custom_op.jpeg_size(data)
        >>> crop = custom_op.decode_and_crop_jpeg(data, 10, 20, 256, 256)
        >>> crop.shape
        torch.Size([3, 256, 256])
    """
    arguments = (data, crop_y, crop_x, crop_height, crop_width, mode, strict, max_pixels,
                 max_scans, seek, contiguous, max_memory, apply_exif_orientation, index)
    if torch.compiler.is_compiling():  # argument errors raised when the graph runs
        return _deferred_errors.checked_in_graph(lambda: _crop(*arguments), (3, 1, 1))
    return _crop(*arguments)


def _crop(data: JpegData, crop_y: int, crop_x: int, crop_height: int, crop_width: int,
          mode: str, strict: bool, max_pixels: int, max_scans: int, seek: bool,
          contiguous: bool, max_memory: int, apply_exif_orientation: bool,
          index: JpegData | None) -> torch.Tensor:
    """decode_and_crop_jpeg, its arguments checked here."""
    name = "decode_and_crop_jpeg"
    encoded = _as_encoded(data, name)
    index_tensor = as_index(name, index)
    y, x, height, width = _as_window(name, crop_y, crop_x, crop_height, crop_width)
    mode_code = _normalize_mode(name, mode)
    _check_flags(name, strict=strict, seek=seek, contiguous=contiguous,
                 apply_exif_orientation=apply_exif_orientation)
    limits = (_as_limit(name, "max_pixels", max_pixels), _as_limit(name, "max_scans", max_scans))
    memory = _as_limit(name, "max_memory", max_memory)
    orientation = _orientation.exif_orientation(encoded) if apply_exif_orientation else 1
    if orientation != 1:  # the stored window, decoded as HWC and turned (custom_op/_decode/_orientation.py)
        y, x, height, width = _orientation.checked_stored_window(
            name, orientation, _C.jpeg_size(encoded, limits[0])[:2], y, x, height, width)
    planes = contiguous and orientation == 1
    if not torch.compiler.is_compiling():  # eager: the kernel itself, without the operator's hop
        pixels = _C.decode_and_crop_jpeg(encoded, y, x, height, width, mode_code, strict, *limits,
                                         seek, True, planes, memory, index_tensor)
    else:  # the public operator, which torch.compile traces (custom_op/_core/_ops.py)
        pixels = _ops.CROP(_C.as_tensor(encoded), y, x, height, width, mode_code, strict, *limits,
                           seek, planes, memory, index_tensor)
    return _orientation.turn(pixels, orientation, contiguous=contiguous)


def libjpeg_version() -> str:
    """The libjpeg-turbo version custom_op runs with, e.g. ``"2.1.5"``.

    Read from the loaded library's file (its "libjpeg-turbo version" text);
    when that file does not say, the version of the headers custom_op was
    compiled against. Include it in bug reports.
    """
    return _C.libjpeg_version()


#: libjpeg's DCT scales (numerator over 8) that decode_and_resized_crop_jpeg
#: uses (csrc/scale_rule.h). libjpeg-turbo has SIMD code for the 1/8, 1/4 and 1/2
#: scaled IDCTs only; the other scales are slower than no scaling at all.
SCALE_NUMERATORS = (1, 2, 4, 8)
#: The scale argument that lets the kernel choose by the rule (csrc/scale_rule.h, kScaleAuto).
SCALE_AUTO = 0


def choose_scale(crop_height: float, crop_width: float, size: tuple[int, int],
                 antialias: bool) -> int:
    """The DCT scale numerator n (of n/8, in SCALE_NUMERATORS) a resize of a
    ``crop_height`` x ``crop_width`` window to ``size`` decodes at.

    With ``antialias``, the smallest scale whose decoded window is still at
    least ``size`` on both sides; without it always 8 (full scale): only
    antialiased resizes decode at a reduced scale. The rule lives once, in the
    native core (csrc/scale_rule.h), which the resized operator applies itself
    when given SCALE_AUTO; this asks it. The sides may be fractional (a resize
    grid's rectangle mapped back to the file).
    """
    return _C.choose_scale(crop_height, crop_width, size[0], size[1], antialias)


def decode_and_resized_crop_jpeg(
    data: JpegData,
    crop_y: int,
    crop_x: int,
    crop_height: int,
    crop_width: int,
    size: Union[int, Tuple[int, int]],
    *,
    mode: str = "rgb",
    antialias: bool = True,
    strict: bool = True,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_scans: int = DEFAULT_MAX_SCANS,
    seek: bool = True,
    contiguous: bool = False,
    max_memory: int = DEFAULT_MAX_MEMORY,
    apply_exif_orientation: bool = False,
    index: JpegData | None = None,
) -> torch.Tensor:
    """Decodes a window and resizes it to ``size``, decoding at a reduced scale when it can.

    libjpeg can scale while it decodes (by n/8), which skips most of the
    inverse DCT work. This picks the smallest of the scales 1/8, 1/4, 1/2, 1
    at which the window is still at least ``size`` on both sides, decodes only
    the window at that scale (rows above it entropy-decoded and skipped, rows
    below never read), and resizes it with bilinear interpolation, antialiased
    when shrinking (``antialias=True``), as torchvision's resize does.

    At scale 1 (windows less than twice ``size``) the exact crop is resized by
    the same ATen kernel torchvision uses, so the result equals
    ``torchvision.transforms.v2.functional.resized_crop(full_decode, crop_y,
    crop_x, crop_height, crop_width, size, antialias=antialias)`` bit for
    bit. At reduced scales custom_op's own triangle-filter resampler maps the
    requested window exactly (its edges fall between the scaled pixels), and
    the result is close to that reference, not equal: README.md gives the
    measured PSNR.

    Args:
        data, crop_y, crop_x, crop_height, crop_width, mode, strict, max_pixels,
            max_scans, max_memory, seek, contiguous, index: as for
            :func:`decode_and_crop_jpeg` (the index serves every DCT scale).
        apply_exif_orientation: as for :func:`decode_and_crop_jpeg`: the
            window and ``size`` are the displayed image's. At full scale the
            exact window is turned, then resized: equal to torchvision's
            resized_crop of the turned full decode. At reduced scales the
            stored window is resized, then turned (close, as above).
        size: the output's ``(height, width)``, or an int for a square.
        antialias: widen the filter when shrinking (torchvision's default for
            tensors since 0.17). False gives plain bilinear interpolation.

    Returns:
        A ``torch.uint8`` tensor ``[C, size[0], size[1]]``: a view of HWC
        memory, or contiguous CHW with ``contiguous=True`` (same pixels).

    Raises:
        TypeError, ValueError, JpegDecodeError, MemoryError, RuntimeError: as
            :func:`decode_and_crop_jpeg`.

    Example:
        >>> crop = custom_op.decode_and_resized_crop_jpeg(data, 40, 60, 300, 400, 224)
        >>> crop.shape
        torch.Size([3, 224, 224])
    """
    arguments = (data, crop_y, crop_x, crop_height, crop_width, size, mode, antialias, strict,
                 max_pixels, max_scans, seek, contiguous, max_memory, apply_exif_orientation,
                 index)
    if torch.compiler.is_compiling():  # argument errors raised when the graph runs
        return _deferred_errors.checked_in_graph(lambda: _resized_crop(*arguments), (3, 1, 1))
    return _resized_crop(*arguments)


def _resized_crop(data: JpegData, crop_y: int, crop_x: int, crop_height: int, crop_width: int,
                  size: Union[int, Tuple[int, int]], mode: str, antialias: bool, strict: bool,
                  max_pixels: int, max_scans: int, seek: bool, contiguous: bool, max_memory: int,
                  apply_exif_orientation: bool, index: JpegData | None) -> torch.Tensor:
    """decode_and_resized_crop_jpeg, its arguments checked here."""
    name = "decode_and_resized_crop_jpeg"
    encoded = _as_encoded(data, name)
    index_tensor = as_index(name, index)
    y, x, height, width = _as_window(name, crop_y, crop_x, crop_height, crop_width)
    out_height, out_width = _as_size(name, size)
    mode_code = _normalize_mode(name, mode)
    _check_flags(name, strict=strict, antialias=antialias, seek=seek, contiguous=contiguous,
                 apply_exif_orientation=apply_exif_orientation)
    limits = (_as_limit(name, "max_pixels", max_pixels), _as_limit(name, "max_scans", max_scans))
    memory = _as_limit(name, "max_memory", max_memory)
    orientation = _orientation.exif_orientation(encoded) if apply_exif_orientation else 1
    if orientation != 1:
        scale_num = choose_scale(height, width, (out_height, out_width), antialias)
        return _turned_resized_crop(encoded, orientation, (y, x, height, width),
                                    (out_height, out_width), scale_num, antialias, contiguous,
                                    mode=mode, strict=strict, max_pixels=limits[0],
                                    max_scans=limits[1], seek=seek, max_memory=memory,
                                    index=index_tensor)
    # The kernel chooses the DCT scale (SCALE_AUTO), so no comparison of symbolic sizes in
    # Python specializes a graph.
    if not torch.compiler.is_compiling():  # eager: the kernel itself, without the operator's hop
        return _C.decode_and_resized_crop_jpeg(encoded, y, x, height, width, out_height,
                                               out_width, SCALE_AUTO, antialias, mode_code,
                                               strict, *limits, seek, contiguous, memory,
                                               index_tensor)
    # The public operator, which torch.compile traces (custom_op/_core/_ops.py).
    return _ops.RESIZED_CROP(_C.as_tensor(encoded), y, x, height, width, out_height, out_width,
                             SCALE_AUTO, antialias, mode_code, strict, *limits, seek, contiguous,
                             memory, index_tensor)


def _turned_resized_crop(encoded: torch.Tensor | memoryview, orientation: int,
                         window: tuple[int, int, int, int], size: tuple[int, int], scale_num: int,
                         antialias: bool, contiguous: bool, **options) -> torch.Tensor:
    """decode_and_resized_crop_jpeg of a file whose EXIF orientation turns it (window and size
    in the displayed image): the exact window turned then resized at full scale, the stored
    window resized at ``scale_num`` then turned otherwise."""
    name = "decode_and_resized_crop_jpeg"
    stored = _orientation.checked_stored_window(
        name, orientation, _C.jpeg_size(encoded, options["max_pixels"])[:2], *window)
    if scale_num == 8:
        crop = decode_and_crop_jpeg(encoded, *window, apply_exif_orientation=True, **options)
        return _orientation.resize_as_torchvision(crop, size, antialias, contiguous=contiguous)
    out_height, out_width = _orientation.stored_size(orientation, size)
    mode_code = _normalize_mode(name, options["mode"])
    pixels = _C.decode_and_resized_crop_jpeg(
        encoded, *stored, out_height, out_width, scale_num, antialias, mode_code,
        options["strict"], options["max_pixels"], options["max_scans"], options["seek"],
        contiguous=False, max_memory=options["max_memory"], index=options["index"])
    return _orientation.turn(pixels, orientation, contiguous=contiguous)
