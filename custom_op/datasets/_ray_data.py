"""Crop decoding on a Ray Data cluster: the batch lane as a ``map_batches`` step.

Ray Data schedules, streams, retries and moves the batches between machines;
this module only gives it the decode. :class:`LaneDecoder` is a callable
class for ``Dataset.map_batches``: each actor holds one :class:`BatchLane`,
and each batch of rows (encoded bytes, a stable key, optionally a label) is
decoded by one native batch call, its windows and flips drawn from each
sample's own stream of (seed, epoch, key), exactly as the lane draws them in
a DataLoader. So the same seed and epoch give the same pixels on one machine
or fifty, in any number of actors and in any order of blocks.

:func:`lane_map_batches` is the usual call: the decoded dataset of one epoch,
for ``iter_torch_batches`` or Ray Train's ``get_dataset_shard``. Ray Data is
lazy, so building it once per epoch costs nothing until it is iterated.
Ray is an optional dependency (``pip install 'custom_op[ray]'``); this module
imports it only where a Ray object is made.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from .._torchvision._decode_options import DecodeOptions
from ._batch_lane import BatchLane
from ._huggingface import encoded_lane_sample
from ._lane_sample import LaneSample

__all__ = ["LaneDecoder", "lane_map_batches"]


class LaneDecoder:
    """Decodes a Ray Data batch of encoded images with the batch lane: for ``map_batches``.

    Args:
        transform: The torchvision v2 transform of one image, as for
            :class:`BatchLane` (``v2.RandomResizedCrop`` and a flip are fused
            into the native call; a tail runs per sample).
        seed: The seed of every sample's random stream. Give it: each actor
            is its own process, and a default taken from one would differ
            from another's.
        epoch: The epoch whose draws this step makes.
        bytes_column: The column of encoded bytes (``read_binary_files``:
            ``"bytes"``; a Hugging Face parquet image column holds
            ``{"bytes", "path"}`` dicts, also taken).
        key_column: A column that names each sample stably across runs and
            machines (``read_binary_files(include_paths=True)``: ``"path"``;
            webdataset: ``"__key__"``): its value keys the sample's stream
            and names it in errors.
        label_column: The label column, or None for none.
        classes: With string labels (a folder name from Ray's
            ``Partitioning("dir")``), the class names in index order; each
            label becomes its index, as ImageFolder numbers classes.
        options: How each JPEG is decoded (mode, strict, EXIF orientation).
        on_error: ``"raise"`` (the batch's task fails with the file's name,
            and Ray's own retry and error policy take over) or
            ``"substitute"`` (as :class:`BatchLane`).
        keep_key: Also return ``key_column`` (strings, which
            ``iter_torch_batches`` cannot turn into tensors: iterate with
            ``iter_batches`` then).

    Returns (when called): a dict of numpy arrays: ``"image"`` uint8
    ``[B, C, H, W]`` (contiguous), ``"label"`` int64 ``[B]`` with a label
    column, and ``key_column`` as given with ``keep_key``.

    Raises:
        ValueError: a column is missing from a batch, or a label is not in
            ``classes``.
        JpegDecodeError: a file cannot be decoded (``on_error="raise"``); the
            message starts with its key.
    """

    def __init__(self, transform: Callable[[Any], Any], *, seed: int, epoch: int = 0,
                 bytes_column: str = "bytes", key_column: str = "path",
                 label_column: Optional[str] = None, classes: Optional[Sequence[str]] = None,
                 options: Optional[DecodeOptions] = None, on_error: str = "raise",
                 keep_key: bool = False) -> None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"LaneDecoder: seed must be an int, got {seed!r}")
        self.lane = BatchLane(None, transform, seed=seed, on_error=on_error)
        self.lane.set_epoch(epoch)
        self.bytes_column, self.key_column, self.label_column = bytes_column, key_column, label_column
        self.class_index = None if classes is None else {name: i for i, name in enumerate(classes)}
        self.options = options or DecodeOptions()
        self.keep_key = keep_key

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        for column in (self.bytes_column, self.key_column, self.label_column):
            if column is not None and column not in batch:
                raise ValueError(f"LaneDecoder: the batch has no column {column!r} (it has "
                                 f"{sorted(batch)})")
        keys = [str(key) for key in batch[self.key_column]]
        # Without a label column the lane still collates a label per sample: a 0 that is dropped.
        labels = ([self._label(value) for value in batch[self.label_column]]
                  if self.label_column is not None else [0] * len(keys))
        samples = [self._sample(value, key, label)
                   for value, key, label in zip(batch[self.bytes_column], keys, labels)]
        images, decoded_labels = self.lane.decode(self.lane.draw(samples))
        result = {"image": images.numpy()}
        if self.keep_key:
            result[self.key_column] = np.asarray(batch[self.key_column])
        if self.label_column is not None:
            result["label"] = decoded_labels.numpy()
        return result

    def _sample(self, value: Any, key: str, label: Any) -> LaneSample:
        encoded = value if isinstance(value, Mapping) else bytes(value)
        return encoded_lane_sample(encoded, self.options, label, key, key=key)

    def _label(self, value: Any) -> int:
        if isinstance(value, bytes):
            value = value.decode()
        if self.class_index is None:
            return int(value)
        if value not in self.class_index:
            raise ValueError(f"LaneDecoder: label {value!r} is not in classes "
                             f"({len(self.class_index)} names)")
        return self.class_index[value]


def lane_map_batches(dataset: Any, transform: Callable[[Any], Any], *, seed: int, epoch: int = 0,
                     batch_size: int = 64, concurrency: int = 1, num_cpus: float = 1,
                     **decoder_options: Any) -> Any:
    """``dataset`` decoded by :class:`LaneDecoder` in a pool of Ray actors: one epoch's batches.

    Args:
        dataset: A ``ray.data.Dataset`` of encoded images (``read_binary_files(...,
            include_paths=True)``, ``read_parquet``, ``read_webdataset``).
        transform, seed, epoch: as :class:`LaneDecoder`.
        batch_size: Rows per native batch call (the batches the training loop
            iterates may differ: ``iter_torch_batches(batch_size=...)``).
        concurrency: Actors decoding at once (the pool's size).
        num_cpus: CPUs each actor reserves; each decodes on one native thread.
        decoder_options: :class:`LaneDecoder`'s column, label, options and
            on_error arguments.

    Returns:
        The lazy ``ray.data.Dataset`` of ``{"image", ["label"], [key]}`` batches. A dead
        actor (a killed node, an out-of-memory kill) is restarted and its batches retried by
        Ray Data's own policy for actor pools (restarts and task retries without limit):
        no batch is lost or repeated.

    Example:
        >>> files = ray.data.read_binary_files("train/", include_paths=True)
        >>> for epoch in range(epochs):
        ...     decoded = lane_map_batches(files.random_shuffle(seed=epoch), transform,
        ...                                seed=0, epoch=epoch, concurrency=4)
        ...     for batch in decoded.iter_torch_batches(batch_size=256):
        ...         images = batch["image"]   # uint8 [256, 3, 224, 224]
    """
    for name, value in (("batch_size", batch_size), ("concurrency", concurrency)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"lane_map_batches: {name} must be an int >= 1, got {value!r}")
    constructor = {"transform": transform, "seed": seed, "epoch": epoch, **decoder_options}
    LaneDecoder(**constructor)  # argument errors here, in the driver, not in every actor
    return dataset.map_batches(LaneDecoder, fn_constructor_kwargs=constructor,
                               batch_size=batch_size, batch_format="numpy",
                               concurrency=concurrency, num_cpus=num_cpus)
