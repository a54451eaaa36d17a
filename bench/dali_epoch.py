"""NVIDIA DALI's CPU pipeline for the lane part's anchor row, run in DALI's own venv.

    python bench/dali_epoch.py ROOT BATCH THREADS LENGTH

File reader (shuffled) + decoders.image_random_crop + resize to 224 + random
horizontal flip, on THREADS CPU threads, no GPU. After one warm-up epoch it
runs one epoch of LENGTH images per line read from stdin and prints
"images nanoseconds" (bench/lane_bench.py times it interleaved with its rows).
It imports no torch: DALI's venv needs only nvidia-dali-cuda120.
"""
import os
import sys
import time

from nvidia.dali import fn, pipeline_def, types

root, batch, threads, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

@pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=0)
def train_pipeline():
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
    images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
    images = fn.resize(images, resize_x=224, resize_y=224)
    images = fn.flip(images, horizontal=fn.random.coin_flip())
    return images, labels



def epoch() -> tuple[int, int]:
    images = 0
    start = time.perf_counter_ns()
    while images < length:
        batch_images, _ = pipe.run()
        images += len(batch_images)
    return images, time.perf_counter_ns() - start


pipe = train_pipeline()
pipe.build()
epoch()
for _ in sys.stdin:
    print(*epoch(), flush=True)
# DALI's worker threads can keep the interpreter from exiting when stdin closes: leave at once.
os._exit(0)
