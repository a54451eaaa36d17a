"""The MCU index of a JPEG file: building it, checking an ``index=`` argument,
and the counts of how indexed decodes went.

The index (custom_op/csrc/mcu_index.h) records where every few MCUs of each
MCU row of a baseline file without restart markers begin and the DC
predictors there, so that a crop's decode reads only the MCUs of its rows and
columns instead of Huffman-decoding everything before and beside them. It is
about a hundredth of the file and carries a checksum of the file it
describes: a stale, damaged or foreign index is refused and the decode takes
the ordinary path, with the same pixels.
"""

from __future__ import annotations

from typing import Optional

import torch

from .._decode._arguments import JpegData, _as_encoded
from .._core import _native as _C
from .._core._fakes import INDEX_OUTCOMES


def jpeg_index(data: JpegData) -> Optional[bytes]:
    """Builds the MCU index of a JPEG file, for ``index=`` of the decode functions.

    One entropy pass over the file (no inverse DCT, no colour conversion): where
    the data of every few MCUs of each row begins and each component's DC
    predictor there, as densely as a hundredth of the file allows. Build it once
    per file and keep it beside the file's bytes; a crop decoded with it skips
    the rows above the window and, in its rows, the columns left and right of it.

    Args:
        data: The encoded file, as for :func:`decode_and_crop_jpeg`. Not copied.

    Returns:
        The serialized index (bytes, about 1% of the file), or
        None when the file cannot be indexed: progressive or arithmetic-coded
        files, files with restart markers (they seek without an index, see
        :func:`prepare_jpeg`), files of several scans, and files whose
        entropy-coded data does not parse.

    Raises:
        TypeError, ValueError: ``data`` is of the wrong type or shape.
        JpegDecodeError: the header cannot be read.

    Example:
        >>> index = custom_op.jpeg_index(data)
        >>> crop = custom_op.decode_and_crop_jpeg(data, 300, 20, 256, 256, index=index)
    """
    return _C.jpeg_index(_as_encoded(data, "jpeg_index"))


def index_stats() -> dict[str, int]:
    """How the decodes handed an ``index=`` went in this process, by outcome.

    Returns:
        ``{outcome: count}`` for every outcome: ``"indexed"`` (decoded from the
        MCUs the window needs), ``"unneeded"`` (the data around the window is too
        little to be worth skipping: the ordinary decode, which costs no more),
        and the fallbacks to the ordinary decode, with the same pixels: ``"not_indexable"`` (the
        file cannot be indexed), ``"refused"`` (the index is damaged, or
        describes another file or another version of it), ``"cut_failed"``
        (the index's positions do not fit the data, or the file's Huffman
        tables cannot rebuild the DC predictors), ``"cut_decode_failed"``
        (libjpeg refused the data read from the index). The counts only grow.

    Example:
        >>> custom_op.index_stats()["indexed"]
        12
    """
    counts = _C.index_stats()
    return dict(zip(INDEX_OUTCOMES, counts, strict=True))


def as_index(function: str, index: object) -> Optional[torch.Tensor]:
    """Checks an ``index=`` argument: None, or what :func:`jpeg_index` returned (any buffer)."""
    if index is None:
        return None
    if isinstance(index, str):
        raise TypeError(f"{function}(): index must be bytes from custom_op.jpeg_index() or None, "
                        f"got str")
    try:
        encoded = _as_encoded(index, function)
    except (TypeError, ValueError) as error:
        # The checks of ``data``, with this argument's name in the message.
        raise type(error)(str(error).replace("(): data ", "(): index ", 1)) from None
    size = encoded.numel() if isinstance(encoded, torch.Tensor) else encoded.nbytes
    if size == 0:
        raise ValueError(f"{function}(): index is empty; custom_op.jpeg_index() returns None, "
                         "not an empty index, for a file it cannot index: pass index=None")
    return _C.as_tensor(encoded)
