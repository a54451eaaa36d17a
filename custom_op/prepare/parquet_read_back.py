"""``--verify`` for a parquet file: the written file read back, row by row, against the source.

After the rewrite (parquet.py) the temporary output is read again, in slices
of a few MB per row group, beside the same rows of the source; every field
of every row must hold the source's value (parquet_check.same_values: bits,
so NaN equals NaN), except the bytes of an image, which must be the source's
bytes or a prepared file with the same pixels, the same metadata segments and
restart markers (files.verify_rewrite, the check files and shard members get).
INT96 columns are compared in both units the reader offers (parquet_check),
which together fix every stored value. Anything else refuses the file:
nothing is written under its name.
"""

from __future__ import annotations

import itertools
from typing import Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from .files import is_jpeg, verify_rewrite
from .parquet_check import ParquetRefused, int96_columns, same_values

#: Bytes of a row group compared at a time.
_SLICE_BYTES = 8 << 20


def _open(path, unit: Optional[str]) -> pq.ParquetFile:
    # No pre-buffering: a row group's column chunks are then read as the slices need them.
    return pq.ParquetFile(path, coerce_int96_timestamp_unit=unit, pre_buffer=False)


def _image_problem(before: Optional[bytes], after: Optional[bytes],
                   max_memory: int) -> Optional[str]:
    if before == after:
        return None
    if before is None or after is None or not is_jpeg(before):
        return "the image's bytes changed"
    return verify_rewrite(before, after, max_memory)


def _compare_images(before: pa.Array, after: pa.Array, where: str, first_row: int,
                    max_memory: int) -> None:
    """One slice of an image column: other fields by value, each image by pixels."""
    if pa.types.is_struct(before.type):
        if not same_values(before.is_valid(), after.is_valid()):
            raise ParquetRefused(f"verification: {where}: a row's image became null or not")
        for index in range(before.type.num_fields):
            name = before.type.field(index).name
            if name != "bytes" and not same_values(before.field(index), after.field(index)):
                raise ParquetRefused(f"verification: {where}: the field {name!r} differs from "
                                     "the source's")
        before, after = before.field("bytes"), after.field("bytes")
    for row, (old, new) in enumerate(zip(before.to_pylist(), after.to_pylist())):
        problem = _image_problem(old, new, max_memory)
        if problem is not None:
            raise ParquetRefused(f"verification: {where}[{first_row + row}]: {problem}")


def _compare_slice(before: pa.RecordBatch, after: pa.RecordBatch, images: Sequence[str],
                   first_row: int, max_memory: int) -> None:
    if before.schema != after.schema or before.num_rows != after.num_rows:
        raise ParquetRefused(f"verification: rows from {first_row}: another shape was read back")
    for name in before.schema.names:
        old, new = before.column(name), after.column(name)
        if name in images:
            _compare_images(old, new, name, first_row, max_memory)
        elif not same_values(old, new):
            raise ParquetRefused(f"verification: column {name!r} differs from the source's in "
                                 f"rows {first_row}-{first_row + before.num_rows - 1}")


def _slice_rows(metadata: pq.FileMetaData, group: int) -> int:
    row_group = metadata.row_group(group)
    return max(1, row_group.num_rows * _SLICE_BYTES // max(row_group.total_byte_size, 1))


def _compare_all(before: pq.ParquetFile, after: pq.ParquetFile, images: Sequence[str],
                 max_memory: int, columns: Optional[list[str]] = None) -> None:
    first_row = 0
    for group in range(before.num_row_groups):
        rows = _slice_rows(before.metadata, group)
        pairs = itertools.zip_longest(
            before.iter_batches(rows, row_groups=[group], columns=columns, use_threads=False),
            after.iter_batches(rows, row_groups=[group], columns=columns, use_threads=False))
        for old, new in pairs:
            if old is None or new is None:
                raise ParquetRefused(f"verification: row group {group} has another row count")
            _compare_slice(old, new, images, first_row, max_memory)
            first_row += old.num_rows


def read_back(source, written: str, images: Sequence[str], unit: Optional[str],
              max_memory: int) -> None:
    """Compares every row of ``written`` with ``source``'s; raises ParquetRefused if one differs.

    Args:
        source: The source file (a path or an open binary file).
        written: The path of the rewritten file.
        images: The image columns (prepared, so compared by pixels).
        unit: The INT96 unit the rewrite read with (None: the file has no INT96 column).
        max_memory: The decoders' limit for the pixel comparison.
    """
    _compare_all(_open(source, unit), _open(written, unit), images, max_memory)
    if unit is not None:
        other = "us" if unit == "ns" else "ns"
        timestamps = int96_columns(_open(source, None))
        _compare_all(_open(source, other), _open(written, other), (), max_memory, timestamps)
