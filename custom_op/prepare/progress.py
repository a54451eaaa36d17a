"""The progress bar on stderr (tqdm): bytes read, MB/s, the time left, and files done.

It counts bytes rather than files because files differ in size (a shard is
hundreds of MB, a thumbnail a few kB), so the rate and the time left come out
right for both. It is drawn only when asked, or when stderr is a terminal.
"""

from __future__ import annotations

import shutil
import sys
from typing import Optional, Sequence

from tqdm import tqdm

from .items import Outcome

_REFRESH_SECONDS = 0.2  # at most 5 redraws per second


def _screen() -> dict[str, int]:
    """The terminal's size, or 80 x 24 where it reports none: at a reported size of 0 x 0 (some
    pseudo-terminals, a container's exec before its first resize) tqdm would draw nothing."""
    size = shutil.get_terminal_size(fallback=(80, 24))
    return {"ncols": size.columns, "nrows": size.lines}


class Progress:
    """Advanced by the outcomes of each finished chunk; ``close`` ends the line."""

    def __init__(self, total_files: int, total_bytes: int, enabled: Optional[bool]) -> None:
        self.total_files, self.files = total_files, 0
        show = sys.stderr.isatty() if enabled is None else enabled
        self.bar = tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1000,
                        mininterval=_REFRESH_SECONDS, disable=not show or not total_files,
                        file=sys.stderr, desc="custom_op.prepare", **_screen())
        self.bar.set_postfix_str(self._files_text(), refresh=False)

    def _files_text(self) -> str:
        return f"{self.files}/{self.total_files} files"

    def advance(self, outcomes: Sequence[Outcome]) -> None:
        """Counts the files (not shard members) of a finished chunk."""
        done = [outcome for outcome in outcomes if not outcome.member]
        self.files += len(done)
        self.bar.set_postfix_str(self._files_text(), refresh=False)
        self.bar.update(sum(outcome.size_in for outcome in done))

    def close(self) -> None:
        """Draws the final counts and ends the line, so the summary starts on a fresh one."""
        self.bar.close()
