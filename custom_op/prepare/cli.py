"""The command line, ``python -m custom_op.prepare SRC DST``: arguments, summary, exit status."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Callable, Optional, Sequence

from .._decode._single import DEFAULT_MAX_MEMORY
from .summary import EXIT_REFUSED, printable_name
from .index_only import IndexSummary, index_tree
from .tree import ENGINES, prepare_tree
from .workspace import DestinationBusy

PROG = "python -m custom_op.prepare"
#: The exit status when another run is writing into DST.
BUSY = 3


def _positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


#: --max-memory's suffixes: binary multiples, as the sizes of memory are counted.
_BYTE_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_BYTES = re.compile(r"([0-9]+)([KMGT]?)", re.IGNORECASE)


def _bytes(text: str) -> int:
    """argparse type: a number of bytes >= 1, plain or with a K, M, G or T suffix (powers of 1024)."""
    match = _BYTES.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"not a number of bytes: {text!r} (use e.g. 268435456, 512M or 2G)")
    value = int(match.group(1)) * _BYTE_SUFFIXES[match.group(2).upper()]
    if not 1 <= value <= 2**62:
        raise argparse.ArgumentTypeError(f"must be between 1 and 2**62 bytes, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Rewrite a tree of JPEG files losslessly (same pixels) with restart markers, "
                    "so that custom_op decodes a crop in time proportional to the crop. Tar "
                    "shards (*.tar) are rewritten member by member, parquet files (*.parquet, "
                    "Hugging Face datasets) row group by row group (with pyarrow installed). "
                    "Other files are copied unchanged.",
        epilog="Exit status: 0 everything prepared as asked (files that are not JPEGs copied), "
               "1 a file failed verification, could not be read or written (or its worker "
               "process died), or a shard or parquet file was refused, 2 bad arguments, 3 "
               "another run is writing into DST, 4 JPEGs were refused (damaged, 12-bit, too "
               "large for --max-memory, ...) and copied unprepared (0 with --accept-refused), "
               "130 interrupted (rerun to resume).")
    parser.add_argument("src", metavar="SRC", help="folder to read, searched recursively")
    parser.add_argument("dst", metavar="DST", nargs="?", default=None,
                        help="folder to write (outside SRC); not with --index-only")
    parser.add_argument("--index-only", action="store_true",
                        help="write no DST: beside SRC's JPEGs, a sidecar of their MCU-row "
                             "indexes per folder, tar shard and parquet file (the JPEGs "
                             "untouched), which custom_op's datasets read to decode crops "
                             "from their first row; a rerun writes only what is missing or "
                             "stale")
    # None when not given, so that --index-only can tell an explicit --workers from the default.
    parser.add_argument("--workers", type=_positive_int, default=None, metavar="N",
                        help=f"processes to use (default: {os.cpu_count() or 1}, the CPU count; "
                             "--index-only: 1 only)")
    parser.add_argument("--engine", choices=ENGINES, default="processes",
                        help="where the work runs: worker processes of this machine (default) "
                             "or Ray tasks on every CPU of a Ray cluster (the 'ray' extra; SRC "
                             "and DST at the same paths on every node; --workers unused)")
    parser.add_argument("--ray-address", metavar="ADDR", default=None,
                        help="--engine ray: the cluster to join, as ray.init's address (default: "
                             "RAY_ADDRESS, else a Ray started on this machine)")
    parser.add_argument("--verify", action="store_true",
                        help="decode every input and output in full and require equal pixels "
                             "(about two extra full decodes per file)")
    parser.add_argument("--max-memory", type=_bytes, default=DEFAULT_MAX_MEMORY, metavar="BYTES",
                        help="working memory one file may use, e.g. 512M or 2G (default 256M); "
                             "a JPEG that needs more is copied unchanged, with the bytes it "
                             "needs as the reason in the summary")
    parser.add_argument("--force", action="store_true",
                        help="rewrite outputs that are already up to date (made from their "
                             "source as it is now)")
    parser.add_argument("--no-fsync", dest="fsync", action="store_false",
                        help="do not flush each output to disk before its rename (faster where "
                             "fsync is slow; after a power cut during such a run, rerun it "
                             "with --force)")
    parser.add_argument("--accept-refused", action="store_true",
                        help=f"exit 0 rather than {EXIT_REFUSED} when JPEGs were refused and "
                             "copied unprepared (known damaged or unusual files); failures "
                             "still exit 1")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bar (the summary is still printed)")
    # Parquet files (custom_op/prepare/parquet.py): the only option of their own.
    parser.add_argument("--image-column", metavar="NAME", default=None,
                        help="parquet files: the column of images to rewrite, a struct {bytes, "
                             "path} or a binary column (default: every struct {bytes, path} "
                             "column, as Hugging Face datasets writes images)")
    return parser


def _prepare(args: argparse.Namespace):
    """prepare_tree with the command line's options."""
    return prepare_tree(args.src, args.dst, workers=args.workers or os.cpu_count() or 1,
                        verify=args.verify, force=args.force,
                        progress=False if args.quiet else None,
                        max_memory=args.max_memory, fsync=args.fsync,
                        image_column=args.image_column, engine=args.engine,
                        ray_address=args.ray_address)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns the exit status (see ``--help``).

    Args:
        argv: The arguments after the program name; default ``sys.argv[1:]``.

    Returns:
        0 when everything was prepared as asked, 1 after a verification failure, an I/O
        error (a worker's death included) or a refused shard or parquet file, 2 for bad
        arguments, 3 when another run is writing into DST, 4 when JPEGs were refused and
        copied unprepared (0 with --accept-refused), 130 when interrupted.

    Example:
        >>> main(["photos", "photos-prepared", "--verify", "--quiet"])
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if args.index_only or args.dst is None:
        return _index_only(parser, args)

    def prepare() -> int:
        summary = _prepare(args)
        _print(summary.report())
        return summary.exit_status(accept_refused=args.accept_refused)

    return _exit_status(prepare, "files")


def _exit_status(run: Callable[[], int], written: str,
                 report_partial: Callable[[], None] = lambda: None) -> int:
    """What ``run`` returns, or the exit status of what it raised, with the error printed:
    2 for bad arguments, BUSY, 130 when interrupted (what was ``written`` is complete), 1 for
    a failure. ``report_partial`` prints what was done before an interruption or a failure."""
    try:
        return run()
    except ValueError as error:
        _error(error)
        return 2
    except DestinationBusy as error:
        _error(error)
        return BUSY
    except KeyboardInterrupt:
        report_partial()
        print(f"\n{PROG}: interrupted; the {written} written are complete, run the same "
              "command again to resume", file=sys.stderr)
        return 130
    except (OSError, RuntimeError, ImportError) as error:
        report_partial()
        _error(error)
        return 1


def _unsupported_with_index_only(args: argparse.Namespace) -> Optional[str]:
    """The first option given that --index-only cannot honour, with why; None if none."""
    unsupported = (
        (args.verify, "--verify", "no file is rewritten, so there is nothing to verify"),
        (args.workers not in (None, 1), "--workers",
         "it runs in one process (give --workers 1 or leave it out)"),
        (args.engine != "processes", "--engine", "it runs in this process only"),
        (args.ray_address is not None, "--ray-address", "it runs in this process only"),
        (args.accept_refused, "--accept-refused",
         "it refuses no JPEG: its exit status is 0, or 1 when something failed"),
    )
    for given, option, why in unsupported:
        if given:
            return f"--index-only does not take {option}: {why}"
    return None


def _index_only(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """--index-only SRC: the sidecars written (index_only.py); the summary printed whatever
    happened once the run started; 1 if anything failed, 2 for bad arguments, 3 when another
    run holds SRC's lock, 130 when interrupted."""
    if not args.index_only:
        parser.error("DST is required (or --index-only, to write index sidecars into SRC)")
    if args.dst is not None:
        parser.error("--index-only writes into SRC: give no DST")
    refusal = _unsupported_with_index_only(args)
    if refusal is not None:
        _error(ValueError(refusal))
        return 2
    summary = IndexSummary()

    def index() -> int:
        index_tree(args.src, image_column=args.image_column, max_memory=args.max_memory,
                   force=args.force, fsync=args.fsync, summary=summary)
        _print(summary.report())
        return 1 if summary.failed else 0

    return _exit_status(index, "sidecars", report_partial=lambda: _print(summary.report()))


def _error(error: BaseException) -> None:
    """Prints an error on one line: a name in it with a newline cannot add lines of its own."""
    print(f"{PROG}: error: {printable_name(str(error))}", file=sys.stderr)


def _print(text: str) -> None:
    """Prints ``text`` whatever stdout's encoding (PYTHONIOENCODING=ascii, a C locale): a
    character it cannot encode shows as a backslash escape rather than ending the run."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="backslashreplace")
    print(text)
