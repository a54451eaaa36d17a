"""MosaicML Streaming (MDS) shards read with their JPEG column still encoded.

MDS's ``jpeg`` encoding stores the original file's bytes when the writer is
given a PIL image opened from a file (``MDSWriter.write({"image":
Image.open(path)})``), and its reader hands back ``PIL.Image.open`` of them,
decoded in full once pixels are asked for. Here the bytes are read instead,
without MDS's decoder: through the shard reader's ``get_sample_data`` (the
sample's bytes, every column) and the reader's column names, encodings and
sizes, which say where each column lies in them (MDS's sample layout: a
uint32 size for each variable-size column, then the columns in order).
Those are internals of ``streaming`` (0.13 is the release tested); its public
API has no way to read a column's stored bytes.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

from .._core._extras import require
from .._decode._options import DecodeOptions
from ._encoded_records import EncodedRecords

__all__ = ["MdsJpegs"]

#: MDS encodings whose stored bytes are an image file: a JPEG stays encoded, a PNG (or a JPEG
#: in a plain ``bytes`` column) is read by hf_image as in any other source.
IMAGE_FILE_ENCODINGS = ("jpeg", "png", "bytes")


def _columns(reader: Any, data: bytes) -> dict[str, bytes]:
    """Each column's bytes within one sample's ``data``, as MDS's reader lays them out."""
    sizes = []
    offset = 0
    for size in reader.column_sizes:
        if size is None:  # a variable-size column: its uint32 (little-endian) size leads the sample
            size = int.from_bytes(data[offset:offset + 4], "little")
            offset += 4
        sizes.append(size)
    columns = {}
    for name, size in zip(reader.column_names, sizes):
        columns[name] = data[offset:offset + size]
        offset += size
    return columns


def _dataset_name(dataset: Any) -> str:
    """Where a LocalDataset or StreamingDataset reads its shards from, for error messages."""
    streams = getattr(dataset, "streams", None)
    local = getattr(dataset, "local", None) or (streams[0].local if streams else None)
    return str(local or type(dataset).__name__)


def _local_dataset(local: str) -> Any:
    require("mds", "custom_op.datasets.MdsJpegs")
    from streaming import LocalDataset

    return LocalDataset(local)


class MdsJpegs(EncodedRecords):
    """MDS shards as a dataset of ``(EncodedJpeg, label)`` items and a batch lane source.

    Items are what :class:`custom_op.JpegFolder` gives: the image column as an
    :class:`custom_op.EncodedJpeg` (a PNG decoded in full), through
    ``transform``, so a torchvision v2 crop decodes only its window; the same
    object is a :class:`BatchLane` source (the lane uses its own transform).

    Args:
        dataset: A folder of MDS shards (its ``index.json``), read with
            ``streaming.LocalDataset``; or a ``streaming.LocalDataset`` or
            ``StreamingDataset`` already made (its shards downloaded). Items
            are by global sample index, map-style.
        column: The image column; its encoding must be ``jpeg``, ``png`` or
            ``bytes``.
        label_column: The label column, or None for no label (None in its place).
        transform: Any torchvision v2 transform for the items (not the lane's).
        on_error: The lane's default policy (see :class:`BatchLane`); the
            items here raise.
        decode_options: ``mode``, ``strict``, ... (see :class:`custom_op.EncodedJpeg`).
            EXIF orientation is not applied by default: MDS's reader hands
            back ``Image.open`` of the bytes, as stored.

    Raises:
        ValueError: a column is missing, the image column's encoding is not an
            image file (``pil`` stores pixels), or ``on_error`` is not a policy.
        TypeError: an unknown decode option.
        ImportError: a folder is given and ``streaming`` is not installed
            (``pip install 'custom_op[mds]'``).
        JpegDecodeError: (reading an item) the image cannot be decoded; the
            message starts with the sample's name.

    Example:
        >>> train = MdsJpegs("mds/train", transform=v2.RandomResizedCrop(224))
        >>> train[0][0].shape
        torch.Size([3, 224, 224])
        >>> lane = BatchLane(MdsJpegs("mds/train"), v2.RandomResizedCrop(224))
    """

    def __init__(self, dataset: Any, column: str = "image", label_column: Optional[str] = "label",
                 transform: Optional[Callable[[Any], Any]] = None, *, on_error: str = "raise",
                 **decode_options: Any) -> None:
        super().__init__("MdsJpegs", transform, on_error)
        self.options = DecodeOptions.checked("MdsJpegs", **decode_options)
        if isinstance(dataset, (str, os.PathLike)):
            self.name = os.fspath(dataset)
            dataset = _local_dataset(self.name)
        else:
            self.name = _dataset_name(dataset)
        if not hasattr(dataset, "spanner") or not hasattr(dataset, "shards"):
            raise TypeError("MdsJpegs: expected a folder of MDS shards or a streaming "
                            f"LocalDataset/StreamingDataset, got {type(dataset).__name__}")
        self.dataset, self.column, self.label_column = dataset, column, label_column
        for shard in dataset.shards:
            self._check_columns(shard)
        self.size = sum(int(shard.samples) for shard in dataset.shards)

    def _check_columns(self, shard: Any) -> None:
        encodings = dict(zip(shard.column_names, shard.column_encodings))
        for name in (self.column, self.label_column):
            if name is not None and name not in encodings:
                raise ValueError(f"MdsJpegs: no column {name!r}; the columns are "
                                 f"{sorted(encodings)}")
        if encodings[self.column] not in IMAGE_FILE_ENCODINGS:
            raise ValueError(f"MdsJpegs: column {self.column!r} has the MDS encoding "
                             f"{encodings[self.column]!r}, not an image file; MdsJpegs reads "
                             f"the encodings {IMAGE_FILE_ENCODINGS} (write JPEGs as 'jpeg')")

    def __len__(self) -> int:
        return self.size

    def record(self, index: int) -> tuple[bytes, Any, str]:
        shard_id, sample_in_shard = self.dataset.spanner[index]
        shard = self.dataset.shards[shard_id]
        # The columns were checked against every shard when the dataset was made.
        columns = _columns(shard, shard.get_sample_data(sample_in_shard))
        label = None
        if self.label_column is not None:
            label = self._label(shard, columns[self.label_column])
        return columns[self.column], label, f"{self.name}: sample {index}"

    def _label(self, shard: Any, stored: bytes) -> Any:
        """The label column's bytes decoded by MDS's own decoder for its encoding (an int...)."""
        from streaming.base.format.mds.encodings import mds_decode

        encoding = shard.column_encodings[shard.column_names.index(self.label_column)]
        return mds_decode(encoding, stored)
