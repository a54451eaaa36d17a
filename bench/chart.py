"""Draws the benchmark results as a PNG (matplotlib, Agg backend).

``python -m bench`` draws bench/results/bench.png after every full run (a run
of one part draws bench/results/bench-<part>.png). To redraw from a saved run:

    python -m bench chart bench/results/<name>.json [--output out.png]
"""

from __future__ import annotations

import pathlib
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

_HIGHLIGHT = "#d95f02"  # custom_op
_FULL = "#fdb863"  # custom_op decoding the whole image
_PEER = "#7570b3"


def _colour(name: str) -> str:
    if name.startswith("custom_op"):
        return _FULL if "full" in name else _HIGHLIGHT
    return _PEER


def _bars(axes, names: list[str], medians: list[float], lows: list[float],
          highs: list[float]) -> range:
    """Horizontal bars of the medians with low-high whiskers, first name on top."""
    positions = range(len(names))
    below = [median - low for median, low in zip(medians, lows)]
    above = [high - median for median, high in zip(medians, highs)]
    axes.barh(positions, medians, xerr=[below, above], color=[_colour(name) for name in names],
              capsize=3, error_kw={"elinewidth": 1})
    axes.set_yticks(list(positions), names)
    axes.invert_yaxis()
    return positions


def _draw_operator(axes, operator: dict[str, Any]) -> None:
    rows = [row for row in operator["methods"] if row["available"]]
    missing = [row["method"] for row in operator["methods"] if not row["available"]]
    positions = _bars(axes, [row["method"] for row in rows], [row["median_ms"] for row in rows],
                      [row["p10_ms"] for row in rows], [row["p90_ms"] for row in rows])
    for position, row in zip(positions, rows):
        ratio = row.get("speedup_vs_torchvision")
        label = f"{row['median_ms']:.2f} ms" + (f"  ({ratio:.2f}x vs tv)" if ratio else "")
        axes.text(row["p90_ms"], position, "  " + label, va="center", fontsize=8)
    axes.set_xlim(0, max(row["p90_ms"] for row in rows) * 1.7)
    config = operator["config"]
    axes.set_xlabel("milliseconds per crop (median, bars p10-p90); lower is better")
    title = f"One {config['crop']}x{config['crop']} crop from one JPEG, 1 thread"
    if missing:
        title += "\nnot installed: " + ", ".join(missing)
    axes.set_title(title, fontsize=10)


def _draw_pipeline(axes, pipeline: dict[str, Any]) -> None:
    rows = pipeline["configs"]
    positions = _bars(axes, [row["config"] for row in rows],
                      [row["median_images_per_s"] for row in rows],
                      [row["min_images_per_s"] for row in rows],
                      [row["max_images_per_s"] for row in rows])
    for position, row in zip(positions, rows):
        label = f"{row['median_images_per_s']:.0f}/s  ({row['speedup_vs_pil']:.2f}x vs PIL)"
        axes.text(row["max_images_per_s"], position, "  " + label, va="center", fontsize=8)
    axes.set_xlim(0, max(row["max_images_per_s"] for row in rows) * 1.6)
    config = pipeline["config"]
    axes.set_xlabel("images per second (median, bars min-max of rounds); higher is better")
    axes.set_title(f"DataLoader, {config['workers']} workers, batch {config['batch_size']}, "
                   f"{config['crop']}x{config['crop']} crops + 3 transforms", fontsize=10)


def _draw_imagenet(axes, imagenet: dict[str, Any]) -> None:
    cases = imagenet["cases"]
    names = [row["method"] for row in cases[0]["methods"]]
    height = 0.8 / len(cases)
    shades = ("#1b9e77", "#66a61e", "#e6ab02")
    for number, case in enumerate(cases):
        ratios = [row["speedup_vs_torchvision"] for row in case["methods"]]
        positions = [index + (number - (len(cases) - 1) / 2) * height for index in range(len(names))]
        axes.barh(positions, ratios, height=height, color=shades[number % len(shades)], label=case["label"])
        for position, row in zip(positions, case["methods"]):
            axes.text(row["speedup_vs_torchvision"], position,
                      f"  {row['speedup_vs_torchvision']:.2f}x ({row['median_ms']:.1f} ms)", va="center", fontsize=7)
    axes.axvline(1.0, color="grey", linewidth=0.8)
    axes.set_yticks(list(range(len(names))), names)
    axes.invert_yaxis()
    axes.set_xlim(0, max(row["speedup_vs_torchvision"] for case in cases for row in case["methods"]) * 1.5)
    axes.legend(fontsize=8, loc="center right", title="width x height", title_fontsize=8)
    axes.set_xlabel("speed-up vs torchvision decode + resized_crop (ratio of medians); higher is better")
    axes.set_title(f"RandomResizedCrop({imagenet['config']['size']}) from JPEG bytes, 1 thread", fontsize=10)


def _draw_prepared(axes, prepared: dict[str, Any]) -> None:
    """Speed-ups bought by preparing: crop over the same file's full decode, and RRC over torchvision."""
    labels, values, colours = [], [], []
    for item in prepared["sets"]:
        for name, key, colour in (("original", "crop_vs_full_original", _PEER),
                                  ("prepared", "crop_vs_full_prepared", _HIGHLIGHT)):
            labels.append(f"{item['label']}, {name}: {item['crop']}px crop vs full")
            values.append(item[key])
            colours.append(colour)
        if "rrc_prepared_vs_torchvision" in item:
            labels.append(f"{item['label']}, prepared: RRC(224) vs torchvision")
            values.append(item["rrc_prepared_vs_torchvision"])
            colours.append(_HIGHLIGHT)
    positions = range(len(labels))
    axes.barh(positions, values, color=colours)
    axes.set_yticks(list(positions), labels, fontsize=8)
    axes.invert_yaxis()
    axes.set_xscale("log")
    for position, value in zip(positions, values):
        axes.text(value, position, f"  {value:.1f}x", va="center", fontsize=8)
    axes.set_xlim(0.8, max(values) * 3)
    axes.set_xlabel("speed-up (ratio of medians, log scale); higher is better")
    axes.set_title("Files prepared with restart markers (python -m custom_op.prepare)", fontsize=10)


_DRAWERS = {"operator": _draw_operator, "pipeline": _draw_pipeline, "imagenet": _draw_imagenet,
            "prepared": _draw_prepared}


def draw(results: dict[str, Any], output: pathlib.Path) -> pathlib.Path:
    """Draws the parts present in ``results`` (operator, pipeline, imagenet, prepared) to ``output``."""
    parts = [part for part in _DRAWERS if part in results]
    width = sum(9.5 if part in ("imagenet", "prepared") else 7.5 for part in parts)
    if len(parts) == 1:
        width = 12.0  # room for the two-line title
    figure, axes_list = plt.subplots(1, len(parts), figsize=(width, 4.2), squeeze=False)
    for axes, part in zip(axes_list[0], parts):
        _DRAWERS[part](axes, results[part])
    machine = results["machine"]
    corpus = next((results[part]["config"]["corpus"] for part in parts if "corpus" in results[part]["config"]),
                  None)
    if corpus is not None:
        images = (f"{corpus['num_files']} JPEGs, {corpus['mean_height']:.0f}x{corpus['mean_width']:.0f} px, "
                  f"{corpus['mean_encoded_bytes'] / 1024:.0f} KiB mean ({corpus['source']})")
    else:  # the imagenet or prepared part alone: they generate their own sets
        sets = results["imagenet"]["cases"] if "imagenet" in results else results["prepared"]["sets"]
        images = "generated JPEGs: " + ", ".join(f"{item['files']} of {item['label']} (width x height)"
                                                 for item in sets)
    figure.suptitle(
        f"custom_op benchmarks on {machine['cpu']} ({machine['usable_cores']} cores); torch {machine['torch']}, "
        f"torchvision {machine['torchvision']}, Pillow {machine['pillow']}, libjpeg-turbo "
        f"{machine['custom_op_libjpeg']} (custom_op)\n{images}; load average at start "
        f"{(machine.get('load_average_1_5_15') or [float('nan')])[0]:.2f}",
        fontsize=9)
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=120)
    plt.close(figure)
    return output
