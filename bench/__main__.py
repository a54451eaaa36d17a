"""Runs the benchmarks: ``python -m bench [all|PART] [options]``, or redraws the charts.

From the repository root (``make bench`` does the first, with BENCH_ARGS):

    python -m bench                          # every part on generated and real files
                                             # (the first run also makes the images)
    python -m bench operator --repeats 20    # one part
    python -m bench classification --images real --rounds 5
    python -m bench --data ~/photos          # your own JPEGs for the operator and pipeline parts
    python -m bench chart bench/results/<name>.json
    python -m bench tables bench/results/<name>.json   # print a saved run's tables again (for docs/)

The parts, each an experiment with its own module (its docstring says what
it runs and how it times it):

  operator        one random crop from one JPEG: custom_op against torchvision, Pillow, peers
  pipeline        the article's DataLoader experiment (its Dataset, its transforms)
  imagenet        RandomResizedCrop(224) from JPEG bytes, one thread, and the batched call
  prepared        files prepared with restart markers: crops, full decodes, the cost of preparing
  index           MCU-row indexes: crops of unmodified baseline files from the rows they need
  classification  training input pipelines, DataLoader, 500x375: the usual recipes against custom_op's
  detection       a COCO-style detection pipeline, 800x533: RandomIoUCrop with boxes
  timm            timm's train transform, DataLoader, 500x375: ImageFolder against JpegFolder
  huggingface     a Hub-style parquet dataset through datasets: Image() (Pillow) against custom_op
  formats         MDS and LitData: each library's own decode against custom_op's items and the lane
  eval            the evaluation recipe Resize(256) + CenterCrop(224), three sizes
  sample          where one sample of the per-sample path goes, step by step, against torchvision
  lane            the batch lane (workers, threads) against per-sample, torchvision and the ceiling
  ray             the lane on Ray Data against the threads lane and torchvision, one machine
  ship            custom_op on system libjpeg-turbo 2.1.5 against static 3.1 (child processes); the wheel

Every part runs once per kind of image (``--images``: generated, real or
both). Prints the machine and one table per part and kind, writes
bench/results/<name>.json (every figure and the configuration, to compare
commits) and one PNG chart per question (bench/results/<name>-*.png).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
import traceback

from bench import images, index_store, machine, photos, report  # the package pins thread counts before torch loads
from bench import (chart, classification_bench, detection_bench, eval_bench, formats_bench,
                   huggingface_bench, imagenet_bench, index_bench, lane_bench, operator_bench,
                   pipeline_bench, prepared_bench, ray_bench, sample_bench, ship_bench, timm_bench)

#: The parts, in the order "all" runs them: each module has add_arguments(parser),
#: run(args, source) and format_table(result).
PARTS = {"operator": operator_bench, "pipeline": pipeline_bench, "imagenet": imagenet_bench,
         "prepared": prepared_bench, "index": index_bench,
         "classification": classification_bench, "detection": detection_bench,
         "eval": eval_bench, "timm": timm_bench, "huggingface": huggingface_bench,
         "formats": formats_bench, "sample": sample_bench, "lane": lane_bench, "ray": ray_bench, "ship": ship_bench}
#: Parts that read the corpus (``--data`` replaces it); the others make sets of their own sizes.
CORPUS_PARTS = ("operator", "pipeline")
COMMANDS = ("all", *PARTS, "chart", "tables")


def _first_line(module) -> str:
    return module.__doc__.split("\n\n")[0].rstrip(".")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Run 'python -m bench COMMAND --help' for a command's options.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    helps = {"all": "every part (the default)", **{part: _first_line(module) for part, module in PARTS.items()}}
    for command, text in helps.items():
        sub = commands.add_parser(command, help=text, description=text)
        images.add_arguments(sub)
        for part, module in PARTS.items():
            if command in ("all", part):
                module.add_arguments(sub)
        output = sub.add_argument_group("output")
        output.add_argument("--name", default=None,
                            help="results file name without .json (default: <UTC time>-<commit>-<command>)")
        output.add_argument("--results", type=pathlib.Path, default=report.DEFAULT_RESULTS,
                            help=f"folder for the JSON and the charts (default {report.DEFAULT_RESULTS})")
    redraw = commands.add_parser("chart", help="redraw the PNG charts from a saved JSON",
                                 description="Redraw the PNG charts from a saved JSON file.")
    redraw.add_argument("json", type=pathlib.Path)
    redraw.add_argument("--output", type=pathlib.Path, default=None,
                        help="folder for the PNGs (default: beside the JSON)")
    reprint = commands.add_parser("tables", help="print the tables of a saved JSON again",
                                  description="Print the machine and every table of a saved JSON file.")
    reprint.add_argument("json", type=pathlib.Path)
    return parser


def _print_table(part: str, kind: str, result: dict) -> None:
    """A part's table for one kind of image, and the time the part took."""
    print("\n" + PARTS[part].format_table(result), flush=True)
    print(f"({part} on {kind} images: {result['elapsed_s']:.0f} s)", flush=True)


def _print_tables(results: dict) -> None:
    """Every part's table for every kind of image in ``results``, in the order of a run."""
    for part in PARTS:
        for kind, result in results.get(part, {}).items():
            _print_table(part, kind, result)


def _kinds_for(part: str, args: argparse.Namespace) -> tuple[str, ...]:
    """The kinds a part runs on: the folder alone when --data replaces a corpus part's images."""
    if part in CORPUS_PARTS and args.data is not None:
        return images.KINDS[:1]  # images.corpus() returns --data whatever the kind
    return images.kinds(args)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help")):
        argv.insert(0, "all")
    args = _parser().parse_args(argv)

    if args.command == "chart":
        results = json.loads(args.json.read_text(encoding="utf-8"))
        for path in chart.draw_all(results, args.output or args.json.parent, args.json.stem):
            print(f"Chart: {path}")
        return
    if args.command == "tables":
        results = json.loads(args.json.read_text(encoding="utf-8"))
        print(machine.format_machine(results["machine"]))
        print(f"Command: python -m bench {' '.join(results['argv'])}; {results['elapsed_s']:.0f} s")
        _print_tables(results)
        return

    started = time.perf_counter()
    described = machine.describe_machine()
    print(machine.format_machine(described), flush=True)
    results = {"command": args.command, "argv": argv, "machine": described,
               "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "index_store": index_store.users_store() or "a new one per part"}
    sources, failures = {}, []
    for part, module in PARTS.items():
        if args.command not in ("all", part):
            continue
        results[part] = {}
        for kind in _kinds_for(part, args):
            part_started = time.perf_counter()
            try:
                source = sources.setdefault(kind, images.ImageSource(kind, args))
                with index_store.fresh_index_store(part):
                    results[part][kind] = module.run(args, source)
            except photos.PhotosUnavailable as error:
                print(f"\n{part} on {kind} images skipped: {error}", flush=True)
                continue
            except Exception:  # noqa: BLE001 - keep the other parts' figures; fail at the end
                failures.append(f"{part} on {kind} images")
                print(f"\n{part} on {kind} images FAILED:\n{traceback.format_exc()}", flush=True)
                continue
            results[part][kind]["elapsed_s"] = time.perf_counter() - part_started
            _print_table(part, kind, results[part][kind])

    results["elapsed_s"] = time.perf_counter() - started
    results["failures"] = failures
    name = args.name or report.default_run_name(args.command, described)
    json_path = report.write_json(args.results, name, results)
    print(f"\nResults: {json_path}")
    for path in chart.draw_all(results, args.results, name):
        print(f"Chart: {path}")
    print(f"Total time: {results['elapsed_s']:.0f} s")
    if failures:
        raise SystemExit(f"failed: {', '.join(failures)} (tracebacks above; the other parts' results are saved)")


if __name__ == "__main__":
    main()
