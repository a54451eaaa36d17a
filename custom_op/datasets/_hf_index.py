"""A Hugging Face dataset's MCU-row indexes as a column of its own, its images untouched."""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence

from .._core._errors import JpegDecodeError
from .._decode._single import JPEG_SIGNATURE
from .._index._jpeg_index import jpeg_index
from .._index._sidecar import SidecarError, decode_sidecar, sidecar_of_source
from ._huggingface import HF_OPTIONS
from ._stored_images import stored_bytes
from ._loading import read_file

__all__ = ["add_index_column"]

#: Rows read per step of the pass that builds the indexes.
_ROWS_PER_STEP = 256


def _row_index(value: Any) -> Optional[bytes]:
    """A row's image's index, or None (not a JPEG, not indexable, or no image)."""
    try:
        raw, _ = stored_bytes(value, None, HF_OPTIONS.max_memory)
        return jpeg_index(raw) if raw.startswith(JPEG_SIGNATURE) else None
    except (JpegDecodeError, OSError):
        return None


def _built(dataset: Any, column: str) -> list[Optional[bytes]]:
    """Every row's index, built now from the image column read undecoded."""
    images = dataset.select_columns([column])
    feature = images.features[column]
    if getattr(feature, "decode", False):
        images = images.cast_column(column, type(feature)(decode=False))
    indexes: list[Optional[bytes]] = []
    for start in range(0, len(images), _ROWS_PER_STEP):
        indexes += [_row_index(value) for value in images[start:start + _ROWS_PER_STEP][column]]
    return indexes


def _from_sidecars(parquet_files: Sequence[str], rows: int) -> list[Optional[bytes]]:
    """The rows' indexes read from the sidecars of the parquet files, in order."""
    indexes: list[Optional[bytes]] = []
    for path in parquet_files:
        sidecar = sidecar_of_source(str(path))
        try:
            stamp, entries = decode_sidecar(bytes(read_file(sidecar)))
        except (OSError, SidecarError) as error:
            raise ValueError(f"add_index_column(): {sidecar}: {error} (write it with python -m "
                             "custom_op.prepare --index-only)") from None
        stat = os.stat(path)
        if stamp != (stat.st_size, stat.st_mtime_ns):
            raise ValueError(f"add_index_column(): {sidecar} describes another version of "
                             f"{path}: run python -m custom_op.prepare --index-only again")
        indexes += [entries[str(row)].index if str(row) in entries else None
                    for row in range(_rows_of(path))]
    if len(indexes) != rows:
        raise ValueError(f"add_index_column(): the parquet files hold {len(indexes)} rows, the "
                         f"dataset {rows}: pass the files it was loaded from, in its order")
    return indexes


def _rows_of(path: str) -> int:
    """The parquet file's row count, from its footer."""
    import pyarrow.parquet as pq  # only with parquet files

    return pq.ParquetFile(path).metadata.num_rows


def add_index_column(dataset: Any, column: str = "image", index_column: str = "jpeg_index", *,
                     parquet_files: Optional[Sequence[str]] = None) -> Any:
    """The dataset with each row's MCU-row index in a new column, the images untouched.

    The column is added with ``Dataset.add_column`` (Arrow tables joined side by
    side): the image column is neither decoded nor rewritten. Give it to
    :class:`HfImageTransform` or :class:`HfRows` as ``index_column`` and every
    crop skips the rows above its window. A row whose image is not a JPEG, or
    cannot be indexed (progressive, restart markers), holds None.

    Args:
        dataset: A map-style ``datasets.Dataset``.
        column: The image column (an ``Image`` feature, decoded or not, or bytes).
        index_column: The new column's name.
        parquet_files: The parquet files the dataset was loaded from, in its
            order: the indexes are read from their sidecars
            (``python -m custom_op.prepare --index-only``) instead of built.

    Returns:
        A new ``datasets.Dataset`` (``dataset`` itself is unchanged).

    Raises:
        ValueError: ``column`` is missing or ``index_column`` exists; a
            sidecar is missing, damaged, stale, or its rows do not match.

    Example:
        >>> train = add_index_column(train)
        >>> train.set_transform(HfImageTransform(v2.RandomResizedCrop(224),
        ...                                      index_column="jpeg_index"))
    """
    names = dataset.column_names
    if column not in names:
        raise ValueError(f"add_index_column(): no column {column!r}; the columns are "
                         f"{sorted(names)}")
    if index_column in names:
        raise ValueError(f"add_index_column(): the dataset has a column {index_column!r} already")
    indexes = (_built(dataset, column) if parquet_files is None
               else _from_sidecars(parquet_files, len(dataset)))
    return dataset.add_column(index_column, indexes)
