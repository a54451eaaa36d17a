"""The batch lane: a batch of samples in, one uint8 [B, C, H, W] tensor and one label tensor out.

The per-sample pipeline (``JpegFolder(root, transform)`` in a DataLoader)
runs Python per image and pickles one tensor per image through the workers'
queues; the decoder itself is not the limit. Here a whole batch takes three
steps, each a method, so that a loader can run them where they serve best:

1. :meth:`BatchLane.load`: read the files (EncodedJpegs: headers only).
   No random numbers; threads may run it in any order.
2. :meth:`BatchLane.draw`: draw each sample's window and flip from the
   sample's own generator, seeded from (the lane's seed, the epoch, the
   sample's key) (_lane_random.py), with torchvision's distributions. No
   process-wide generator is read or moved, so any thread may run it, in any
   order, and the same seed gives the same batches whatever else draws.
3. :meth:`BatchLane.decode`: every window decoded by one
   ``decode_and_crop_jpeg_batch(..., size=, out=, hflips=)`` call on C++
   threads with the GIL released, straight into the batch and mirrored there
   by the thread that decoded it; whatever follows the flip in the transform
   (the "tail") per sample.

A tail is the user's transform and draws from the process-wide generators
(torchvision's and timm's random transforms know no other). Before each
sample's tail they are seeded from the sample's stream, so the tail draws
what the per-sample pipeline seeded with the sample's seed would draw, and
after the batch the caller's states are put back, so that the training
loop's own sequence goes on as if the lane had drawn nothing. Those
generators are the whole process's: this is done only in the thread that
asked for the batch, never on a loader's background threads (lane_threads
runs a drawing tail in the training loop's thread as each batch is handed
over).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode
from torchvision.transforms import v2

from .._timm._compose_jpeg import for_encoded_images
from .._decode._batch import decode_and_crop_jpeg_batch
from .._torchvision._encoded_jpeg import EncodedJpeg
from .._core._errors import JpegDecodeError
from .._torchvision._fused_head import split_head
from .._torchvision._fused_resize import native_size
from .._torchvision._tv_geometry import interpolation_mode
from ..transforms import decode_remaining
from ._random_streams import (derived_seed, draws_from_global_generators, flip_draw,
                           process_generators_kept, resized_crop_window, sample_generator,
                           seed_process_generators)
from ..datasets._lane_sample import LaneSample

__all__ = ["BatchLane", "LaneSample"]

_log = logging.getLogger("custom_op.datasets")

@dataclasses.dataclass
class _Plan:
    """A batch with its parameters drawn: what :meth:`BatchLane.decode` needs."""

    samples: list[LaneSample]
    windows: list[Optional[dict[str, int]]]
    flips: list[bool]
    #: Each sample's generator after the lane's draws, with its seed: where the process-wide
    #: generators are put before the sample's tail (None: failed to load).
    generators: list[Optional[torch.Generator]]
    seeds: list[Optional[int]]


@dataclasses.dataclass
class _Decoded:
    """A batch decoded but for its tail, substitutions and stacking: what is left for
    :meth:`BatchLane._finished`, which a loader may run in another thread."""

    plan: _Plan
    images: Any
    failures: dict[int, Exception]


class BatchLane:
    """Decodes a batch of a dataset in one native call: ``lane(indices) -> (images, labels)``.

    Args:
        source: Where samples come from: a :class:`custom_op.JpegFolder`, a
            :class:`custom_op.lane.HfRows` (Hugging Face parquet), or
            ``None`` for tar shards, whose samples (webdataset's dicts) go to
            :meth:`collate_samples` instead of indices.
        transform: A torchvision v2 transform for one image, the same object
            the per-sample pipeline would use. ``v2.Compose([
            v2.RandomResizedCrop(size), v2.RandomHorizontalFlip(), *tail])``
            is fused: windows decoded and flipped in one call, the
            tail per sample. Anything else runs per sample (a timm or
            torchvision v1 pipeline in ComposeJPEG, as JpegFolder runs it),
            still delivered as one batch.
        pin_memory: allocate each batch in pinned memory (needs an
            accelerator); in DataLoader workers pass ``pin_memory`` to the
            DataLoader instead (see :func:`lane_dataloader`).
        num_threads: decoding threads per batch; default
            ``torch.get_num_threads()`` (1 in a DataLoader worker).
        seed: The seed of the lane's random streams: sample ``key``'s
            window and flip in epoch ``e`` are drawn from a generator seeded
            with ``sample_seed(key, e)``, a hash of (seed, e, key). Default
            ``torch.initial_seed()`` when the lane is built (read, not
            drawn), so ``torch.manual_seed(s)`` before building the lane
            makes its batches reproducible.
        on_error: ``"raise"`` or ``"substitute"``; default the source's own
            ``on_error`` (JpegFolder's, HfRows'), else ``"raise"``. With
            ``"substitute"`` a sample that cannot be decoded is replaced
            (image and label) by the next one of the batch that decodes,
            logged as a warning naming the file and counted in
            ``substitutions``.

    Raises:
        TypeError: ``transform`` is not callable, or ``seed`` is not an int.
        ValueError: ``on_error`` is not a policy, or ``seed`` is negative.
        JpegDecodeError: (when called, ``on_error="raise"``) a file cannot be
            decoded; the message starts with its path (or shard and member).

    Example:
        >>> lane = BatchLane(JpegFolder("train"), v2.Compose([
        ...     v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()]))
        >>> images, labels = lane([0, 5, 9])
        >>> images.shape, images.dtype, labels.tolist()
        (torch.Size([3, 3, 224, 224]), torch.uint8, [0, 0, 1])
    """

    def __init__(self, source: Any, transform: Callable[[Any], Any], *, pin_memory: bool = False,
                 num_threads: Optional[int] = None, on_error: Optional[str] = None,
                 seed: Optional[int] = None) -> None:
        if not callable(transform):
            raise TypeError(f"BatchLane: transform must be callable, got {type(transform).__name__}")
        seed = torch.initial_seed() if seed is None else seed
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"BatchLane: seed must be an int, got {seed!r}")
        if seed < 0:
            raise ValueError(f"BatchLane: seed must be >= 0, got {seed}")
        self.seed, self.epoch = seed, 0
        on_error = on_error or getattr(source, "on_error", "raise")
        if on_error not in ("raise", "substitute"):
            raise ValueError(f"BatchLane: on_error must be 'raise' or 'substitute', got {on_error!r}")
        from ._sources import lane_source  # imported on first use: the sources pull in the datasets

        self.source = lane_source(source)
        self.crop, self.flip, self.tail = split_head(transform)
        # v2's flip flips when torch.rand(1) < p, compared in float32 (p is cast to the
        # tensor's dtype): the same test on the draw's value costs no tensor comparison.
        self._flip_below = float(np.float32(self.flip.p)) if self.flip is not None else 0.0
        if self.crop is not None:
            # RandomResizedCrop draws its aspect ratio between the float32 logarithms of its
            # bounds: the same numbers, computed the same way, give the same draws.
            self._log_ratio = torch.log(torch.tensor(self.crop.ratio)).tolist()
        if self.crop is None:
            # Nothing to fuse: the whole transform runs per sample (a timm / torchvision v1
            # pipeline in ComposeJPEG, as JpegFolder runs it), and there is no separate tail.
            self.tail, transform = None, for_encoded_images(transform)
        self.transform = transform
        self.pin_memory, self.num_threads, self.on_error = pin_memory, num_threads, on_error
        self.substitutions = 0
        self._global_draws: Optional[list[str]] = None

    def __repr__(self) -> str:
        return (f"BatchLane({type(self.source).__name__}, crop={self.crop}, flip={self.flip}, "
                f"tail={self.tail}, on_error={self.on_error!r}, seed={self.seed})")

    def __len__(self) -> int:
        return len(self.source)

    # ---- the three steps ------------------------------------------------------------------

    def load(self, indices: Sequence[int]) -> list[LaneSample]:
        """The samples at ``indices``, read from the source (nothing decoded, nothing drawn)."""
        return self.source.lane_samples([int(index) for index in indices])

    def draw(self, samples: list[LaneSample], epoch: Optional[int] = None) -> _Plan:
        """Each sample's window and flip, drawn from its own stream in ``epoch`` (default
        :attr:`epoch`); any thread, any order: no process-wide generator is used."""
        epoch = self.epoch if epoch is None else _checked_epoch(epoch)
        count = len(samples)
        plan = _Plan(samples, [None] * count, [False] * count, [None] * count, [None] * count)
        for index, sample in enumerate(samples):
            if sample.image is None:
                continue  # failed to load: substituted in decode
            seed = self.sample_seed(sample.key, epoch)
            generator = sample_generator(seed)
            if self.crop is not None:
                height, width = v2.functional.get_size(sample.image)
                plan.windows[index] = resized_crop_window(generator, height, width,
                                                          self.crop.scale, self.crop.ratio,
                                                          self._log_ratio)
                if self.flip is not None:
                    plan.flips[index] = flip_draw(generator, self._flip_below)
            plan.generators[index], plan.seeds[index] = generator, seed
        return plan

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next draws are for (the lane's loaders set it at every epoch)."""
        self.epoch = _checked_epoch(epoch)

    def sample_seed(self, key: Any, epoch: Optional[int] = None) -> int:
        """The seed of sample ``key``'s stream in ``epoch`` (default :attr:`epoch`).

        ``key`` is the sample's dataset index, or for tar shards
        ``"<shard file name>/<member key>"``. With the global generator seeded
        to it, the per-sample pipeline draws this sample's window and flip."""
        return derived_seed(self.seed, self.epoch if epoch is None else _checked_epoch(epoch),
                            key)

    def global_draws(self) -> list[str]:
        """The names of the transform's steps that draw from the process-wide generators
        (the tail's, or the whole transform when nothing is fused); empty when none does.

        Found once, by running them on a blank image of the output's size (the fused
        case) or on the source's first sample, with the process-wide generators put back
        afterwards."""
        if self._global_draws is None:
            if self.crop is not None:
                steps = [] if self.tail is None else (
                    list(self.tail.transforms) if isinstance(self.tail, v2.Compose)
                    else [self.tail])
                image = tv_tensors.Image(torch.zeros((3, *self._size()), dtype=torch.uint8))
                self._global_draws = draws_from_global_generators(steps, image)
            else:
                first = self.load([0])[0].image if self.source is not None and len(self) else None
                self._global_draws = ([type(self.transform).__name__] if first is None else
                                      draws_from_global_generators([self.transform], first))
        return self._global_draws

    def decode(self, plan: _Plan, num_threads: Optional[int] = None) -> tuple[torch.Tensor, Any]:
        """The batch: windows decoded into one tensor, flipped, the tail applied; and the labels.

        ``num_threads`` overrides the lane's for this batch (lane_threads decodes several
        batches at once, each on one thread). A tail that draws from the process-wide
        generators finds them seeded from each sample's stream, in the calling thread, and
        the caller's states are put back afterwards."""
        return self._finished(self._decoded(plan, num_threads))

    def _decoded(self, plan: _Plan, num_threads: Optional[int] = None, *,
                 streams: bool = True) -> _Decoded:
        """The batch before its tail. With nothing fused, the whole transform runs here per
        sample, with each sample's streams installed only when ``streams`` (see
        :func:`_each_sample`)."""
        failures: dict[int, Exception] = {index: sample.error for index, sample in
                                          enumerate(plan.samples) if sample.image is None}
        if failures and self.on_error == "raise":
            raise next(iter(failures.values()))
        if self.crop is None:
            images = self._per_sample_transform(plan, failures, streams)
        else:
            images = self._decode_windows(plan, failures, num_threads)
        return _Decoded(plan, images, failures)

    def _finished(self, decoded: _Decoded, *, streams: bool = True
                  ) -> tuple[torch.Tensor, Any]:
        """The tail applied (with each sample's streams installed when ``streams``), failed
        samples substituted, the batch stacked; and the labels."""
        plan, images, failures = decoded.plan, decoded.images, decoded.failures
        if self.tail is not None:
            images = self._apply_tail(images, plan, failures, streams)
        labels = [sample.label for sample in plan.samples]
        if failures:
            images, labels = self._substitute(images, labels, plan.samples, failures)
        if isinstance(images, list):
            images = self._stack(images)
        return images, _label_tensor(labels)

    def __call__(self, indices: Sequence[int], epoch: Optional[int] = None
                 ) -> tuple[torch.Tensor, Any]:
        return self.decode(self.draw(self.load(indices), epoch))

    def collate_samples(self, samples: Sequence[dict], image_key: str = "jpg",
                        label_key: str = "cls") -> tuple[torch.Tensor, Any]:
        """A batch of webdataset samples (dicts of member bytes) -> (images, labels).

        For ``wds.batched(n, collation_fn=lane.collate_samples)``: each
        sample's ``image_key`` member becomes an EncodedJpeg named
        ``<shard>: member <key>.<image_key>``, its ``label_key`` member (text
        digits, as ``.cls`` files hold) the label. A sample's stream is keyed
        ``"<shard file name>/<key>"``: the same wherever the shards are read from.
        """
        from ._sources import tar_lane_samples

        return self.decode(self.draw(tar_lane_samples(samples, image_key, label_key)))

    # ---- inside the steps -----------------------------------------------------------------

    def _size(self) -> tuple[int, int]:
        size = self.crop.size
        return (size[0], size[0]) if len(size) == 1 else (size[0], size[1])

    def _fusable(self, image: Any, window: dict[str, int], options: Any) -> bool:
        """Whether the batch call gives this sample exactly what the v2 kernel would."""
        return (isinstance(image, EncodedJpeg) and image.pending_resize is None
                and image.options == options and not options.exact
                and options.mode in ("rgb", "gray")
                and interpolation_mode(self.crop.interpolation) == InterpolationMode.BILINEAR
                and native_size(self._size())
                and (window["height"], window["width"]) != self._size())

    def _new_batch(self, count: int, channels: int) -> torch.Tensor:
        shape = (count, channels, *self._size())
        if self.pin_memory:
            return torch.empty(shape, dtype=torch.uint8, pin_memory=True)
        if torch.utils.data.get_worker_info() is not None:
            return _shared_empty(shape, torch.uint8)
        return torch.empty(shape, dtype=torch.uint8)

    def _stack(self, images: list[Any]) -> torch.Tensor:
        """Per-sample results as one batch, in a worker stacked straight into shared memory."""
        if self.pin_memory:
            return torch.stack(images).pin_memory()
        if torch.utils.data.get_worker_info() is not None:
            first = images[0]
            return torch.stack(images, out=_shared_empty((len(images), *first.shape), first.dtype))
        return torch.stack(images)

    def _decode_windows(self, plan: _Plan, failures: dict[int, Exception],
                        num_threads: Optional[int]) -> torch.Tensor:
        samples, windows = plan.samples, plan.windows
        first = next((s.image for s in samples if isinstance(s.image, EncodedJpeg)), None)
        options = first.options if first is not None else None
        fused = [index for index, sample in enumerate(samples) if index not in failures
                 and self._fusable(sample.image, windows[index], options)]
        # The channels of the first sample read, JPEG or not (a batch of PNGs in a gray folder
        # is 1-channel, as the per-sample pipeline's).
        loaded = next((s.image for s in samples if s.image is not None), None)
        images = self._new_batch(len(samples), _channels(loaded))
        if fused:
            self._decode_fused(plan, fused, images, options, num_threads, failures)
        return self._decode_rest(plan, set(fused), images, failures)

    def _decode_fused(self, plan: _Plan, fused: list[int], images: torch.Tensor, options: Any,
                      num_threads: Optional[int], failures: dict[int, Exception]) -> None:
        """The fused samples in one batch call, each decoded once: a file that fails goes to
        on_error (raised naming the file, or noted in ``failures`` for substitution)."""
        samples, windows = plan.samples, plan.windows
        boxes = [[windows[i]["top"], windows[i]["left"], windows[i]["height"], windows[i]["width"]]
                 for i in fused]
        arguments = {**options.decode_arguments(), "contiguous": True}
        datas = [samples[i].image.encoded_bytes() for i in fused]
        # Each sample's index from the cache, a sidecar, or built now (custom_op/_index/_cache.py).
        indexes = [samples[i].image.window_index(windows[i]["height"]) for i in fused]
        whole = len(fused) == len(samples)
        decoded, errors = decode_and_crop_jpeg_batch(
            datas, boxes, size=self._size(), antialias=bool(self.crop.antialias),
            num_threads=num_threads or self.num_threads, out=images if whole else None,
            hflips=[plan.flips[i] for i in fused], errors="return", indexes=indexes,
            **arguments)
        if not whole:
            images[fused] = decoded
        for index, error in zip(fused, errors):
            if isinstance(error, JpegDecodeError):  # named as the per-sample decode names it
                source = getattr(samples[index].image, "source", None) or samples[index].name
                self._fail_or_note(failures, index, JpegDecodeError(f"{source}: {error}"))
            elif error is not None:
                raise error

    def _decode_rest(self, plan: _Plan, done: set[int], images: torch.Tensor,
                     failures: dict[int, Exception]) -> torch.Tensor:
        """The samples the batch call did not take, through the crop's own v2 kernel (and the
        flip's: v2's horizontal_flip of an image tensor is ``flip(-1)``)."""
        for index, sample in enumerate(plan.samples):
            if index in done or index in failures:
                continue
            try:
                image = self.crop.transform(sample.image, plan.windows[index])
            except JpegDecodeError as error:
                self._fail_or_note(failures, index, error)
                continue
            if image.shape[-3] != images.shape[1]:  # would broadcast 1 channel into 3
                raise ValueError(f"BatchLane: {sample.name} gives {image.shape[-3]} channels, the "
                                 f"batch's first image {images.shape[1]}: files that decode to "
                                 "different channel counts cannot be stacked (mode='unchanged' "
                                 "over gray and colour files); use mode='rgb' or 'gray'")
            images[index] = image.flip(-1) if plan.flips[index] else image
        return images

    def _fail_or_note(self, failures: dict[int, Exception], index: int, error: Exception) -> None:
        if self.on_error == "raise":
            raise error
        failures[index] = error

    def _per_sample_transform(self, plan: _Plan, failures: dict[int, Exception],
                              streams: bool) -> list[Any]:
        """No crop to fuse: the whole transform per sample, as the per-sample pipeline runs it."""
        images: list[Any] = [None] * len(plan.samples)

        def transform(index: int) -> None:
            try:
                images[index] = decode_remaining(self.transform(plan.samples[index].image))
            except JpegDecodeError as error:
                self._fail_or_note(failures, index, error)

        _each_sample(plan, failures, streams, transform)
        return images

    def _apply_tail(self, images: Any, plan: _Plan, failures: dict[int, Exception],
                    streams: bool) -> list[Any]:
        results: list[Any] = [None] * len(plan.samples)

        def tail(index: int) -> None:
            results[index] = self.tail(tv_tensors.Image(images[index]))

        _each_sample(plan, failures, streams, tail)
        return results

    def _substitute(self, images: Any, labels: list[Any], samples: list[LaneSample],
                    failures: dict[int, Exception]) -> tuple[Any, list[Any]]:
        """Each failed sample replaced by the next good one of the batch, logged and counted."""
        size = len(samples)
        for index, error in sorted(failures.items()):
            replacement = next((c % size for c in range(index + 1, index + size)
                                if c % size not in failures), None)
            if replacement is None:
                raise JpegDecodeError(f"{error} (and no other sample of this batch of {size} "
                                      "decoded to take its place)") from error
            images[index], labels[index] = images[replacement], labels[replacement]
            self.substitutions += 1
            _log.warning("BatchLane: %s replaced by %s (%d replacements so far in process %d): "
                         "%s", samples[index].name, samples[replacement].name, self.substitutions,
                         os.getpid(), error)
        return images, labels


def _each_sample(plan: _Plan, failures: dict[int, Exception], streams: bool,
                 work: Callable[[int], None]) -> None:
    """``work(index)`` for each sample of the batch that loaded. With ``streams``, the
    process-wide generators are seeded from each sample's stream before its work, and the
    caller's states are put back once the batch is done (or has raised), so that the
    transform's draws are the sample's own and the training loop's sequence is unchanged.
    Without ``streams`` (a loader's background thread, where the training loop may draw at
    the same moment) they are left alone, and the transform draws from them as it finds
    them."""
    with process_generators_kept() if streams else contextlib.nullcontext():
        for index, generator in enumerate(plan.generators):
            if index in failures:
                continue
            if streams and generator is not None:
                seed_process_generators(generator, plan.seeds[index])
            work(index)


def _channels(image: Any) -> int:
    """The channels ``image`` gives decoded: an EncodedJpeg's by its mode and file, a decoded
    image's (a PNG, decoded in the dataset's mode) by its shape; 3 for no image."""
    if isinstance(image, EncodedJpeg):
        return image.num_channels
    return 3 if image is None else int(image.shape[-3])


def _checked_epoch(epoch: Any) -> int:
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        raise TypeError(f"BatchLane: epoch must be an int, got {epoch!r}")
    if epoch < 0:
        raise ValueError(f"BatchLane: epoch must be >= 0, got {epoch}")
    return epoch


def _shared_empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor in fresh shared memory, the way default_collate allocates a
    worker's batch: it crosses to the training process as a handle, where a private tensor
    would first be copied into shared memory. Fresh for every batch, because the training
    process may still hold the last one (a view, an asynchronous copy to the GPU)."""
    count = math.prod(shape)
    storage = torch.UntypedStorage._new_shared(count * dtype.itemsize)
    return torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape))


def _label_tensor(labels: list[Any]) -> Any:
    """Integer labels as one int64 tensor; anything else collated as a DataLoader would."""
    if all(isinstance(label, int) and not isinstance(label, bool) for label in labels):
        return torch.tensor(labels, dtype=torch.int64)
    return torch.utils.data.default_collate(labels)
