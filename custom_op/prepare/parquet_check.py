"""What a parquet rewrite must keep, checked: stored types, INT96 timestamps, every value.

prepare rewrites a parquet file through Arrow (parquet.py), and Arrow's
defaults are not lossless for every file: INT96 timestamps (Spark's and
Hive's default) are read as timestamp[ns], which wraps a date outside
1677-2262 (9999-12-31, a common "no end date", came back as 1816-03-29) and
would be written back as INT64. So:

- ``int96_unit`` picks, per file, the unit in which every INT96 value of the
  file reads exactly ("ns" when all fit, else "us" when none has a part
  below the microsecond) or refuses the file; the writer stores INT96 again;
- ``check_types`` requires the written file's parquet schema (physical and
  logical type of every column) and key-value metadata to be the source's;
- ``same_values`` compares two Arrow arrays by their bits (floats as the
  integers of the same width), so NaN equals NaN and -0.0 differs from 0.0:
  an unchanged column is seen as unchanged, a changed bit is seen.

Verification (parquet.py) reads INT96 columns of both files in both units,
which together fix every stored value: what is compared is what is stored.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

#: The Arrow key-value entry that holds the writer's Arrow schema: it follows the unit read.
_ARROW_SCHEMA = b"ARROW:schema"
# The widest microsecond count whose nanoseconds still fit in an int64.
_NS_LIMIT_US = (2**63 - 1) // 1000
_FLOAT_BITS = {pa.float16(): pa.int16(), pa.float32(): pa.int32(), pa.float64(): pa.int64()}


class ParquetRefused(Exception):
    """The parquet file cannot be rewritten faithfully; the message says why."""


def int96_columns(reader: pq.ParquetFile) -> list[str]:
    """Top-level columns stored as INT96; refuses INT96 inside a nested column, and a file
    that mixes INT96 with INT64 timestamps (the writer stores all timestamps one way)."""
    schema = reader.schema
    int96, int64_timestamps = [], []
    for index in range(len(schema)):
        column = schema.column(index)
        if column.physical_type == "INT96":
            if "." in column.path:
                raise ParquetRefused(f"column {column.path!r} holds INT96 timestamps inside a "
                                     "nested column, which pyarrow cannot write back as INT96")
            int96.append(column.path)
        elif column.logical_type.type == "TIMESTAMP" or column.converted_type in (
                "TIMESTAMP_MILLIS", "TIMESTAMP_MICROS"):
            int64_timestamps.append(column.path)
    if int96 and int64_timestamps:
        raise ParquetRefused(f"INT96 timestamps ({', '.join(int96)}) beside INT64 ones "
                             f"({', '.join(int64_timestamps)}): pyarrow writes all timestamps of "
                             "a file one way, so one kind would change")
    return int96


def _integers(column: pa.ChunkedArray) -> np.ndarray:
    return column.cast(pa.int64()).fill_null(0).to_numpy()


def int96_unit(source, columns: list[str]) -> Optional[str]:
    """The unit in which every INT96 value of ``columns`` reads exactly; None without any.

    Raises ParquetRefused when a value is outside 1677-2262 (no nanosecond
    int64 holds it) and also has a part below the microsecond (no unit holds it).
    """
    if not columns:
        return None
    in_ns = pq.ParquetFile(source, coerce_int96_timestamp_unit="ns", pre_buffer=False)
    in_us = pq.ParquetFile(source, coerce_int96_timestamp_unit="us", pre_buffer=False)
    all_fit, sub_microsecond = True, False
    for group in range(in_ns.num_row_groups):
        nanoseconds = in_ns.read_row_group(group, columns=columns)
        microseconds = in_us.read_row_group(group, columns=columns)
        for name in columns:
            us, ns = _integers(microseconds.column(name)), _integers(nanoseconds.column(name))
            all_fit = all_fit and bool(np.all(np.abs(us) <= _NS_LIMIT_US))
            # The nanoseconds below the microsecond, exact even where the ns reading wrapped.
            remainder = ns.view(np.uint64) - us.view(np.uint64) * np.uint64(1000)
            sub_microsecond = sub_microsecond or bool(np.any(remainder != 0))
    if all_fit:
        return "ns"
    if not sub_microsecond:
        return "us"
    raise ParquetRefused("INT96 timestamps outside 1677-2262 with nanoseconds: no Arrow unit "
                         "reads them exactly, so they cannot be rewritten without change")


def _key_values(metadata: pq.FileMetaData) -> dict:
    return {key: value for key, value in (metadata.metadata or {}).items()
            if key != _ARROW_SCHEMA}


def check_types(before: pq.ParquetFile, after: pq.ParquetFile) -> None:
    """Raises ParquetRefused unless ``after`` stores every column as ``before`` does."""
    if not after.schema.equals(before.schema):
        raise ParquetRefused("the written file would store other physical or logical types "
                             f"than the source:\n{before.schema}\nbecame\n{after.schema}")
    old, new = _key_values(before.metadata), _key_values(after.metadata)
    if old != new:
        keys = sorted(key.decode("utf-8", "backslashreplace") for key in set(old) | set(new)
                      if old.get(key) != new.get(key))
        raise ParquetRefused("the written file's key-value metadata differs from the source's "
                             f"({', '.join(keys)})")
    if after.num_row_groups != before.num_row_groups:
        raise ParquetRefused(f"the written file has {after.num_row_groups} row groups, not "
                             f"{before.num_row_groups}")
    for group in range(before.num_row_groups):
        if after.metadata.row_group(group).num_rows != before.metadata.row_group(group).num_rows:
            raise ParquetRefused(f"row group {group} of the written file has another row count")


def _bits_type(kind: pa.DataType) -> pa.DataType:
    """``kind`` with every floating-point type replaced by the integer of its width."""
    if kind in _FLOAT_BITS:
        return _FLOAT_BITS[kind]
    if pa.types.is_struct(kind):
        return pa.struct([field.with_type(_bits_type(field.type)) for field in kind])
    if pa.types.is_map(kind):
        return pa.map_(kind.key_field.with_type(_bits_type(kind.key_type)),
                       kind.item_field.with_type(_bits_type(kind.item_type)),
                       keys_sorted=kind.keys_sorted)
    if pa.types.is_fixed_size_list(kind):
        return pa.list_(kind.value_field.with_type(_bits_type(kind.value_type)), kind.list_size)
    if pa.types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(_bits_type(kind.value_type)))
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_bits_type(kind.value_type)))
    if pa.types.is_dictionary(kind):
        return pa.dictionary(kind.index_type, _bits_type(kind.value_type), kind.ordered)
    return kind


def same_values(before: pa.Array, after: pa.Array) -> bool:
    """Whether two arrays hold the same values, bit for bit (NaN == NaN, 0.0 != -0.0)."""
    if before.type != after.type or len(before) != len(after):
        return False
    bits = _bits_type(before.type)
    if bits == before.type:
        return before.equals(after)
    try:
        return before.view(bits).equals(after.view(bits))
    except (pa.ArrowException, NotImplementedError):
        return before.equals(after)  # a layout view cannot express: NaN then counts as differing
