"""How results are shown and kept: ratios, markdown tables, the JSON file.

The tables are markdown so that docs/benchmarks.md can hold exactly what a
run prints; they are padded so that they also read in a terminal.
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
from typing import Any, Sequence

from bench.machine import REPO_ROOT, describe_machine, format_machine

DEFAULT_RESULTS = REPO_ROOT / "bench" / "results"


def format_ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """A markdown table padded so that its columns line up in a terminal too."""
    widths = [max(len(headers[column]), *(len(row[column]) for row in rows)) if rows else len(headers[column])
              for column in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        padded = [cell.rjust(width) if align else cell.ljust(width)
                  for cell, width, align in zip(cells, widths, right)]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(("-" * (width + 1) + ":") if align else (":" + "-" * (width + 1))
                          for width, align in zip(widths, right)) + "|"
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


def format_targets(targets: Sequence[dict[str, Any]]) -> list[str]:
    """One line per target: holds or MISSED, and the measured ratio."""
    return [f"- [{'holds' if target['holds'] else 'MISSED'}] {target['target']}: "
            f"measured {target['measured']:.2f}x" for target in targets]


def default_run_name(part: str, machine: dict[str, Any]) -> str:
    """<UTC time>-<commit>-<part>, so runs of different commits sit side by side.

    The commit is the one describe_machine() saw when the run started.
    """
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    commit = (machine.get("git_commit") or "nogit")[:10]
    return f"{stamp}-{commit}-{part}"


def write_json(results_dir: pathlib.Path, name: str, payload: dict[str, Any]) -> pathlib.Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def standalone_main(module, argv: list[str] | None = None) -> None:
    """``main()`` of a part run alone (``python -m bench.<part>_bench``): its options, the machine,
    its table for every kind of image asked for. ``python -m bench <part>`` also saves JSON and charts."""
    from bench import images

    parser = argparse.ArgumentParser(description=module.__doc__.split("\n\n")[0])
    images.add_arguments(parser)
    module.add_arguments(parser)
    args = parser.parse_args(argv)
    print(format_machine(describe_machine()), flush=True)
    for kind in images.kinds(args):
        print(module.format_table(module.run(args, images.ImageSource(kind, args))), flush=True)
