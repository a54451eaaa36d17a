"""NVIDIA DALI's CPU crop for the operator part's --dali comparison, run in DALI's own venv.

    python bench/dali_crop.py PLAN.json

PLAN.json (written by bench/operator_bench.py) holds, per encoding, the
files and the windows to crop (one ``[y, x, height, width]`` per sample, in
batch order), the batch size and the thread count. Each file's bytes are
read into memory once, before any timing. One pipeline of that batch size on
that many CPU threads, no GPU, synchronous (exec_async=False,
exec_pipelined=False: run() decodes exactly the batch just fed, nothing
ahead of it between timings): external_source feeds the encoded bytes and
each window's position, ``fn.decoders.image_crop(device="cpu")`` decodes the
window (crop_w, crop_h; crop_pos_x, crop_pos_y normalised as DALI defines
them: x / (W - crop_w)).

Commands, one a line on stdin:

  round ENCODING        feeds every batch of that encoding once; prints "images
                        nanoseconds cpu_nanoseconds" (the process's CPU time over the round:
                        more than the wall time would mean more than one thread worked);
                        the caller's first round is its warm-up
  dump ENCODING PATH    saves the first batch's crops (N x H x W x 3 uint8) as PATH
                        (.npy) and prints "ok": the caller checks they are its windows

It imports no torch: DALI's venv needs only nvidia-dali-cuda120 and numpy
(bench/lane_bench.py's --lane-dali venv serves).
"""
import json
import os
import sys
import time

import numpy as np
from nvidia.dali import fn, pipeline_def, types

plan = json.loads(open(sys.argv[1], encoding="utf-8").read())
batch_size, threads = int(plan["batch"]), int(plan["threads"])


def _batches(encoding: dict) -> list[tuple[list, list, list, list, list]]:
    """The encoding's samples as DALI inputs, batch by batch: bytes, normalised positions, sizes."""
    cache: dict[str, np.ndarray] = {}
    samples = []
    for path, (y, x, height, width), (image_height, image_width) in zip(
            encoding["paths"], encoding["windows"], encoding["sizes"]):
        if path not in cache:
            cache[path] = np.fromfile(path, dtype=np.uint8)
        position_x = x / (image_width - width) if image_width > width else 0.0
        position_y = y / (image_height - height) if image_height > height else 0.0
        samples.append((cache[path], np.float32(position_x), np.float32(position_y),
                        np.float32(width), np.float32(height)))
    batches = []
    for start in range(0, len(samples), batch_size):
        chunk = samples[start:start + batch_size]
        batches.append(tuple([np.asarray(sample[field]) if field else sample[0] for sample in chunk]
                             for field in range(5)))
    return batches


@pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, seed=0,
              exec_async=False, exec_pipelined=False, prefetch_queue_depth=1)
def crop_pipeline():
    encoded = fn.external_source(name="encoded", dtype=types.UINT8)
    position_x = fn.external_source(name="x", dtype=types.FLOAT)
    position_y = fn.external_source(name="y", dtype=types.FLOAT)
    width = fn.external_source(name="w", dtype=types.FLOAT)
    height = fn.external_source(name="h", dtype=types.FLOAT)
    return fn.decoders.image_crop(encoded, device="cpu", output_type=types.RGB, crop_w=width,
                                  crop_h=height, crop_pos_x=position_x, crop_pos_y=position_y)


def _run(batch: tuple) -> object:
    for name, values in zip(("encoded", "x", "y", "w", "h"), batch):
        pipe.feed_input(name, values)
    (crops,) = pipe.run()
    return crops


def _round(batches: list) -> tuple[int, int, int]:
    images = 0
    cpu, start = time.process_time_ns(), time.perf_counter_ns()
    for batch in batches:
        images += len(_run(batch))
    return images, time.perf_counter_ns() - start, time.process_time_ns() - cpu


work = {name: _batches(encoding) for name, encoding in plan["encodings"].items()}
pipe = crop_pipeline()
pipe.build()
for line in sys.stdin:
    command = line.split()
    if not command:
        continue
    if command[0] == "round":
        print(*_round(work[command[1]]), flush=True)
    elif command[0] == "dump":
        crops = _run(work[command[1]][0])
        np.save(command[2], np.stack([np.array(crops.at(index)) for index in range(len(crops))]))
        print("ok", flush=True)
    else:
        print(f"unknown command {command[0]!r}", file=sys.stderr, flush=True)
        os._exit(2)
# DALI's threads can keep the interpreter from exiting when stdin closes: leave at once.
os._exit(0)
