"""Source identities kept in DST where outputs cannot carry them (no user extended attributes).

atomic.py records each output's source identity (size, mtime in ns, inode)
in an extended attribute of the output. Some file systems keep none (tmpfs
before Linux 6.6, some NFS, overlay and FUSE mounts); comparing only the
mtime there kept a stale output when a different source had the same mtime,
and took a DST pre-filled by ``cp -a`` for done. On such a DST the run keeps
the identities in a journal instead: the file ``DST/.custom_op-prepare-journal``
(JSON: relative path -> source size, mtime, inode, and the output's inode and
size), written to a temporary in the private folder, flushed and renamed, so
it is whole or absent even after a kill. An output counts as done only when
its journal entry names the source as it is now and the output as it is now,
which is the guarantee the attribute gives. It also keeps what the run found
in each output (items.findings_of), as the findings attribute would. A killed
run loses the entries since its last save: those outputs are simply redone.
Entries of files that are no longer in SRC are dropped.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from typing import Optional

from .atomic import PRIVATE_FOLDER, flush_file, valid_findings

#: The journal's name at the top of DST (a file: ImageFolder takes only folders for classes).
JOURNAL_NAME = ".custom_op-prepare-journal"
_FORMAT = 1
_SAVE_SECONDS = 10.0  # how often a long run saves the journal, so a kill loses little
_PROBE_ATTRIBUTE = "user.custom_op.probe"
_NO_ATTRIBUTES = {errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


def keeps_attributes(path: str) -> bool:
    """Whether the file system of ``path`` (a file we own) keeps user extended attributes."""
    from . import atomic  # the switch tests turn off lives there
    if not atomic._HAS_ATTRIBUTES:
        return False
    try:
        os.setxattr(path, _PROBE_ATTRIBUTE, b"1")
        os.removexattr(path, _PROBE_ATTRIBUTE)
    except OSError as error:
        if error.errno in _NO_ATTRIBUTES:
            return False
        raise
    return True


def _output_identity(path: str) -> Optional[list[int]]:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return [status.st_ino, status.st_size, status.st_mtime_ns]


class Journal:
    """The identities of DST's outputs, read at the start of a run and saved as it goes."""

    def __init__(self, destination: str) -> None:
        self.destination = destination
        self.path = os.path.join(destination, JOURNAL_NAME)
        content = self._load()
        entries, findings = content.get("outputs"), content.get("findings")
        self.previous = entries if isinstance(entries, dict) else {}
        self.previous_findings = findings if isinstance(findings, dict) else {}
        self.entries: dict[str, list[int]] = {}
        self.findings: dict[str, list[list]] = {}
        self.last_save = time.monotonic()

    def _load(self) -> dict:
        try:
            with open(self.path, encoding="utf-8") as file:
                content = json.load(file)
        except (OSError, ValueError):
            return {}  # none yet, or unreadable: every output is then redone
        if not isinstance(content, dict) or content.get("format") != _FORMAT:
            return {}
        return content

    def is_done(self, relative: str, source: os.stat_result) -> bool:
        """Whether DST's output of ``relative`` was made from ``source`` as it is now, and is
        still the file that was written then; keeps its entry for the next run if so."""
        entry = self.previous.get(relative)
        expected = [source.st_size, source.st_mtime_ns, source.st_ino]
        output = _output_identity(os.path.join(self.destination, relative))
        if entry != expected + (output or []):
            return False
        self.entries[relative] = entry
        found = valid_findings(self.previous_findings.get(relative))
        if found:
            self.findings[relative] = found
        return True

    def findings_of(self, relative: str) -> list[list]:
        """What was found in the output of ``relative`` when it was written (kept by is_done)."""
        return self.findings.get(relative, [])

    def written(self, relative: str, size: int, mtime_ns: int, inode: int,
                findings: list[list]) -> None:
        """Records the output of ``relative`` just renamed into place, with what was found in
        it, and saves now and then."""
        output = _output_identity(os.path.join(self.destination, relative))
        self.findings.pop(relative, None)
        if output is not None:
            self.entries[relative] = [size, mtime_ns, inode] + output
            if findings:
                self.findings[relative] = findings
        if time.monotonic() - self.last_save > _SAVE_SECONDS:
            self.save()

    def save(self) -> None:
        """Writes the journal whole: a temporary in the private folder, flushed, renamed."""
        temporary = os.path.join(self.destination, PRIVATE_FOLDER, f"journal-{os.getpid()}")
        try:
            with open(temporary, "w", encoding="utf-8") as file:
                json.dump({"format": _FORMAT, "outputs": self.entries,
                           "findings": self.findings}, file)
            flush_file(temporary)
            os.replace(temporary, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        self.last_save = time.monotonic()
