"""What the parent sends a worker (a Task) and what comes back (Outcomes).

A Task is one file of SRC: a plain file, or a whole-file task (a tar shard
whose members are handled one by one, or a parquet file whose images are).
An Outcome says what happened to one file, one shard member or one image of
a parquet file. Both are small picklable tuples, because they cross process
boundaries; nothing here touches a file.
"""

from __future__ import annotations

from typing import NamedTuple

from .._core._errors import JpegDecodeError

# Outcome kinds, for files and shard members alike.
PREPARED = "prepared"
COPIED = "copied"
VERIFY_FAILED = "verify_failed"
ERROR = "error"
# Shard members that are not JPEGs and are not named like one (key.cls, key.json): a shard's
# ordinary metadata, copied as it is and counted, not listed.
OTHER_MEMBER = "other_member"
# Outcome kinds for a whole-file task (a shard or a parquet file) as a whole.
SHARD_WRITTEN = "shard_written"
SHARD_REFUSED = "shard_refused"

# Reasons for copying a file, member or row unchanged that are not refusals: there was no JPEG
# to prepare. Every other reason of a copy is a JPEG left unprepared (prepare_jpeg refused it:
# damaged, 12-bit, too large for max_memory, ...), which the exit status reports (summary.py).
NOT_A_JPEG = "not a JPEG (does not start with FF D8 FF)"
EMPTY_FILE = "empty file"
NO_IMAGE_BYTES = "no image bytes in the row (null, or only a path)"
NO_IMAGE_COLUMN = "a parquet file without an image column (struct {bytes, path} or --image-column)"
NOTHING_TO_PREPARE = frozenset({NOT_A_JPEG, EMPTY_FILE, NO_IMAGE_BYTES, NO_IMAGE_COLUMN})

#: The suffix that makes a file of SRC a tar shard (case-insensitive), as WebDataset names them.
SHARD_SUFFIX = ".tar"
#: The suffix that makes a file of SRC a parquet file (case-insensitive), as the Hub names them.
PARQUET_SUFFIX = ".parquet"


class Task(NamedTuple):
    """One file to handle; paths are absolute except ``relative``."""

    relative: str
    source: str
    destination: str
    size: int
    #: The source's times when it was listed, before it was read: stamped on the output, so a
    #: source changed while it was being read looks newer than its output and is redone.
    times_ns: tuple[int, int]
    #: The source's inode and mode bits when it was listed: the inode is part of the identity
    #: recorded with the output (atomic.py), the mode is given to the output (as ``cp -p``).
    inode: int = 0
    mode: int = 0o644

    @property
    def is_shard(self) -> bool:
        return self.relative.lower().endswith(SHARD_SUFFIX)

    @property
    def is_parquet(self) -> bool:
        return self.relative.lower().endswith(PARQUET_SUFFIX)

    @property
    def is_whole(self) -> bool:
        """A shard or a parquet file: one worker writes it whole, in one piece of work."""
        return self.is_shard or self.is_parquet


class Outcome(NamedTuple):
    """What happened to one file, one shard member or one shard, sent back from a worker."""

    relative: str  # a shard member's is "shard.tar:member/name"
    kind: str
    reason: str = ""  # why it was copied, failed verification, hit an error or was refused
    size_in: int = 0
    size_out: int = 0
    was_progressive: bool = False
    seconds: float = 0.0  # all the work on this file or shard, verification included
    verify_seconds: float = 0.0
    #: A member of a shard: its bytes are counted in the shard's, not again on their own.
    member: bool = False


def findings_of(outcomes: list[Outcome]) -> list[list]:
    """What an output records of its outcomes for later runs (atomic.py, journal.py): each
    JPEG refused and copied unprepared and each that failed verification, as [path, kind,
    reason, member]. A rerun leaves the output alone and would not find them again; the exit
    status describes the tree, so they come back from the output (walk.plan)."""
    return [[outcome.relative, outcome.kind, outcome.reason, outcome.member]
            for outcome in outcomes if outcome.kind == VERIFY_FAILED
            or (outcome.kind == COPIED and outcome.reason not in NOTHING_TO_PREPARE)]


def describe(error: BaseException) -> str:
    """A one-line reason for an error: its message, with the type when that says more."""
    if isinstance(error, JpegDecodeError):
        return str(error)
    if isinstance(error, OSError) and error.strerror:
        # The file named may be the source or the output, so it is worth its length.
        return f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    return f"{type(error).__name__}: {error}"
