"""One parquet file's work, in a worker: the same file, each image of its image column prepared.

A Hub dataset is a folder of parquet files (``data/train-00000-of-00004.parquet``
...) whose image column is the ``datasets.Image`` feature's storage, a struct
``{bytes: binary, path: string}``, or a plain binary column of encoded images.
:func:`custom_op.prepare.prepare_tree` hands each ``*.parquet`` file of SRC
whole to one worker, as it hands a tar shard (tree.handle_task), which
rewrites it here, row group by row group (memory for one row group), into a
file with:

- the same Arrow schema and schema metadata (the ``huggingface`` features),
  the same rows in the same order, the same row-group sizes, and every other
  column's values unchanged; each column's compression codec and dictionary
  use are carried over;
- every JPEG of the image column(s) rewritten by :func:`custom_op.prepare_jpeg`
  (same pixels, restart markers), its ``path`` unchanged; a row that is not a
  JPEG (a PNG), that prepare_jpeg refuses (damaged) or that fails ``verify``
  keeps its bytes and is counted in the summary under ``FILE:COLUMN[ROW]``.

A file that is not parquet (or is truncated), or has no column named by
``image_column``, is refused with the reason and nothing is written under its
name; a parquet file without any image column, and every parquet file when
pyarrow is not installed, is copied byte for byte with the reason. Every run
requires the written file to store every column as the source does (the
parquet schema's physical and logical types, INT96 read in a unit that holds
its values and written back as INT96: parquet_check.py). A row group is read
once, its image column rewritten in slices of _SLICE_BYTES, and a group that
cannot be held twice within half of ``max_memory`` is refused with the limit
it needs. With ``verify`` every image is checked as prepare_tree checks
files, and the written file is read back row by row against the source
(parquet_read_back.py). The output is written, finished (identity, mode,
times, fsync) and renamed by atomic.replace_atomically, as every output is.

This module imports pyarrow; tree.py imports it only when a parquet file
comes up, so ``import custom_op.prepare`` does not.
"""

from __future__ import annotations

import json
import os
import time
from typing import BinaryIO, Optional, Sequence

try:  # a dependency of datasets, not of custom_op: only parquet datasets need it
    import pyarrow as pa
    import pyarrow.parquet as pq
except ModuleNotFoundError:  # every parquet file is then copied unchanged (NO_PYARROW)
    pa = pq = None

from .._decode._single import DEFAULT_MAX_MEMORY
from .._core._regular_files import open_regular
from . import atomic, pool
from .files import is_jpeg, rewrite_jpeg
from .items import (COPIED, EMPTY_FILE, NO_IMAGE_BYTES, NO_IMAGE_COLUMN, NOT_A_JPEG, SHARD_WRITTEN,
                    Outcome, Task)
from .whole_file import Interrupted, whole_file_outcomes

if pa is not None:
    from .parquet_check import ParquetRefused, check_types, int96_columns, int96_unit
    from .parquet_read_back import read_back
else:
    class ParquetRefused(Exception):  # type: ignore[no-redef]  # never raised without pyarrow
        """The parquet file cannot be rewritten faithfully (see parquet_check)."""

__all__ = ["NO_IMAGE_BYTES", "NO_IMAGE_COLUMN", "NO_PYARROW", "handle_parquet"]

NO_PYARROW = "a parquet file, not rewritten: pyarrow is not installed (pip install pyarrow)"
_ARROW_SCHEMA = b"ARROW:schema"  # the key-value entry holding a writer's Arrow schema
_CHUNKING = b"content_defined_chunking"  # the entry of a file written with content-defined pages
#: Bytes of images turned into Python objects at a time (a slice of the image column).
_SLICE_BYTES = 8 << 20
#: The writer's names for the codecs the file metadata reports.
_CODECS = {"UNCOMPRESSED": "NONE", "LZ4_RAW": "LZ4"}


def _is_image_struct(kind: pa.DataType) -> bool:
    """Whether ``kind`` is datasets' Image storage: struct {bytes: binary, path: string}."""
    if not pa.types.is_struct(kind) or {kind.field(i).name for i in range(kind.num_fields)} != {
            "bytes", "path"}:
        return False
    return _is_binary(kind.field("bytes").type)


def _is_binary(kind: pa.DataType) -> bool:
    return pa.types.is_binary(kind) or pa.types.is_large_binary(kind)


def image_columns(schema: pa.Schema, image_column: Optional[str]) -> list[str]:
    """The columns to rewrite: ``image_column``, or every Image-feature struct column.

    Raises ParquetRefused when ``image_column`` is missing or holds no image bytes.
    """
    if image_column is None:
        return [field.name for field in schema if _is_image_struct(field.type)]
    if image_column not in schema.names:
        raise ParquetRefused(f"no column {image_column!r} (the columns are "
                             f"{', '.join(schema.names)})")
    kind = schema.field(image_column).type
    if not (_is_image_struct(kind) or _is_binary(kind)):
        raise ParquetRefused(f"column {image_column!r} is {kind}, neither binary nor a "
                             "struct {bytes: binary, path: string}")
    return [image_column]


def _writer_options(metadata: pq.FileMetaData) -> dict:
    """The source's format version, and each column's codec and dictionary use, for the writer."""
    options: dict = {"version": metadata.format_version}
    if metadata.num_row_groups == 0:
        return options
    first = metadata.row_group(0)
    chunks = [first.column(index) for index in range(first.num_columns)]
    options["compression"] = {chunk.path_in_schema: _CODECS.get(chunk.compression,
                                                                chunk.compression)
                              for chunk in chunks}
    options["use_dictionary"] = [chunk.path_in_schema for chunk in chunks
                                 if chunk.has_dictionary_page]
    if first.sorting_columns:
        options["sorting_columns"] = first.sorting_columns
    chunking = (metadata.metadata or {}).get(_CHUNKING)
    if chunking is not None:  # datasets writes Hub files so; the writer records it again
        try:
            options["use_content_defined_chunking"] = json.loads(chunking)
        except ValueError:
            raise ParquetRefused(f"unreadable {_CHUNKING.decode()} entry: {chunking!r}") from None
    return options


class _Images:
    """Rewrites the images of one column of one row group; collects their outcomes."""

    def __init__(self, task: Task, verify: bool, max_memory: int,
                 outcomes: list[Outcome]) -> None:
        self.task, self.verify, self.max_memory = task, verify, max_memory
        self.outcomes = outcomes

    def one(self, data: Optional[bytes], where: str) -> Optional[bytes]:
        """The bytes to write for one row's image (its own when not prepared)."""
        path = f"{self.task.relative}:{where}"
        if data is None:
            self.outcomes.append(Outcome(path, COPIED, NO_IMAGE_BYTES, member=True))
            return None
        if not is_jpeg(data):
            reason = NOT_A_JPEG if data else EMPTY_FILE
            self.outcomes.append(Outcome(path, COPIED, reason, len(data), len(data), member=True))
            return data
        rewrite = rewrite_jpeg(data, self.verify, self.max_memory)
        self.outcomes.append(Outcome(path, rewrite.kind, rewrite.reason, len(data),
                                     len(rewrite.data), rewrite.was_progressive,
                                     verify_seconds=rewrite.verify_seconds, member=True))
        return rewrite.data

    def column(self, column: pa.ChunkedArray, name: str, first_row: int) -> pa.ChunkedArray:
        """``column`` (binary, or the Image struct) with every image rewritten, in slices of
        _SLICE_ROWS rows: only one slice's images are ever Python objects at once."""
        rows = max(1, len(column) * _SLICE_BYTES // max(column.nbytes, 1))
        pieces = [self._piece(column.slice(start, rows).combine_chunks(), name, first_row + start)
                  for start in range(0, len(column), rows)]
        return pa.chunked_array(pieces, type=column.type)

    def _piece(self, array: pa.Array, name: str, first_row: int) -> pa.Array:
        kind = array.type
        struct = pa.types.is_struct(kind)
        source = array.field("bytes") if struct else array
        valid = array.is_valid().to_pylist() if struct else [True] * len(array)
        written = [self.one(data if row_valid else None, f"{name}[{first_row + row}]")
                   for row, (data, row_valid) in enumerate(zip(source.to_pylist(), valid))]
        new_bytes = pa.array(written, type=kind.field("bytes").type if struct else kind)
        if not struct:
            return new_bytes
        children = [new_bytes if kind.field(i).name == "bytes" else array.field(i)
                    for i in range(kind.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(kind),
                                          mask=array.is_null() if array.null_count else None)


def _file_only_entries(reader: pq.ParquetFile) -> dict:
    """Key-value entries of the file that its Arrow schema does not carry (datasets adds
    ``content_defined_chunking`` so): written again as they are."""
    schema_entries = reader.schema_arrow.metadata or {}
    return {key: value for key, value in (reader.metadata.metadata or {}).items()
            if key != _ARROW_SCHEMA and key not in schema_entries}


def _check_held(group: int, group_bytes: int, max_memory: int) -> int:
    """What one image's rewrite may use while row group ``group`` is held; refuses a group that
    does not fit: held twice (the group read, and its rewritten image column), it may take at
    most half of ``max_memory``, so that ``--workers x --max-memory`` bounds the whole run."""
    held = 2 * group_bytes
    if held > max_memory // 2:
        raise ParquetRefused(
            f"row group {group} holds {group_bytes} bytes of data; rewriting it holds that "
            f"twice ({held} bytes), more than half of max_memory ({max_memory} bytes): raise "
            f"--max-memory to at least {2 * held} bytes, or write the file with smaller row "
            "groups")
    return max_memory - held


def _rewrite(task: Task, temporary: str, verify: bool, max_memory: int, columns: Sequence[str],
             source: BinaryIO, unit: Optional[str], outcomes: list[Outcome]) -> None:
    """Writes ``source`` into ``temporary``, one row group at a time; checks what was written."""
    reader = pq.ParquetFile(source, coerce_int96_timestamp_unit=unit, pre_buffer=False)
    images = _Images(task, verify, max_memory, outcomes)
    schema = reader.schema_arrow
    options = _writer_options(reader.metadata)
    # INT96 is written back as INT96, and the Arrow schema entry only where the source has one.
    options.update(use_deprecated_int96_timestamps=unit is not None,
                   store_schema=_ARROW_SCHEMA in (reader.metadata.metadata or {}))
    first_row = 0
    with pq.ParquetWriter(temporary, schema, **options) as writer:
        for group in range(reader.num_row_groups):
            if pool.stop_requested():
                raise Interrupted
            _check_held(group, reader.metadata.row_group(group).total_byte_size, max_memory)
            table = reader.read_row_group(group)
            # Arrow may hold more than the file says (dictionary-encoded values expand).
            images.max_memory = _check_held(group, table.nbytes, max_memory)
            for name in columns:
                index = schema.get_field_index(name)
                table = table.set_column(index, schema.field(index),
                                         images.column(table.column(index), name, first_row))
            # One write per row group, of all its rows: the output keeps the source's groups.
            writer.write_table(table, row_group_size=max(table.num_rows, 1))
            first_row += table.num_rows
            del table
        extra = _file_only_entries(reader)
        if extra:
            writer.add_key_value_metadata(extra)
    written = pq.ParquetFile(temporary)
    check_types(reader, written)  # always: cheap (the footers), and types must never change
    if verify:
        read_back(source, temporary, columns, unit, max_memory)


def _copy_unchanged(task: Task, reason: str, start: float) -> Outcome:
    """Copies the file byte for byte, as prepare copies any file it cannot rewrite."""
    outcome = Outcome(task.relative, COPIED, reason, task.size, task.size)
    atomic.replace_atomically(task, atomic.copy_from(task.source), [outcome])
    return outcome._replace(seconds=time.perf_counter() - start)


def _write(task: Task, source: BinaryIO, verify: bool, max_memory: int,
           image_column: Optional[str], outcomes: list[Outcome], start: float) -> Outcome:
    """The file's output, or a copy of it when it has no image column."""
    try:
        probe = pq.ParquetFile(source)
    except pa.ArrowException as error:
        raise ParquetRefused(f"not a parquet file, or truncated: {error}") from None
    columns = image_columns(probe.schema_arrow, image_column)
    if not columns:
        return _copy_unchanged(task, NO_IMAGE_COLUMN, start)
    unit = int96_unit(source, int96_columns(probe))
    atomic.replace_atomically(task, lambda temporary: _rewrite(
        task, temporary, verify, max_memory, columns, source, unit, outcomes), outcomes)
    return Outcome(task.relative, SHARD_WRITTEN, "", task.size, os.path.getsize(task.destination))


def handle_parquet(task: Task, verify: bool, max_memory: int = DEFAULT_MAX_MEMORY,
                   image_column: Optional[str] = None) -> list[Outcome]:
    """Writes one parquet file's output; the outcomes of its images and of the file.

    Never raises for a bad file: it is refused (nothing written under its name)
    with the reason. Without pyarrow the file is copied unchanged (NO_PYARROW).
    """
    def write(outcomes: list[Outcome], start: float) -> Outcome:
        if pa is None:
            return _copy_unchanged(task, NO_PYARROW, start)
        with open_regular(task.source) as source:  # a FIFO put in its place: refused
            return _write(task, source, verify, max_memory, image_column, outcomes, start)

    # A damaged page or footer found while reading refuses the file; I/O fails it.
    return whole_file_outcomes(task, write, ParquetRefused,
                               lambda error: pa is not None and isinstance(error, pa.ArrowException))
