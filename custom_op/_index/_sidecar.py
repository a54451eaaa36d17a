"""The sidecar file of MCU-row indexes: one per folder of JPEGs, tar shard or
parquet file, written by ``python -m custom_op.prepare --index-only SRC`` and read by the
index cache (_cache.py). The JPEGs themselves are never touched.

Format, version 2 (all integers little-endian)::

    magic      8 bytes  b"CJMIDX\\r\\n"
    version    u32      2 (its indexes are of the core's index format 3)
    stamp      u64 size, i64 mtime_ns   of the shard or parquet file it describes (0, 0 for a folder)
    count      u32      entries
    entries    count x (u16 name length, name in UTF-8, u64 size, i64 mtime_ns,
                        u32 index length, index bytes)
    checksum   u32      CRC-32 of every byte before it

An entry names a file of the folder, a member of the shard, or a row of the parquet file
(its number in decimal), with the size and mtime (0 for members and rows) it had when its
index was built; an index length of 0 records a file that cannot be indexed. Another
version, a bad checksum or a length that runs past the end makes the whole sidecar invalid.
A name longer than the u16 field holds cannot be recorded (``name_fits``), and a sidecar is
read only through ``read_sidecar``: a regular file, opened without blocking, of at most a
bounded size.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import zlib
from typing import Iterable, Optional

from .._core._regular_files import read_regular

#: A folder's sidecar: a file inside the folder, hidden, which no image listing takes.
FOLDER_SIDECAR = ".custom_op-index.cjmi"
#: A shard's or parquet file's sidecar is its name with this appended.
SIDECAR_SUFFIX = ".cjmi"
#: Bumped with the core's index format, so that a sidecar of indexes the core would refuse
#: one by one is refused as a whole: prepare --index-only rewrites it, the cache builds instead.
SIDECAR_VERSION = 2
_MAGIC = b"CJMIDX\r\n"
_HEAD = struct.Struct("<8sIQqI")
_ENTRY = struct.Struct("<QqI")
_NAME_LENGTH = struct.Struct("<H")
_CHECKSUM = struct.Struct("<I")
#: The longest name, in UTF-8 bytes, that an entry's u16 name length can record.
MAX_NAME_BYTES = 0xFFFF
#: The largest sidecar read_sidecar reads unless told otherwise: the index cache's default
#: budget, beyond which its entries could not be held anyway.
DEFAULT_MAX_SIDECAR_BYTES = 256 << 20


class SidecarError(ValueError):
    """A sidecar that is not a valid one: another version, damaged, or cut short."""


@dataclasses.dataclass(frozen=True)
class SidecarEntry:
    """One file's (member's, row's) index as a sidecar records it; ``index`` None: not
    indexable."""

    name: str
    size: int
    mtime_ns: int
    index: Optional[bytes]


def sidecar_of_source(path: str) -> str:
    """The sidecar of a tar shard or parquet file: beside it, its name + ``.cjmi``."""
    return path + SIDECAR_SUFFIX


def sidecar_of_folder(folder: str) -> str:
    """The sidecar of a folder's JPEGs: a hidden file inside the folder."""
    return os.path.join(folder, FOLDER_SIDECAR)


def _name_bytes(name: str) -> bytes:
    return name.encode("utf-8", "surrogateescape")


def name_fits(name: str) -> bool:
    """Whether an entry can record ``name`` (at most MAX_NAME_BYTES in UTF-8)."""
    return len(_name_bytes(name)) <= MAX_NAME_BYTES


def read_sidecar(path: str, max_bytes: int = DEFAULT_MAX_SIDECAR_BYTES) -> bytes:
    """The bytes of the sidecar at ``path``, for decode_sidecar.

    Only a regular file is read, opened without blocking (a FIFO or device planted under a
    sidecar's name is refused, never waited on), and only when it holds at most
    ``max_bytes``: a sidecar is read whole, so its size is bounded before it is read.

    Raises:
        OSError: there is no sidecar, or it is not a regular file, or cannot be read.
        SidecarError: it holds more than ``max_bytes``.
    """
    try:
        return read_regular(path, max_bytes)
    except ValueError as error:  # larger than max_bytes: refused as the sidecar's own fault
        raise SidecarError(f"the sidecar is too large: {error}") from None


def encode_sidecar(stamp: tuple[int, int], entries: Iterable[SidecarEntry]) -> bytes:
    """The sidecar's bytes; ``stamp`` is the (size, mtime_ns) of the shard or parquet file,
    (0, 0) for a folder."""
    entries = list(entries)
    parts = [_HEAD.pack(_MAGIC, SIDECAR_VERSION, stamp[0], stamp[1], len(entries))]
    for entry in entries:
        name = _name_bytes(entry.name)
        if len(name) > MAX_NAME_BYTES:
            raise ValueError(f"a sidecar entry's name holds at most {MAX_NAME_BYTES} bytes, "
                             f"got {len(name)} (check name_fits first)")
        index = entry.index or b""
        parts += [_NAME_LENGTH.pack(len(name)), name,
                  _ENTRY.pack(entry.size, entry.mtime_ns, len(index)), index]
    body = b"".join(parts)
    return body + _CHECKSUM.pack(zlib.crc32(body))


def decode_sidecar(data: bytes) -> tuple[tuple[int, int], dict[str, SidecarEntry]]:
    """``(stamp, {name: entry})`` of a sidecar's bytes.

    Raises:
        SidecarError: the bytes are not a valid sidecar of this version.
    """
    if len(data) < _HEAD.size + _CHECKSUM.size or not data.startswith(_MAGIC):
        raise SidecarError("not a custom_op index sidecar")
    # A view, not a copy: the sidecar's bytes are held once.
    body = memoryview(data)[:-_CHECKSUM.size]
    (checksum,) = _CHECKSUM.unpack(data[-_CHECKSUM.size:])
    magic, version, size, mtime_ns, count = _HEAD.unpack_from(body)
    if version != SIDECAR_VERSION:
        raise SidecarError(f"sidecar version {version}, this custom_op reads {SIDECAR_VERSION}: "
                           "python -m custom_op.prepare --index-only rewrites it")
    if zlib.crc32(body) != checksum:
        raise SidecarError("the sidecar's checksum does not match its bytes")
    entries: dict[str, SidecarEntry] = {}
    at = _HEAD.size
    try:
        for _ in range(count):
            (length,) = _NAME_LENGTH.unpack_from(body, at)
            name = bytes(body[at + 2:at + 2 + length]).decode("utf-8", "surrogateescape")
            size_, mtime, index_length = _ENTRY.unpack_from(body, at + 2 + length)
            start = at + 2 + length + _ENTRY.size
            if start + index_length > len(body):
                raise SidecarError("the sidecar is cut short")
            index = bytes(body[start:start + index_length]) or None
            entries[name] = SidecarEntry(name, size_, mtime, index)
            at = start + index_length
    except struct.error:
        raise SidecarError("the sidecar is cut short") from None
    if at != len(body):
        raise SidecarError("the sidecar has bytes after its last entry")
    return (size, mtime_ns), entries
