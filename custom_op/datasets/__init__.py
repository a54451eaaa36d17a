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
- :class:`MdsJpegs`, :class:`LitJpegs`: MosaicML Streaming (MDS) shards and
  LitData optimized datasets read with their JPEG column still encoded, as
  ``(EncodedJpeg, label)`` items and as batch lane sources
  (docs/streaming_formats.md); their libraries are imported when one is made.

The batch lane is :mod:`custom_op.lane`, the Ray Data step :mod:`custom_op.ray`. Their names
here (``BatchLane``, ``lane_dataloader``, ..., ``LaneDecoder``, ``lane_map_batches``,
``lane_map_epochs``) are deprecated, kept for one release.
"""

import warnings

from .._core._extras import require

require("torchvision", "custom_op.datasets")

from ._coco import CocoJpegDetection  # noqa: E402 (after the check that names the extra)
from ._folder import IMG_EXTENSIONS, ON_ERROR_POLICIES, JpegFolder  # noqa: E402
from ._hf_index import add_index_column  # noqa: E402
from ._huggingface import HfImageTransform, hf_image  # noqa: E402
from ._litdata import LitJpegs  # noqa: E402
from ._loading import load_sample  # noqa: E402
from ._mds import MdsJpegs  # noqa: E402
from ._tar_samples import TarSamples  # noqa: E402

__all__ = ["CocoJpegDetection", "HfImageTransform", "IMG_EXTENSIONS", "JpegFolder", "LitJpegs",
           "MdsJpegs", "ON_ERROR_POLICIES", "TarSamples", "add_index_column", "hf_image", "load_sample"]

#: The batch lane's names, which moved to custom_op.lane: they warn here for one release.
_MOVED_TO_LANE = frozenset({"BatchLane", "EpochShuffle", "HfRows", "LaneBatchSampler", "ShardLoader",
                            "ShardSet", "lane_dataloader", "lane_threads", "shard_loader"})
#: The Ray Data names of earlier releases; the module that keeps them warns when they are used.
_DEPRECATED_RAY_NAMES = frozenset({"LaneDecoder", "lane_map_batches", "lane_map_epochs"})


def __getattr__(name: str):
    """The deprecated names, imported on first use so that importing this package imports
    neither the lane nor Ray."""
    if name in _MOVED_TO_LANE:
        warnings.warn(f"custom_op.datasets.{name} is deprecated and will be removed in the next "
                      f"release: use custom_op.lane.{name} (docs/batch_lane.md)",
                      DeprecationWarning, stacklevel=2)
        from .. import lane

        return getattr(lane, name)
    if name in _DEPRECATED_RAY_NAMES:
        from ..ray import _deprecated

        return getattr(_deprecated, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
