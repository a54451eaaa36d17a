"""The benchmark's figures: one PNG per question, each labelled with the machine and the command.

  <name>-headline.png   the README's chart: five classification pipelines on real photos, one bar
                        each, images/s and the ratio behind each of the README's claims
  <name>-crops.png      one crop from one JPEG, one thread: custom_op against its peers
                        (operator part, ms) and RandomResizedCrop(224) (imagenet part, ms,
                        with the entropy floor drawn as a line, not as a bar among methods)
  <name>-pipelines.png  DataLoader images/s: classification recipes (the decoder alone drawn
                        as a line: an upper bound, not a pipeline), detection, the article's
  <name>-prepared.png   prepared files: a crop's speed-up over a full decode of the same file,
                        original against prepared; RandomResizedCrop against torchvision
  <name>-evaluation.png the evaluation recipe Resize(256) + CenterCrop(224): each custom_op
                        mode's speed-up over torchvision, one bar per image size

One column of panels per kind of image (generated, real), one row per panel. Every panel shows one
quantity and at most one kind of ratio. ``python -m bench`` draws them after
a run; ``python -m bench chart bench/results/<name>.json`` redraws them.
"""

from __future__ import annotations

import pathlib
import textwrap
from typing import Any, Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.machine import short_label  # noqa: E402

_CUSTOM = "#d95f02"
_CUSTOM_LIGHT = "#fdb863"  # custom_op doing more work than needed (full decode, float tail)
_PEER = "#7570b3"
_REFERENCE = "#1b9e77"
_SIZE_SHADES = ("#66a61e", "#a6761d", "#666666")  # image sizes, neither custom_op nor a peer
Panel = Callable[[Any, dict[str, Any]], None]


def _colour(name: str) -> str:
    if "custom_op" in name or "EncodedJpeg" in name:
        return _CUSTOM_LIGHT if ("full" in name or "float32" in name) else _CUSTOM
    return _PEER


def _bars(axes, names: list[str], values: list[float], lows: list[float], highs: list[float],
          labels: list[str]) -> None:
    """Horizontal bars with low-high whiskers and a text label each, first name on top."""
    positions = list(range(len(names)))
    axes.barh(positions, values, xerr=[[v - low for v, low in zip(values, lows)],
                                       [high - v for v, high in zip(values, highs)]],
              color=[_colour(name) for name in names], capsize=3, error_kw={"elinewidth": 1})
    axes.set_yticks(positions, names, fontsize=8)
    axes.invert_yaxis()
    for position, high, label in zip(positions, highs, labels):
        axes.text(high, position, "  " + label, va="center", fontsize=7)
    axes.set_xlim(0, max(highs) * 1.55)


def _reference_line(axes, value: float, label: str) -> None:
    """A dashed line with its label under the axes (a legend would cover a bar's value)."""
    axes.axvline(value, color=_REFERENCE, linestyle="--", linewidth=1.2)
    axes.annotate(label, (value, 0), xycoords=("data", "axes fraction"), xytext=(0, -24),
                  textcoords="offset points", ha="center", va="top", fontsize=7,
                  color=_REFERENCE)


def _operator(axes, result: dict[str, Any]) -> None:
    rows = [row for row in result["methods"] if row["available"]]
    _bars(axes, [row["method"] for row in rows], [row["median_ms"] for row in rows],
          [row["p10_ms"] for row in rows], [row["p90_ms"] for row in rows],
          [f"{row['median_ms']:.2f} ms ({row['speedup_vs_torchvision']:.2f}x tv)" for row in rows])
    crop = result["config"]["crop"]
    axes.set_title(f"one {crop}x{crop} crop, {result['config']['corpus']['mean_width']:.0f}x"
                   f"{result['config']['corpus']['mean_height']:.0f} files", fontsize=9)
    axes.set_xlabel("ms per crop (median, p10-p90); lower is better", fontsize=8)


def _imagenet_case(index: int) -> Panel:
    def draw(axes, result: dict[str, Any]) -> None:
        case = result["cases"][index]
        rows = [row for row in case["methods"] if not row["method"].startswith("floor")]
        _bars(axes, [row["method"] for row in rows], [row["median_ms"] for row in rows],
              [row["p10_ms"] for row in rows], [row["p90_ms"] for row in rows],
              [f"{row['median_ms']:.2f} ms ({row['speedup_vs_torchvision']:.2f}x tv)" for row in rows])
        _reference_line(axes, case["floor_median_ms"], f"entropy floor {case['floor_median_ms']:.2f} ms")
        axes.set_title(f"RandomResizedCrop({result['config']['size']}), {case['label']} files", fontsize=9)
        axes.set_xlabel("ms per image (median, p10-p90); lower is better", fontsize=8)
    return draw


def _classification(axes, result: dict[str, Any]) -> None:
    rows = [row for row in result["configs"] if not row["config"].startswith("decoder alone")]
    _bars(axes, [row["config"] for row in rows], [row["median_images_per_s"] for row in rows],
          [row["min_images_per_s"] for row in rows], [row["max_images_per_s"] for row in rows],
          [f"{row['median_images_per_s']:.0f}/s ({row['vs_usual_recipe']:.2f}x usual recipe)" for row in rows])
    decoder = next((row for row in result["configs"] if row["config"].startswith("decoder alone")), None)
    if decoder is not None:
        # The decoder alone reads the original files: prepared rows may pass it.
        _reference_line(axes, decoder["median_images_per_s"],
                        f"decoder alone, original files, no DataLoader: "
                        f"{decoder['median_images_per_s']:.0f}/s")
        axes.set_xlim(0, max(axes.get_xlim()[1], decoder["median_images_per_s"] * 1.25))
    config = result["config"]
    axes.set_title(f"classification, {config['width']}x{config['height']}, RRC({config['size']}) + flip, "
                   f"{config['workers']} workers, batch {config['batch_size']}", fontsize=9)
    axes.set_xlabel("images/s (median of rounds, min-max); higher is better", fontsize=8,
                    labelpad=16)


def _loader_panel(title: Callable[[dict[str, Any]], str], ratio_key: str, ratio_label: str) -> Panel:
    def draw(axes, result: dict[str, Any]) -> None:
        rows = result["configs"]
        _bars(axes, [row["config"] for row in rows], [row["median_images_per_s"] for row in rows],
              [row["min_images_per_s"] for row in rows], [row["max_images_per_s"] for row in rows],
              [f"{row['median_images_per_s']:.0f}/s ({row[ratio_key]:.2f}x {ratio_label})" for row in rows])
        axes.set_title(title(result["config"]), fontsize=9)
        axes.set_xlabel("images/s (median of rounds, min-max); higher is better", fontsize=8)
    return draw


def _prepared_crops(axes, result: dict[str, Any]) -> None:
    labels, originals, prepared = [], [], []
    for item in result["sets"]:
        labels.append(item["label"])
        originals.append(item["crop_vs_full_original"])
        prepared.append(item["crop_vs_full_prepared"])
    positions = range(len(labels))
    axes.barh([p - 0.2 for p in positions], originals, height=0.4, color=_PEER, label="original file")
    axes.barh([p + 0.2 for p in positions], prepared, height=0.4, color=_CUSTOM, label="prepared file")
    for position, before, after in zip(positions, originals, prepared):
        axes.text(before, position - 0.2, f"  {before:.1f}x", va="center", fontsize=7)
        axes.text(after, position + 0.2, f"  {after:.1f}x", va="center", fontsize=7)
    axes.set_yticks(list(positions), labels, fontsize=8)
    axes.invert_yaxis()
    axes.set_xscale("log")
    axes.set_xlim(0.8, max(prepared + originals) * 8)
    axes.axvline(1.0, color="grey", linewidth=0.8)
    axes.legend(fontsize=7, loc="upper right")
    crop = result["sets"][0]["crop"]
    axes.set_title(f"{crop}x{crop} crop: speed-up over a full decode of the file", fontsize=9)
    axes.set_xlabel("full decode time / crop time (medians, log scale); higher is better", fontsize=8)


def _grouped_speedups(axes, names: list[str], groups: list[tuple[str, list[float]]]) -> None:
    """One bar per method and group (an image size), its ratio written at its end, 1.0 marked.

    ``groups`` holds (label, ratios in the order of ``names``); the x axis leaves room for
    the labels beyond the longest bar.
    """
    height = 0.8 / max(1, len(groups))
    for number, (label, ratios) in enumerate(groups):
        positions = [index + (number - (len(groups) - 1) / 2) * height for index in range(len(names))]
        axes.barh(positions, ratios, height=height, color=_SIZE_SHADES[number % len(_SIZE_SHADES)],
                  label=label)
        for position, ratio in zip(positions, ratios):
            axes.text(ratio, position, f"  {ratio:.2f}x", va="center", fontsize=7)
    axes.axvline(1.0, color="grey", linewidth=0.8)
    axes.set_yticks(list(range(len(names))), names, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlim(0, max([ratio for _, ratios in groups for ratio in ratios] + [1]) * 1.4)
    axes.legend(fontsize=7, loc="lower right")


def _prepared_rrc(axes, result: dict[str, Any]) -> None:
    items = [item for item in result["sets"] if "rrc_methods" in item]
    names = [row["method"] for row in items[0]["rrc_methods"]] if items else []
    _grouped_speedups(axes, names, [(item["label"], [row["speedup_vs_torchvision"]
                                                     for row in item["rrc_methods"]])
                                    for item in items])
    axes.set_title("RRC(224): speed-up over torchvision, original file", fontsize=9)
    axes.set_xlabel("torchvision's median / method's median; higher is better", fontsize=8)


def _evaluation(axes, result: dict[str, Any]) -> None:
    """Each custom_op mode's speed-up over torchvision, one bar per image size, 1.0 marked."""
    cases = result["cases"]
    names = [row["method"] for row in cases[0]["methods"][1:]] if cases else []
    _grouped_speedups(axes, names, [(case["label"], [row["speedup_vs_torchvision"]
                                                     for row in case["methods"][1:]])
                                    for case in cases])
    axes.set_title("Resize(256) + CenterCrop(224): speed-up over torchvision's decode_jpeg + "
                   "the same transforms, one thread", fontsize=9)
    axes.set_xlabel("torchvision's median / method's median; higher is better", fontsize=8)


#: figure name -> its question and its panels: (part, panel drawer).
FIGURES: dict[str, tuple[str, list[tuple[str, Panel]]]] = {
    "crops": ("One crop from one JPEG, one thread: custom_op against its peers", [
        ("operator", _operator), ("imagenet", _imagenet_case(0)), ("imagenet", _imagenet_case(1))]),
    "pipelines": ("Input pipelines (DataLoader): images per second", [
        ("classification", _classification),
        ("detection", _loader_panel(lambda c: f"detection, {c['width']}x{c['height']}, RandomIoUCrop + "
                                              f"Resize({c['size']}), {c['workers']} workers, batch {c['batch_size']}",
                                    "vs_torchvision", "tv")),
        ("pipeline", _loader_panel(lambda c: f"the article's Dataset, {c['crop']}x{c['crop']} crops, "
                                             f"{c['workers']} workers, batch {c['batch_size']}",
                                   "speedup_vs_pil", "PIL"))]),
    "prepared": ("Files prepared with restart markers (python -m custom_op.prepare)", [
        ("prepared", _prepared_crops), ("prepared", _prepared_rrc)]),
    "evaluation": ("The evaluation recipe on EncodedJpeg: the resize waits, the crop decodes its "
                   "window", [("eval", _evaluation)]),
}


def _fit_texts(axes) -> None:
    """Widens the x range until every value written at a bar's end lies inside the axes."""
    texts = [text for text in axes.texts if text.get_text().strip()]
    if not texts or axes.get_xscale() != "linear":
        return
    renderer = axes.figure.canvas.get_renderer()
    right = max(text.get_window_extent(renderer).x1 for text in texts)
    box = axes.get_window_extent(renderer)
    if right > box.x1 - 4:
        low, high = axes.get_xlim()
        # Data units per pixel stay proportional: stretch the range by the overflow.
        axes.set_xlim(low, low + (high - low) * (right - box.x0 + 8) / box.width)


def _command(results: dict[str, Any]) -> str:
    return "python -m bench " + " ".join(results.get("argv", []))


def _draw_figure(results: dict[str, Any], question: str, panels: list[tuple[str, Panel]],
                 output: pathlib.Path) -> pathlib.Path | None:
    panels = [(part, draw) for part, draw in panels if results.get(part)]
    kinds = [kind for kind in ("generated", "real") if any(kind in results[part] for part, _ in panels)]
    if not panels or not kinds:
        return None
    # One column per kind of image and one row per panel: a figure that reads whole on a screen.
    width = 9.0 * len(kinds)
    height = 3.9 * len(panels) + 1.2
    figure, grid = plt.subplots(len(panels), len(kinds), figsize=(width, height), squeeze=False)
    for column, kind in enumerate(kinds):
        for row, (part, draw) in enumerate(panels):
            axes = grid[row][column]
            if kind not in results[part]:
                axes.axis("off")
                continue
            draw(axes, results[part][kind])
            axes.set_title(textwrap.fill(f"{kind} images: " + axes.get_title(), 60), fontsize=9)
    header = [question, short_label(results["machine"]), "command: " + _command(results)]
    figure.suptitle("\n".join(textwrap.fill(line, int(width * 14)) for line in header), fontsize=9)
    for _ in range(2):  # widening an axes for its labels moves the others: settle twice
        figure.tight_layout(rect=(0, 0, 1, 1 - 0.6 / height))  # room for the header lines
        for axes in figure.axes:
            _fit_texts(axes)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=110)
    plt.close(figure)
    return output


#: The headline chart's rows: classification_bench's pipeline name -> (the label a reader
#: needs, the row its ratio is taken against or None). Each ratio is one of the headline's
#: claims: uint8 against the usual recipe is the recipe's gain, custom_op against torchvision
#: uint8 the decoder's, prepared files against torchvision uint8 the preparing's. (The names
#: are classification_bench's, repeated so that redrawing from a JSON does not import torch.)
_USUAL = "torchvision decode_jpeg, float32 (usual recipe)"
_TV_UINT8 = "torchvision decode_jpeg, uint8"
HEADLINE_ROWS = {
    "Pillow ImageFolder, float32": ("Pillow ImageFolder, float32", _USUAL),
    _USUAL: ("torchvision, float32 (the usual recipe)", None),
    _TV_UINT8: ("torchvision, uint8", _USUAL),
    "custom_op.EncodedJpeg + v2.RandomResizedCrop, uint8": ("custom_op, uint8", _TV_UINT8),
    "custom_op.EncodedJpeg + v2.RandomResizedCrop, uint8, prepared":
        ("custom_op, uint8, prepared files", _TV_UINT8),
}
_SHORT = {_USUAL: "the usual recipe", _TV_UINT8: "torchvision uint8"}


def draw_headline(results: dict[str, Any], output: pathlib.Path) -> pathlib.Path | None:
    """Draws headline_figure to ``output``; None when ``results`` has no classification part."""
    figure = headline_figure(results)
    if figure is None:
        return None
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=HEADLINE_DPI)
    plt.close(figure)
    return output


#: The headline chart is 8 x 3.3 inches at this resolution: 800 pixels wide, a README's width.
HEADLINE_DPI = 100


def headline_figure(results: dict[str, Any]):
    """The README's chart: images/s of five pipelines on real photos (generated if no real).

    One bar per pipeline with its images/s and its ratio to the row it is
    compared with written at its end, inside the figure. None when
    ``results`` has no classification part.
    """
    part = results.get("classification") or {}
    kind = "real" if "real" in part else "generated" if "generated" in part else None
    if kind is None:
        return None
    result = part[kind]
    rate = {row["config"]: row["median_images_per_s"] for row in result["configs"]}
    names = [name for name in HEADLINE_ROWS if name in rate]
    figure, axes = plt.subplots(figsize=(8.0, 3.3), dpi=HEADLINE_DPI)
    positions = list(range(len(names)))
    axes.barh(positions, [rate[name] for name in names], height=0.62,
              color=[_colour(name) for name in names])
    axes.set_yticks(positions, [HEADLINE_ROWS[name][0] for name in names], fontsize=10)
    axes.invert_yaxis()
    for position, name in zip(positions, names):
        against = HEADLINE_ROWS[name][1]
        ratio = (f"  {rate[name] / rate[against]:.2f}x {_SHORT[against]}"
                 if against in rate else "")
        axes.text(rate[name], position, f" {rate[name]:.0f}/s{ratio}", va="center", fontsize=9)
    # Room at the right for the longest label: the numbers stay inside the figure.
    axes.set_xlim(0, max(rate[name] for name in names) * 1.8)
    axes.spines[["top", "right"]].set_visible(False)
    config = result["config"]
    axes.set_xlabel(f"images per second (median of {config['rounds']} epochs); higher is better",
                    fontsize=9)
    figure.text(0.01, 0.97, f"DataLoader, RandomResizedCrop({config['size']}) + flip, {kind} "
                f"{config['width']} x {config['height']} JPEG photos, {config['workers']} "
                f"workers", fontsize=10, va="top")
    machine = results["machine"]
    figure.text(0.01, 0.01, f"{_command(results)} on {machine['cpu']}, "
                f"{machine['usable_cores']} cores; uint8 batches are normalised on the device; "
                f"docs/benchmarks.md", fontsize=7, color="#555555")
    figure.tight_layout(rect=(0, 0.04, 1, 0.93))
    return figure


def draw_all(results: dict[str, Any], folder: pathlib.Path, name: str) -> list[pathlib.Path]:
    """Draws every figure whose parts are in ``results`` to ``folder/<name>-<figure>.png``."""
    drawn = []
    headline = draw_headline(results, folder / f"{name}-headline.png")
    if headline is not None:
        drawn.append(headline)
    for figure, (question, panels) in FIGURES.items():
        path = _draw_figure(results, question, panels, folder / f"{name}-{figure}.png")
        if path is not None:
            drawn.append(path)
    return drawn
