"""Datasets that hand their transforms encoded JPEGs, for torchvision's own transforms to crop.

- :class:`JpegFolder`: ``torchvision.datasets.ImageFolder``'s listing and
  labels (it is a ``DatasetFolder``), items ``(EncodedJpeg, class index)``.
- :class:`CocoJpegDetection`: ``torchvision.datasets.CocoDetection`` whose
  images are EncodedJpegs; wrap it with
  ``torchvision.datasets.wrap_dataset_for_transforms_v2`` exactly as
  CocoDetection, and boxes follow the window decoded.
- :func:`load_sample`: what both read a file into.
- :class:`HfImageTransform`, :func:`hf_image`: Hugging Face ``datasets``
  rows of an ``Image(decode=False)`` column as EncodedJpegs, for
  ``set_transform`` and ``IterableDataset.map`` (docs/huggingface.md);
  :func:`add_index_column`: their MCU-row indexes as a column (docs/batch_lane.md).
- :class:`TarSamples`: the webdataset pipeline stage that reads tar shards
  into samples (in place of ``wds.tarfile_to_samples()``), faster.
- :class:`BatchLane`: whole batches (indices in, one uint8 [B, C, H, W]
  tensor and the labels out) decoded in one native call, each sample's window
  and flip drawn from a random stream of its own (seed, epoch, index); :class:`HfRows` (Hugging Face rows as its source),
  :func:`lane_dataloader` (worker processes), :func:`lane_threads`
  (torchdata.nodes threads), :class:`LaneBatchSampler` (an order that
  (seed, epoch) determine, for resuming), :func:`shard_loader` (tar shards split by rank
  and worker, reshuffled every epoch: :class:`ShardSet`, :class:`EpochShuffle`,
  :class:`ShardLoader`) (docs/batch_lane.md).
- :class:`MdsJpegs`, :class:`LitJpegs`: MosaicML Streaming (MDS) shards and
  LitData optimized datasets read with their JPEG column still encoded, as
  ``(EncodedJpeg, label)`` items and as batch lane sources
  (docs/streaming_formats.md); their libraries are imported when one is made.
- ``LaneDecoder``, ``lane_map_batches``, ``lane_map_epochs``: deprecated, kept for one release;
  the Ray Data step is :mod:`custom_op.ray` (docs/ray.md).
"""

from .._core._extras import require

require("torchvision", "custom_op.datasets")

from ._batch_lane import BatchLane  # noqa: E402 (after the check that names the extra)
from ._coco import CocoJpegDetection
from ._folder import IMG_EXTENSIONS, ON_ERROR_POLICIES, JpegFolder
from ._huggingface import HfImageTransform, hf_image
from ._hf_index import add_index_column
from ._lane_loaders import lane_dataloader, lane_threads
from ._lane_sampler import LaneBatchSampler
from ._lane_sources import HfRows
from ._litdata import LitJpegs
from ._mds import MdsJpegs
from ._shards import EpochShuffle, ShardLoader, ShardSet, shard_loader
from ._loading import load_sample
from ._tar_samples import TarSamples

__all__ = ["BatchLane", "CocoJpegDetection", "EpochShuffle", "HfImageTransform", "HfRows",
           "IMG_EXTENSIONS", "JpegFolder", "LaneBatchSampler", "LitJpegs", "MdsJpegs",
           "ON_ERROR_POLICIES", "ShardLoader", "ShardSet", "TarSamples", "add_index_column", "hf_image",
           "lane_dataloader", "lane_threads", "load_sample",
           "shard_loader"]

#: The deprecated Ray Data names, imported when first used so that importing this package
#: imports neither Ray nor custom_op.ray.
_DEPRECATED_RAY_NAMES = frozenset({"LaneDecoder", "lane_map_batches", "lane_map_epochs"})


def __getattr__(name: str):
    """The deprecated Ray Data names, from the module that warns when they are used."""
    if name in _DEPRECATED_RAY_NAMES:
        from . import _ray_data

        return getattr(_ray_data, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
