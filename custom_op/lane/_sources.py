"""Where the batch lane's samples come from: a JpegFolder, Hugging Face rows, tar shard samples.

Each source turns a batch's indices into :class:`LaneSample` s: the image as
the per-sample pipeline reads it (an EncodedJpeg for a JPEG, the decoded
image for anything else), the label, and the name errors carry. A file that
cannot be read becomes a sample with its error, for the lane's ``on_error``.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from .._index._cache import IndexKey
from .._index._sidecar import sidecar_of_source
from .._torchvision._encoded_jpeg import DecodeOptions, EncodedJpeg
from .._core._errors import JpegDecodeError
from ..datasets._lane_sample import LaneSample
from ..datasets._folder import ON_ERROR_POLICIES, JpegFolder
from ..datasets._huggingface import hf_decode_options
from ..datasets._stored_images import stored_lane_sample
from ..datasets._loading import load_samples

__all__ = ["HfRows", "lane_source", "tar_lane_samples"]


class _FolderSource:
    """A JpegFolder's files and labels (its transform is the lane's business, not used here)."""

    def __init__(self, folder: JpegFolder) -> None:
        self.folder = folder
        self.on_error = folder.on_error

    def __len__(self) -> int:
        return len(self.folder)

    def lane_samples(self, indices: Sequence[int]) -> list[LaneSample]:
        """The folder's loader (load_sample) for each sample, the headers read in one call."""
        entries = [self.folder.samples[index] for index in indices]
        paths = [path for path, _ in entries]
        targets = [target for _, target in entries]
        if self.folder.target_transform is not None:
            targets = [self.folder.target_transform(target) for target in targets]
        return [LaneSample(None, target, path, image, key=index)
                if isinstance(image, JpegDecodeError) else LaneSample(image, target, path, key=index)
                for index, path, target, image in zip(indices, paths, targets,
                                                      load_samples(paths, self.folder.options))]


class HfRows:
    """A Hugging Face ``datasets.Dataset`` of images as a batch lane source.

    The rows are fetched a batch at a time (``dataset[indices]``); each
    row's ``column`` (an ``Image(decode=False)`` column, or JPEG bytes)
    goes through :func:`custom_op.datasets.hf_image`, its ``label_column``
    is the label.

    Args:
        dataset: A map-style ``datasets.Dataset`` (parquet files loaded with
            ``load_dataset("parquet", ...)``), its image column cast to
            ``Image(decode=False)``.
        column: The image column.
        label_column: The label column.
        index_column: The column of MCU-row indexes :func:`add_index_column`
            added, if any: the lane's crops then skip the rows above them.
        on_error: The lane's default policy (see :class:`BatchLane`).
        decode_options: ``mode``, ``strict``, ... (see :class:`custom_op.EncodedJpeg`);
            ``apply_exif_orientation`` defaults to True, as for
            :class:`custom_op.datasets.HfImageTransform` (the per-sample pipeline) and
            ``datasets``' ``Image()``.

    Raises:
        ValueError: ``on_error`` is not a policy, or a column is missing.
        TypeError: an unknown decode option.

    Example:
        >>> rows = HfRows(train.cast_column("image", Image(decode=False)))
        >>> lane = BatchLane(rows, v2.Compose([v2.RandomResizedCrop(224)]))
    """

    def __init__(self, dataset: Any, column: str = "image", label_column: str = "label", *,
                 index_column: Optional[str] = None, on_error: str = "raise",
                 **decode_options: Any) -> None:
        if on_error not in ON_ERROR_POLICIES:
            raise ValueError(f"HfRows: on_error must be one of {ON_ERROR_POLICIES}, got {on_error!r}")
        names = getattr(dataset, "column_names", None)
        for name in (column, label_column, index_column or column):
            if names is not None and name not in names:
                raise ValueError(f"HfRows: no column {name!r}; the columns are {sorted(names)}")
        self.dataset, self.column, self.label_column = dataset, column, label_column
        self.index_column = index_column
        self.on_error = on_error
        self.options = hf_decode_options("HfRows", **decode_options)

    def __len__(self) -> int:
        return len(self.dataset)

    def lane_samples(self, indices: Sequence[int]) -> list[LaneSample]:
        rows = self.dataset[list(indices)]
        indexes = rows[self.index_column] if self.index_column else [None] * len(indices)
        samples = []
        for index, value, label, jpeg_index in zip(indices, rows[self.column],
                                                   rows[self.label_column], indexes):
            path = value.get("path") if isinstance(value, dict) else None
            samples.append(stored_lane_sample(value, self.options, label, path or f"row {index}",
                                               key=int(index), index=jpeg_index))
        return samples


def lane_source(source: Any) -> Any:
    """What the lane reads from: a JpegFolder adapted, anything with ``lane_samples`` as is."""
    if isinstance(source, JpegFolder):
        return _FolderSource(source)
    if source is None or hasattr(source, "lane_samples"):
        return source
    raise TypeError(f"BatchLane: the source must be a JpegFolder, an HfRows, an MdsJpegs, a "
                    f"LitJpegs, or None for tar shard samples, got {type(source).__name__}")


#: The decode options of tar shard members: the image as stored, as webdataset's own decoders
#: (``wds.decode("pil")``, "torchrgb") and ``EncodedJpeg(member)`` give it, per sample.
TAR_OPTIONS = DecodeOptions()


def tar_lane_samples(samples: Sequence[dict], image_key: str, label_key: str,
                     options: Optional[DecodeOptions] = None) -> list[LaneSample]:
    """webdataset samples (``__key__``, ``__url__`` and member bytes) as LaneSamples, decoded
    with ``options`` (default TAR_OPTIONS)."""
    lane_samples = []
    for sample in samples:
        url = sample.get('__url__', '<tar>')
        name = f"{url}: member {sample['__key__']}.{image_key}"
        # The shard's file name, not its path or URL: a copy of the shards elsewhere (another
        # bucket, a local cache) keeps every sample's random stream.
        key = f"{url.rsplit('/', 1)[-1]}/{sample['__key__']}"
        label = int(sample[label_key]) if label_key in sample else None
        # A JPEG stays encoded; a PNG in a shard is decoded as hf_image decodes one.
        lane_sample = stored_lane_sample(sample[image_key], options or TAR_OPTIONS, label, name,
                                          key=key)
        if isinstance(lane_sample.image, EncodedJpeg):  # the shard's sidecar names it by member
            lane_sample.image.index_key = IndexKey(sidecar_of_source(str(url)),
                                                   f"{sample['__key__']}.{image_key}",
                                                   lane_sample.image.nbytes, 0)
        lane_samples.append(lane_sample)
    return lane_samples
