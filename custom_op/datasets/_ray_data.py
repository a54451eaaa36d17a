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

__all__ = ["LaneDecoder", "lane_map_batches", "lane_map_epochs"]

#: The column lane_map_epochs adds: each row's epoch, which keys its draws.
EPOCH_COLUMN = "epoch"


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
        epoch_column: A column of int epochs: each row is drawn in its own
            row's epoch rather than ``epoch``, and the column is returned
            (lane_map_epochs sets it). None: every row in ``epoch``.

    Returns (when called): a dict of numpy arrays: ``"image"`` uint8
    ``[B, C, H, W]`` (contiguous), ``"label"`` int64 ``[B]`` with a label
    column, ``key_column`` as given with ``keep_key``, and ``epoch_column``
    as given.

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
                 keep_key: bool = False, epoch_column: Optional[str] = None) -> None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"LaneDecoder: seed must be an int, got {seed!r}")
        self.lane = BatchLane(None, transform, seed=seed, on_error=on_error)
        self.lane.set_epoch(epoch)
        self.bytes_column, self.key_column, self.label_column = bytes_column, key_column, label_column
        self.class_index = None if classes is None else {name: i for i, name in enumerate(classes)}
        self.options = options or DecodeOptions()
        self.keep_key = keep_key
        self.epoch_column = epoch_column

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        for column in (self.bytes_column, self.key_column, self.label_column, self.epoch_column):
            if column is not None and column not in batch:
                raise ValueError(f"LaneDecoder: the batch has no column {column!r} (it has "
                                 f"{sorted(batch)})")
        keys = [str(key) for key in batch[self.key_column]]
        # Without a label column the lane still collates a label per sample: a 0 that is dropped.
        labels = ([self._label(value) for value in batch[self.label_column]]
                  if self.label_column is not None else [0] * len(keys))
        samples = [self._sample(value, key, label)
                   for value, key, label in zip(batch[self.bytes_column], keys, labels)]
        epochs = (None if self.epoch_column is None
                  else [int(epoch) for epoch in batch[self.epoch_column]])
        images, decoded_labels = self._decode(samples, epochs)
        result = {"image": images}
        if self.keep_key:
            result[self.key_column] = np.asarray(batch[self.key_column])
        if epochs is not None:
            result[self.epoch_column] = np.asarray(epochs, dtype=np.int64)
        if self.label_column is not None:
            result["label"] = decoded_labels
        return result

    def _decode(self, samples: list[LaneSample],
                epochs: Optional[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """The batch's images and labels; with ``epochs``, one native call per epoch among
        them (a batch may straddle two epochs of lane_map_epochs), rows kept in place."""
        if epochs is None or len(set(epochs)) <= 1:  # an empty batch has no epoch to split by
            images, labels = self.lane.decode(self.lane.draw(
                samples, epochs[0] if epochs else None))
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
                     batch_size: int = 256, concurrency: int = 1, num_cpus: float = 1,
                     **decoder_options: Any) -> Any:
    """``dataset`` decoded by :class:`LaneDecoder` in a pool of Ray actors: one epoch's batches.

    Args:
        dataset: A ``ray.data.Dataset`` of encoded images (``read_binary_files(...,
            include_paths=True)``, ``read_parquet``, ``read_webdataset``).
        transform, seed, epoch: as :class:`LaneDecoder`.
        batch_size: Rows per native batch call and per actor task (the batches the
            training loop iterates may differ: ``iter_torch_batches(batch_size=...)``
            slices them without a copy). Ray's own cost (a task, the object store, the
            driver's bookkeeping) is paid per block, whatever its rows: a few hundred
            rows spread it thin.
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
    from ray.data import ActorPoolStrategy

    return dataset.map_batches(LaneDecoder, fn_constructor_kwargs=constructor,
                               batch_size=batch_size, batch_format="numpy",
                               compute=ActorPoolStrategy(size=concurrency), num_cpus=num_cpus)


def lane_map_epochs(epochs: Mapping[int, Any], transform: Callable[[Any], Any], *, seed: int,
                    batch_size: int = 256, concurrency: int = 1, num_cpus: float = 1,
                    **decoder_options: Any) -> Any:
    """Several epochs decoded in one Ray Data execution: one pool of actors starts once.

    lane_map_batches makes one epoch's dataset, and every iteration of a
    dataset is an execution of its own whose actors start anew (a process
    each, torch imported: seconds). This gives one dataset holding every
    epoch's rows, each drawn from its own (seed, epoch, key) stream as
    lane_map_batches would draw it in that epoch, so the same pixels arrive
    from actors started once. The epochs' rows interleave: Ray Data's
    ``union`` takes blocks from each epoch's dataset in turn, so the stream
    is that of a dataset repeated ``len(epochs)`` times (as webdataset's
    ``repeat`` gives), not one epoch after another; each row carries its
    epoch in the ``"epoch"`` column. A loop that needs an epoch's end (an
    evaluation, a checkpoint) iterates lane_map_batches per epoch instead.

    Args:
        epochs: Each epoch's dataset of encoded images, by epoch, e.g. ``{epoch:
            files.random_shuffle(seed=epoch) for epoch in range(3)}``.
        transform, seed, batch_size, concurrency, num_cpus, decoder_options: as
            :func:`lane_map_batches`.

    Returns:
        The lazy ``ray.data.Dataset`` of ``{"image", ["label"], [key], "epoch"}`` batches.

    Raises:
        ValueError: ``epochs`` is empty, an epoch is not an int >= 0, or an argument of
            lane_map_batches is out of range.
        TypeError: as lane_map_batches.

    Example:
        >>> files = ray.data.read_binary_files("train/", include_paths=True)
        >>> decoded = lane_map_epochs({epoch: files for epoch in range(3)}, transform, seed=0)
        >>> for batch in decoded.iter_torch_batches(batch_size=256):
        ...     images, epochs = batch["image"], batch["epoch"]   # uint8 [256, 3, 224, 224]
    """
    if not epochs:
        raise ValueError("lane_map_epochs: epochs is empty; give {epoch: dataset}")
    for epoch in epochs:
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError(f"lane_map_epochs: an epoch must be an int >= 0, got {epoch!r}")
    from ray.data.expressions import lit

    # An expression, not a Python function: the reading tasks that add the column need not
    # import custom_op (and torch) in every worker they run in.
    tagged = [epochs[epoch].with_column(EPOCH_COLUMN, lit(epoch)) for epoch in sorted(epochs)]
    rows = tagged[0].union(*tagged[1:]) if len(tagged) > 1 else tagged[0]
    return lane_map_batches(rows, transform, seed=seed, epoch=min(epochs),
                            batch_size=batch_size, concurrency=concurrency, num_cpus=num_cpus,
                            epoch_column=EPOCH_COLUMN, **decoder_options)
