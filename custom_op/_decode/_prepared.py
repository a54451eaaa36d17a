"""prepare_jpeg and seekable: one file's bytes rewritten, losslessly, with restart markers.

A prepared file lets a crop decode only the entropy-coded segments it covers
(see docs/preparing.md). ``python -m custom_op.prepare`` (custom_op/prepare/)
applies this to folders and tar shards.
"""

from __future__ import annotations

from typing import NamedTuple

from .._core import _native as _C
from ._arguments import JpegData, _as_encoded, _as_int, _as_limit
from ._single import DEFAULT_MAX_MEMORY, DEFAULT_MAX_PIXELS, DEFAULT_MAX_SCANS


class PreparedJpeg(NamedTuple):
    """What :func:`prepare_jpeg_with_info` returns."""

    #: The rewritten file.
    data: bytes
    #: MCUs per restart segment in ``data``.
    restart_interval: int
    #: The input was progressive (the output never is).
    was_progressive: bool


#: prepare_jpeg's default width of a restart segment, in pixels.
DEFAULT_SEGMENT_WIDTH = 64


def prepare_jpeg_with_info(data: JpegData, *, max_pixels: int = DEFAULT_MAX_PIXELS,
                           max_scans: int = DEFAULT_MAX_SCANS,
                           segment_width: int = DEFAULT_SEGMENT_WIDTH,
                           max_memory: int = DEFAULT_MAX_MEMORY) -> PreparedJpeg:
    """:func:`prepare_jpeg`, also saying what it did."""
    name = "prepare_jpeg"
    data_out, interval, was_progressive = _C.prepare_jpeg(
        _as_encoded(data, name), _as_limit(name, "max_pixels", max_pixels),
        _as_limit(name, "max_scans", max_scans), _as_int(name, "segment_width", segment_width, 1),
        max_memory=_as_limit(name, "max_memory", max_memory))
    return PreparedJpeg(data_out, interval, was_progressive)


def prepare_jpeg(data: JpegData, *, max_pixels: int = DEFAULT_MAX_PIXELS,
                 max_scans: int = DEFAULT_MAX_SCANS,
                 segment_width: int = DEFAULT_SEGMENT_WIDTH,
                 max_memory: int = DEFAULT_MAX_MEMORY) -> bytes:
    """Rewrites a JPEG losslessly so that crops of it decode in time proportional to the crop.

    The DCT coefficients are copied, never re-quantised (as ``jpegtran``
    does), so every decoded pixel of the result equals the input's. The result
    is one baseline scan with a restart marker every few MCUs (the interval
    divides the MCUs per row, and segments are about 64 pixels wide and a few
    hundred bytes long) and Huffman tables optimised for the image, which
    usually save more than the markers cost. Progressive and arithmetic-coded
    inputs become baseline too. Metadata (Exif, ICC profile, comments) is kept;
    a file with anything after its end-of-image marker is refused.

    :func:`decode_and_crop_jpeg` and the resized and batched variants then
    decode only the segments that cover the window (see :func:`seekable`).

    Args:
        data: The encoded file (tensor, bytes, ... as for decode_and_crop_jpeg).
        max_pixels, max_scans, max_memory: as for :func:`decode_and_crop_jpeg`:
            larger images, progressive files with more scans, and files whose
            rewrite needs more working memory are refused. The rewrite keeps
            every coefficient of every file, baseline ones too (2 bytes per
            pixel and component), plus the output (about the input's size).
        segment_width: the width in pixels to aim for between two restart
            markers (the interval must divide the MCUs per row, so the result
            is the nearest such width; light images get longer segments, so
            that each holds a few hundred bytes). Narrower segments make a
            crop decode fewer columns it does not need, at a few bytes per
            marker.

    Returns:
        The prepared file's bytes.

    Raises:
        JpegDecodeError: the file cannot be read, or libjpeg warns that its
            data is damaged (writing it back would make the damage permanent),
            or it is not an 8-bit JPEG, or it exceeds a limit, or it is a
            progressive file whose scans stop before every coefficient is
            complete (libjpeg smooths such blocks when decoding; a baseline
            copy would not, so its pixels would differ), or bytes follow its
            end-of-image marker (a second image, a gain map, a motion
            photo: the copy would lose them, and appending them would break
            the offsets that point into them).
        MemoryError: an allocation failed; the file was not judged, so it
            must not be reported as refused.
        RuntimeError: an internal failure (a bug in custom_op or below).
    """
    return prepare_jpeg_with_info(data, max_pixels=max_pixels, max_scans=max_scans,
                                  segment_width=segment_width, max_memory=max_memory).data


def seekable(data: JpegData) -> bool:
    """Whether the file's header allows decode_and_crop_jpeg to seek with restart markers.

    True for files written by :func:`prepare_jpeg`, and for any baseline file
    with one scan whose restart interval divides the MCUs per row. The markers
    themselves are checked while decoding; damaged ones make the decode fall
    back to reading every row above the window.

    Raises:
        JpegDecodeError: the header cannot be read.
    """
    return _C.restart_geometry(_as_encoded(data, "seekable")) is not None
