"""Crop decoding as a Ray Data step: ``map_batches`` with the batch lane, for a cluster's CPUs.

Ray Data reads, schedules, streams, retries and moves the batches between
machines; this package gives it the decode (docs/ray.md):

- :func:`decode_batches`: ``dataset`` (``read_binary_files``, ``read_parquet`` of
  Hugging Face image structs, ``read_webdataset``, folders labelled by
  ``Partitioning("dir")``) decoded in a pool of actors, one native batch call
  per block; with ``epoch=None`` each execution (each epoch of Ray Train)
  draws the next epoch's windows.
- :class:`JpegDecoder`: the callable class it runs, for a ``map_batches`` of
  your own.
- :func:`decode_epochs`: several epochs in one execution, so that one pool of
  actors serves them all.

Ray is an optional dependency (``pip install 'custom_op[ray]'``).
"""

from .._core._extras import require

require("ray", "custom_op.ray")
require("torchvision", "custom_op.ray")

from ._decoder import JpegDecoder  # noqa: E402 (after the checks that name the extras)
from ._steps import decode_batches, decode_epochs  # noqa: E402

__all__ = ["JpegDecoder", "decode_batches", "decode_epochs"]
