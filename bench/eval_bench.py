"""Evaluation benchmark: Resize(256) + CenterCrop(224), the validation recipe, from the encoded JPEG.

Run from the repository root:

    python -m bench eval                        # 500x375, 800x533, 2560x1600; generated and real
    python -m bench eval --images real --eval-rounds 5
    python -m bench.eval_bench --help           # the same, without the chart

Generated and real JPEGs (bench/images.py, quality 90, 4:2:0 unless told
otherwise) of three sizes, width x height: 500x375 (a typical ImageNet
file), 800x533 and 2560x1600. The encoded bytes are in memory before timing
starts. One thread (the bench package pins the thread counts before torch
loads).

Methods, each a call of ``v2.Compose([v2.Resize(256), v2.CenterCrop(224)])``
(torchvision's own transforms, bilinear, antialiased):
  torchvision              on torchvision.io.decode_jpeg(data): the usual recipe
  custom_op                on custom_op.EncodedJpeg(data): the resize stays pending and the
                           crop decodes the central window only, at a reduced DCT scale where
                           the window is at least twice the output (close, not exact)
  custom_op exact          the same with exact=True: full-scale window, resampled as ATen's
                           uint8 kernel (bit for bit torchvision's result)
  ... non-contiguous       the same two with contiguous=False (CHW views of HWC memory, as
                           decode_jpeg returns)
The EncodedJpeg is made inside the timed call (its header is read there), with
options checked once beforehand, as custom_op's datasets do.

The methods run back to back for each sample in an order that rotates from
sample to sample, after one untimed warm-up call per method and file; each
call is timed with time.perf_counter_ns with the garbage collector off,
freeing the result included. Ratios are of medians: "vs torchvision" is
torchvision's median over the method's, so above 1 is faster. Beside the
times, the pixels of the non-exact path against torchvision's: the worst
absolute difference and the lowest PSNR over the files (exact methods are
checked to be equal).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable

import numpy as np
import torch
from torchvision.transforms import v2

import custom_op
from custom_op._torchvision._encoded_jpeg import DecodeOptions
from bench import images, report, timing

RESIZE, CROP = 256, 224
TORCHVISION = "torchvision decode_jpeg + Resize + CenterCrop"
CUSTOM = "custom_op (DCT scaling allowed)"
CUSTOM_PLANES_OFF = "custom_op, contiguous=False"
EXACT = "custom_op exact=True"
EXACT_PLANES_OFF = "custom_op exact=True, contiguous=False"
METHOD_ORDER = (TORCHVISION, CUSTOM, CUSTOM_PLANES_OFF, EXACT, EXACT_PLANES_OFF)
#: (label, height, width, files option, required ratio of the DCT-scaling path over torchvision).
CASES = (("500x375", 375, 500, "eval_small", 1.0), ("800x533", 533, 800, "eval_medium", 1.3),
         ("2560x1600", 1600, 2560, "eval_large", 1.0))
#: Every custom_op method must not be slower than torchvision at any size.
NOT_SLOWER = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("eval benchmark")
    group.add_argument("--eval-small", type=int, default=20, help="500x375 files (default 20)")
    group.add_argument("--eval-medium", type=int, default=20, help="800x533 files (default 20)")
    group.add_argument("--eval-large", type=int, default=5, help="2560x1600 files (default 5)")
    group.add_argument("--eval-rounds", type=int, default=2,
                       help="timed calls per method and file (default 2)")


def _methods() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Each takes the encoded file (a uint8 tensor) and returns the 3 x 224 x 224 result."""
    recipe = v2.Compose([v2.Resize(RESIZE), v2.CenterCrop(CROP)])

    def torchvision(data: torch.Tensor) -> torch.Tensor:
        return recipe(images.torchvision_decode(data))

    def custom(options: DecodeOptions) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda data: recipe(custom_op.EncodedJpeg.with_options(data, options))

    def options(**values: Any) -> DecodeOptions:
        return DecodeOptions.checked("eval_bench", **values)

    return {TORCHVISION: torchvision, CUSTOM: custom(options()),
            CUSTOM_PLANES_OFF: custom(options(contiguous=False)),
            EXACT: custom(options(exact=True)),
            EXACT_PLANES_OFF: custom(options(exact=True, contiguous=False))}


def _fidelity(methods: dict[str, Callable[[torch.Tensor], torch.Tensor]],
              tensors: list[torch.Tensor]) -> dict[str, Any]:
    """The non-exact path's worst difference from torchvision, and whether the exact ones equal it."""
    worst, psnrs, exact_equal = 0, [], True
    for data in tensors:
        reference = methods[TORCHVISION](data).to(torch.int16)
        difference = (methods[CUSTOM](data).to(torch.int16) - reference).abs()
        worst = max(worst, int(difference.max()))
        mse = float((difference.to(torch.float64) ** 2).mean())
        psnrs.append(float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse))
        exact_equal &= all(torch.equal(methods[name](data).to(torch.int16), reference)
                           for name in (EXACT, EXACT_PLANES_OFF))
    return {"max_abs_diff": worst, "min_psnr_db": min(psnrs),
            "median_psnr_db": float(np.median(psnrs)), "exact_equal": exact_equal}


def _time_case(args: argparse.Namespace, source: images.ImageSource, label: str, height: int,
               width: int, count: int, methods: dict[str, Callable[..., Any]]) -> dict[str, Any]:
    files = source.files(height, width, count)
    tensors = images.as_tensors(files.paths)
    names = list(METHOD_ORDER)
    for data in tensors:  # warm-up, untimed
        for name in names:
            methods[name](data)
    plan = [index for _ in range(args.eval_rounds) for index in range(len(tensors))]
    samples = timing.time_rotating(names, plan, lambda name, index: methods[name](tensors[index]))
    stats = timing.milliseconds(samples)
    rows = [{"method": name, "median_ms": stats[name]["median"], "p10_ms": stats[name]["p10"],
             "p90_ms": stats[name]["p90"], "samples": stats[name]["n"],
             "speedup_vs_torchvision": stats[TORCHVISION]["median"] / stats[name]["median"]}
            for name in names]
    return {"label": label, "height": height, "width": width, "files": len(tensors),
            "recipe": files.description["recipe"],
            "mean_encoded_bytes": float(np.mean([data.numel() for data in tensors])),
            "samples_per_method": len(plan), "methods": rows,
            "fidelity": _fidelity(methods, tensors)}


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """Times the methods on the three sizes of the source's files."""
    methods = _methods()
    cases, targets = [], []
    for label, height, width, option, required in CASES:
        case = _time_case(args, source, label, height, width, getattr(args, option), methods)
        cases.append(case)
        for row in case["methods"][1:]:
            needed = required if row["method"] == CUSTOM else NOT_SLOWER
            targets.append({"target": f"{row['method']} >= {needed}x vs torchvision at {label} "
                                      f"({source.kind})",
                            "required": needed, "measured": row["speedup_vs_torchvision"],
                            "holds": row["speedup_vs_torchvision"] >= needed})
    return {"config": {"images": source.kind, "resize": RESIZE, "crop": CROP,
                       "rounds": args.eval_rounds, "quality": args.quality,
                       "subsampling": args.subsampling, "threads": torch.get_num_threads(),
                       "load_average_after_1_5_15": list(os.getloadavg())},
            "cases": cases, "targets": targets}


def format_table(result: dict[str, Any]) -> str:
    """One table per image size, the pixels' agreement, and the targets."""
    config = result["config"]
    headers = ["method", "median ms", "p10 ms", "p90 ms", "vs torchvision"]
    lines = []
    for case in result["cases"]:
        rows = [[row["method"], f"{row['median_ms']:.3f}", f"{row['p10_ms']:.3f}",
                 f"{row['p90_ms']:.3f}", report.format_ratio(row["speedup_vs_torchvision"])]
                for row in case["methods"]]
        fidelity = case["fidelity"]
        lines += [f"Resize({config['resize']}) + CenterCrop({config['crop']}) on {case['files']} "
                  f"{config['images']} files of {case['label']} (width x height, "
                  f"{case['mean_encoded_bytes'] / 1024:.0f} KiB mean), one thread, "
                  f"{case['samples_per_method']} samples per method", "",
                  report.markdown_table(headers, rows, right=[False] + [True] * 4),
                  f"custom_op with DCT scaling vs torchvision: max |diff| "
                  f"{fidelity['max_abs_diff']}, PSNR min {fidelity['min_psnr_db']:.1f} dB, median "
                  f"{fidelity['median_psnr_db']:.1f} dB; exact=True equal: "
                  f"{'yes' if fidelity['exact_equal'] else 'NO'}", ""]
    one, five, _ = config["load_average_after_1_5_15"]
    lines += ["Targets:", *report.format_targets(result["targets"]),
              f"Load average after this part: {one:.2f} (1 min), {five:.2f} (5 min)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
