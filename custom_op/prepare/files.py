"""One file's work, in a worker: prepare a JPEG (and verify it), or copy the file with the reason.

``rewrite_jpeg`` decides what one JPEG's bytes become, whether they come from
a file or from a shard member; ``handle_file`` applies it to a plain file of
SRC and writes the output atomically. A JPEG too large to prepare within
``max_memory`` is streamed as a copy, never read whole. Neither raises for one
bad file: what went wrong becomes the Outcome's reason.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple, Optional

import torch

from .._decode._single import DEFAULT_MAX_MEMORY, JPEG_SIGNATURE, decode_and_crop_jpeg, jpeg_size
from .._core._errors import JpegDecodeError
from .._core._regular_files import open_regular, read_at_most, read_head
from .._decode._prepared import prepare_jpeg_with_info, seekable
from . import atomic, layout
from .items import (COPIED, EMPTY_FILE, ERROR, NOT_A_JPEG, PREPARED, VERIFY_FAILED, Outcome,
                    Task, describe)


#: How many bytes tell a JPEG from anything else.
SIGNATURE_LENGTH = len(JPEG_SIGNATURE)


class Rewrite(NamedTuple):
    """What one JPEG's bytes became."""

    kind: str  # PREPARED, COPIED (prepare_jpeg refused it) or VERIFY_FAILED
    reason: str
    data: bytes  # the prepared bytes, or the input itself when it was not prepared
    was_progressive: bool
    verify_seconds: float


def is_jpeg(head: bytes) -> bool:
    """Whether bytes starting with ``head`` are a JPEG (by content, whatever the name)."""
    return head[:SIGNATURE_LENGTH] == JPEG_SIGNATURE


def largest_preparable(max_memory: int) -> int:
    """The size in bytes above which a JPEG cannot be prepared within ``max_memory``.

    prepare_jpeg refuses any file whose output buffer alone, about twice the
    file's size (csrc/prepare.h's estimate: ``2 * (size + 65536)``), exceeds
    the limit, so a larger file is copied unread: streamed in chunks, so the
    worker never holds it whole, whatever its size. No file the rewrite could
    accept is copied this way.
    """
    return max(0, max_memory // 2 - 65536)


def too_large(max_memory: int) -> str:
    """The reason given for a JPEG larger than ``largest_preparable(max_memory)``."""
    return (f"larger than {largest_preparable(max_memory)} bytes, the most a max_memory of "
            f"{max_memory} can prepare (the rewrite holds about twice the file): copied as a "
            "stream, never read whole")


def verify_rewrite(original: bytes, prepared: bytes, max_memory: int) -> Optional[str]:
    """Why ``prepared`` is not a faithful, seekable rewrite of ``original``; None if it is."""
    try:
        height, width, _ = jpeg_size(original)
        # The limit that let the file be prepared also lets its (progressive) input be decoded.
        before = decode_and_crop_jpeg(original, 0, 0, height, width, mode="unchanged", seek=False,
                                      max_memory=max_memory)
        after = decode_and_crop_jpeg(prepared, 0, 0, height, width, mode="unchanged", seek=False,
                                     max_memory=max_memory)
        if not torch.equal(before, after):
            return "the prepared file decodes to different pixels"
        problem = layout.compare(original, prepared)
        if problem is not None:
            return problem
        if not seekable(prepared):
            return "the prepared file has no restart markers decode_and_crop_jpeg can seek with"
    except (JpegDecodeError, ValueError) as error:
        return f"decoding for verification failed: {describe(error)}"
    return None


def rewrite_jpeg(data: bytes, verify: bool, max_memory: int = DEFAULT_MAX_MEMORY) -> Rewrite:
    """Prepares a JPEG's bytes; the input itself when prepare_jpeg refuses or verification fails.

    A file whose rewrite would need more than ``max_memory`` is refused by
    prepare_jpeg with a JpegDecodeError naming the bytes it needs, so it is
    copied with that reason, like any other refusal.
    """
    try:
        result = prepare_jpeg_with_info(data, max_memory=max_memory)
    except JpegDecodeError as error:
        return Rewrite(COPIED, describe(error), data, False, 0.0)
    if not verify:
        return Rewrite(PREPARED, "", result.data, result.was_progressive, 0.0)
    start = time.perf_counter()
    problem = verify_rewrite(data, result.data, max_memory)
    seconds = time.perf_counter() - start
    if problem is not None:
        # A wrong output must not stay behind: the original is always safe to train on.
        return Rewrite(VERIFY_FAILED, problem, data, False, seconds)
    return Rewrite(PREPARED, "", result.data, result.was_progressive, seconds)


def _read_if_preparable(path: str, max_memory: int) -> tuple[Optional[bytes], str]:
    """A JPEG's bytes, or None and why the file is to be copied as it is.

    Only the signature is read first, and a JPEG too large to prepare is not
    read at all, so a large file (an archive left in the tree, a huge JPEG) is
    copied by the kernel, never loaded into memory. The read is bounded too:
    a file that grew since it was listed is not read whole either.
    """
    largest = largest_preparable(max_memory)
    with open_regular(path) as file:  # a FIFO put in its place since the listing: refused
        head = read_head(file, SIGNATURE_LENGTH)
        if not is_jpeg(head):
            return None, NOT_A_JPEG
        if os.fstat(file.fileno()).st_size > largest:
            return None, too_large(max_memory)
        rest = read_at_most(file, largest - len(head))
    return (None, too_large(max_memory)) if rest is None else (head + rest, "")


def handle_file(task: Task, verify: bool, max_memory: int = DEFAULT_MAX_MEMORY) -> Outcome:
    """Writes one plain file's output, and says what it did; never raises for one bad file."""
    start = time.perf_counter()
    try:
        os.makedirs(os.path.dirname(task.destination), exist_ok=True)
        data, reason = _read_if_preparable(task.source, max_memory)
        if data is not None:
            rewrite = rewrite_jpeg(data, verify, max_memory)
            outcome = Outcome(task.relative, rewrite.kind, rewrite.reason, len(data),
                              len(rewrite.data), rewrite.was_progressive,
                              verify_seconds=rewrite.verify_seconds)
            atomic.replace_atomically(task, atomic.write_bytes(rewrite.data), [outcome])
        else:
            atomic.replace_atomically(task, atomic.copy_from(task.source),
                                      [Outcome(task.relative, COPIED, reason)])
            size = os.path.getsize(task.destination)
            outcome = Outcome(task.relative, COPIED, reason if size else EMPTY_FILE, size, size)
    except Exception as error:  # noqa: BLE001 - one unreadable file must not end a long run
        outcome = Outcome(task.relative, ERROR, describe(error), task.size)
    return outcome._replace(seconds=time.perf_counter() - start)
