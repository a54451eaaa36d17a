"""Crop windows that probe a decoder's edges, and the comparison with a full decode.

Shared by the exactness tests of the ordinary decode (test_decode.py) and of
the restart-marker seeking (test_seek.py).
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

Window = tuple[int, int, int, int]  # (y, x, height, width)


def is_tiny(height: int, width: int) -> bool:
    return height <= 20 and width <= 20


def all_windows(height: int, width: int) -> list[Window]:
    return [(y, x, h, w)
            for y in range(height) for h in range(1, height - y + 1)
            for x in range(width) for w in range(1, width - x + 1)]


def chosen_windows(height: int, width: int, seed: int) -> list[Window]:
    """Windows at the edges, on and beside MCU boundaries, tiny ones and random ones."""
    found: set[Window] = set()

    def add(y: int, x: int, h: int, w: int) -> None:
        if y >= 0 and x >= 0 and h >= 1 and w >= 1 and y + h <= height and x + w <= width:
            found.add((y, x, h, w))

    add(0, 0, height, width)
    # Touching each edge and each corner, as strips and as small boxes.
    for h, w in [(1, width), (height, 1), (min(height, 5), min(width, 7)),
                 (min(height, 16), min(width, 17)), (min(height, 3), width),
                 (height, min(width, 2))]:
        for y in (0, (height - h) // 2, height - h):
            for x in (0, (width - w) // 2, width - w):
                add(y, x, h, w)
    # Left edges on and beside 8-, 16- and 32-pixel boundaries.
    y0 = min(3, height - 1)
    h0 = min(9, height - y0)
    for x in (1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65):
        for w in (1, 2, 5, 16, 17):
            add(y0, x, h0, w)
        add(0, x, height, width - x)  # to the right edge
    # Right edges on and beside those boundaries, so both even and odd.
    for right in (2, 8, 9, 15, 16, 17, 31, 32, 33, 64, 65):
        for w in (1, 6, 17, right):
            add(y0, right - w, h0, w)
    # Top and bottom edges on and beside the vertical MCU boundaries.
    x0 = min(5, width - 1)
    w0 = min(20, width - x0)
    for y in (1, 7, 8, 9, 15, 16, 17, 31, 32, 33):
        for h in (1, 2, 9):
            add(y, x0, h, w0)
            add(y - h, x0, h, w0)  # ending just above y
    # Heights and widths of 1 to 4 pixels, in the middle and off the grid.
    for h in range(1, 5):
        for w in range(1, 5):
            add((height - h) // 2, (width - w) // 2, h, w)
            add(height - h - 1, width - w - 1, h, w)
            add(9, 17, h, w)
    # Random windows, seeded by the file, so reruns test the same ones.
    rng = np.random.default_rng(seed)
    for _ in range(20):
        y, x = int(rng.integers(0, height)), int(rng.integers(0, width))
        add(y, x, int(rng.integers(1, height - y + 1)), int(rng.integers(1, width - x + 1)))
    return sorted(found)


def windows_for(case_id: str, height: int, width: int) -> list[Window]:
    if is_tiny(height, width):
        return all_windows(height, width)
    return chosen_windows(height, width, seed=zlib.crc32(case_id.encode()))


def mismatches(data, windows: list[Window], full: torch.Tensor, decode) -> list[str]:
    """Every window whose decode differs from the same window of `full`, described."""
    failures = []
    for y, x, h, w in windows:
        crop = decode(data, y, x, h, w)
        expected = full[:, y:y + h, x:x + w]
        if crop.shape != expected.shape:
            failures.append(f"(y={y}, x={x}, h={h}, w={w}): shape {tuple(crop.shape)}, "
                            f"expected {tuple(expected.shape)}")
        elif not torch.equal(crop, expected):
            diff = (crop.int() - expected.int()).abs()
            failures.append(f"(y={y}, x={x}, h={h}, w={w}): max abs diff {int(diff.max())} "
                            f"in {int((diff > 0).sum())} samples")
    return failures


def report(failures: list[str], total: int) -> str:
    first = "; ".join(failures[:5])
    return f"{len(failures)} of {total} windows differ from the full decode: {first}"
