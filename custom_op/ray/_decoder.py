"""JpegDecoder: the callable class of the decode step, one BatchLane per Ray actor."""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from .._index._cache import IndexKey
from .._index._sidecar import sidecar_of_folder
from .._decode._options import DecodeOptions
from .._torchvision._encoded_jpeg import EncodedJpeg
from ..lane._batch_lane import BatchLane
from ..datasets._stored_images import stored_lane_sample
from ..datasets._lane_sample import LaneSample
from ._executions import epoch_of_execution

__all__ = ["JpegDecoder"]


class JpegDecoder:
    """Decodes a Ray Data batch of encoded JPEGs with the batch lane: the class for ``map_batches``.

    Each actor holds one :class:`custom_op.lane.BatchLane`; each batch is
    decoded by one native call, every sample's window and flip drawn from its
    own random stream of (seed, epoch, key), so the same three give the same
    pixels in any number of actors, on any node, in any order of blocks.

    Args:
        transform: The torchvision v2 transform of one image, as for BatchLane
            (``v2.RandomResizedCrop`` and a flip are fused into the native call; a tail
            runs per sample).
        seed: The seed of every sample's random stream. Required: each actor is a process
            of its own, and a seed drawn in one would differ from another's.
        epoch: The epoch whose draws every execution makes; None: each execution of the
            dataset decodes the next epoch (the first execution after
            ``executions_before`` is epoch 0), as ``FileShuffleConfig(seed,
            reseed_after_execution=True)`` reshuffles.
        executions_before: The executions the dataset's ``DataContext`` had counted when
            the step was added (:func:`decode_batches` sets it); used with ``epoch=None``.
        bytes_column: The column of encoded bytes (``read_binary_files``: ``"bytes"``; a
            Hugging Face parquet image column of ``{"bytes", "path"}`` structs is taken as
            it is; webdataset: ``"jpg"``).
        key_column: A column naming each sample stably across runs and machines
            (``read_binary_files(include_paths=True)``: ``"path"``; webdataset:
            ``"__key__"``; a parquet column of ids): it keys the sample's stream and names
            it in errors. A key that is an absolute path of a local file of the sample's
            size also names the file for the MCU-row index cache and its sidecar.
        label_column: The label column, or None for none.
        classes: With string labels (a class folder's name from ``Partitioning("dir")``),
            the class names in index order; each label becomes its index, as
            ImageFolder numbers classes.
        index_column: A column of MCU-row indexes (``add_index_column``'s), or None.
        options: How each JPEG is decoded (mode, strict, EXIF orientation).
        on_error: ``"raise"`` (the batch's task fails with the file's key, and Ray's own
            retry and error policy take over) or ``"substitute"`` (as BatchLane).
        keep_key: Also return ``key_column`` (strings, which ``iter_torch_batches`` cannot
            turn into tensors: iterate with ``iter_batches`` then).
        epoch_column: A column of int epochs: each row is drawn in its row's epoch, and the
            column is returned (:func:`decode_epochs` sets it). None: every row in the
            execution's epoch.

    Returns (when called): a dict of numpy arrays: ``"image"`` uint8 ``[B, C, H, W]``
    (contiguous), ``"label"`` int64 ``[B]`` with a label column, ``key_column`` with
    ``keep_key``, and ``epoch_column`` as given.

    Raises:
        TypeError: ``seed`` is not an int.
        ValueError: ``epoch`` or ``executions_before`` is not an int >= 0, a column is
            missing from a batch, or a label is not in ``classes``.
        JpegDecodeError: a file cannot be decoded (``on_error="raise"``); the message
            starts with its key.

    Example:
        >>> decoded = files.map_batches(JpegDecoder, fn_constructor_kwargs={
        ...     "transform": transform, "seed": 0}, batch_size=256, batch_format="numpy",
        ...     compute=ray.data.ActorPoolStrategy(min_size=1, max_size=3))
    """

    def __init__(self, transform: Callable[[Any], Any], *, seed: int,
                 epoch: Optional[int] = None, executions_before: int = 0,
                 bytes_column: str = "bytes", key_column: str = "path",
                 label_column: Optional[str] = None, classes: Optional[Sequence[str]] = None,
                 index_column: Optional[str] = None, options: Optional[DecodeOptions] = None,
                 on_error: str = "raise", keep_key: bool = False,
                 epoch_column: Optional[str] = None) -> None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"JpegDecoder: seed must be an int, got {seed!r}")
        for name, value in (("epoch", epoch), ("executions_before", executions_before)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < 0):
                raise ValueError(f"JpegDecoder: {name} must be an int >= 0, got {value!r}")
        self.lane = BatchLane(None, transform, seed=seed, on_error=on_error)
        self.epoch, self.executions_before = epoch, executions_before
        self.bytes_column, self.key_column, self.label_column = bytes_column, key_column, label_column
        self.index_column, self.epoch_column = index_column, epoch_column
        self.class_index = None if classes is None else {name: i for i, name in enumerate(classes)}
        self.options = options or DecodeOptions()
        self.keep_key = keep_key

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        for column in (self.bytes_column, self.key_column, self.label_column,
                       self.index_column, self.epoch_column):
            if column is not None and column not in batch:
                raise ValueError(f"JpegDecoder: the batch has no column {column!r} (it has "
                                 f"{sorted(batch)})")
        keys = [str(key) for key in batch[self.key_column]]
        # Without a label column the lane still collates a label per sample: a 0 that is dropped.
        labels = ([self._label(value) for value in batch[self.label_column]]
                  if self.label_column is not None else [0] * len(keys))
        indexes = (batch[self.index_column] if self.index_column is not None
                   else [None] * len(keys))
        samples = [self._sample(value, key, label, index) for value, key, label, index
                   in zip(batch[self.bytes_column], keys, labels, indexes)]
        epochs = ([int(epoch) for epoch in batch[self.epoch_column]]
                  if self.epoch_column is not None else None)
        images, decoded_labels = self._decode(samples, epochs)
        result = {"image": images}
        if self.keep_key:
            result[self.key_column] = np.asarray(batch[self.key_column])
        if epochs is not None:
            result[self.epoch_column] = np.asarray(epochs, dtype=np.int64)
        if self.label_column is not None:
            result["label"] = decoded_labels
        return result

    def execution_epoch(self) -> int:
        """The epoch of the rows without an epoch column: ``epoch``, or the execution's.

        Returns:
            The epoch, an int >= 0.

        Raises:
            RuntimeError: ``epoch`` is None and Ray's count of executions is missing or
                below ``executions_before`` (custom_op/ray/_executions.py).

        Example:
            >>> JpegDecoder(transform, seed=0, epoch=3).execution_epoch()
            3
        """
        return self.epoch if self.epoch is not None else epoch_of_execution(self.executions_before)

    def _decode(self, samples: list[LaneSample],
                epochs: Optional[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """The batch's images and labels; with ``epochs``, one native call per epoch among
        them (a batch may straddle two epochs of decode_epochs), rows kept in place."""
        if epochs is None or len(set(epochs)) <= 1:  # an empty batch has no epoch to split by
            epoch = epochs[0] if epochs else self.execution_epoch()
            images, labels = self.lane.decode(self.lane.draw(samples, epoch))
            return images.numpy(), labels.numpy()
        parts = []
        for epoch in sorted(set(epochs)):
            rows = [index for index, value in enumerate(epochs) if value == epoch]
            images, labels = self.lane.decode(self.lane.draw([samples[i] for i in rows], epoch))
            parts.append((rows, images.numpy(), labels.numpy()))
        images = np.empty((len(samples), *parts[0][1].shape[1:]), dtype=parts[0][1].dtype)
        labels = np.empty(len(samples), dtype=parts[0][2].dtype)
        for rows, part_images, part_labels in parts:
            images[rows], labels[rows] = part_images, part_labels
        return images, labels

    def _sample(self, value: Any, key: str, label: Any, index: Any) -> LaneSample:
        encoded = value if isinstance(value, Mapping) else bytes(value)
        sample = stored_lane_sample(encoded, self.options, label, key, key=key, index=index)
        if (index is None and isinstance(sample.image, EncodedJpeg)
                and not isinstance(encoded, Mapping)):
            sample.image.index_key = _file_index_key(key, len(encoded))
        return sample

    def _label(self, value: Any) -> int:
        if isinstance(value, bytes):
            value = value.decode()
        if self.class_index is None:
            return int(value)
        if value not in self.class_index:
            raise ValueError(f"JpegDecoder: label {value!r} is not in classes "
                             f"({len(self.class_index)} names)")
        return self.class_index[value]


def _file_index_key(path: str, size: int) -> Optional[IndexKey]:
    """The index cache's key of the local file ``path`` (read_binary_files' path column), as
    JpegFolder makes it, or None when the key names no local file of the bytes' size (a bucket,
    a webdataset key). The stat comes after Ray's read: if the file changed in between, the
    index's own checksum refuses it and the decode goes the ordinary way."""
    if not os.path.isabs(path):
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    if stat.st_size != size:
        return None
    folder, name = os.path.split(path)
    return IndexKey(sidecar_of_folder(folder), name, stat.st_size, stat.st_mtime_ns)
