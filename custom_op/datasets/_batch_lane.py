"""The batch lane: a batch of samples in, one uint8 [B, C, H, W] tensor and one label tensor out.

The per-sample pipeline (``JpegFolder(root, transform)`` in a DataLoader)
runs Python per image and pickles one tensor per image through the workers'
queues; the decoder itself is not the limit. Here a whole batch takes three
steps, each a method, so that a loader can run them where they serve best:

1. :meth:`BatchLane.load`: read the files (EncodedJpegs: headers only).
   No random numbers; threads may run it in any order.
2. :meth:`BatchLane.draw`: draw each sample's random parameters with the
   transforms' own code (``v2.RandomResizedCrop.make_params``, the flip's
   ``torch.rand(1) < p``), sample by sample in the order the per-sample
   pipeline draws them, so the same seed gives the same windows and flips.
   It must run in batch order (one thread, or a DataLoader worker).
3. :meth:`BatchLane.decode`: every window decoded by one
   ``decode_and_crop_jpeg_batch(..., size=, out=, hflips=)`` call on C++
   threads with the GIL released, straight into the batch and mirrored there
   by the thread that decoded it; whatever follows the flip in the transform
   (the "tail") per sample.

A tail that draws random numbers (RandAugment, ColorJitter) gets the draws the
per-sample pipeline would give it: in step 2 each sample's generator states
are saved and the tail is run once on a blank image of the output's shape
(only to move the generators on as it would; v2 transforms draw from the image
size, never from its pixels), and in step 3 the tail runs on the real image
from the saved states, under a lock that keeps other threads' draws out.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import threading
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode
from torchvision.transforms import v2

from .._timm._compose_jpeg import for_encoded_images
from .._decode_batch import decode_and_crop_jpeg_batch
from .._torchvision._encoded_jpeg import EncodedJpeg
from .._core._errors import JpegDecodeError
from .._torchvision._fused_resize import native_size
from .._torchvision._tv_geometry import interpolation_mode
from ..transforms import decode_remaining
from ._lane_sample import LaneSample

__all__ = ["BatchLane", "LaneSample", "split_transform"]

_log = logging.getLogger("custom_op.datasets")

#: Held while the global generators are drawn from or swapped (steps 2 and 3 above).
_RNG_LOCK = threading.RLock()


@dataclasses.dataclass
class _Plan:
    """A batch with its parameters drawn: what :meth:`BatchLane.decode` needs."""

    samples: list[LaneSample]
    windows: list[Optional[dict[str, int]]]
    flips: list[bool]
    tail_states: list[Optional[tuple]]


def split_transform(transform: Any) -> tuple[Optional[v2.RandomResizedCrop],
                                             Optional[v2.RandomHorizontalFlip],
                                             Optional[Callable[[Any], Any]]]:
    """``transform`` as (its leading v2.RandomResizedCrop, the flip after it, the rest).

    The crop and the flip are what the lane fuses; the rest (None when there
    is none) runs per sample. A transform that does not start with
    ``v2.RandomResizedCrop`` is all tail: it runs per sample, still batched.
    """
    steps = list(transform.transforms) if isinstance(transform, v2.Compose) else [transform]
    if not steps or type(steps[0]) is not v2.RandomResizedCrop:
        return None, None, transform
    crop, rest = steps[0], steps[1:]
    flip = None
    if rest and type(rest[0]) is v2.RandomHorizontalFlip:
        flip, rest = rest[0], rest[1:]
    tail = None if not rest else rest[0] if len(rest) == 1 else v2.Compose(rest)
    return crop, flip, tail


def _rng_states() -> tuple:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def _set_rng_states(states: tuple) -> None:
    torch.set_rng_state(states[0])
    random.setstate(states[1])
    np.random.set_state(states[2])


def _same_states(first: tuple, second: tuple) -> bool:
    return (torch.equal(first[0], second[0]) and first[1] == second[1]
            and all(np.array_equal(a, b) for a, b in zip(first[2][1:3], second[2][1:3])))


class BatchLane:
    """Decodes a batch of a dataset in one native call: ``lane(indices) -> (images, labels)``.

    Args:
        source: Where samples come from: a :class:`custom_op.JpegFolder`, a
            :class:`custom_op.datasets.HfRows` (Hugging Face parquet), or
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
        on_error: ``"raise"`` or ``"substitute"``; default the source's own
            ``on_error`` (JpegFolder's, HfRows'), else ``"raise"``. With
            ``"substitute"`` a sample that cannot be decoded is replaced
            (image and label) by the next one of the batch that decodes,
            logged as a warning naming the file and counted in
            ``substitutions``.

    Raises:
        TypeError: ``transform`` is not callable.
        ValueError: ``on_error`` is not a policy.
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
                 num_threads: Optional[int] = None, on_error: Optional[str] = None) -> None:
        if not callable(transform):
            raise TypeError(f"BatchLane: transform must be callable, got {type(transform).__name__}")
        on_error = on_error or getattr(source, "on_error", "raise")
        if on_error not in ("raise", "substitute"):
            raise ValueError(f"BatchLane: on_error must be 'raise' or 'substitute', got {on_error!r}")
        from ._lane_sources import lane_source  # imported on first use: the sources pull in the datasets

        self.source = lane_source(source)
        self.crop, self.flip, self.tail = split_transform(transform)
        # v2's flip flips when torch.rand(1) < p, compared in float32 (p is cast to the
        # tensor's dtype): the same test on the draw's value costs no tensor comparison.
        self._flip_below = float(np.float32(self.flip.p)) if self.flip is not None else 0.0
        if self.crop is None:
            # Nothing to fuse: the whole transform runs per sample (a timm / torchvision v1
            # pipeline in ComposeJPEG, as JpegFolder runs it), and there is no separate tail.
            self.tail, transform = None, for_encoded_images(transform)
        self.transform = transform
        self.pin_memory, self.num_threads, self.on_error = pin_memory, num_threads, on_error
        self.substitutions = 0

    def __repr__(self) -> str:
        return (f"BatchLane({type(self.source).__name__}, crop={self.crop}, flip={self.flip}, "
                f"tail={self.tail}, on_error={self.on_error!r})")

    def __len__(self) -> int:
        return len(self.source)

    # ---- the three steps ------------------------------------------------------------------

    def load(self, indices: Sequence[int]) -> list[LaneSample]:
        """The samples at ``indices``, read from the source (nothing decoded, nothing drawn)."""
        return self.source.lane_samples([int(index) for index in indices])

    def draw(self, samples: list[LaneSample]) -> _Plan:
        """Each sample's window, flip and tail states, drawn in the per-sample pipeline's order."""
        plan = _Plan(samples, [None] * len(samples), [False] * len(samples), [None] * len(samples))
        if self.crop is None:
            return plan
        tail_draws = self.tail is not None
        with _RNG_LOCK:
            for index, sample in enumerate(samples):
                if sample.image is None:
                    continue  # failed to load: substituted in decode
                plan.windows[index] = self.crop.make_params([sample.image])
                if self.flip is not None:
                    plan.flips[index] = torch.rand(1).item() < self._flip_below
                if tail_draws:
                    tail_draws = self._step_over_tail(plan, index, sample)
        return plan

    def decode(self, plan: _Plan, num_threads: Optional[int] = None) -> tuple[torch.Tensor, Any]:
        """The batch: windows decoded into one tensor, flipped, the tail applied; and the labels.

        ``num_threads`` overrides the lane's for this batch (lane_threads decodes several
        batches at once, each on one thread)."""
        samples = plan.samples
        failures: dict[int, Exception] = {index: sample.error for index, sample in
                                          enumerate(samples) if sample.image is None}
        if failures and self.on_error == "raise":
            raise next(iter(failures.values()))
        if self.crop is None:
            images = self._per_sample_transform(samples, failures)
        else:
            images = self._decode_windows(plan, failures, num_threads)
        if self.tail is not None:
            images = self._apply_tail(images, plan, failures)
        labels = [sample.label for sample in samples]
        if failures:
            images, labels = self._substitute(images, labels, samples, failures)
        if isinstance(images, list):
            images = torch.stack(images)
            images = images.pin_memory() if self.pin_memory else images
        return images, _label_tensor(labels)

    def __call__(self, indices: Sequence[int]) -> tuple[torch.Tensor, Any]:
        return self.decode(self.draw(self.load(indices)))

    def collate_samples(self, samples: Sequence[dict], image_key: str = "jpg",
                        label_key: str = "cls") -> tuple[torch.Tensor, Any]:
        """A batch of webdataset samples (dicts of member bytes) -> (images, labels).

        For ``wds.batched(n, collation_fn=lane.collate_samples)``: each
        sample's ``image_key`` member becomes an EncodedJpeg named
        ``<shard>: member <key>.<image_key>``, its ``label_key`` member (text
        digits, as ``.cls`` files hold) the label.
        """
        from ._lane_sources import tar_lane_samples

        return self.decode(self.draw(tar_lane_samples(samples, image_key, label_key)))

    # ---- inside the steps -----------------------------------------------------------------

    def _step_over_tail(self, plan: _Plan, index: int, sample: LaneSample) -> bool:
        """Saves the generators for sample ``index``'s tail and moves them past its draws;
        False when the tail drew nothing (then no later sample needs this)."""
        before = _rng_states()
        channels = _channels(sample.image)
        self.tail(tv_tensors.Image(torch.zeros((channels, *self._size()), dtype=torch.uint8)))
        if _same_states(before, _rng_states()):
            return False
        plan.tail_states[index] = before
        return True

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
        batch = torch.empty(shape, dtype=torch.uint8)
        if torch.utils.data.get_worker_info() is not None:
            # Decoded straight into shared memory: the batch crosses to the main process as a
            # handle, where a private tensor would be copied into fresh shared memory first.
            batch.share_memory_()
        return batch

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
            try:
                self._decode_fused(plan, fused, images, options, num_threads)
            except JpegDecodeError:
                fused = []  # the batch fails as a whole: the per-sample decode names the file(s)
        return self._decode_rest(plan, set(fused), images, failures)

    def _decode_fused(self, plan: _Plan, fused: list[int], images: torch.Tensor, options: Any,
                      num_threads: Optional[int]) -> None:
        samples, windows = plan.samples, plan.windows
        boxes = [[windows[i]["top"], windows[i]["left"], windows[i]["height"], windows[i]["width"]]
                 for i in fused]
        arguments = {**options.decode_arguments(), "contiguous": True}
        datas = [samples[i].image.encoded_bytes() for i in fused]
        whole = len(fused) == len(samples)
        decoded = decode_and_crop_jpeg_batch(
            datas, boxes, size=self._size(), antialias=bool(self.crop.antialias),
            num_threads=num_threads or self.num_threads, out=images if whole else None,
            hflips=[plan.flips[i] for i in fused], **arguments)
        if not whole:
            images[fused] = decoded

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

    def _per_sample_transform(self, samples: list[LaneSample],
                              failures: dict[int, Exception]) -> list[Any]:
        """No crop to fuse: the whole transform per sample, as the per-sample pipeline runs it."""
        images: list[Any] = [None] * len(samples)
        for index, sample in enumerate(samples):
            if index in failures:
                continue
            try:
                images[index] = decode_remaining(self.transform(sample.image))
            except JpegDecodeError as error:
                self._fail_or_note(failures, index, error)
        return images

    def _apply_tail(self, images: Any, plan: _Plan, failures: dict[int, Exception]) -> list[Any]:
        results: list[Any] = [None] * len(plan.samples)
        for index in range(len(plan.samples)):
            if index in failures:
                continue
            image = tv_tensors.Image(images[index])
            states = plan.tail_states[index]
            if states is None:
                results[index] = self.tail(image)
                continue
            with _RNG_LOCK:
                after = _rng_states()
                _set_rng_states(states)
                try:
                    results[index] = self.tail(image)
                finally:
                    _set_rng_states(after)
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


def _channels(image: Any) -> int:
    """The channels ``image`` gives decoded: an EncodedJpeg's by its mode and file, a decoded
    image's (a PNG, decoded in the dataset's mode) by its shape; 3 for no image."""
    if isinstance(image, EncodedJpeg):
        return image.num_channels
    return 3 if image is None else int(image.shape[-3])


def _label_tensor(labels: list[Any]) -> Any:
    """Integer labels as one int64 tensor; anything else collated as a DataLoader would."""
    if all(isinstance(label, int) and not isinstance(label, bool) for label in labels):
        return torch.tensor(labels, dtype=torch.int64)
    return torch.utils.data.default_collate(labels)
