"""Prepare a tree of JPEG files for seeking: ``python -m custom_op.prepare SRC DST``.

Every file under SRC is written to the same relative path under DST:

- a JPEG (by content: it starts with FF D8 FF, whatever its name) is rewritten
  losslessly by :func:`custom_op.prepare_jpeg`: the same pixels, restart
  markers every few MCUs and optimised Huffman tables, so that
  decode_and_crop_jpeg decodes only the segments that cover a crop;
- anything else (a PNG named .JPEG, a text file, an empty file) and every JPEG
  that prepare_jpeg refuses (damaged, 12-bit, lossless) is copied byte for
  byte, and the summary lists it with the reason.

The work runs on every core, resumes an interrupted run (an output at least
as new as its source is kept), never leaves a half-written file under a final
name, and ends with a summary::

    python -m custom_op.prepare /data/imagenet/train /data/imagenet-prepared/train --verify

``--verify`` decodes every input and output in full and requires the same
pixels, and checks that every output is seekable. It costs two full decodes
per file: on 533 x 800 photos it was 44% of the work, so the run took 1.8x as
long (the summary prints the seconds it took).

The same is available from Python::

    from custom_op.prepare import prepare_tree
    summary = prepare_tree("/data/train", "/data/train-prepared", workers=8)
    print(summary.report())

This module is not imported by ``custom_op/__init__.py``: runpy warns when the
module it is asked to run was already imported by its package.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import multiprocessing
import multiprocessing.synchronize
import os
import shutil
import signal
import stat
import statistics
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterator, NamedTuple, Optional, Sequence, TextIO, Union

import torch

# Importing anything from the package runs custom_op/__init__.py, which builds and loads the
# extension in this (parent) process, so forked workers inherit it instead of each one racing
# to build it.
from ._decode import decode_and_crop_jpeg, jpeg_size
from ._errors import JpegDecodeError
from ._prepare import prepare_jpeg_with_info, seekable
from .datasets import _JPEG_SIGNATURE

__all__ = ["Summary", "prepare_tree", "main"]

PathLike = Union[str, "os.PathLike[str]"]

#: Every temporary file this module writes ends so; a run removes the ones a killed run left.
TEMPORARY_SUFFIX = ".custom_op-tmp"

NOT_A_JPEG = "not a JPEG (does not start with FF D8 FF)"
EMPTY_FILE = "empty file"

# Files per task sent to a worker: large enough that the round trip through the pool's queues
# (about 0.1 ms) is small next to the work, small enough that the last chunks keep every core
# busy and that Ctrl-C, which lets running chunks finish, is answered within a second or so.
_MAX_CHUNK = 16
_CHUNKS_PER_WORKER = 8  # aim: each worker takes this many chunks, so the load balances
_IN_FLIGHT_PER_WORKER = 2  # submitted chunks per worker: the queue never runs dry, never floods
_PROGRESS_INTERVAL = 0.2  # seconds between progress lines: at most 5 updates per second
_REPORT_PATHS = 10  # paths shown per reason in the report

# Outcome kinds.
_PREPARED = "prepared"
_COPIED = "copied"
_VERIFY_FAILED = "verify_failed"
_ERROR = "error"


class _Task(NamedTuple):
    """One file to handle; paths are absolute except ``relative``."""

    relative: str
    source: str
    destination: str
    size: int
    #: The source's times when it was listed, before it was read: stamped on the output, so a
    #: source changed while it was being read looks newer than its output and is redone.
    times_ns: tuple[int, int]


class _Outcome(NamedTuple):
    """What happened to one file, sent back from a worker."""

    relative: str
    kind: str
    reason: str = ""  # why it was copied, failed verification or hit an error
    size_in: int = 0
    size_out: int = 0
    was_progressive: bool = False
    seconds: float = 0.0  # all the work on this file, verification included
    verify_seconds: float = 0.0


@dataclasses.dataclass
class Summary:
    """What :func:`prepare_tree` did. Paths are relative to SRC, with "/" separators.

    Every file seen is counted in exactly one of ``prepared``,
    ``already_done``, ``copied`` (by reason), ``verify_failed`` and ``errors``.
    """

    source: str
    destination: str
    files_seen: int = 0
    #: JPEGs rewritten by prepare_jpeg.
    prepared: int = 0
    #: Of ``prepared``, those whose input was progressive.
    progressive: int = 0
    #: Outputs already at least as new as their source, left alone (a resumed run).
    already_done: int = 0
    #: Files copied unchanged, by reason ("not a JPEG ...", or prepare_jpeg's error message).
    copied: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    #: Prepared files that came out larger than their input (written all the same).
    larger: list[str] = dataclasses.field(default_factory=list)
    #: (path, why) of prepared files whose pixels or seekability did not check out with
    #: ``verify``; the original was copied in their place.
    verify_failed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #: (path, error) of files that could not be read or written.
    errors: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #: Input and output bytes of the prepared files.
    bytes_before: int = 0
    bytes_after: int = 0
    #: Output size / input size of every prepared file.
    size_ratios: list[float] = dataclasses.field(default_factory=list)
    #: Input bytes of every file handled in this run (not of those already done).
    bytes_read: int = 0
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
    def handled(self) -> int:
        """Files read and written in this run (everything but the ones already done)."""
        return self.files_seen - self.already_done

    @property
    def size_ratio(self) -> Optional[float]:
        """Total output bytes / total input bytes of the prepared files (None if there are none)."""
        return self.bytes_after / self.bytes_before if self.bytes_before else None

    @property
    def median_size_ratio(self) -> Optional[float]:
        return statistics.median(self.size_ratios) if self.size_ratios else None

    @property
    def files_per_second(self) -> float:
        return self.handled / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    @property
    def megabytes_per_second(self) -> float:
        """Input MB (10**6 bytes) read per second of wall time."""
        return self.bytes_read / 1e6 / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    @property
    def exit_code(self) -> int:
        """0 if every file was handled, 1 after a verification failure or an I/O error."""
        return 1 if self.verify_failed or self.errors else 0

    def report(self) -> str:
        """The summary as lines of text, as ``python -m custom_op.prepare`` prints it."""
        lines = [f"custom_op.prepare: {self.source} -> {self.destination}",
                 f"files seen           {self.files_seen}",
                 f"prepared             {self.prepared} (of which {self.progressive} were "
                 f"progressive; {len(self.larger)} came out larger than their input)"]
        lines += _indented_paths(self.larger)
        lines.append(f"already done         {self.already_done} (kept from an earlier run)")
        lines.append(f"copied unchanged     {self.copied_count}")
        for reason, paths in sorted(self.copied.items()):
            lines.append(f"  {reason}: {len(paths)}")
            lines += _indented_paths(paths, indent="    ")
        lines.append(f"failed verification  {len(self.verify_failed)}")
        lines += _indented_pairs(self.verify_failed)
        lines.append(f"I/O errors           {len(self.errors)}")
        lines += _indented_pairs(self.errors)
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
        return "\n".join(lines)

    def _bytes_line(self) -> str:
        if self.size_ratio is None:
            return "bytes (prepared)     none prepared"
        return (f"bytes (prepared)     {_megabytes(self.bytes_before)} -> "
                f"{_megabytes(self.bytes_after)} ({self.size_ratio:.3f}x); median per-file ratio "
                f"{self.median_size_ratio:.3f}")


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.2f} MB"


def _indented_paths(paths: Sequence[str], indent: str = "  ") -> list[str]:
    """At most _REPORT_PATHS of ``paths``, one a line, and how many more there are."""
    lines = [f"{indent}{path}" for path in paths[:_REPORT_PATHS]]
    if len(paths) > _REPORT_PATHS:
        lines.append(f"{indent}... and {len(paths) - _REPORT_PATHS} more")
    return lines


def _indented_pairs(pairs: Sequence[tuple[str, str]]) -> list[str]:
    return _indented_paths([f"{path}: {why}" for path, why in pairs])


# --- Paths -------------------------------------------------------------------------------------

def _is_within(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both absolute and resolved)."""
    return os.path.commonpath([path, folder]) == folder


def _check_folders(src: PathLike, dst: PathLike) -> tuple[str, str]:
    """The resolved SRC and DST, or ValueError when they cannot be used together."""
    source, destination = os.path.realpath(src), os.path.realpath(dst)
    if not os.path.isdir(source):
        raise ValueError(f"SRC {os.fspath(src)!r} is not a folder")
    if _is_within(destination, source):
        # The outputs would be listed as inputs: a rerun would prepare them again, into DST/DST.
        raise ValueError(f"DST {os.fspath(dst)!r} is SRC {os.fspath(src)!r} or inside it; "
                         "choose a folder outside SRC")
    if _is_within(source, destination):
        # Writing DST/<relative path> could then overwrite a source file before it is read.
        raise ValueError(f"SRC {os.fspath(src)!r} is inside DST {os.fspath(dst)!r}; "
                         "choose a DST that does not contain SRC")
    if os.path.exists(destination) and not os.path.isdir(destination):
        raise ValueError(f"DST {os.fspath(dst)!r} exists and is not a folder")
    return source, destination


def _walk(source: str, exclude: str, errors: list[tuple[str, str]]) -> Iterator[str]:
    """Relative paths of every file under ``source``, in sorted order.

    Symbolic links are followed, as ImageFolder follows them, except links back
    to a folder on the current path (a cycle) or into ``exclude`` (DST). A
    folder that cannot be listed is added to ``errors``.
    """
    # Real paths of each visited folder and its ancestors: a link to one of them is a cycle.
    chains = {source: (source,)}

    def on_error(error: OSError) -> None:
        errors.append((_relative(error.filename or source, source), _describe(error)))

    for folder, dirnames, filenames in os.walk(source, onerror=on_error, followlinks=True):
        chain = chains.pop(folder)
        kept = []
        for name in sorted(dirnames):
            real = os.path.realpath(os.path.join(folder, name))
            if real not in chain and not _is_within(real, exclude):
                chains[os.path.join(folder, name)] = chain + (real,)
                kept.append(name)
        dirnames[:] = kept  # os.walk descends into these only, in this order
        for name in sorted(filenames):
            yield _relative(os.path.join(folder, name), source)


def _relative(path: str, root: str) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")


def _remove_stale_temporaries(destination: str) -> int:
    """Deletes the temporary files a killed run left in ``destination``; returns how many.

    Two runs writing into the same DST at once are not supported: this would
    delete the other run's files in progress.
    """
    removed = 0
    for folder, _, filenames in os.walk(destination):
        for name in filenames:
            if name.startswith(".") and name.endswith(TEMPORARY_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, name))
                    removed += 1
    return removed


def _is_done(source_stat: os.stat_result, destination: str) -> bool:
    """Whether ``destination`` is at least as new as its source (written by an earlier run)."""
    try:
        return os.stat(destination).st_mtime_ns >= source_stat.st_mtime_ns
    except OSError:
        return False


def _plan(source: str, destination: str, force: bool, summary: Summary) -> list[_Task]:
    """The files still to handle; counts the others in ``summary``."""
    tasks = []
    for relative in _walk(source, destination, summary.errors):
        summary.files_seen += 1
        path = os.path.join(source, relative)
        target = os.path.join(destination, relative)
        try:
            status = os.stat(path)
        except OSError as error:  # e.g. a broken symbolic link
            summary.errors.append((relative, _describe(error)))
            continue
        if not stat.S_ISREG(status.st_mode):
            summary.errors.append((relative, "not a regular file (a FIFO or device?)"))
        elif not force and _is_done(status, target):
            summary.already_done += 1
        else:
            tasks.append(_Task(relative, path, target, status.st_size,
                               (status.st_atime_ns, status.st_mtime_ns)))
    return tasks


# --- One file (runs in the workers) --------------------------------------------------------------

def _describe(error: BaseException) -> str:
    """A one-line reason for an error: its message, with the type when that says more."""
    if isinstance(error, JpegDecodeError):
        return str(error)
    if isinstance(error, OSError) and error.strerror:
        # The file named may be the source or the output, so it is worth its length.
        return f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    return f"{type(error).__name__}: {error}"


def _temporary_name(destination: str) -> str:
    """A hidden name beside ``destination``, unique to this process."""
    folder, name = os.path.split(destination)
    return os.path.join(folder, f".{name}.{os.getpid()}{TEMPORARY_SUFFIX}")


def _replace_atomically(task: _Task, write: Callable[[str], None]) -> None:
    """Has ``write`` fill a temporary file, gives it the source's times, renames it.

    The rename is atomic, so the destination is either the old file or the
    complete new one, even when the process is killed. Setting the mtime before
    the rename means a file under its final name always has its source's
    mtime, which is what resuming relies on. Only the times are copied, not the
    mode (shutil.copystat), which some network file systems refuse to set.
    """
    temporary = _temporary_name(task.destination)
    try:
        write(temporary)
        os.utime(temporary, ns=task.times_ns)
        os.replace(temporary, task.destination)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)  # only left when something above failed or was interrupted


def _write_bytes(data: bytes) -> Callable[[str], None]:
    """A writer for _replace_atomically that writes ``data``."""

    def write(path: str) -> None:
        with open(path, "wb") as file:
            file.write(data)
    return write


def _copy_from(source: str) -> Callable[[str], None]:
    """A writer for _replace_atomically that copies ``source`` byte for byte."""
    return lambda path: shutil.copyfile(source, path)


def _verify(original: bytes, prepared: bytes) -> Optional[str]:
    """Why ``prepared`` is not a faithful, seekable rewrite of ``original``; None if it is."""
    try:
        height, width, _ = jpeg_size(original)
        before = decode_and_crop_jpeg(original, 0, 0, height, width, mode="unchanged", seek=False)
        after = decode_and_crop_jpeg(prepared, 0, 0, height, width, mode="unchanged", seek=False)
        if not torch.equal(before, after):
            return "the prepared file decodes to different pixels"
        if not seekable(prepared):
            return "the prepared file has no restart markers decode_and_crop_jpeg can seek with"
    except (JpegDecodeError, ValueError) as error:
        return f"decoding for verification failed: {_describe(error)}"
    return None


def _prepare_file(task: _Task, data: bytes, verify: bool) -> _Outcome:
    """Prepares a JPEG's bytes into ``task.destination``, or copies them when that fails."""
    try:
        result = prepare_jpeg_with_info(data)
    except JpegDecodeError as error:
        _replace_atomically(task, _write_bytes(data))
        return _Outcome(task.relative, _COPIED, _describe(error), len(data), len(data))
    verify_seconds = 0.0
    if verify:
        verify_start = time.perf_counter()
        problem = _verify(data, result.data)
        verify_seconds = time.perf_counter() - verify_start
        if problem is not None:
            # A wrong output must not stay behind: the original is always safe to train on.
            _replace_atomically(task, _write_bytes(data))
            return _Outcome(task.relative, _VERIFY_FAILED, problem, len(data), len(data),
                            verify_seconds=verify_seconds)
    _replace_atomically(task, _write_bytes(result.data))
    return _Outcome(task.relative, _PREPARED, "", len(data), len(result.data),
                    result.was_progressive, verify_seconds=verify_seconds)


def _handle(task: _Task, verify: bool) -> _Outcome:
    """Writes one file's output, and says what it did; never raises for one bad file."""
    start = time.perf_counter()
    try:
        os.makedirs(os.path.dirname(task.destination), exist_ok=True)
        with open(task.source, "rb") as file:
            # Only the signature is read first, so a large file that is not a JPEG (an archive
            # left in the tree) is copied by the kernel, never loaded into memory.
            head = file.read(len(_JPEG_SIGNATURE))
            data = head + file.read() if head == _JPEG_SIGNATURE else None
        if data is not None:
            outcome = _prepare_file(task, data, verify)
        else:
            _replace_atomically(task, _copy_from(task.source))
            size = os.path.getsize(task.destination)
            outcome = _Outcome(task.relative, _COPIED, NOT_A_JPEG if size else EMPTY_FILE,
                               size, size)
    except Exception as error:  # noqa: BLE001 - one unreadable file must not end a long run
        outcome = _Outcome(task.relative, _ERROR, _describe(error), task.size)
    return outcome._replace(seconds=time.perf_counter() - start)


# Set by the parent when it shuts the pool down early (Ctrl-C, an error), so that workers stop
# between two files instead of finishing the chunks they hold. None in the parent process.
_stop_event: Optional[multiprocessing.synchronize.Event] = None


def _handle_chunk(tasks: list[_Task], verify: bool) -> list[_Outcome]:
    """What a worker runs: _handle for each task, until the parent says stop."""
    outcomes = []
    for task in tasks:
        if _stop_event is not None and _stop_event.is_set():
            break
        outcomes.append(_handle(task, verify))
    return outcomes


def _init_worker(stop_event: multiprocessing.synchronize.Event) -> None:
    """Runs once in each worker process."""
    global _stop_event
    _stop_event = stop_event
    # Ctrl-C goes to the whole process group; the parent alone decides what to do (set the stop
    # event, drop the chunks not started) rather than every worker printing a traceback and
    # breaking the pool.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # One process per core already: torch's own threads would only compete for the same cores.
    torch.set_num_threads(1)


# --- Running and progress ------------------------------------------------------------------------

class _Progress:
    """One line on stderr, rewritten in place: files done, MB/s and the time left."""

    def __init__(self, total_files: int, total_bytes: int, enabled: bool) -> None:
        self.total_files, self.total_bytes, self.enabled = total_files, total_bytes, enabled
        self.files = self.bytes = 0
        self.start = self.last = time.perf_counter()
        self.width = 0

    def advance(self, outcomes: Sequence[_Outcome]) -> None:
        """Counts finished files; redraws if the last line is older than _PROGRESS_INTERVAL."""
        self.files += len(outcomes)
        self.bytes += sum(outcome.size_in for outcome in outcomes)
        now = time.perf_counter()
        if self.enabled and now - self.last >= _PROGRESS_INTERVAL:
            self.last = now
            self._draw(now)

    def close(self) -> None:
        """Draws the final counts and ends the line, so the summary starts on a fresh one."""
        if self.enabled and self.total_files:
            self._draw(time.perf_counter())
            self._stream().write("\n")
            self._stream().flush()

    def _draw(self, now: float) -> None:
        elapsed = max(now - self.start, 1e-9)
        rate = self.bytes / elapsed
        left = (self.total_bytes - self.bytes) / rate if rate > 0 else None
        eta = "--:--" if left is None else f"{int(left) // 60}:{int(left) % 60:02d}"
        line = f"{self.files}/{self.total_files} files  {rate / 1e6:.1f} MB/s  ETA {eta}"
        # Pad with spaces so nothing of a longer previous line remains after "\r".
        self._stream().write("\r" + line.ljust(self.width))
        self._stream().flush()
        self.width = len(line)

    @staticmethod
    def _stream() -> TextIO:
        return sys.stderr  # looked up each time, so redirections made later are honoured


def _chunks(tasks: list[_Task], workers: int) -> Iterator[list[_Task]]:
    """``tasks`` in consecutive slices of at most _MAX_CHUNK, about _CHUNKS_PER_WORKER each."""
    size = max(1, min(_MAX_CHUNK, len(tasks) // (workers * _CHUNKS_PER_WORKER)))
    for start in range(0, len(tasks), size):
        yield tasks[start:start + size]


def _pool_context() -> Optional[multiprocessing.context.BaseContext]:
    """fork on Linux: workers start in milliseconds with torch and the extension loaded.

    spawn and forkserver import torch again in every worker (a second or two
    each); Python 3.14 makes forkserver the default on Linux, so fork is asked
    for by name. Elsewhere (macOS, Windows) the platform's default is safer.
    """
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return None


def _run_pool(tasks: list[_Task], verify: bool, workers: int,
              record: Callable[[list[_Outcome]], None]) -> None:
    """Handles ``tasks`` in ``workers`` processes, a few chunks in flight at a time."""
    chunks = _chunks(tasks, workers)
    pending: set[Future] = set()
    context = _pool_context() or multiprocessing.get_context()
    stop_event = context.Event()
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker,
                               initargs=(stop_event,))
    try:
        while True:
            while len(pending) < workers * _IN_FLIGHT_PER_WORKER:
                chunk = next(chunks, None)
                if chunk is None:
                    break
                pending.add(pool.submit(_handle_chunk, chunk, verify))
            if not pending:
                break
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                record(future.result())
    finally:
        # Normally every chunk is done by now. After Ctrl-C, the chunks not yet started are
        # dropped and the running ones stop after their current file, which is written under a
        # temporary name and renamed, so no partial file remains under a final name.
        stop_event.set()
        pool.shutdown(wait=True, cancel_futures=True)


def _record(summary: Summary, outcomes: Sequence[_Outcome]) -> None:
    """Adds a chunk's outcomes to ``summary``."""
    for outcome in outcomes:
        summary.work_seconds += outcome.seconds
        summary.verify_seconds += outcome.verify_seconds
        summary.bytes_read += outcome.size_in
        if outcome.kind == _PREPARED:
            summary.prepared += 1
            summary.progressive += outcome.was_progressive
            summary.bytes_before += outcome.size_in
            summary.bytes_after += outcome.size_out
            summary.size_ratios.append(outcome.size_out / outcome.size_in)
            if outcome.size_out > outcome.size_in:
                summary.larger.append(outcome.relative)
        elif outcome.kind == _COPIED:
            summary.copied.setdefault(outcome.reason, []).append(outcome.relative)
        elif outcome.kind == _VERIFY_FAILED:
            summary.verify_failed.append((outcome.relative, outcome.reason))
        else:
            summary.errors.append((outcome.relative, outcome.reason))


def _sort_lists(summary: Summary) -> None:
    """Puts every path list in path order: workers finish in no particular order."""
    summary.larger.sort()
    summary.verify_failed.sort()
    summary.errors.sort()
    for paths in summary.copied.values():
        paths.sort()


def prepare_tree(src: PathLike, dst: PathLike, *, workers: Optional[int] = None,
                 verify: bool = False, force: bool = False,
                 progress: Optional[bool] = None) -> Summary:
    """Prepares every JPEG under ``src`` for seeking into the same relative path under ``dst``.

    JPEGs (by content) are rewritten by :func:`custom_op.prepare_jpeg`, with
    the same pixels; every other file, and every JPEG prepare_jpeg refuses, is
    copied unchanged and listed in the summary with the reason. Outputs get
    their source's access and modification times, and an output whose mtime
    is at least its source's is taken as done by an earlier run and left
    alone, unless ``force``. Each output is written under a temporary name
    (``.NAME.PID.custom_op-tmp``) and renamed, so an interrupted run leaves
    only complete files; the next run removes the temporaries and goes on.

    Args:
        src: The folder to read, searched recursively (symbolic links followed).
        dst: The folder to write; created if missing. It must not be ``src``,
            lie inside it, or contain it.
        workers: Processes to use; default ``os.cpu_count()``. 1 does the work
            in this process.
        verify: Decode every prepared file and its input in full and require
            identical pixels, and check that the output is seekable. A file
            that fails is replaced by a copy of its input and listed in
            ``Summary.verify_failed``. Costs two full decodes per file.
        force: Rewrite outputs that are already up to date.
        progress: True draws a progress line on stderr, False never does,
            None draws it only when stderr is a terminal.

    Returns:
        A :class:`Summary`; ``summary.report()`` is its text and
        ``summary.exit_code`` is 1 when a file failed verification or could
        not be read or written.

    Raises:
        ValueError: ``src`` is not a folder, ``dst`` is ``src`` or inside it (or
            contains it), or ``workers`` < 1.
        OSError: ``dst`` cannot be created. Errors on single files are listed
            in the summary instead.
        KeyboardInterrupt: the run was interrupted; every output written so far
            is complete, and a rerun resumes.

    Example:
        >>> summary = prepare_tree("photos", "photos-prepared", workers=4, verify=True)
        >>> print(summary.report())
    """
    start = time.perf_counter()
    workers = (os.cpu_count() or 1) if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"prepare_tree(): workers must be an int >= 1, got {workers!r}")
    source, destination = _check_folders(src, dst)
    os.makedirs(destination, exist_ok=True)
    summary = Summary(source, destination)
    summary.stale_removed = _remove_stale_temporaries(destination)
    tasks = _plan(source, destination, force, summary)

    show = sys.stderr.isatty() if progress is None else progress
    bar = _Progress(len(tasks), sum(task.size for task in tasks), show)

    def record(outcomes: list[_Outcome]) -> None:
        _record(summary, outcomes)
        bar.advance(outcomes)

    try:
        if workers == 1 or len(tasks) <= 1:
            for task in tasks:
                record([_handle(task, verify)])
        else:
            _run_pool(tasks, verify, min(workers, len(tasks)), record)
    finally:
        bar.close()
    _sort_lists(summary)
    summary.elapsed_seconds = time.perf_counter() - start
    return summary


# --- Command line --------------------------------------------------------------------------------

def _positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m custom_op.prepare",
        description="Rewrite a tree of JPEG files losslessly (same pixels) with restart markers, "
                    "so that custom_op decodes a crop in time proportional to the crop. Other "
                    "files are copied unchanged.",
        epilog="Exit status: 0 done, 1 a file failed verification or could not be read or "
               "written, 2 bad arguments, 130 interrupted (rerun to resume).")
    parser.add_argument("src", metavar="SRC", help="folder to read, searched recursively")
    parser.add_argument("dst", metavar="DST", help="folder to write (outside SRC)")
    parser.add_argument("--workers", type=_positive_int, default=os.cpu_count() or 1,
                        metavar="N", help="processes to use (default: %(default)s, the CPU count)")
    parser.add_argument("--verify", action="store_true",
                        help="decode every input and output in full and require equal pixels "
                             "(about two extra full decodes per file)")
    parser.add_argument("--force", action="store_true",
                        help="rewrite outputs that are already at least as new as their source")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress line (the summary is still printed)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; returns the exit status (see ``--help``)."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        summary = prepare_tree(args.src, args.dst, workers=args.workers, verify=args.verify,
                               force=args.force, progress=False if args.quiet else None)
    except ValueError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\n{parser.prog}: interrupted; the files written are complete, run the same "
              "command again to resume", file=sys.stderr)
        return 130
    except (OSError, BrokenProcessPool) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    print(summary.report())
    return summary.exit_code


if __name__ == "__main__":
    # Run main from the module imported under its own name, so the functions sent to worker
    # processes pickle as custom_op.prepare.* and not __main__.*, which a worker started with
    # spawn could not find.
    from custom_op.prepare import main as _main
    sys.exit(_main())
