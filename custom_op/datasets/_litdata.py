"""LitData optimized datasets read with their JPEG column still encoded.

``litdata.optimize`` stores a PIL image opened from a JPEG file with its
``jpeg`` serializer, which keeps the file's bytes (``JPEGSerializer.serialize``
reads ``item.filename``), and decodes them in full when an item is read
(``torchvision.io.decode_jpeg``, or Pillow plus ``exif_transpose`` when the
file has EXIF). ``litdata.StreamingDataset`` takes the serializers to read
with (its public ``serializers=`` argument): :class:`EncodedBytes` in place
of the ``jpeg`` and ``image`` ones hands the stored bytes back undecoded.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Optional

from .._core._extras import require
from .._decode._options import DecodeOptions
from ._encoded_records import EncodedRecords

__all__ = ["LitJpegs"]


class EncodedBytes:
    """A LitData serializer that reads a stored image's bytes as they are (it never writes)."""

    def serialize(self, item: Any) -> tuple[bytes, Optional[str]]:
        """Refused: datasets are written with litdata's own serializers."""
        raise TypeError("custom_op's EncodedBytes only reads; write with litdata's serializers")

    def deserialize(self, data: bytes) -> bytes:
        """The stored bytes, copied out of litdata's chunk buffer."""
        return bytes(data)

    def can_serialize(self, item: Any) -> bool:
        """Never chosen for writing."""
        return False

    def setup(self, metadata: Any) -> None:
        """Nothing to set up: the bytes are the item."""


#: litdata serializer keys whose stored bytes are an image file.
IMAGE_FILE_SERIALIZERS = ("jpeg", "image")


def _streaming_dataset(input_dir: str, dataset_options: Mapping[str, Any]) -> Any:
    require("litdata", "custom_op.datasets.LitJpegs")
    import litdata

    if "serializers" in dataset_options:
        raise ValueError("LitJpegs: dataset_options cannot set serializers (LitJpegs sets the "
                         "ones that read the images undecoded)")
    serializers = {key: EncodedBytes() for key in IMAGE_FILE_SERIALIZERS}
    return litdata.StreamingDataset(input_dir, serializers=serializers, **dataset_options)


class LitJpegs(EncodedRecords):
    """A LitData optimized dataset as ``(EncodedJpeg, label)`` items and a batch lane source.

    Items are what :class:`custom_op.JpegFolder` gives: the image as an
    :class:`custom_op.EncodedJpeg` (a PNG stored as bytes decoded in full),
    through ``transform``, so a torchvision v2 crop decodes only its window;
    the same object is a :class:`BatchLane` source (the lane uses its own
    transform). Items are by index, map-style.

    Args:
        input_dir: The folder ``litdata.optimize`` wrote (its ``index.json``).
        column: The image's key in each item (a dict key, or a tuple position);
            it must have been written as a JPEG (a PIL image opened from a
            ``.jpg`` file, or ``litdata.Image``) or as bytes.
        label_column: The label's key, or None for no label.
        transform: Any torchvision v2 transform for the items (not the lane's).
        on_error: The lane's default policy (see :class:`BatchLane`); the
            items here raise.
        dataset_options: Keyword arguments of ``litdata.StreamingDataset``
            (``cache_dir``, ``max_cache_size``, ...), all but ``serializers``.
        decode_options: ``mode``, ``strict``, ... (see :class:`custom_op.EncodedJpeg`).
            ``apply_exif_orientation`` defaults to True, as LitData's own
            decoder turns a JPEG that carries EXIF.

    Raises:
        ValueError: ``on_error`` is not a policy, or ``dataset_options`` sets serializers.
        TypeError: an unknown decode option; (reading an item) the image was
            stored decoded (litdata's ``pil`` serializer keeps pixels: a PIL
            image that was not opened from a JPEG file).
        ImportError: ``litdata`` is not installed (``pip install 'custom_op[litdata]'``).
        JpegDecodeError: (reading an item) the image cannot be decoded; the
            message starts with the item's name.

    Example:
        >>> train = LitJpegs("optimized/train", transform=v2.RandomResizedCrop(224))
        >>> train[0][0].shape
        torch.Size([3, 224, 224])
        >>> lane = BatchLane(LitJpegs("optimized/train"), v2.RandomResizedCrop(224))
    """

    def __init__(self, input_dir: str, column: Any = "image", label_column: Any = "label",
                 transform: Optional[Callable[[Any], Any]] = None, *, on_error: str = "raise",
                 dataset_options: Optional[Mapping[str, Any]] = None,
                 **decode_options: Any) -> None:
        super().__init__("LitJpegs", transform, on_error)
        if not isinstance(input_dir, (str, os.PathLike)):
            raise TypeError(f"LitJpegs: input_dir must be a folder, got {input_dir!r}")
        # LitData's decoder turns a JPEG that carries EXIF (exif_transpose), so by default so
        # do the items here.
        self.options = DecodeOptions.checked("LitJpegs", **{"apply_exif_orientation": True,
                                                            **decode_options})
        self.input_dir = os.fspath(input_dir)
        self.dataset = _streaming_dataset(self.input_dir, dict(dataset_options or {}))
        self.column, self.label_column = column, label_column

    def __len__(self) -> int:
        return len(self.dataset)

    def record(self, index: int) -> tuple[bytes, Any, str]:
        item = self.dataset[index]
        name = f"{self.input_dir}: item {index}"
        value = item[self.column]
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"LitJpegs: {name}: {self.column!r} holds a {type(value).__name__}, "
                            "not the stored bytes of an image file: litdata wrote it with "
                            "another serializer (a PIL image not opened from a JPEG file is "
                            "stored as pixels, 'pil'); write JPEG files opened with "
                            "PIL.Image.open, or their bytes")
        label = item[self.label_column] if self.label_column is not None else None
        return value, label, name
