"""Operator benchmark: time to get one random crop out of one encoded JPEG.

Run from the repository root:

    python -m bench operator                      # 533x800 files, generated and real, 256x256 crops
    python -m bench operator --data DIR --crop 224 --num-images 200 --repeats 5
    python -m bench operator --dali .venv-dali/bin/python   # and DALI's CPU crop, batches of 32
    python -m bench.operator_bench --help          # the same, without the chart

Every method gets the same files and the same random windows; the encoded
bytes are in memory before timing starts, so no file I/O is timed. One
process, one thread (the bench package pins the thread counts before torch loads).
For each sample the methods run back to back in an order that rotates from
sample to sample, so slow drift of the machine (frequency, other load) hits
all of them alike. After one untimed warm-up call per method and file, each
call is timed with time.perf_counter_ns with the garbage collector off; the
time includes freeing the result, so every method pays for its own memory.

Methods:
  custom_op crop       custom_op.decode_and_crop_jpeg(tensor, y, x, h, w), the public function:
                       eager, it calls the stable-ABI kernel without the operator's hop (under
                       torch.compile, torch.ops.custom_op_jpeg.decode_and_crop_jpeg)
  custom_op crop, kernel call
                       the same argument checks, then the kernel call itself
                       (custom_op._core._native.decode_and_crop_jpeg): the target is the public
                       function within 3% of it, i.e. what the function adds is noise
  custom_op full image the same operator asked for the whole image (what the crop saves)
  torchvision + slice  torchvision.io.decode_jpeg(tensor, mode=RGB)[:, y:y+h, x:x+w]
  Pillow + crop        Image.open(BytesIO(b)).convert("RGB").crop(...) -> tensor (CHW view)
  torchcodec + slice   torchcodec.decoders.decode_jpeg(tensor, mode="RGB")[:, y:y+h, x:x+w]: the
                       decoder torchvision 0.29 deprecates its own for (make bench installs it)
  tensorflow           tf.io.decode_and_crop_jpeg(tf.string constant, [y, x, h, w]), if installed
  simplejpeg + slice   simplejpeg.decode_jpeg(b)[y:y+h, x:x+w] -> tensor, if installed

torchvision is given mode=RGB so that grayscale or CMYK files in --data give
the same three channels as the other methods; for colour files it changes
nothing. Speed-ups are ratios of medians: "vs torchvision" is torchvision's
median over this method's, so above 1 means faster.

With ``--dali PYTHON`` (a Python with nvidia-dali-cuda120 and numpy, e.g.
``python3 -m venv .venv-dali && .venv-dali/bin/pip install
nvidia-dali-cuda120 numpy``, the venv bench/lane_bench.py's --lane-dali
takes), one more table: the strongest peer of a crop call, NVIDIA DALI's CPU
``fn.decoders.image_crop(device="cpu")`` in a pipeline of batch 32 on
num_threads=1 (bench/dali_crop.py, in DALI's venv as a child process, no
torch there), against ``custom_op.decode_and_crop_jpeg_batch(datas, boxes,
num_threads=1)`` on the same batches of 32 and the single call
``decode_and_crop_jpeg`` one sample at a time, on the real photos when the run has them (else
the generated ones). The files: the kind's
--height x --width set (533x800 by default; not --data), baseline and
progressive, --num-images files each, bytes in memory before timing; the
windows: --crop squares drawn with --seed (the same for both encodings),
--repeats per file, cut to whole batches. Each encoding runs one warm-up
round of every method, then --dali-rounds rounds, the three methods in an
order that rotates from round to round; a round is every batch once. Per
image ms is a round's time over its images, median of the rounds; "DALI /
batch" is DALI's median over the batch call's (above 1: the batch call is
ahead; the JSON also has the median of the rounds' own ratios), and
"CPU/wall" each process's CPU time over its rounds' wall time (about 1 for
one busy thread; less when neighbours take the core). DALI's crops of the
first batch are checked against the batch call's (mean absolute difference
per pixel), so both decode the same windows. ``--json FILE`` also writes
``{"operator-dali-<kind>": {encoding: {dali_crop_ms, batch_crop_ms,
single_crop_ms}}}`` (merged).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import io
import json
import pathlib
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from PIL import Image

import custom_op
from bench import images, report, timing

CUSTOM_CROP = "custom_op crop"
CUSTOM_KERNEL = "custom_op crop, kernel call"
CUSTOM_FULL = "custom_op full image"
TORCHVISION = "torchvision decode_jpeg + slice"
PILLOW = "Pillow open/convert/crop"
TENSORFLOW = "tf.io.decode_and_crop_jpeg"
SIMPLEJPEG = "simplejpeg decode + slice"
TORCHCODEC = "torchcodec decode_jpeg + slice"


@dataclass
class Method:
    """One way to get a crop: ``prepare`` turns the file's bytes into the
    method's natural input (untimed), ``crop`` is what is timed."""

    name: str
    prepare: Callable[[bytes], Any] | None
    crop: Callable[[Any, int, int, int, int], Any] | None
    note: str = ""

    @property
    def available(self) -> bool:
        return self.crop is not None


def _as_uint8_tensor(encoded: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(encoded), dtype=torch.uint8)


def _custom_op_methods() -> list[Method]:
    def crop(data: torch.Tensor, y: int, x: int, height: int, width: int) -> torch.Tensor:
        return custom_op.decode_and_crop_jpeg(data, y, x, height, width)

    def prepare_full(encoded: bytes) -> tuple[torch.Tensor, int, int]:
        height, width, _ = custom_op.jpeg_size(encoded)
        return _as_uint8_tensor(encoded), height, width

    def full(state: tuple[torch.Tensor, int, int], y: int, x: int, height: int, width: int) -> torch.Tensor:
        data, image_height, image_width = state
        return custom_op.decode_and_crop_jpeg(data, 0, 0, image_height, image_width)

    return [Method(CUSTOM_CROP, _as_uint8_tensor, crop, note="the public function"),
            Method(CUSTOM_KERNEL, _as_uint8_tensor, _kernel_crop, note="custom_op._C"),
            Method(CUSTOM_FULL, prepare_full, full, note="whole image, no crop")]


def _kernel_crop(data: torch.Tensor, y: int, x: int, height: int, width: int) -> torch.Tensor:
    """custom_op.decode_and_crop_jpeg's argument checks, then its kernel call and nothing else
    (no EXIF look-up, no compile check): the floor the public function is measured against."""
    from custom_op._decode import _single as _decode

    name = "decode_and_crop_jpeg"
    encoded = _decode._as_encoded(data, name)
    window = _decode._as_window(name, y, x, height, width)
    mode = _decode._normalize_mode(name, "rgb")
    _decode._check_flags(name, strict=True, seek=True, contiguous=False)
    return custom_op._C.decode_and_crop_jpeg(
        encoded, *window, mode, True, _decode._as_limit(name, "max_pixels", _decode.DEFAULT_MAX_PIXELS),
        _decode._as_limit(name, "max_scans", _decode.DEFAULT_MAX_SCANS), True, contiguous=False,
        max_memory=_decode._as_limit(name, "max_memory", _decode.DEFAULT_MAX_MEMORY))


def _torchvision_method() -> Method:
    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except ImportError:
        return Method(TORCHVISION, None, None, note="not installed")

    def crop(data: torch.Tensor, y: int, x: int, height: int, width: int) -> torch.Tensor:
        return decode_jpeg(data, mode=ImageReadMode.RGB)[:, y:y + height, x:x + width]

    return Method(TORCHVISION, _as_uint8_tensor, crop)


def _pillow_method() -> Method:
    def crop(encoded: bytes, y: int, x: int, height: int, width: int) -> torch.Tensor:
        image = Image.open(io.BytesIO(encoded)).convert("RGB")
        window = np.array(image.crop((x, y, x + width, y + height)))
        return torch.from_numpy(window).permute(2, 0, 1)

    return Method(PILLOW, bytes, crop)


def _torchcodec_method() -> Method:
    """torchcodec's decode_jpeg: torchvision 0.29 deprecates its own decoder in favour of it."""
    if importlib.util.find_spec("torchcodec") is None:
        return Method(TORCHCODEC, None, None, note="not installed")
    try:
        import torchcodec
        from torchcodec.decoders import decode_jpeg
    except (ImportError, OSError, RuntimeError) as error:  # built for another torch: say so, time the rest
        return Method(TORCHCODEC, None, None, note=f"not loadable: {str(error)[:60]}")

    def crop(data: torch.Tensor, y: int, x: int, height: int, width: int) -> torch.Tensor:
        return decode_jpeg(data, mode="RGB")[:, y:y + height, x:x + width]

    return Method(TORCHCODEC, _as_uint8_tensor, crop, note=f"torchcodec {torchcodec.__version__}")


def _tensorflow_method() -> Method:
    if importlib.util.find_spec("tensorflow") is None:
        return Method(TENSORFLOW, None, None, note="not installed")
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # TensorFlow was already initialised by someone else
        pass

    def prepare(encoded: bytes) -> Any:
        return tf.constant(encoded, dtype=tf.string)

    def crop(contents: Any, y: int, x: int, height: int, width: int) -> torch.Tensor:
        window = tf.io.decode_and_crop_jpeg(contents, [y, x, height, width], channels=3)
        return torch.from_numpy(window.numpy()).permute(2, 0, 1)

    return Method(TENSORFLOW, prepare, crop, note=f"tensorflow {tf.__version__}")


def _simplejpeg_method() -> Method:
    if importlib.util.find_spec("simplejpeg") is None:
        return Method(SIMPLEJPEG, None, None, note="not installed")
    import simplejpeg

    def crop(encoded: bytes, y: int, x: int, height: int, width: int) -> torch.Tensor:
        image = simplejpeg.decode_jpeg(encoded, colorspace="RGB")
        return torch.from_numpy(image[y:y + height, x:x + width]).permute(2, 0, 1)

    return Method(SIMPLEJPEG, bytes, crop, note=f"simplejpeg {simplejpeg.__version__}")


def all_methods() -> list[Method]:
    return [*_custom_op_methods(), _torchvision_method(), _torchcodec_method(), _pillow_method(),
            _tensorflow_method(), _simplejpeg_method()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("operator benchmark")
    group.add_argument("--repeats", type=int, default=6,
                       help="random windows per file; samples = files x repeats (default 6)")
    group.add_argument("--dali", type=pathlib.Path, default=None,
                       help="a Python with nvidia-dali-cuda120 and numpy (e.g. .venv-dali/bin/python): "
                            "adds DALI's CPU image_crop at batch 32, one thread, against the batch "
                            "call (bench/dali_crop.py)")
    group.add_argument("--dali-rounds", type=int, default=5,
                       help="timed rounds of the DALI comparison, each every batch once (default 5)")


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """Times every available method on the corpus; returns the configuration and the statistics."""
    corpus = images.corpus(args, source)
    methods = all_methods()
    active = [method for method in methods if method.available]
    encoded = [path.read_bytes() for path in corpus.paths]
    states = {method.name: [method.prepare(data) for data in encoded] for method in active}

    # Warm-up: one call per method and file, which also drops any file that a
    # method cannot decode (possible only with --data).
    usable, dropped = [], []
    for index, (height, width) in enumerate(corpus.sizes):
        side_y, side_x = min(args.crop, height), min(args.crop, width)
        try:
            for method in active:
                method.crop(states[method.name][index], 0, 0, side_y, side_x)
        except Exception as error:  # noqa: BLE001 - a benchmark reports, it does not stop
            dropped.append(f"{corpus.paths[index]}: {type(error).__name__}: {error}")
        else:
            usable.append(index)

    rng = np.random.default_rng(args.seed)
    plan = []
    for _ in range(args.repeats):
        for index in usable:
            height, width = corpus.sizes[index]
            crop_height, crop_width = min(args.crop, height), min(args.crop, width)
            y = int(rng.integers(0, height - crop_height + 1))
            x = int(rng.integers(0, width - crop_width + 1))
            plan.append((index, y, x, crop_height, crop_width))

    by_name = {method.name: method for method in active}
    samples = timing.time_rotating(
        list(by_name), plan, lambda name, item: by_name[name].crop(states[name][item[0]], *item[1:]))
    stats = timing.milliseconds(samples)
    reference = {peer: stats[peer]["median"] for peer in (TORCHVISION, PILLOW) if peer in stats}
    rows = []
    for method in methods:
        row: dict[str, Any] = {"method": method.name, "available": method.available, "note": method.note}
        if method.available:
            row.update({f"{key}_ms" if key != "n" else "samples": value
                        for key, value in stats[method.name].items()})
            for peer, label in ((TORCHVISION, "speedup_vs_torchvision"), (PILLOW, "speedup_vs_pillow")):
                row[label] = reference[peer] / stats[method.name]["median"] if peer in reference else None
        rows.append(row)
    result = {
        "config": {"crop": args.crop, "repeats": args.repeats, "seed": args.seed,
                   "files_used": len(usable), "files_dropped": dropped,
                   "samples_per_method": len(plan), "threads": torch.get_num_threads(),
                   "corpus": corpus.description},
        "methods": rows,
        "targets": _targets(rows),
    }
    if getattr(args, "dali", None) is not None and _dali_kind(args, source):
        result["dali_crop"] = _dali_comparison(args, source)
        result["targets"] += _dali_targets(result["dali_crop"])
        if getattr(args, "json", None) is not None:
            _merge_dali_json(args.json, source.kind, result["dali_crop"])
    return result


#: DALI's comparison: batches of this many images, one thread on both sides.
DALI_BATCH, DALI_THREADS = 32, 1
DALI_ENCODINGS = {"baseline": False, "progressive": True}
DALI_METHODS = ("dali", "batch", "single")


def _dali_windows(sizes: list[tuple[int, int]], args: argparse.Namespace) -> list[tuple[int, int, int, int, int]]:
    """(file, y, x, h, w) per sample: --repeats windows per file, files in order, cut (or cycled)
    to whole batches; drawn with --seed, so both encodings get the same windows."""
    rng = np.random.default_rng(args.seed)
    wanted = max(1, round(len(sizes) * args.repeats / DALI_BATCH)) * DALI_BATCH
    samples = []
    for number in range(wanted):
        index = number % len(sizes)
        height, width = sizes[index]
        side_y, side_x = min(args.crop, height), min(args.crop, width)
        samples.append((index, int(rng.integers(0, height - side_y + 1)),
                        int(rng.integers(0, width - side_x + 1)), side_y, side_x))
    return samples


class _DaliChild:
    """bench/dali_crop.py in DALI's Python: one line per command, one line per answer."""

    def __init__(self, python: pathlib.Path, plan: pathlib.Path) -> None:
        script = pathlib.Path(__file__).with_name("dali_crop.py")
        self.process = subprocess.Popen([str(python), str(script), str(plan)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)

    def ask(self, line: str) -> list[str]:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline().split()
        if not reply:
            raise RuntimeError(f"bench/dali_crop.py stopped on {line!r} (exit status "
                               f"{self.process.poll()}; its error is above)")
        return reply

    def stop(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _dali_kind(args: argparse.Namespace, source: images.ImageSource) -> bool:
    """Whether DALI's comparison runs on this kind: the real photos when the run has them (the
    peers' figures are quoted on real photos), else the generated ones."""
    return source.kind == "real" or "real" not in images.kinds(args)


def _dali_version(python: pathlib.Path) -> str:
    done = subprocess.run([str(python), "-c", "import nvidia.dali; print(nvidia.dali.__version__)"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"--dali {python}: cannot import nvidia.dali: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


def _dali_comparison(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """DALI's image_crop, the batch call and the single call over the same batches, per encoding."""
    version = _dali_version(args.dali)
    sets, tensors, windows = {}, {}, {}
    for encoding, progressive in DALI_ENCODINGS.items():
        sets[encoding] = source.files(args.height, args.width, args.num_images, progressive=progressive)
        tensors[encoding] = images.as_tensors(sets[encoding].paths)
        windows[encoding] = _dali_windows(sets[encoding].sizes, args)
    with tempfile.TemporaryDirectory(prefix="dali-crop-") as folder:
        plan = pathlib.Path(folder) / "plan.json"
        plan.write_text(json.dumps({"batch": DALI_BATCH, "threads": DALI_THREADS, "encodings": {
            encoding: {"paths": [str(sets[encoding].paths[index]) for index, *_ in windows[encoding]],
                       "windows": [list(box) for _, *box in windows[encoding]],
                       "sizes": [list(sets[encoding].sizes[index]) for index, *_ in windows[encoding]]}
            for encoding in DALI_ENCODINGS}}), encoding="utf-8")
        child = _DaliChild(args.dali, plan)
        try:
            results = {encoding: _dali_encoding(child, encoding, tensors[encoding], windows[encoding],
                                                pathlib.Path(folder), args.dali_rounds)
                       for encoding in DALI_ENCODINGS}
        finally:
            child.stop()
    return {"dali": version, "batch": DALI_BATCH, "threads": DALI_THREADS, "rounds": args.dali_rounds,
            "crop": args.crop, "sets": {encoding: image_set.description for encoding, image_set in sets.items()},
            "encodings": results}


def _dali_encoding(child: _DaliChild, encoding: str, tensors: list[torch.Tensor],
                   windows: list[tuple[int, int, int, int, int]], folder: pathlib.Path,
                   rounds: int) -> dict[str, Any]:
    batches = [windows[start:start + DALI_BATCH] for start in range(0, len(windows), DALI_BATCH)]
    inputs = [([tensors[index] for index, *_ in batch], [list(box) for _, *box in batch])
              for batch in batches]

    def dali_round() -> tuple[int, int, int]:
        images_done, nanoseconds, cpu = child.ask(f"round {encoding}")
        return int(images_done), int(nanoseconds), int(cpu)

    def batch_round() -> tuple[int, int, int]:
        done = 0
        cpu, start = time.process_time_ns(), time.perf_counter_ns()
        for datas, boxes in inputs:
            crops = custom_op.decode_and_crop_jpeg_batch(datas, boxes, num_threads=DALI_THREADS)
            done += len(crops)
            del crops
        return done, time.perf_counter_ns() - start, time.process_time_ns() - cpu

    def single_round() -> tuple[int, int, int]:
        cpu, start = time.process_time_ns(), time.perf_counter_ns()
        for index, y, x, height, width in windows:
            crop = custom_op.decode_and_crop_jpeg(tensors[index], y, x, height, width)
            del crop
        return len(windows), time.perf_counter_ns() - start, time.process_time_ns() - cpu

    run = {"dali": dali_round, "batch": batch_round, "single": single_round}
    # The same windows: DALI's first batch against the batch call's (HWC both).
    dump = folder / f"{encoding}.npy"
    child.ask(f"dump {encoding} {dump}")
    theirs = np.load(dump).astype(np.int16)
    ours = np.stack([crop.permute(1, 2, 0).numpy() for crop in custom_op.decode_and_crop_jpeg_batch(
        *inputs[0], num_threads=DALI_THREADS)]).astype(np.int16)
    difference = float(np.abs(theirs - ours).mean()) if theirs.shape == ours.shape else None
    per_round: dict[str, list[float]] = {name: [] for name in DALI_METHODS}
    cpu_per_wall: dict[str, list[float]] = {name: [] for name in DALI_METHODS}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        warmup = {name: run[name]() for name in DALI_METHODS}
        for order in timing.rotations(DALI_METHODS, rounds):
            for name in order:
                images_done, nanoseconds, cpu = run[name]()
                per_round[name].append(nanoseconds / images_done / 1e6)
                cpu_per_wall[name].append(cpu / nanoseconds)
    finally:
        if gc_was_enabled:
            gc.enable()
    median = {name: float(np.median(values)) for name, values in per_round.items()}
    return {"samples": len(windows), "batches": len(batches),
            "dali_crop_ms": median["dali"], "batch_crop_ms": median["batch"],
            "single_crop_ms": median["single"],
            "dali_over_batch": median["dali"] / median["batch"],
            "dali_over_single": median["dali"] / median["single"],
            # The median of the rounds' own ratios (a round's methods ran back to back).
            "dali_over_batch_paired": float(np.median([dali / batch for dali, batch in
                                                       zip(per_round["dali"], per_round["batch"])])),
            "per_round_ms": per_round,
            "warmup_ms": {name: nanoseconds / images_done / 1e6
                          for name, (images_done, nanoseconds, _) in warmup.items()},
            # CPU time over wall time of each method's process in its rounds: about 1 on one thread.
            "cpu_per_wall": {name: float(np.median(values)) for name, values in cpu_per_wall.items()},
            "dali_shape": list(theirs.shape), "batch_shape": list(ours.shape),
            "mean_abs_difference": difference}


def _dali_targets(comparison: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 41: the batch call, one thread, ahead of DALI's CPU crop per image, each encoding."""
    return [{"target": f"batch call ahead of DALI: decode_and_crop_jpeg_batch, one thread, faster per image "
                       f"than DALI {comparison['dali']} image_crop (batch {comparison['batch']}, one thread), "
                       f"{encoding} (DALI / batch > 1)",
             "required": 1.0, "measured": row["dali_over_batch"], "holds": row["dali_over_batch"] > 1.0}
            for encoding, row in comparison["encodings"].items()]


def _merge_dali_json(path: pathlib.Path, kind: str, comparison: dict[str, Any]) -> None:
    """Writes {"operator-dali-<kind>": {encoding: {dali_crop_ms, batch_crop_ms, single_crop_ms}}}."""
    existing = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    existing[f"operator-dali-{kind}"] = {
        encoding: {key: round(row[key], 4) for key in ("dali_crop_ms", "batch_crop_ms", "single_crop_ms")}
        for encoding, row in comparison["encodings"].items()}
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(existing, indent=2), encoding="utf-8")
    temporary.replace(path)


def _dali_lines(comparison: dict[str, Any]) -> list[str]:
    """The DALI comparison's table."""
    headers = ["encoding", "DALI image_crop ms/image", "batch call ms/image", "single call ms/image",
               "DALI / batch", "DALI / single", "CPU/wall DALI, batch", "mean |DALI - batch|"]
    rows = []
    for encoding, row in comparison["encodings"].items():
        difference = row["mean_abs_difference"]
        rows.append([encoding, f"{row['dali_crop_ms']:.3f}", f"{row['batch_crop_ms']:.3f}",
                     f"{row['single_crop_ms']:.3f}", report.format_ratio(row["dali_over_batch"]),
                     report.format_ratio(row["dali_over_single"]),
                     f"{row['cpu_per_wall']['dali']:.2f}, {row['cpu_per_wall']['batch']:.2f}",
                     "shapes differ" if difference is None else f"{difference:.2f}"])
    first = next(iter(comparison["sets"].values()))
    samples = next(iter(comparison["encodings"].values()))["samples"]
    return [f"DALI {comparison['dali']} CPU fn.decoders.image_crop (pipeline of batch {comparison['batch']}, "
            f"num_threads={comparison['threads']}) against decode_and_crop_jpeg_batch(num_threads="
            f"{comparison['threads']}) on the same batches: {samples} {comparison['crop']}x{comparison['crop']} "
            f"windows of {first['num_files']} {first['source']} {first['width']}x{first['height']} files per "
            f"encoding; median of {comparison['rounds']} rotating rounds after a warm-up",
            "", report.markdown_table(headers, rows, right=[False] + [True] * 7)]


def _targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A full decode at least as fast as torchvision's (the fallback path and validation sets
    use it); the public function within 3% of its checks and kernel call."""
    by_method = {row["method"]: row for row in rows}
    targets = []
    measured = by_method[CUSTOM_FULL].get("speedup_vs_torchvision")
    if measured is not None:
        targets.append({"target": "custom_op full image >= torchvision decode_jpeg (full decode, "
                                  "then a slice)",
                        "required": 1.0, "measured": measured, "holds": measured >= 1.0})
    ratio = by_method[CUSTOM_CROP]["median_ms"] / by_method[CUSTOM_KERNEL]["median_ms"]
    targets.append({"target": "custom_op crop (the public function) within 3% of its checks and "
                              "kernel call (time ratio <= 1.03)", "required": 1.03,
                    "measured": ratio,
                    "holds": ratio <= 1.03})
    return targets


def format_table(result: dict[str, Any]) -> str:
    """The operator results as an aligned markdown table."""
    headers = ["method", "median ms", "p10 ms", "p90 ms", "vs torchvision", "vs Pillow", "note"]
    rows = []
    for row in result["methods"]:
        if not row["available"]:
            rows.append([row["method"], "-", "-", "-", "-", "-", row["note"]])
            continue
        rows.append([row["method"], f"{row['median_ms']:.3f}", f"{row['p10_ms']:.3f}", f"{row['p90_ms']:.3f}",
                     report.format_ratio(row["speedup_vs_torchvision"]),
                     report.format_ratio(row["speedup_vs_pillow"]), row["note"]])
    config = result["config"]
    title = (f"Per-crop time on {images.summary(config['corpus'])}:\n"
             f"{config['crop']}x{config['crop']} windows, one thread, "
             f"{config['samples_per_method']} samples per method ({config['files_used']} files x "
             f"{config['repeats']} windows); speed-up = peer's median / method's median")
    table = report.markdown_table(headers, rows, right=[False, True, True, True, True, True, False])
    lines = [title, "", table]
    if config["files_dropped"]:
        lines.append(f"Dropped {len(config['files_dropped'])} file(s) that some method could not decode.")
    if result.get("dali_crop"):
        lines += ["", *_dali_lines(result["dali_crop"])]
    if result.get("targets"):
        lines += ["", "Targets:", *report.format_targets(result["targets"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
