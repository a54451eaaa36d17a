"""The batch lane: a batch's crop windows decoded in one native call, for a DataLoader.

- :class:`BatchLane`: whole batches (indices in, one uint8 [B, C, H, W] tensor
  and the labels out), each sample's window and flip drawn from a random
  stream of its own (seed, epoch, index); :class:`HfRows`: Hugging Face rows
  as its source (a JpegFolder, MdsJpegs or LitJpegs serves as one too).
- :class:`LaneBatchSampler`: an order that (seed, epoch) determine, for
  resuming.
- :func:`lane_dataloader` (worker processes), :func:`lane_threads`
  (torchdata.nodes threads): the loaders, with resume and index counts.
- :func:`shard_loader`: tar shards split by rank and worker, reshuffled every
  epoch (:class:`ShardSet`, :class:`EpochShuffle`, :class:`ShardLoader`).

docs/batch_lane.md explains it; the Ray Data step over the same lane is
:mod:`custom_op.ray`.
"""

from .._core._extras import require

require("torchvision", "custom_op.lane")

from ._batch_lane import BatchLane  # noqa: E402 (after the check that names the extra)
from ._loaders import lane_dataloader, lane_threads  # noqa: E402
from ._sampler import LaneBatchSampler  # noqa: E402
from ._shards import EpochShuffle, ShardLoader, ShardSet, shard_loader  # noqa: E402
from ._sources import HfRows  # noqa: E402

__all__ = ["BatchLane", "EpochShuffle", "HfRows", "LaneBatchSampler", "ShardLoader", "ShardSet",
           "lane_dataloader", "lane_threads", "shard_loader"]
