"""One file's work, in a worker: prepare a JPEG (and verify it), or copy the file with the reason.

``rewrite_jpeg`` decides what one JPEG's bytes become, whether they come from
a file or from a shard member; ``handle_file`` applies it to a plain file of
SRC and writes the output atomically. Neither raises for one bad file: what
went wrong becomes the Outcome's reason.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple, Optional

import torch

from .._decode import DEFAULT_MAX_MEMORY, decode_and_crop_jpeg, jpeg_size
from .._errors import JpegDecodeError
from .._restart_markers import prepare_jpeg_with_info, seekable
from ..datasets._loading import _JPEG_SIGNATURE
from . import atomic
from .items import COPIED, ERROR, PREPARED, VERIFY_FAILED, Outcome, Task, describe

NOT_A_JPEG = "not a JPEG (does not start with FF D8 FF)"
EMPTY_FILE = "empty file"

#: How many bytes tell a JPEG from anything else.
SIGNATURE_LENGTH = len(_JPEG_SIGNATURE)


class Rewrite(NamedTuple):
    """What one JPEG's bytes became."""

    kind: str  # PREPARED, COPIED (prepare_jpeg refused it) or VERIFY_FAILED
    reason: str
    data: bytes  # the prepared bytes, or the input itself when it was not prepared
    was_progressive: bool
    verify_seconds: float


def is_jpeg(head: bytes) -> bool:
    """Whether bytes starting with ``head`` are a JPEG (by content, whatever the name)."""
    return head[:SIGNATURE_LENGTH] == _JPEG_SIGNATURE


def _verify(original: bytes, prepared: bytes, max_memory: int) -> Optional[str]:
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
    problem = _verify(data, result.data, max_memory)
    seconds = time.perf_counter() - start
    if problem is not None:
        # A wrong output must not stay behind: the original is always safe to train on.
        return Rewrite(VERIFY_FAILED, problem, data, False, seconds)
    return Rewrite(PREPARED, "", result.data, result.was_progressive, seconds)


def handle_file(task: Task, verify: bool, max_memory: int = DEFAULT_MAX_MEMORY) -> Outcome:
    """Writes one plain file's output, and says what it did; never raises for one bad file."""
    start = time.perf_counter()
    try:
        os.makedirs(os.path.dirname(task.destination), exist_ok=True)
        with open(task.source, "rb") as file:
            # Only the signature is read first, so a large file that is not a JPEG (an archive
            # left in the tree) is copied by the kernel, never loaded into memory.
            head = file.read(SIGNATURE_LENGTH)
            data = head + file.read() if is_jpeg(head) else None
        if data is not None:
            rewrite = rewrite_jpeg(data, verify, max_memory)
            atomic.replace_atomically(task, atomic.write_bytes(rewrite.data))
            outcome = Outcome(task.relative, rewrite.kind, rewrite.reason, len(data),
                              len(rewrite.data), rewrite.was_progressive,
                              verify_seconds=rewrite.verify_seconds)
        else:
            atomic.replace_atomically(task, atomic.copy_from(task.source))
            size = os.path.getsize(task.destination)
            outcome = Outcome(task.relative, COPIED, NOT_A_JPEG if size else EMPTY_FILE,
                              size, size)
    except Exception as error:  # noqa: BLE001 - one unreadable file must not end a long run
        outcome = Outcome(task.relative, ERROR, describe(error), task.size)
    return outcome._replace(seconds=time.perf_counter() - start)
