"""One timed round of the ship part, in a process that loads one custom_op build.

Run by bench/ship_bench.py, never by hand: ``python -m bench.ship_child JOB.json``.
Two builds of custom_op (system libjpeg-turbo, static 3.1) cannot load in one
process, so each round runs here with the environment naming its build
(CUSTOM_OP_BUILD_DIR, CUSTOM_OP_JPEG_STATIC). torchvision runs in the same
process as the reference, so every ratio compares calls made under the same
load. Prints one JSON line: the loaded libjpeg-turbo and, per size, task and
method, the nanoseconds of every timed call.

The job file gives, per size, the files, one 256x256 crop window and one
RandomResizedCrop window per file (drawn by the parent, the same for every
round and build).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable

from bench import timing  # the package pins thread counts before torch loads

import torch
from torchvision.io import decode_jpeg
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import custom_op

RRC_SIZE, RESIZE, CROP = 224, 256, 224
TASKS = ("crop", "rrc", "eval")
METHODS = ("torchvision", "custom_op")


def _calls(window: dict[str, Any]) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Each ``task/method``: the encoded file in, the task's tensor out."""
    top, left, size = window["crop"]
    rrc_top, rrc_left, rrc_height, rrc_width = window["rrc"]
    recipe = v2.Compose([v2.Resize(RESIZE), v2.CenterCrop(CROP)])
    return {
        "crop/torchvision": lambda data: F.crop(decode_jpeg(data), top, left, size, size),
        "crop/custom_op": lambda data: custom_op.decode_and_crop_jpeg(data, top, left, size, size),
        "rrc/torchvision": lambda data: F.resized_crop(decode_jpeg(data), rrc_top, rrc_left, rrc_height,
                                                       rrc_width, [RRC_SIZE, RRC_SIZE], antialias=True),
        "rrc/custom_op": lambda data: custom_op.decode_and_resized_crop_jpeg(
            data, rrc_top, rrc_left, rrc_height, rrc_width, RRC_SIZE),
        "eval/torchvision": lambda data: recipe(decode_jpeg(data)),
        # The resize stays pending on the EncodedJpeg; the crop decodes the central window.
        "eval/custom_op": lambda data: recipe(custom_op.EncodedJpeg(data)),
    }


def _read(path: str) -> torch.Tensor:
    with open(path, "rb") as file:
        return torch.frombuffer(bytearray(file.read()), dtype=torch.uint8)


def time_case(case: dict[str, Any], repeats: int) -> dict[str, list[int]]:
    """Nanoseconds per ``task/method`` over the case's files, methods rotating per call."""
    tensors = [_read(path) for path in case["paths"]]
    calls = [_calls(window) for window in case["windows"]]
    names = [f"{task}/{method}" for task in TASKS for method in METHODS]
    for index, data in enumerate(tensors):  # warm-up, untimed (caches, lazy kernels)
        for name in names:
            calls[index][name](data)
    plan = [index for _ in range(repeats) for index in range(len(tensors))]
    return timing.time_rotating(names, plan, lambda name, index: calls[index][name](tensors[index]))


def main(argv: list[str]) -> None:
    job = json.loads(open(argv[0], encoding="utf-8").read())
    started = time.perf_counter()
    custom_op.decode_and_crop_jpeg(_read(job["cases"][0]["paths"][0]), 0, 0, 8, 8)  # loads (or builds)
    load_s = time.perf_counter() - started
    result = {"libjpeg": custom_op.libjpeg_version(), "module": sys.modules["custom_op._C"].__file__,
              "load_s": load_s,
              "cases": {case["label"]: time_case(case, job["repeats"]) for case in job["cases"]}}
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
