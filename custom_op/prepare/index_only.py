"""``python -m custom_op.prepare --index-only SRC``: the MCU-row indexes of a tree's JPEGs
written as sidecars beside them (custom_op/_index_sidecar.py), the JPEGs untouched.

One sidecar per folder holding JPEGs (a hidden file inside it), per tar shard and per
parquet file (``<name>.cjmi`` beside it). Each is written under a hidden temporary name in
its own folder, flushed to disk, and renamed: a killed run leaves under a sidecar's name
only a complete sidecar, and the temporaries it leaves are removed by the next run, which
skips the sidecars that are current (a folder's lists every JPEG with its size and mtime;
a shard's or parquet file's records the size and mtime it has) and writes the rest.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tarfile
from typing import Callable, Iterator, Optional

from .._decode import JPEG_SIGNATURE
from .._index import jpeg_index
from .._index_sidecar import (FOLDER_SIDECAR, SIDECAR_SUFFIX, SidecarEntry, SidecarError,
                              decode_sidecar, encode_sidecar, sidecar_of_folder,
                              sidecar_of_source)
from .._core._errors import JpegDecodeError
from .atomic import PRIVATE_FOLDER, flush_file, write_bytes

#: A temporary sidecar: hidden, the sidecar's name and the writing process's id.
_TEMPORARY = re.compile(r"^\..*\.cjmi\.\d+\.tmp$")
#: webdataset's split of a member name into the sample's key and the member's suffix.
_KEY_AND_SUFFIX = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")


@dataclasses.dataclass
class IndexSummary:
    """What an --index-only run did: sidecars written and kept (already current), JPEGs
    indexed, JPEGs that cannot be indexed, and the sources that could not be read."""

    written: int = 0
    current: int = 0
    indexed: int = 0
    unindexable: int = 0
    index_bytes: int = 0
    failed: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def report(self) -> str:
        """The summary as the command line prints it."""
        lines = [f"index sidecars: {self.written} written, {self.current} already current; "
                 f"{self.indexed} JPEGs indexed ({self.index_bytes} bytes of indexes), "
                 f"{self.unindexable} cannot be indexed (progressive, restart markers, ...)"]
        lines += [f"  failed: {path}: {reason}" for path, reason in self.failed]
        return "\n".join(lines)


def _index_of(data: bytes) -> Optional[bytes]:
    """The file's index, or None (not indexable, or its header cannot be read)."""
    try:
        return jpeg_index(data)
    except JpegDecodeError:
        return None


def _write_atomically(path: str, data: bytes) -> None:
    """``data`` under ``path``, whole or not at all (see the module's note)."""
    folder, name = os.path.split(path)
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    write_bytes(data)(temporary)
    flush_file(temporary)
    os.replace(temporary, path)


def _current_entries(path: str) -> Optional[tuple[tuple[int, int], dict[str, SidecarEntry]]]:
    """The valid sidecar at ``path``, or None."""
    try:
        with open(path, "rb") as file:
            return decode_sidecar(file.read())
    except (OSError, SidecarError):
        return None


def _folder_jpegs(folder: str, names: list[str]) -> list[tuple[str, os.stat_result]]:
    """The folder's JPEGs by content (names sorted), with their stat."""
    jpegs = []
    for name in sorted(names):
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as file:
                if file.read(len(JPEG_SIGNATURE)) == JPEG_SIGNATURE:
                    jpegs.append((name, os.fstat(file.fileno())))
        except OSError:
            continue
    return jpegs


def _index_folder(folder: str, names: list[str], summary: IndexSummary) -> None:
    jpegs = _folder_jpegs(folder, names)
    if not jpegs:
        return
    sidecar = sidecar_of_folder(folder)
    wanted = {name: (stat.st_size, stat.st_mtime_ns) for name, stat in jpegs}
    found = _current_entries(sidecar)
    if found is not None and {name: (entry.size, entry.mtime_ns) for name, entry in
                              found[1].items()} == wanted:
        summary.current += 1
        return
    entries = []
    for name, (size, mtime_ns) in wanted.items():
        with open(os.path.join(folder, name), "rb") as file:
            entries.append(SidecarEntry(name, size, mtime_ns, _index_of(file.read())))
    _finish(sidecar, (0, 0), entries, summary)


def _finish(sidecar: str, stamp: tuple[int, int], entries: list[SidecarEntry],
            summary: IndexSummary) -> None:
    _write_atomically(sidecar, encode_sidecar(stamp, entries))
    summary.written += 1
    for entry in entries:
        summary.indexed += entry.index is not None
        summary.unindexable += entry.index is None
        summary.index_bytes += len(entry.index or b"")


def _tar_entries(path: str) -> Iterator[SidecarEntry]:
    """Each JPEG member of the shard, named as webdataset names it: key, ".", lower-case
    suffix (what the lane's tar samples look up)."""
    with tarfile.open(path, "r:") as shard:
        for member in shard:
            match = _KEY_AND_SUFFIX.match(member.name)
            if not member.isfile() or match is None:
                continue
            data = shard.extractfile(member).read()
            if data.startswith(JPEG_SIGNATURE):
                yield SidecarEntry(f"{match.group(1)}.{match.group(2).lower()}", len(data), 0,
                                   _index_of(data))


def _parquet_entries(path: str, image_column: Optional[str]) -> Iterator[SidecarEntry]:
    """Each row's image (by its row number in the file) of the parquet file's first image
    column (or ``image_column``)."""
    from . import parquet

    if parquet.pq is None:
        raise ValueError("reading parquet files needs pyarrow: pip install pyarrow")
    reader = parquet.pq.ParquetFile(path)
    columns = parquet.image_columns(reader.schema_arrow, image_column)
    if not columns:
        return
    row = 0
    for group in range(reader.num_row_groups):
        values = reader.read_row_group(group, columns=columns[:1]).column(0).to_pylist()
        for value in values:
            data = value.get("bytes") if isinstance(value, dict) else value
            if data and bytes(data[:3]) == JPEG_SIGNATURE:
                yield SidecarEntry(str(row), len(data), 0, _index_of(bytes(data)))
            row += 1


def _index_source(path: str, entries: Callable[[str], Iterator[SidecarEntry]],
                  summary: IndexSummary) -> None:
    """The sidecar of a shard or parquet file, unless it is current."""
    stat = os.stat(path)
    stamp = (stat.st_size, stat.st_mtime_ns)
    sidecar = sidecar_of_source(path)
    found = _current_entries(sidecar)
    if found is not None and found[0] == stamp:
        summary.current += 1
        return
    _finish(sidecar, stamp, list(entries(path)), summary)


def index_tree(src: str, *, image_column: Optional[str] = None) -> IndexSummary:
    """Writes the index sidecars of every folder of JPEGs, tar shard and parquet file under
    ``src`` (recursively), skipping those already current; the JPEGs are only read.

    Args:
        src: The folder.
        image_column: parquet files: the image column (default: the first struct
            {bytes, path} column).

    Returns:
        An :class:`IndexSummary`.

    Raises:
        ValueError: ``src`` is not a folder.

    Example:
        >>> print(index_tree("train").report())
    """
    if not os.path.isdir(src):
        raise ValueError(f"--index-only: {src!r} is not a folder")
    summary = IndexSummary()
    for folder, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(name for name in dirnames if name != PRIVATE_FOLDER)
        for name in filenames:
            if _TEMPORARY.match(name):  # a killed run's: never under a sidecar's name
                os.unlink(os.path.join(folder, name))
        names = [name for name in filenames if not name.startswith(".")
                 and not name.endswith(SIDECAR_SUFFIX) and name != FOLDER_SIDECAR]
        for name in sorted(names):
            path = os.path.join(folder, name)
            try:
                if name.endswith(".tar"):
                    _index_source(path, _tar_entries, summary)
                elif name.endswith(".parquet"):
                    _index_source(path, lambda p: _parquet_entries(p, image_column), summary)
            except (OSError, tarfile.TarError, ValueError) as error:
                summary.failed.append((path, str(error)))
        try:
            _index_folder(folder, names, summary)
        except OSError as error:
            summary.failed.append((folder, str(error)))
    return summary
