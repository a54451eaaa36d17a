"""Hugging Face ``datasets`` rows whose images stay encoded until a v2 crop decodes their window.

A Hub dataset keeps its images as JPEG bytes in parquet. With the column cast
to ``Image(decode=False)`` each row holds ``{"bytes": ..., "path": ...}``
instead of a decoded PIL image; :func:`hf_image` turns that into an
:class:`custom_op.EncodedJpeg` (or, for a PNG or any other format, the image
decoded by torchvision), and :class:`HfImageTransform` applies it and a v2
transform to every row of a batch, for ``Dataset.set_transform`` /
``with_transform`` and ``IterableDataset.map(..., batched=True)``. Nothing
here imports ``datasets``: rows are plain dicts and lists.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Mapping, Optional, Union

from torchvision import tv_tensors

from .._core._errors import JpegDecodeError
from .._decode._options import DecodeOptions
from .._torchvision._encoded_jpeg import EncodedJpeg
from .._torchvision._fused_head import fused_transform
from ..transforms import decode_remaining
from ._folder import ON_ERROR_POLICIES
from ._stored_images import StoredImage, stored_image

__all__ = ["HfImageTransform", "hf_image"]

_log = logging.getLogger("custom_op.datasets")

def hf_decode_options(function: str, **decode_options: Any) -> DecodeOptions:
    """The decode options of every Hugging Face source (hf_image, HfImageTransform, the lane's
    HfRows), per sample and batched alike: EXIF orientation applied unless the caller says
    otherwise, as ``datasets``' Image() feature does (PIL.ImageOps.exif_transpose), so that
    switching to custom_op keeps the images; the rest DecodeOptions' defaults."""
    return DecodeOptions.checked(function, **{"apply_exif_orientation": True, **decode_options})


#: hf_decode_options without options of the caller's.
HF_OPTIONS = hf_decode_options("hf_image")


def hf_image(value: StoredImage, options: DecodeOptions = HF_OPTIONS, *,
             source: Optional[str] = None,
             index: Any = None) -> Union[EncodedJpeg, tv_tensors.Image]:
    """Turns one row's image of an ``Image(decode=False)`` column into what v2 transforms crop.

    Args:
        value: The row's image: ``{"bytes": ..., "path": ...}`` as
            ``datasets.Image(decode=False)`` gives it (a row whose ``bytes``
            is None is read from ``path``, as ``datasets`` would), or the
            encoded bytes themselves (a plain binary column).
        options: How the JPEG will be decoded (``DecodeOptions``: mode,
            strict, seek, ...); for other formats only ``mode`` matters. The
            default applies the EXIF orientation (``apply_exif_orientation``),
            as ``datasets``' ``Image()`` does; the other fields are
            DecodeOptions' defaults.
        source: The name used in error messages; default the row's ``path``.
        index: The row's MCU-row index (its :func:`add_index_column` column),
            which the JPEG's crops then use; None: no index. What the decoders'
            ``index=`` takes: bytes, a bytearray, a memoryview, a 1-D uint8
            numpy array or CPU tensor.

    Returns:
        An :class:`custom_op.EncodedJpeg` (header read, nothing decoded) when
        the bytes are a JPEG by content, so a v2 crop decodes only its
        window; otherwise (PNG, WebP, GIF, ...) the image decoded in full by
        ``torchvision.io.decode_image`` (Pillow for formats torchvision does
        not read), a uint8 ``tv_tensors.Image`` [C, H, W], contiguous, with
        the channels of ``options.mode``. Either goes through the same v2
        transforms.

    Raises:
        JpegDecodeError: The JPEG's header cannot be read, the bytes are
            neither a JPEG nor an image torchvision or Pillow decodes, or the
            row has no image (None); the message starts with the source.
        TypeError: ``value`` is neither a {"bytes", "path"} dict nor bytes
            (e.g. a decoded PIL image: cast the column to
            ``Image(decode=False)``), or ``index`` is not what the decoders
            take as an index (an int, a str, a tensor of another dtype).
        ValueError: ``index`` is empty, not 1-D or not contiguous (as the
            decoders refuse it).
        OSError: a row without bytes names a file that cannot be read.

    Example:
        >>> from datasets import Image
        >>> rows = dataset.cast_column("image", Image(decode=False))
        >>> image = hf_image(rows[0]["image"])  # EncodedJpeg(source='n01440764_10026.JPEG', ...)
        >>> v2.RandomResizedCrop(224)(image).shape    # only the window was decoded
        torch.Size([3, 224, 224])
    """
    return stored_image(value, options, source=source, index=index, function="hf_image")


class HfImageTransform:
    """A ``set_transform`` / ``with_transform`` / batched ``map`` function for image datasets.

    Each row's ``column`` (an ``Image(decode=False)`` column, or plain JPEG
    bytes) goes through :func:`hf_image` and then ``transform``; whatever
    the transform leaves undecoded is decoded in full, so rows always hold
    pixels (``transform=None`` gives whole images). Other columns pass
    through unchanged. It takes a batch (a dict of lists, as
    ``set_transform`` and ``map(batched=True)`` give) or a single row (a
    dict, as ``IterableDataset.map`` without ``batched`` gives).

    Args:
        transform: Any torchvision v2 transform or pipeline, applied to the
            image alone. Keep its output uint8 and normalise on the device
            (:class:`custom_op.transforms.NormalizeBatch`).
        column: The image column.
        index_column: The column of MCU-row indexes :func:`add_index_column`
            added, if any: each row's crop then skips the rows above it.
        on_error: ``"raise"`` (the default): a row that cannot be decoded
            raises JpegDecodeError naming its ``path``, which stops the
            epoch (validate with ``python -m custom_op.prepare SRC DST
            --verify`` beforehand instead). ``"substitute"``: the whole row
            (its label too) is replaced by the next row of the same batch
            that decodes, wrapping around, and each replacement is logged as
            a warning on the ``custom_op.datasets`` logger, counted in
            ``substitutions`` (per process); never silent. A DataLoader asks
            a map-style dataset for a whole batch at once (``__getitems__``),
            so the batch is the DataLoader's; a batch of one row, or one
            where no row decodes, raises.
        decode_options: How JPEGs are decoded, by keyword (``mode``,
            ``strict``, ``seek``, ``exact``, ``contiguous``, ``max_pixels``,
            ``max_scans``, ``max_memory``, ``apply_exif_orientation``); see
            :class:`custom_op.EncodedJpeg`. ``apply_exif_orientation``
            defaults to True here: ``datasets``' ``Image()`` shows phone
            photos turned as displayed (``exif_transpose``), and so do these
            rows.

    Raises:
        ValueError: (when constructed) ``on_error`` is not a policy; (when
            called) ``column`` is not in the rows.
        TypeError: (when constructed) an unknown or mistyped decode option.
        JpegDecodeError: (when called, ``on_error="raise"``) a row cannot be
            decoded; the message starts with its path.

    Example:
        >>> from datasets import Image, load_dataset
        >>> train = load_dataset("parquet", data_dir="imagenet", split="train")
        >>> train = train.cast_column("image", Image(decode=False))
        >>> train.set_transform(HfImageTransform(v2.RandomResizedCrop(224)))
        >>> train[0]["image"].shape, train[0]["label"]
        (torch.Size([3, 224, 224]), 0)
    """

    def __init__(self, transform: Optional[Callable[[Any], Any]] = None, *,
                 column: str = "image", index_column: Optional[str] = None,
                 on_error: str = "raise", **decode_options: Any) -> None:
        if on_error not in ON_ERROR_POLICIES:
            raise ValueError(f"HfImageTransform: on_error must be one of {ON_ERROR_POLICIES}, "
                             f"got {on_error!r}")
        if not isinstance(column, str):
            raise TypeError(f"HfImageTransform: column must be a str, got {column!r}")
        self.transform = transform
        self.column, self.index_column = column, index_column
        self.on_error = on_error
        self.options = hf_decode_options("HfImageTransform", **decode_options)
        self.substitutions = 0

    def __repr__(self) -> str:
        return (f"HfImageTransform({self.transform!r}, column={self.column!r}, "
                f"on_error={self.on_error!r})")

    def image(self, value: StoredImage, index: Optional[bytes] = None) -> Any:
        """One row's image through hf_image and the transform, decoded if still encoded."""
        image = hf_image(value, self.options, index=index)
        if self.transform is not None:
            image = fused_transform(self)(image)
        return decode_remaining(image)

    def __call__(self, rows: dict[str, Any]) -> dict[str, Any]:
        if self.column not in rows:
            raise ValueError(f"HfImageTransform: no column {self.column!r} in the rows; their "
                             f"columns are {sorted(rows)}")
        values = rows[self.column]
        indexes = rows.get(self.index_column) if self.index_column is not None else None
        if not isinstance(values, list):  # a single row (IterableDataset.map, unbatched)
            return {**rows, self.column: self.image(values, indexes)}
        indexes = indexes if indexes is not None else [None] * len(values)
        images: list[Any] = [None] * len(values)
        failures: dict[int, JpegDecodeError] = {}
        for index, value in enumerate(values):
            try:
                images[index] = self.image(value, indexes[index])
            except JpegDecodeError as error:
                if self.on_error == "raise":
                    raise
                failures[index] = error
        if not failures:
            return {**rows, self.column: images}
        return self._substitute({**rows, self.column: images}, failures)

    def _substitute(self, batch: dict[str, Any], failures: dict[int, JpegDecodeError]
                    ) -> dict[str, Any]:
        """``batch`` with each failed row replaced, in every column, by the next good row."""
        batch = {name: list(values) for name, values in batch.items()}  # the caller's stay intact
        size = len(batch[self.column])
        for index, error in failures.items():
            replacement = next((candidate % size for candidate in range(index + 1, index + size)
                                if candidate % size not in failures), None)
            if replacement is None:
                raise JpegDecodeError(f"{error} (and no other row of this batch of {size} "
                                      "decoded to take its place)") from error
            for values in batch.values():
                values[index] = values[replacement]
            self.substitutions += 1
            _log.warning("HfImageTransform: row %d of the batch replaced by row %d (%d "
                         "replacements so far in process %d): %s", index, replacement,
                         self.substitutions, os.getpid(), error)
        return batch
