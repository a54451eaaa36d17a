"""How close two uint8 images are, for the tests that compare a DCT-scaled decode with a
reference: PSNR, and the check that also refuses a window misregistered by one pixel."""

from __future__ import annotations

import math

import torch


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """Peak signal-to-noise ratio of two uint8 images, in dB (inf when equal)."""
    mse = (a.double() - b.double()).pow(2).mean().item()
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def shifted_by_one_pixel(image: torch.Tensor, dim: int) -> torch.Tensor:
    """``image`` moved one pixel right (dim -1) or down (dim -2), its first column/row repeated."""
    return torch.cat([image.narrow(dim, 0, 1), image.narrow(dim, 0, image.shape[dim] - 1)], dim=dim)


def assert_close(ours: torch.Tensor, reference: torch.Tensor, floor: float, where: str) -> None:
    """Above ``floor``, and closer to ``reference`` than ``reference`` moved by one pixel is: a
    misregistered window fails even where the content is too smooth for the floor to see it."""
    measured = psnr(ours, reference)
    assert measured >= floor, f"{where}: {measured:.2f} dB"
    for dim in (-1, -2):
        if reference.shape[dim] > 1:
            shifted = psnr(shifted_by_one_pixel(reference, dim), reference)
            assert measured > shifted, f"{where}: {measured:.2f} dB, a shift gives {shifted:.2f}"
