"""Summary: what a run did, counted as the outcomes arrive, and the report printed at the end.

Files of SRC are counted once each: in ``already_done``, ``errors`` or
``shards_refused``, or by what their content became (``prepared``,
``copied``, ``verify_failed``); a written shard is counted in
``shards_written`` and its members by what each became, with paths
``shard.tar:member``. Members that are not JPEGs and not named like one
(``key.cls``) are only counted, in ``other_members``. A parquet file counts
as a shard (written or refused), and each image of it like a member, with
paths ``FILE.parquet:COLUMN[ROW]``. An output an earlier run wrote and this
run kept (``already_done``) also brings back what was found in it then (a
refused JPEG, a verification failure: :meth:`Summary.restore`), so that the
exit status describes the tree, whichever run wrote each output.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from typing import Iterable, Optional, Sequence

from .items import (COPIED, NOTHING_TO_PREPARE, OTHER_MEMBER, PREPARED, SHARD_REFUSED,
                    SHARD_WRITTEN, VERIFY_FAILED, Outcome)

#: Exit statuses (python -m custom_op.prepare): everything prepared as asked (or no JPEG to
#: prepare); a file failed verification, could not be read or written, or a shard or parquet
#: file was refused; JPEGs were refused by prepare_jpeg and copied unprepared (accepted with
#: --accept-refused). 2 (bad arguments), 3 (DST busy) and 130 (interrupted) are cli.py's.
EXIT_DONE, EXIT_FAILED, EXIT_REFUSED = 0, 1, 4

_REPORT_PATHS = 10  # paths shown per reason in the report
# Lone surrogates: what Python makes of a file name's bytes that are not valid in the file
# system's encoding (os.fsdecode's surrogateescape). No encoding can print them.
_SURROGATE = re.compile("[\ud800-\udfff]")
# What a name must not print raw: control characters (a newline in a file name would start a
# line of the report, e.g. a forged "failed verification  0"), line and paragraph separators,
# and lone surrogates.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


@dataclasses.dataclass
class Summary:
    """What :func:`prepare_tree` did. Paths are relative to SRC, with "/" separators."""

    source: str
    destination: str
    #: Files found under SRC, tar shards included.
    files_seen: int = 0
    #: JPEGs (files and shard members) rewritten by prepare_jpeg.
    prepared: int = 0
    #: Of ``prepared``, those whose input was progressive.
    progressive: int = 0
    #: Outputs already at least as new as their source, left alone (a resumed run).
    already_done: int = 0
    #: Files and members copied unchanged, by reason ("not a JPEG ...", or prepare_jpeg's error).
    copied: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    #: Prepared files that came out larger than their input (written all the same).
    larger: list[str] = dataclasses.field(default_factory=list)
    #: (path, why) of prepared files whose pixels or seekability did not check out with
    #: ``verify``; the original was copied in their place.
    verify_failed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #: (path, error) of files that could not be read or written.
    errors: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #: Tar shards and parquet files among ``files_seen``; written in this run; refused, with the
    #: reason (nothing was written under their name).
    shards_seen: int = 0
    #: Parquet files among ``shards_seen``.
    parquet_seen: int = 0
    shards_written: int = 0
    shards_refused: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #: Members of written shards that are neither JPEGs nor named like one, copied as they are.
    other_members: int = 0
    #: Input and output bytes of the prepared files.
    bytes_before: int = 0
    bytes_after: int = 0
    #: Output size / input size of every prepared file.
    size_ratios: list[float] = dataclasses.field(default_factory=list)
    #: Input bytes of every file handled in this run (not of those already done).
    bytes_read: int = 0
    #: Files handled in this run (read and written, or refused).
    handled: int = 0
    #: Temporary files of a killed run removed from DST at the start.
    stale_removed: int = 0
    #: Worker time spent on verification, and on all the work (both summed over workers).
    verify_seconds: float = 0.0
    work_seconds: float = 0.0
    #: Wall time of the whole run.
    elapsed_seconds: float = 0.0

    @property
    def copied_count(self) -> int:
        return sum(len(paths) for paths in self.copied.values())

    @property
    def size_ratio(self) -> Optional[float]:
        """Total output bytes / total input bytes of the prepared files (None if there are none)."""
        return self.bytes_after / self.bytes_before if self.bytes_before else None

    @property
    def median_size_ratio(self) -> Optional[float]:
        return statistics.median(self.size_ratios) if self.size_ratios else None

    @property
    def files_per_second(self) -> float:
        """Files of SRC handled per second of wall time (a shard counts as one file)."""
        return self.handled / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    @property
    def megabytes_per_second(self) -> float:
        """Input MB (10**6 bytes) read per second of wall time."""
        return self.bytes_read / 1e6 / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    @property
    def refused(self) -> list[str]:
        """JPEGs (files, members, rows) copied unprepared because prepare_jpeg refused them
        (damaged, 12-bit, lossless, trailing bytes, too large for max_memory, sparse, no
        pyarrow): every copy whose reason is not that there was no JPEG to prepare."""
        return sorted(path for reason, paths in self.copied.items()
                      if reason not in NOTHING_TO_PREPARE for path in paths)

    @property
    def exit_code(self) -> int:
        """The exit status when refusals are not accepted; see exit_status."""
        return self.exit_status()

    def exit_status(self, accept_refused: bool = False) -> int:
        """EXIT_DONE when everything was prepared as asked; EXIT_FAILED after a verification
        failure, an I/O error or a refused shard or parquet file; otherwise EXIT_REFUSED when a
        JPEG was refused and copied unprepared, unless ``accept_refused``."""
        if self.verify_failed or self.errors or self.shards_refused:
            return EXIT_FAILED
        if self.refused and not accept_refused:
            return EXIT_REFUSED
        return EXIT_DONE

    def record(self, outcomes: Iterable[Outcome]) -> None:
        """Counts the outcomes a worker sent back."""
        for outcome in outcomes:
            self.work_seconds += outcome.seconds
            self.verify_seconds += outcome.verify_seconds
            if not outcome.member:
                self.handled += 1
                self.bytes_read += outcome.size_in
            self._record_one(outcome)

    def restore(self, findings: list[list]) -> None:
        """Counts again what an earlier run found in an output this run kept (refused JPEGs,
        verification failures: items.findings_of), so that the exit status and the report
        describe the tree, not only the files this run handled."""
        for path, kind, reason, _ in findings:
            if kind == VERIFY_FAILED:
                self.verify_failed.append((path, reason))
            else:
                self.copied.setdefault(reason, []).append(path)

    def _record_one(self, outcome: Outcome) -> None:
        if outcome.kind == PREPARED:
            self.prepared += 1
            self.progressive += outcome.was_progressive
            self.bytes_before += outcome.size_in
            self.bytes_after += outcome.size_out
            self.size_ratios.append(outcome.size_out / outcome.size_in)
            if outcome.size_out > outcome.size_in:
                self.larger.append(outcome.relative)
        elif outcome.kind == COPIED:
            self.copied.setdefault(outcome.reason, []).append(outcome.relative)
        elif outcome.kind == VERIFY_FAILED:
            self.verify_failed.append((outcome.relative, outcome.reason))
        elif outcome.kind == OTHER_MEMBER:
            self.other_members += 1
        elif outcome.kind == SHARD_WRITTEN:
            self.shards_written += 1
        elif outcome.kind == SHARD_REFUSED:
            self.shards_refused.append((outcome.relative, outcome.reason))
        else:
            self.errors.append((outcome.relative, outcome.reason))

    def sort(self) -> None:
        """Puts every path list in path order: workers finish in no particular order."""
        for pairs_or_paths in (self.larger, self.verify_failed, self.errors, self.shards_refused,
                               *self.copied.values()):
            pairs_or_paths.sort()

    def report(self) -> str:
        """The summary as lines of text, as ``python -m custom_op.prepare`` prints it.

        A byte of a file name that is not valid in the file system's encoding
        shows as ``\\xNN`` (see printable), so the text encodes in UTF-8.
        """
        return printable("\n".join(self._lines()))

    def _lines(self) -> list[str]:
        lines = [f"custom_op.prepare: {printable_name(self.source)} -> "
                 f"{printable_name(self.destination)}",
                 f"files seen           {self.files_seen}" + self._shards_seen_note()]
        if self.shards_seen:
            lines.append(f"shards written       {self.shards_written}")
            lines.append(f"shards refused       {len(self.shards_refused)} (nothing written)")
            lines += _indented_pairs(self.shards_refused)
        lines.append(f"prepared             {self.prepared} (of which {self.progressive} were "
                     "progressive)")
        lines.append(f"already done         {self.already_done} (kept from an earlier run)")
        lines.append(f"copied unchanged     {self.copied_count}")
        for reason, paths in sorted(self.copied.items()):
            lines.append(f"  {printable_name(reason)}: {len(paths)}")
            lines += _indented_paths(paths, indent="    ")
        if self.shards_seen > self.parquet_seen:  # a tar's count: parquet has no other members
            lines.append(f"other shard members  {self.other_members} (.cls, .json, ...: copied "
                         "as they are)")
        lines.append(f"failed verification  {len(self.verify_failed)}")
        lines += _indented_pairs(self.verify_failed)
        lines.append(f"I/O errors           {len(self.errors)}")
        lines += _indented_pairs(self.errors)
        if self.refused:
            lines.append(f"refused JPEGs        {len(self.refused)} (copied unprepared, listed "
                         f"above: exit status {EXIT_REFUSED} unless --accept-refused)")
        if self.stale_removed:
            lines.append(f"removed {self.stale_removed} temporary files left by an interrupted run")
        lines.append(self._bytes_line())
        if self.verify_seconds:
            share = self.verify_seconds / self.work_seconds if self.work_seconds else 0.0
            lines.append(f"verification         {self.verify_seconds:.2f} s of "
                         f"{self.work_seconds:.2f} s worker time ({share:.0%})")
        lines.append(f"time                 {self.elapsed_seconds:.2f} s: "
                     f"{self.files_per_second:.1f} files/s, {self.megabytes_per_second:.1f} MB/s "
                     "of input")
        lines += self._larger_note()
        return lines

    def _shards_seen_note(self) -> str:
        tars = self.shards_seen - self.parquet_seen
        kinds = [f"{tars} of them tar shards"] if tars else []
        kinds += [f"{self.parquet_seen} parquet files"] if self.parquet_seen else []
        return f" ({', '.join(kinds)})" if kinds else ""

    def _bytes_line(self) -> str:
        if self.size_ratio is None:
            return "bytes (prepared)     none prepared"
        return (f"bytes (prepared)     {_megabytes(self.bytes_before)} -> "
                f"{_megabytes(self.bytes_after)} ({self.size_ratio:.3f}x); median per-file ratio "
                f"{self.median_size_ratio:.3f}")

    def _larger_note(self) -> list[str]:
        """Files that grew: not failures (they were prepared and written), but worth knowing."""
        if not self.larger:
            return []
        return ([f"note: {len(self.larger)} prepared files came out larger than their input "
                 "(written all the same, same pixels; progressive inputs usually grow):"]
                + _indented_paths(self.larger))


def printable(text: str) -> str:
    """``text`` with each undecodable byte of a file name (a lone surrogate) as ``\\xNN``.

    Example:
        >>> printable(os.fsdecode(b"caf\\xe9.jpg"))  # a Latin-1 name on a UTF-8 system
        'caf\\\\xe9.jpg'
    """
    return _SURROGATE.sub(_escape, text)


def printable_name(name: str) -> str:
    """``name`` (a path, or a reason that may quote one) on one printable line: control
    characters as ``\\n``, ``\\t``, ``\\r`` or ``\\xNN``, undecodable bytes as ``\\xNN``.

    Example:
        >>> printable_name("a\\nfailed verification  0.jpg")
        'a\\\\nfailed verification  0.jpg'
    """
    return _UNPRINTABLE.sub(_escape, name)


def _escape(match: re.Match) -> str:
    character = match.group()
    if character in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[character]
    code = ord(character)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's range: one byte of the original name
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.2f} MB"


def _indented_paths(paths: Sequence[str], indent: str = "  ") -> list[str]:
    """At most _REPORT_PATHS of ``paths``, one a line, and how many more there are."""
    lines = [f"{indent}{printable_name(path)}" for path in paths[:_REPORT_PATHS]]
    if len(paths) > _REPORT_PATHS:
        lines.append(f"{indent}... and {len(paths) - _REPORT_PATHS} more")
    return lines


def _indented_pairs(pairs: Sequence[tuple[str, str]]) -> list[str]:
    return _indented_paths([f"{path}: {why}" for path, why in pairs])
