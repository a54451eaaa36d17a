"""Where one sample of the per-sample path goes: each step of JpegFolder + v2 against torchvision's.

Run from the repository root:

    python -m bench sample                           # 500x375 and 800x533, generated and real
    python -m bench sample --images real --sample-rounds 9
    python -m bench.sample_bench --help              # the same, without saving JSON

The README's first recipe is ``JpegFolder(root, v2.Compose([v2.RandomResizedCrop(224),
v2.RandomHorizontalFlip()]))`` in a DataLoader; its peer is torchvision's DatasetFolder
loading ``decode_jpeg(read_file(path), mode=RGB)`` with the same transform. This part times
each step of one sample of both, in one process on one thread (the thread's CPU time, so
that another process on the machine changes the figures little), over --sample-files
files of each size, every step run for every file in a rotating order, medians of
--sample-rounds rounds:

  custom_op                                  torchvision
  read         the file's bytes and key      read_file       torchvision.io.read_file
  header       EncodedJpeg (jpeg_size)        decode          decode_jpeg(mode=RGB), the whole file
  index        the index cache's lookup (off)  crop + flip    the v2 transform on the decoded image
  draw         the crop's make_params         collate         default_collate of a batch, per image
  kernel       the resized-crop operator alone (the drawn window, the layout the pipeline keeps)
  call         decode_and_resized_crop_jpeg (the checks around the kernel)
  head         the transform on an EncodedJpeg (custom_op's FusedHead: draw, kernel, flip)
  v2           the same transform through v2's own dispatch (what FusedHead saves)
  collate      default_collate of a batch, per image
  sample       JpegFolder[i] / DatasetFolder[i], the whole __getitem__

The index cache is off (each round would be an epoch, and later rounds would build the
indexes that earlier ones would have paid for: the index part measures that). The
DataLoader's own cost (workers, pickling, the queue) is the lane part's per_sample and
torchvision_uint8 rows; this part says where a sample's time goes before it. --json FILE
writes per kind and size the custom_op and torchvision steps in microseconds.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time
from typing import Any, Callable

import torch
import torchvision
from torch.utils.data import default_collate
from torchvision.io import read_file
from torchvision.transforms import v2

import custom_op
from bench import images, photos, report
from custom_op._decode._single import DEFAULT_MAX_MEMORY, DEFAULT_MAX_PIXELS, DEFAULT_MAX_SCANS
from custom_op._torchvision._fused_head import FusedHead
from custom_op.datasets import JpegFolder
from custom_op.datasets._loading import _read_with_key, load_sample

SIZES = ((375, 500), (533, 800))
SIZE = 224
BATCH = 64
CUSTOM_STEPS = ("read", "header", "index", "draw", "kernel", "call", "head", "v2", "collate",
                "sample")
TORCHVISION_STEPS = ("read_file", "decode", "crop + flip", "collate", "sample")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("per-sample breakdown")
    group.add_argument("--sample-files", type=int, default=48,
                       help="files per size (default 48)")
    group.add_argument("--sample-rounds", type=int, default=4,
                       help="timed rounds over the files, medians reported (default 4)")


def _transform() -> v2.Compose:
    return v2.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip()])


def _thread_us(function: Callable[[int], Any], count: int, rounds: int) -> float:
    """Median over rounds of the thread CPU time per call of function(0..count-1), in us;
    the process-wide generator seeded the same way before every round."""
    medians = []
    for _ in range(rounds + 1):  # the first round warms up
        torch.default_generator.manual_seed(0)
        start = time.thread_time_ns()
        for number in range(count):
            function(number)
        medians.append((time.thread_time_ns() - start) / count / 1e3)
    return statistics.median(medians[1:])


def _custom_steps(paths: list[str], folder: JpegFolder, rounds: int) -> dict[str, float]:
    transform = folder.transform
    crop = transform.transforms[0]
    samples = [load_sample(path) for path in paths]
    # The windows the transform draws in a round (each sample's crop, then its flip's draw),
    # so that the kernel's and the call's steps decode what the head's and v2's decode.
    torch.default_generator.manual_seed(0)
    windows = []
    for sample in samples:
        windows.append(crop.make_params([sample]))
        torch.rand(1)
    planar = [window["width"] != sample.canvas_size[1] for window, sample in zip(windows, samples)]
    kernel = torch.ops.custom_op_jpeg._decode_and_resized_crop_jpeg.default
    head = FusedHead(transform)
    crops = [transform(sample) for sample in samples]

    def kernel_call(number: int) -> Any:
        window = windows[number]
        return kernel(samples[number].encoded_bytes(), window["top"], window["left"],
                      window["height"], window["width"], SIZE, SIZE, 0, True, 0, True,
                      DEFAULT_MAX_PIXELS, DEFAULT_MAX_SCANS, True, planar[number],
                      DEFAULT_MAX_MEMORY, None)

    def public_call(number: int) -> Any:
        window = windows[number]
        return custom_op.decode_and_resized_crop_jpeg(
            samples[number].encoded_bytes(), window["top"], window["left"], window["height"],
            window["width"], SIZE, contiguous=planar[number])

    steps = {
        "read": lambda n: _read_with_key(paths[n]),
        "header": lambda n: custom_op.EncodedJpeg.with_options(samples[n].encoded_bytes(),
                                                               folder.options),
        "index": lambda n: samples[n].window_index(windows[n]["height"]),
        "draw": lambda n: crop.make_params([samples[n]]),
        "kernel": kernel_call,
        "call": public_call,
        "head": lambda n: head(samples[n]),
        "v2": lambda n: transform(samples[n]),
        "collate": lambda n: default_collate(crops[:BATCH]) if n % BATCH == 0 else None,
        "sample": lambda n: folder[n],
    }
    # Each round is an epoch: with the cache on, the samples whose crops would have saved a
    # build would build one in a later round, and the index part measures what that gains.
    custom_op.configure_index_cache(max_bytes=0)
    try:
        return {name: _thread_us(steps[name], len(paths), rounds) for name in CUSTOM_STEPS}
    finally:
        custom_op.configure_index_cache()


def _torchvision_steps(paths: list[str], folder: Any, rounds: int) -> dict[str, float]:
    datas = [read_file(path) for path in paths]
    decoded = [images.torchvision_decode(data) for data in datas]
    crops = [folder.transform(image) for image in decoded]
    steps = {
        "read_file": lambda n: read_file(paths[n]),
        "decode": lambda n: images.torchvision_decode(datas[n]),
        "crop + flip": lambda n: folder.transform(decoded[n]),
        "collate": lambda n: default_collate(crops[:BATCH]) if n % BATCH == 0 else None,
        "sample": lambda n: folder[n],
    }
    return {name: _thread_us(steps[name], len(paths), rounds) for name in TORCHVISION_STEPS}


def _run_tree(tree: pathlib.Path, rounds: int) -> dict[str, Any]:
    ours = JpegFolder(str(tree), transform=_transform())
    theirs = torchvision.datasets.DatasetFolder(
        str(tree), lambda path: images.torchvision_decode(read_file(path)),
        extensions=(".jpg", ".jpeg"), transform=_transform())
    paths = [path for path, _ in ours.samples]
    custom = _custom_steps(paths, ours, rounds)
    tv = _torchvision_steps(paths, theirs, rounds)
    return {"files": len(paths), "custom_op_us": custom, "torchvision_us": tv,
            "sample_ratio": tv["sample"] / custom["sample"],
            "call_overhead": custom["call"] / custom["kernel"],
            "head_saves_us": custom["v2"] - custom["head"]}


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """Every size of this kind (or --photos DIR's sizes as they are); --json merged."""
    torch.set_num_threads(1)
    if source.kind == "real" and args.photos is not None:
        trees = photos.trees_as_they_are(args.photos, args.cache, "sample")
    else:
        trees = {f"{height}x{width}": pathlib.Path(
            source.files(height, width, args.sample_files).description["folder"])
            for height, width in SIZES}
    sizes = {size: _run_tree(tree, args.sample_rounds) for size, tree in trees.items()}
    if args.json is not None:
        merged = json.loads(args.json.read_text()) if args.json.exists() else {}
        merged.setdefault(source.kind, {}).update(sizes)
        args.json.write_text(json.dumps(merged, indent=2) + "\n")
    return {"config": {"images": source.kind, "size": SIZE, "rounds": args.sample_rounds,
                       "photos": str(args.photos) if args.photos else None},
            "sizes": sizes}


def format_table(result: dict[str, Any]) -> str:
    kind = result["config"]["images"]
    lines = [f"Per-sample path on {kind} files, one process, one thread: microseconds of thread "
             f"CPU time per image (median of {result['config']['rounds']} rounds)"]
    for size, item in result["sizes"].items():
        custom, tv = item["custom_op_us"], item["torchvision_us"]
        rows = [[f"custom_op: {name}", f"{custom[name]:.0f}"] for name in CUSTOM_STEPS]
        rows += [[f"torchvision: {name}", f"{tv[name]:.0f}"] for name in TORCHVISION_STEPS]
        rows += [["sample, torchvision / custom_op", report.format_ratio(item["sample_ratio"])],
                 ["call / kernel", f"{item['call_overhead']:.3f}"]]
        lines += ["", f"{size} ({item['files']} files):",
                  report.markdown_table(["step", "us"], rows, right=[False, True])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
