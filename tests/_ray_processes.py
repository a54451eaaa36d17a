"""Ray's processes below a test's own, to check that shutting Ray down leaves none behind."""

from __future__ import annotations

import collections
import time
from pathlib import Path


def _is_ray(pid: int) -> bool:
    """Whether ``pid`` runs one of Ray's programs (raylet, GCS, its workers and actors)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    return b"ray" in command


def ray_descendants(pid: int) -> set[int]:
    """The live processes of Ray's below ``pid``, from /proc (a test worker has others of its
    own, torch.compile's, multiprocessing's, that Ray's shutdown must leave alone)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children[parent].append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children[todo.pop()]:
            found.add(child)
            todo.append(child)
    return {process for process in found if _is_ray(process)}


def wait_until_gone(pid: int, before: set[int], seconds: float = 30) -> set[int]:
    """Waits up to ``seconds`` for the processes of ``before`` still below ``pid`` to end;
    those left."""
    deadline = time.monotonic() + seconds
    while ray_descendants(pid) & before and time.monotonic() < deadline:
        time.sleep(0.2)
    return ray_descendants(pid) & before
