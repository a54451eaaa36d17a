"""The Ray Data names of earlier releases, kept for one release: custom_op.ray holds the step.

Each name warns (DeprecationWarning) with its replacement and then does what it
did: LaneDecoder and lane_map_batches decode epoch 0 unless given another
(custom_op.ray's default follows the executions instead).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

from ._decoder import JpegDecoder
from ._steps import decode_batches, decode_epochs

__all__ = ["LaneDecoder", "lane_map_batches", "lane_map_epochs"]


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"custom_op.datasets.{old} is deprecated and will be removed in the next "
                  f"release: use {new} (docs/ray.md)", DeprecationWarning, stacklevel=3)


def _pool(concurrency: Any, name: str) -> Any:
    """The fixed pool of ``concurrency`` actors that the old names took."""
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise ValueError(f"{name}: concurrency must be an int >= 1, got {concurrency!r}")
    from ray.data import ActorPoolStrategy

    return ActorPoolStrategy(size=concurrency)


class LaneDecoder(JpegDecoder):
    """Deprecated: :class:`custom_op.ray.JpegDecoder`, whose ``epoch`` defaults to the execution's.

    Args:
        transform, seed, options: as JpegDecoder.
        epoch: The epoch every execution decodes (default 0, as before).

    Raises:
        As JpegDecoder.

    Example:
        >>> LaneDecoder(transform, seed=0)   # warns; JpegDecoder(transform, seed=0, epoch=0)
    """

    def __init__(self, transform: Callable[[Any], Any], *, seed: int, epoch: int = 0,
                 **options: Any) -> None:
        _deprecated("LaneDecoder", "custom_op.ray.JpegDecoder")
        super().__init__(transform, seed=seed, epoch=epoch, **options)


def lane_map_batches(dataset: Any, transform: Callable[[Any], Any], *, seed: int, epoch: int = 0,
                     batch_size: int = 256, concurrency: int = 1, num_cpus: float = 1,
                     **decoder_options: Any) -> Any:
    """Deprecated: :func:`custom_op.ray.decode_batches` with ``compute=ActorPoolStrategy(size=concurrency)``.

    Args:
        dataset, transform, seed, batch_size, num_cpus, decoder_options: as decode_batches.
        epoch: The epoch every execution decodes (default 0, as before).
        concurrency: The pool's fixed size.

    Returns:
        decode_batches' dataset.

    Raises:
        ValueError: ``concurrency`` is not an int >= 1, or as decode_batches (a pool that
            would hold every CPU the reads need).
        TypeError: as decode_batches.

    Example:
        >>> lane_map_batches(files, transform, seed=0, concurrency=2)   # warns
    """
    _deprecated("lane_map_batches", "custom_op.ray.decode_batches")
    return decode_batches(dataset, transform, seed=seed, epoch=epoch, batch_size=batch_size,
                          compute=_pool(concurrency, "lane_map_batches"), num_cpus=num_cpus,
                          **decoder_options)


def lane_map_epochs(epochs: Mapping[int, Any], transform: Callable[[Any], Any], *, seed: int,
                    batch_size: int = 256, concurrency: int = 1, num_cpus: float = 1,
                    **decoder_options: Any) -> Any:
    """Deprecated: :func:`custom_op.ray.decode_epochs` with ``compute=ActorPoolStrategy(size=concurrency)``.

    Args:
        epochs, transform, seed, batch_size, num_cpus, decoder_options: as decode_epochs.
        concurrency: The pool's fixed size.

    Returns:
        decode_epochs' dataset.

    Raises:
        ValueError: as decode_epochs, or ``concurrency`` is not an int >= 1.
        TypeError: as decode_epochs.

    Example:
        >>> lane_map_epochs({0: files, 1: files}, transform, seed=0)   # warns
    """
    _deprecated("lane_map_epochs", "custom_op.ray.decode_epochs")
    return decode_epochs(epochs, transform, seed=seed, batch_size=batch_size,
                         compute=_pool(concurrency, "lane_map_epochs"), num_cpus=num_cpus,
                         **decoder_options)
