"""Reading a path that came from data: regular files only, never blocking, never unbounded.

A path in a dataset row (Hugging Face's ``{"bytes": None, "path": ...}``) or a
file listed under prepare's SRC may name anything by the time it is opened: a
FIFO (whose plain ``open`` waits for a writer for ever), a device such as
``/dev/zero`` (whose ``read()`` never ends), or a file far larger than the
decoders' memory limit. ``open_regular`` opens without blocking
(``O_NONBLOCK``, which a FIFO honours at open) and keeps the descriptor only
when ``fstat`` says it is a regular file; ``read_bounded`` reads no more than
a limit. Used by custom_op.prepare (every read of SRC) and by
custom_op.datasets' ``hf_image`` (a row's path).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO, Optional

from ._errors import JpegDecodeError

#: Flags of every open: no blocking on a FIFO, no controlling terminal from a tty, not inherited.
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a folder"))


class NotRegularFile(OSError):
    """The path names a FIFO, a device, a socket or a folder; ``strerror`` says which."""


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str) -> BinaryIO:
    """``path`` opened for reading (binary, unbuffered), only if it is a regular file.

    Raises:
        NotRegularFile: it is a FIFO, a device, a socket or a folder (never
            waits for a FIFO's writer).
        OSError: it cannot be opened.
    """
    descriptor = os.open(path, _OPEN_FLAGS)
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(errno.EINVAL, f"not a regular file ({_kind(mode)})", path)
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)  # no effect on a regular file; says what we expect
        return os.fdopen(descriptor, "rb", buffering=0)
    except BaseException:
        os.close(descriptor)
        raise


def read_head(file: BinaryIO, count: int) -> bytes:
    """The next ``count`` bytes of ``file``, fewer only at its end."""
    chunks, total = [], 0
    while total < count:
        chunk = file.read(count - total)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def read_at_most(file: BinaryIO, limit: int) -> Optional[bytes]:
    """The rest of ``file``, or None when it holds more than ``limit`` bytes (not read whole)."""
    data = read_head(file, limit + 1)
    return data if len(data) <= limit else None


class FileTooLarge(ValueError):
    """A file holds more than a read may take; ``size`` is at least how many bytes it holds."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size} bytes or more, larger than the limit of {limit} bytes "
                         "(max_memory)")
        self.size = size
        self.limit = limit


def read_bounded(file: BinaryIO, limit: int) -> bytes:
    """The rest of the regular file ``file``, at most ``limit`` bytes.

    A file whose size already says it is larger is refused unread; one that grows while it
    is read is refused after ``limit`` + 1 bytes.

    Raises:
        FileTooLarge: it holds more than ``limit`` bytes.
        OSError: it cannot be read.
    """
    size = os.fstat(file.fileno()).st_size
    data = None if size > limit else read_at_most(file, limit)
    if data is None:
        raise FileTooLarge(max(size, limit + 1), limit)
    return data


def read_regular(path: str, limit: int) -> bytes:
    """All of the regular file ``path``, at most ``limit`` bytes.

    Raises:
        NotRegularFile: ``path`` is not a regular file.
        ValueError: it holds more than ``limit`` bytes (the path, its size and the limit named).
        OSError: it cannot be opened or read.
    """
    with open_regular(path) as file:
        try:
            return read_bounded(file, limit)
        except FileTooLarge as error:
            raise ValueError(f"{path}: {error}") from None


def read_row_path(path: str, limit: int, name: str) -> bytes:
    """A dataset row's image file, for ``hf_image``: what is not a regular file of at most
    ``limit`` bytes is the row's bad data (JpegDecodeError naming ``name``), which
    ``on_error`` handles like a damaged image; a missing or unreadable file stays an OSError."""
    try:
        return read_regular(path, limit)
    except NotRegularFile as error:
        raise JpegDecodeError(f"{name}: the row's path {path!r} is {error.strerror}, "
                              "not read") from None
    except ValueError as error:
        raise JpegDecodeError(f"{name}: the row's file is too large to read: {error}") from None
