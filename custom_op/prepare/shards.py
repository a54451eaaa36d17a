"""One tar shard's work, in a worker: the same shard with every JPEG member prepared.

A shard (``*.tar`` in SRC, WebDataset's format: ``key.jpg``, ``key.cls``, ...)
is read and written as a stream, member by member, so a shard of any size
needs memory for one member only. The output has the same members in the same
order with the same header metadata (name, mode, owner, times, type); JPEG
members are prepared (or kept when prepare_jpeg refuses them, or when
verification fails), every other member is copied byte for byte. The whole
shard is written under a temporary name and renamed, so DST never holds part
of a shard under its final name.

A JPEG member too large to prepare within ``max_memory`` is copied as a
stream, never read whole. A sparse member (``tar --sparse``: GNU's type S, or
the pax formats 0.0, 0.1 and 1.0) is copied as it is stored, its headers and
data blocks byte for byte: tarfile would hand it over expanded, and writing
that back under its sparse headers would corrupt it.

A shard is refused (nothing written, the reason in the summary) when it is
not a tar, when it is truncated, or when a sample key repeats: WebDataset
groups consecutive members by key, so a repeated key would split or merge
samples in training.
"""

from __future__ import annotations

import copy
import io
import os
import posixpath
import tarfile
from typing import BinaryIO, Optional

from .._decode._single import DEFAULT_MAX_MEMORY
from .._core._regular_files import open_regular
from . import atomic
from .files import (SIGNATURE_LENGTH, is_jpeg, largest_preparable,
                    rewrite_jpeg, too_large)
from .items import COPIED, EMPTY_FILE, NOT_A_JPEG, OTHER_MEMBER, SHARD_WRITTEN, Outcome, Task
from .pool import hold_for_test, stop_requested
from .whole_file import Interrupted, whole_file_outcomes

#: Member names that say "JPEG": one that is not a JPEG by content is listed as a copy.
_JPEG_SUFFIXES = (".jpg", ".jpeg")
# A tar ends with two zero blocks; without them the shard was cut short (at a member boundary,
# or inside a header, which tarfile alone would take for the end).
_END_OF_ARCHIVE = 2 * tarfile.BLOCKSIZE
_READ_SIZE = 1 << 16
#: Why a sparse member is copied as stored (it is listed under this reason, whatever its name).
SPARSE_MEMBER = ("a sparse member (tar --sparse): copied as stored, headers and data blocks "
                 "unchanged, not prepared")


class ShardRefused(Exception):
    """The shard cannot be written faithfully; the message says why."""


class _Prefixed:
    """A file object reading ``head`` and then the rest of ``stream``, for tarfile.addfile."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self.head, self.stream = head, stream

    def read(self, size: int = -1) -> bytes:
        if not self.head:
            return self.stream.read(size)
        if size < 0:
            data, self.head = self.head + self.stream.read(), b""
            return data
        data, self.head = self.head[:size], self.head[size:]
        return data + self.stream.read(size - len(data)) if size > len(data) else data


class _Keys:
    """Refuses a member name seen before, or a sample key that comes back after another key."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.finished: set[str] = set()
        self.current: Optional[str] = None

    def check(self, name: str) -> None:
        if name in self.names:
            raise ShardRefused(f"duplicate member {name!r}")
        self.names.add(name)
        folder, base = posixpath.split(name)
        if "." not in base:
            return  # WebDataset ignores members without an extension
        key = posixpath.join(folder, base.split(".", 1)[0])
        if key != self.current:
            if key in self.finished:
                raise ShardRefused(f"duplicate key {key!r}: member {name!r} comes after "
                                   "another sample's members")
            if self.current is not None:
                self.finished.add(self.current)
            self.current = key


def _check_end(raw: BinaryIO, end: int, size: int) -> None:
    """Requires nothing but zeros from ``end`` on, and at least the two end-of-archive blocks."""
    raw.seek(end)
    while block := raw.read(_READ_SIZE):
        if block.count(0) != len(block):
            raise ShardRefused(f"truncated or damaged tar: unreadable header at byte {end}")
    if size - end < _END_OF_ARCHIVE:
        raise ShardRefused(f"truncated tar: it ends at byte {size} without the end-of-archive "
                           f"blocks (the last complete member ends at byte {end})")


def _copy_member(writer: tarfile.TarFile, info: tarfile.TarInfo, data: bytes) -> None:
    """Writes ``info`` with new content ``data`` (only the size changes in the header)."""
    new = copy.copy(info)
    new.size = len(data)
    new.pax_headers = {key: value for key, value in info.pax_headers.items() if key != "size"}
    writer.addfile(new, io.BytesIO(data))


def _copy_stored(source: BinaryIO, start: int, end: int, writer: tarfile.TarFile) -> None:
    """Appends bytes ``start`` to ``end`` of the source archive to ``writer``'s, unchanged.

    A member's stored form is a whole number of blocks (its headers, then its
    data padded to a block), so the output stays a sequence of blocks;
    ``writer.offset`` advances as TarFile.addfile advances it.
    """
    source.seek(start)
    remaining = end - start
    while remaining:
        chunk = source.read(min(_READ_SIZE, remaining))
        if not chunk:
            raise ShardRefused(f"truncated tar: it ends inside a member, at byte {end - remaining}")
        writer.fileobj.write(chunk)
        remaining -= len(chunk)
    writer.offset += end - start


def _sparse_member(shard: str, info: tarfile.TarInfo, stored: BinaryIO, end: int,
                   writer: tarfile.TarFile) -> Outcome:
    """Copies a sparse member as stored, from its first header (``info.offset``: a pax or GNU
    long-name header when it has one) to the end of its data (``end``)."""
    _copy_stored(stored, info.offset, end, writer)
    size = end - info.offset
    return Outcome(f"{shard}:{info.name}", COPIED, SPARSE_MEMBER, size, size, member=True)


def _member(shard: str, info: tarfile.TarInfo, reader: tarfile.TarFile,
            writer: tarfile.TarFile, verify: bool, max_memory: int) -> Outcome:
    """Writes one regular member to ``writer``; what happened to it."""
    path = f"{shard}:{info.name}"
    stream = reader.extractfile(info)
    head = stream.read(SIGNATURE_LENGTH)
    if is_jpeg(head) and info.size > largest_preparable(max_memory):
        writer.addfile(info, _Prefixed(head, stream))  # tarfile copies it in small pieces
        return Outcome(path, COPIED, too_large(max_memory), info.size, info.size, member=True)
    if is_jpeg(head):
        data = head + stream.read()
        rewrite = rewrite_jpeg(data, verify, max_memory)
        _copy_member(writer, info, rewrite.data)
        return Outcome(path, rewrite.kind, rewrite.reason, len(data), len(rewrite.data),
                       rewrite.was_progressive, verify_seconds=rewrite.verify_seconds,
                       member=True)
    writer.addfile(info, _Prefixed(head, stream))
    if info.name.lower().endswith(_JPEG_SUFFIXES):
        return Outcome(path, COPIED, NOT_A_JPEG if info.size else EMPTY_FILE, info.size,
                       info.size, member=True)
    return Outcome(path, OTHER_MEMBER, "", info.size, info.size, member=True)


def _rewrite(task: Task, temporary: str, verify: bool, max_memory: int,
             outcomes: list[Outcome]) -> None:
    """Streams the shard ``task.source`` into ``temporary``, member by member."""
    keys = _Keys()
    where = ""  # where reading stopped, for the reason of a refusal
    # ``stored`` reads sparse members as they are stored, beside the stream tarfile parses.
    with open_regular(task.source) as raw_file, open_regular(task.source) as stored_file, \
            open(temporary, "wb") as out:
        # Buffered readers over the regular files (open_regular refuses a FIFO put in place).
        raw, stored = io.BufferedReader(raw_file), io.BufferedReader(stored_file)
        size = os.fstat(raw.fileno()).st_size
        try:
            with tarfile.open(fileobj=raw, mode="r|") as reader, \
                    tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as writer:
                for members, info in enumerate(reader):
                    hold_for_test(members)
                    if stop_requested():
                        raise Interrupted
                    where = f" in member {info.name!r}"
                    keys.check(info.name)
                    if info.issparse():
                        # reader.offset is already past the member's stored data.
                        outcomes.append(_sparse_member(task.relative, info, stored,
                                                       reader.offset, writer))
                    elif info.isfile():
                        outcomes.append(_member(task.relative, info, reader, writer, verify,
                                                        max_memory))
                    else:
                        writer.addfile(info)  # folders, links: their header is all there is
                    where = f" after member {info.name!r}"
                end = reader.offset
        except tarfile.ReadError as error:
            raise ShardRefused(f"truncated or not a tar{where}: {error}") from None
        _check_end(raw, end, size)


def handle_shard(task: Task, verify: bool,
                 max_memory: int = DEFAULT_MAX_MEMORY) -> list[Outcome]:
    """Writes one shard's output; the outcomes of its members and of the shard.

    Never raises for a bad shard: it is refused (nothing written under its name)
    with the reason.
    """
    def write(outcomes: list[Outcome], start: float) -> Outcome:
        atomic.replace_atomically(
            task, lambda temporary: _rewrite(task, temporary, verify, max_memory, outcomes),
            outcomes)
        return Outcome(task.relative, SHARD_WRITTEN, "", task.size, os.path.getsize(task.destination))

    return whole_file_outcomes(task, write, ShardRefused)
