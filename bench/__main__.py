"""Runs the benchmarks: ``python -m bench [all|operator|pipeline|imagenet|prepared|chart] [options]``.

From the repository root (``make bench`` does the first, with BENCH_ARGS):

    python -m bench                       # all three parts on defaults: ~3.5 min on 2 idle cores
                                          # (the first run also generates the images, ~1 min)
    python -m bench operator --repeats 20
    python -m bench pipeline --workers 4 --batch-size 64
    python -m bench imagenet --windows 50   # RandomResizedCrop(224) at 500x375 and 2560x1600
    python -m bench prepared              # files rewritten by custom_op.prepare: crops and cost
    python -m bench --data ~/photos       # "all" is implied when the first word is an option
    python -m bench chart bench/results/<name>.json

Prints the machine and one table per part, writes bench/results/<name>.json
(every median and the configuration, to compare commits) and a PNG chart.
Generated images are cached under bench/data/ and reused.
"""

from __future__ import annotations

from bench import common  # first: pins thread counts before torch loads

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from bench import chart, imagenet_bench, operator_bench, pipeline_bench, prepared_bench  # noqa: E402

#: The parts, in the order "all" runs them: each module has add_arguments,
#: run(args, corpus) and format_table(result).
PARTS = {"operator": operator_bench, "pipeline": pipeline_bench, "imagenet": imagenet_bench,
         "prepared": prepared_bench}
#: Parts that generate their own sets of images instead of reading the corpus.
OWN_IMAGES = ("imagenet", "prepared")
COMMANDS = ("all", *PARTS, "chart")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Run 'python -m bench COMMAND --help' for a command's options.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    helps = {"all": "operator, pipeline, imagenet and prepared benchmarks (the default)",
             "operator": "per-crop time of custom_op against torchvision, Pillow and optional peers",
             "pipeline": "the article's DataLoader experiment, images per second",
             "imagenet": "RandomResizedCrop(224) from JPEG bytes against torchvision and PIL, and the batched call",
             "prepared": "files prepared with restart markers: crop against full decode, and the cost of preparing"}
    for command, text in helps.items():
        sub = commands.add_parser(command, help=text, description=text)
        common.add_corpus_arguments(sub)
        for part, module in PARTS.items():
            if command in ("all", part):
                module.add_arguments(sub)
        output = sub.add_argument_group("output")
        output.add_argument("--name", default=None,
                            help="results file name without .json (default: <UTC time>-<commit>-<command>)")
        output.add_argument("--results", type=pathlib.Path, default=common.DEFAULT_RESULTS,
                            help=f"folder for the JSON and the chart (default {common.DEFAULT_RESULTS})")
    redraw = commands.add_parser("chart", help="redraw the PNG from a saved JSON",
                                 description="Redraw the PNG chart from a saved JSON file.")
    redraw.add_argument("json", type=pathlib.Path)
    redraw.add_argument("--output", type=pathlib.Path, default=None,
                        help="PNG path (default: beside the JSON, same name)")
    return parser


def _chart_path(results_dir: pathlib.Path, command: str) -> pathlib.Path:
    return results_dir / ("bench.png" if command == "all" else f"bench-{command}.png")


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help")):
        argv.insert(0, "all")
    args = _parser().parse_args(argv)

    if args.command == "chart":
        results = json.loads(args.json.read_text(encoding="utf-8"))
        output = chart.draw(results, args.output or args.json.with_suffix(".png"))
        print(f"Chart: {output}")
        return

    started = time.perf_counter()
    machine = common.describe_machine()
    print(common.format_machine(machine), flush=True)
    corpus = None
    if args.command not in OWN_IMAGES:
        corpus = common.load_corpus(args)
        print(common.describe_corpus(corpus), flush=True)
    results = {"command": args.command, "argv": argv, "machine": machine,
               "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    for part, module in PARTS.items():
        if args.command in ("all", part):
            results[part] = module.run(args, corpus)
            print("\n" + module.format_table(results[part]), flush=True)

    results["elapsed_s"] = time.perf_counter() - started
    name = args.name or common.default_run_name(args.command, machine)
    json_path = common.write_json(args.results, name, results)
    png_path = chart.draw(results, _chart_path(args.results, args.command))
    print(f"\nResults: {json_path}\nChart: {png_path}\nTotal time: {results['elapsed_s']:.0f} s")


if __name__ == "__main__":
    main()
