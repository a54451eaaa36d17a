"""Shared pieces of the benchmarks: thread pinning, the machine's description,
the image corpus, statistics, tables and JSON output.

Not run on its own; ``python -m bench`` uses it. Import this module before
anything that imports torch: it pins the math libraries to one thread, and
those libraries read their environment variables only once, when torch loads.
"""

from __future__ import annotations

import argparse
import os
import sys

# One thread per process: the operator benchmark measures one decode on one
# core, and DataLoader workers are single-threaded anyway. These variables are
# read when the libraries initialise, so they must be set before torch loads.
_THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)
#: False when torch was imported before this module, so the pinning came late.
THREADS_PINNED_BEFORE_TORCH = "torch" not in sys.modules
for _variable in _THREAD_VARIABLES:
    os.environ[_variable] = "1"

import datetime  # noqa: E402
import gc  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any, Callable, Sequence  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

import custom_op  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_CACHE = REPO_ROOT / "bench" / "data"
DEFAULT_RESULTS = REPO_ROOT / "bench" / "results"
JPEG_SUFFIXES = (".jpg", ".jpeg")


# --------------------------------------------------------------------------
# The machine


def _cpu_model() -> str:
    """The first "model name" in /proc/cpuinfo, or what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Processor") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _version(module_name: str) -> str:
    try:
        module = __import__(module_name)
    except ImportError:
        return "not installed"
    return str(getattr(module, "__version__", "unknown"))


def _bundled_libjpeg_turbo(package: str) -> str:
    """The libjpeg-turbo version a wheel bundles (e.g. torchvision.libs/libjpeg*.so), read
    from the library's own version string; "unknown" if there is none to read."""
    import re

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return "not installed"
    package_dir = pathlib.Path(next(iter(spec.submodule_search_locations)))
    for folder in (package_dir.parent / f"{package}.libs", package_dir):
        for library in sorted(folder.glob("libjpeg*.so*")):
            match = re.search(rb"libjpeg-turbo version (\d+\.\d+\.\d+)", library.read_bytes())
            if match:
                return match.group(1).decode()
    return "unknown"


def describe_machine() -> dict[str, Any]:
    """CPU, core counts, library versions and the git commit, for the report and the JSON."""
    import PIL
    from PIL import features

    try:
        usable_cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable_cores = os.cpu_count()
    status = _git("status", "--porcelain")
    return {
        "cpu": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        "torchvision_libjpeg": _bundled_libjpeg_turbo("torchvision"),
        "pillow": PIL.__version__,
        "pillow_libjpeg": features.version("libjpeg_turbo") or features.version("jpg"),
        "pillow_libjpeg_turbo": bool(features.check_feature("libjpeg_turbo")),
        "numpy": np.__version__,
        "custom_op": getattr(custom_op, "__version__", "unknown"),
        "custom_op_libjpeg": custom_op.libjpeg_version(),
        "torch_threads": torch.get_num_threads(),
        # Other work on the machine skews every timing; say how busy it was.
        "load_average_1_5_15": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "threads_pinned_before_torch": THREADS_PINNED_BEFORE_TORCH,
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
    }


def format_machine(machine: dict[str, Any]) -> str:
    """A few lines naming the machine, printed above the tables."""
    commit = machine.get("git_commit") or "unknown"
    dirty = " (uncommitted changes)" if machine.get("git_dirty") else ""
    turbo = "libjpeg-turbo" if machine["pillow_libjpeg_turbo"] else "libjpeg"
    lines = [
        f"Machine: {machine['cpu']}, {machine['usable_cores']} usable of "
        f"{machine['logical_cores']} logical cores, {machine['platform']}",
        f"Python {machine['python']}, torch {machine['torch']}, torchvision {machine['torchvision']} "
        f"(libjpeg-turbo {machine['torchvision_libjpeg']}), Pillow {machine['pillow']} "
        f"({turbo} {machine['pillow_libjpeg']}), numpy {machine['numpy']}",
        f"custom_op {machine['custom_op']} built against libjpeg-turbo {machine['custom_op_libjpeg']}; "
        f"commit {commit[:12]}{dirty}",
    ]
    if machine.get("load_average_1_5_15"):
        one, five, _ = machine["load_average_1_5_15"]
        lines.append(f"Load average before the run: {one:.2f} (1 min), {five:.2f} (5 min)")
        if one > 0.5 * (machine["usable_cores"] or 1):
            lines.append("WARNING: the machine is busy with other work; timings will be noisy "
                         "and the benchmark will run longer")
    if not machine["threads_pinned_before_torch"]:
        lines.append("WARNING: torch was imported before bench.common pinned the thread counts")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# The images


@dataclass
class Corpus:
    """The JPEG files a benchmark reads, with their sizes from the header."""

    paths: list[pathlib.Path]
    sizes: list[tuple[int, int]]  # (height, width)
    description: dict[str, Any] = field(default_factory=dict)


def add_corpus_arguments(parser) -> None:
    """The options that choose the images; both benchmarks share them."""
    group = parser.add_argument_group("images")
    group.add_argument("--data", type=pathlib.Path, default=None,
                       help="folder of real JPEGs, searched recursively (default: generate photo-like ones)")
    group.add_argument("--num-images", type=int, default=100,
                       help="how many files to generate, or at most to take from --data (default 100)")
    group.add_argument("--crop", type=int, default=256, help="crop side in pixels (default 256)")
    group.add_argument("--height", type=int, default=533, help="height of generated images (default 533)")
    group.add_argument("--width", type=int, default=800, help="width of generated images (default 800)")
    group.add_argument("--quality", type=int, default=90, help="JPEG quality of generated images (default 90)")
    group.add_argument("--subsampling", default="4:2:0", choices=("4:4:4", "4:2:2", "4:2:0"),
                       help="chroma subsampling of generated images (default 4:2:0)")
    group.add_argument("--cache", type=pathlib.Path, default=DEFAULT_CACHE,
                       help=f"where generated images are kept and reused (default {DEFAULT_CACHE})")
    group.add_argument("--seed", type=int, default=0, help="seed of the images, windows and targets")


def recipe_name(kind: str, args, height: int, width: int, *, progressive: bool = False) -> str:
    """The cache folder of a set of generated images: kind-HxW-qQ-SSS[-prog]-seedN.

    ``kind`` is "photos" (the corpus of the operator and pipeline parts) or
    "imagenet" (the imagenet part's sets); the prepared part reuses both.
    """
    return (f"{kind}-{height}x{width}-q{args.quality}-{args.subsampling.replace(':', '')}"
            f"{'-prog' if progressive else ''}-seed{args.seed}")


def _generated_corpus(args) -> Corpus:
    import synthetic

    recipe = recipe_name("photos", args, args.height, args.width)
    folder = args.cache / recipe
    paths = synthetic.write_jpeg_folder(folder, args.num_images, args.height, args.width,
                                        quality=args.quality, subsampling=args.subsampling, seed=args.seed)
    sizes = [(args.height, args.width)] * len(paths)
    return Corpus(paths, sizes, {
        "source": "generated", "folder": str(folder), "recipe": recipe,
        "generator": "custom_op.synthetic.make_photo (dead leaves), encoded by Pillow",
        "height": args.height, "width": args.width, "quality": args.quality,
        "subsampling": args.subsampling,
    })


def _folder_corpus(args) -> Corpus:
    """Real files: RGB (3-channel) JPEGs at least as large as the crop, in path order."""
    candidates = sorted(path for path in args.data.rglob("*")
                        if path.suffix.lower() in JPEG_SUFFIXES and path.is_file())
    paths, sizes, skipped = [], [], {"unreadable": 0, "not_3_channels": 0, "smaller_than_crop": 0}
    for path in candidates:
        if len(paths) >= args.num_images:
            break
        try:
            height, width, channels = custom_op.jpeg_size(path.read_bytes())
        except (OSError, ValueError, RuntimeError):
            skipped["unreadable"] += 1
            continue
        if channels != 3:
            # The article's PIL pipeline would give 1- or 4-channel tensors that do not stack.
            skipped["not_3_channels"] += 1
        elif height < args.crop or width < args.crop:
            skipped["smaller_than_crop"] += 1
        else:
            paths.append(path)
            sizes.append((height, width))
    return Corpus(paths, sizes, {"source": "folder", "folder": str(args.data),
                                 "files_found": len(candidates), "skipped": skipped})


def load_corpus(args) -> Corpus:
    """Generates (or reuses) the photo-like JPEGs, or lists the files under --data."""
    corpus = _folder_corpus(args) if args.data is not None else _generated_corpus(args)
    if not corpus.paths:
        raise SystemExit(f"no usable JPEG files (at least {args.crop}x{args.crop}, 3 channels): "
                         f"{corpus.description}")
    encoded_bytes = [path.stat().st_size for path in corpus.paths]
    pixels = [height * width for height, width in corpus.sizes]
    corpus.description.update({
        "num_files": len(corpus.paths),
        "mean_encoded_bytes": float(np.mean(encoded_bytes)),
        "mean_bits_per_pixel": float(8 * np.sum(encoded_bytes) / np.sum(pixels)),
        "mean_height": float(np.mean([size[0] for size in corpus.sizes])),
        "mean_width": float(np.mean([size[1] for size in corpus.sizes])),
    })
    return corpus


def describe_corpus(corpus: Corpus) -> str:
    info = corpus.description
    where = info.get("recipe") or info.get("folder")
    text = (f"Images: {info['num_files']} files ({info['source']}: {where}), mean "
            f"{info['mean_height']:.0f}x{info['mean_width']:.0f} px, "
            f"{info['mean_encoded_bytes'] / 1024:.0f} KiB, {info['mean_bits_per_pixel']:.2f} bits/pixel")
    skipped = {reason: count for reason, count in info.get("skipped", {}).items() if count}
    if skipped:
        text += "; skipped " + ", ".join(f"{count} {reason.replace('_', ' ')}" for reason, count in skipped.items())
    return text


def read_encoded(path: str | os.PathLike[str]) -> torch.Tensor:
    """The file's bytes as a 1-D uint8 tensor, read once into a buffer the tensor shares."""
    with open(path, "rb", buffering=0) as file:
        buffer = bytearray(os.fstat(file.fileno()).st_size)
        view, filled = memoryview(buffer), 0
        while filled < len(buffer):
            count = file.readinto(view[filled:])
            if not count:
                raise OSError(f"{path}: file shrank while being read")
            filled += count
    return torch.frombuffer(buffer, dtype=torch.uint8)


# --------------------------------------------------------------------------
# Statistics, tables and results


def time_rotating(names: Sequence[str], plan: Sequence[Any],
                  call: Callable[[str, Any], Any]) -> dict[str, list[int]]:
    """Nanoseconds of ``call(name, item)`` for every name and plan item.

    For each item the names run back to back in an order that rotates from
    item to item, so slow drift of the machine (frequency, other load) hits
    them alike. The garbage collector is off; freeing each result is timed.
    """
    samples: dict[str, list[int]] = {name: [] for name in names}
    order = list(names)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for number, item in enumerate(plan):
            shift = number % len(order)
            for name in order[shift:] + order[:shift]:
                start = time.perf_counter_ns()
                result = call(name, item)
                del result
                samples[name].append(time.perf_counter_ns() - start)
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    """Median, p10 and p90 (numpy's linear interpolation) and the sample count."""
    p10, median, p90 = np.percentile(np.asarray(samples, dtype=np.float64), [10, 50, 90])
    return {"median": float(median), "p10": float(p10), "p90": float(p90), "n": len(samples)}


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


def standalone_main(module, argv: list[str] | None = None, *, corpus: bool = True) -> None:
    """``main()`` of a benchmark module run alone: its arguments, the machine, its table.

    ``module`` provides ``__doc__``, ``add_arguments(parser)``, ``run(args)``
    and ``format_table(result)``.
    """
    parser = argparse.ArgumentParser(description=module.__doc__.split("\n\n")[0])
    if corpus:
        add_corpus_arguments(parser)
    module.add_arguments(parser)
    args = parser.parse_args(argv)
    print(format_machine(describe_machine()), flush=True)
    print(module.format_table(module.run(args)))
