"""Seeding torch's CPU generator alone, for tests that seed in loops.

``torch.manual_seed`` also queues the seed for CUDA, XPU and MTIA when they are not
initialised, and each queued call keeps ``traceback.format_stack()`` of its caller: inside
pytest's deep stack that is milliseconds per call, and the transform comparisons seed thousands
of times. The transforms draw from the CPU generator only, which this seeds exactly as
``torch.manual_seed`` does.
"""

from __future__ import annotations

import torch


def seed_cpu(seed: int) -> None:
    """Puts torch's default CPU generator in the state ``torch.manual_seed(seed)`` puts it in.

    Args:
        seed: the seed, as ``torch.manual_seed`` takes it.

    Example:
        >>> seed_cpu(3); a = torch.rand(2); _ = torch.manual_seed(3)
        >>> torch.equal(a, torch.rand(2))
        True
    """
    torch.default_generator.manual_seed(int(seed))
