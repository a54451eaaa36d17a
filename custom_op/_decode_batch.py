"""The batch call: windows of many JPEGs decoded (and resized, and mirrored) on a pool of C++
threads, the GIL released; its argument checks in Python, the pool in C++
(binding/thread_pool.h)."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import torch

from ._core import _native as _C
from . import _orientation
from ._arguments import (MODES, JpegData, _as_boxes, _as_encoded, _as_int, _as_limit,
                         _as_size, _check_flags, _check_out, _normalize_mode)
from ._core._errors import JpegDecodeError
from ._decode import (DEFAULT_MAX_MEMORY, DEFAULT_MAX_PIXELS, DEFAULT_MAX_SCANS, SCALE_AUTO,
                      decode_and_crop_jpeg, decode_and_resized_crop_jpeg)

__all__ = ["decode_and_crop_jpeg_batch"]


def decode_and_crop_jpeg_batch(
    datas: Sequence[JpegData],
    boxes: Union[Sequence[Sequence[int]], torch.Tensor],
    *,
    size: Optional[Union[int, Tuple[int, int]]] = None,
    mode: str = "rgb",
    antialias: bool = True,
    strict: bool = True,
    num_threads: Optional[int] = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_scans: int = DEFAULT_MAX_SCANS,
    seek: bool = True,
    contiguous: bool = False,
    max_memory: int = DEFAULT_MAX_MEMORY,
    out: Optional[torch.Tensor] = None,
    apply_exif_orientation: bool = False,
    hflips: Optional[Sequence[bool]] = None,
) -> Union[List[torch.Tensor], torch.Tensor]:
    """Decodes one window of each of several JPEGs on a pool of C++ threads.

    Each result equals the one-at-a-time call: :func:`decode_and_crop_jpeg`
    without ``size``, :func:`decode_and_resized_crop_jpeg` with it. The GIL is
    released for the whole batch.

    Args:
        datas: a sequence of encoded files (1-D uint8 tensors, bytes, ...).
        boxes: one ``(crop_y, crop_x, crop_height, crop_width)`` per file, as a
            list or an N x 4 integer tensor.
        size: if given (int or ``(height, width)``), every window is resized
            to it and the result is stacked.
        mode, antialias, strict, max_pixels, max_scans, max_memory, seek,
            contiguous: as for the single calls; max_memory bounds each
            image's decode (one per thread at a time).
        num_threads: decoding threads; default ``torch.get_num_threads()``,
            which is 1 inside a DataLoader worker. At most one per image.
        out: with ``size`` and ``mode`` "rgb" or "gray": the uint8 CPU tensor
            ``[N, C, size[0], size[1]]`` to decode into (pinned or shared
            memory, a reused buffer), in the memory format the result would
            have (channels_last, or contiguous with ``contiguous=True``);
            returned.
        hflips: one bool per image: True mirrors that image left to right
            after its decode (and resize), as ``v2.RandomHorizontalFlip``
            does, on the thread that decoded it. ``boxes`` stay in the
            file's coordinates.

    Returns:
        Without ``size``: a list of uint8 ``[C, h, w]`` tensors (views of HWC
        memory, or contiguous CHW with ``contiguous=True``). With it: one
        uint8 tensor ``[N, C, size[0], size[1]]`` in ``torch.channels_last``
        memory format (NHWC), or contiguous NCHW with ``contiguous=True``.

    Raises:
        TypeError, ValueError: bad arguments, or (with ``size``) files whose
            channel counts differ in ``mode="unchanged"``.
        JpegDecodeError: a file cannot be decoded. The batch fails as a whole;
            the message names the first failing file's index:
            ``decode_and_crop_jpeg_batch(): image 3: Premature end of JPEG file ...``.
        MemoryError, RuntimeError: as :func:`decode_and_crop_jpeg`.
    """
    name = "decode_and_crop_jpeg_batch"
    if isinstance(datas, (bytes, bytearray, torch.Tensor)):
        raise TypeError(f"{name}(): datas must be a sequence of encoded files, got one "
                        f"{type(datas).__name__}")
    encoded = [_as_encoded(data, name) for data in datas]
    flat = _as_boxes(name, boxes, len(encoded))
    mode_code = _normalize_mode(name, mode)
    _check_flags(name, strict=strict, antialias=antialias, seek=seek, contiguous=contiguous,
                 apply_exif_orientation=apply_exif_orientation)
    threads = torch.get_num_threads() if num_threads is None else \
        _as_int(name, "num_threads", num_threads, 1)
    out_size = (0, 0) if size is None else _as_size(name, size)
    flips = _as_flips(name, hflips, len(encoded))
    turned = [i for i, data in enumerate(encoded) if _orientation.exif_orientation(data) != 1] \
        if apply_exif_orientation else []
    if turned:
        options = dict(mode=mode, strict=strict, max_pixels=max_pixels, max_scans=max_scans,
                       seek=seek, contiguous=contiguous, max_memory=max_memory)
        return _batch_with_turned_files(encoded, flat, turned, size, antialias, threads, out,
                                        options, flips)
    scales = [] if size is None else [SCALE_AUTO] * len(encoded)  # the kernel applies the rule
    # Every mode but "unchanged" knows its channel count before decoding, so
    # the threads write straight into the stacked result. torch.stack would
    # copy it once more on ATen's OpenMP threads, which then spin-wait on the
    # cores the next batch decodes on (2 threads: 1.66x -> 1.97x 1 thread).
    memory_format = torch.contiguous_format if contiguous else torch.channels_last
    if out is not None:
        _check_out(name, out, size is not None and mode_code != MODES["unchanged"],
                   (len(encoded), 3 if mode_code == MODES["rgb"] else 1, *out_size), memory_format)
    elif size is not None and mode_code != MODES["unchanged"]:
        out = torch.empty((len(encoded), 3 if mode_code == MODES["rgb"] else 1, *out_size),
                          dtype=torch.uint8, memory_format=memory_format)
    results = _C.decode_batch(encoded, flat, scales, out_size[0], out_size[1], mode_code,
                              antialias, strict, _as_limit(name, "max_pixels", max_pixels),
                              _as_limit(name, "max_scans", max_scans), threads, seek, out,
                              contiguous=contiguous,
                              max_memory=_as_limit(name, "max_memory", max_memory), hflips=flips)
    if out is not None:
        return out
    if size is None:
        return results
    _check_one_channel_count(name, mode, results)
    if not results:
        return torch.empty((0, 3 if mode_code == 0 else 1, *out_size), dtype=torch.uint8,
                           memory_format=memory_format)
    if contiguous:
        return torch.stack(results)
    # Stacking the HWC memory behind the views gives NHWC, i.e. channels_last.
    return torch.stack([result.permute(1, 2, 0) for result in results]).permute(0, 3, 1, 2)


def _as_flips(function: str, hflips: Optional[Sequence[bool]], count: int) -> list[int]:
    """``hflips`` as the kernel's list (one 0/1 per image, or empty for none)."""
    if hflips is None:
        return []
    if isinstance(hflips, torch.Tensor):
        if hflips.dtype != torch.bool or hflips.dim() != 1:
            raise TypeError(f"{function}(): hflips must be a 1-D bool tensor or a sequence of "
                            f"bools, got a {hflips.dtype} tensor of shape {tuple(hflips.shape)}")
        hflips = hflips.tolist()
    flips = list(hflips)
    if len(flips) != count:
        raise ValueError(f"{function}(): hflips must hold one bool per image ({count}), "
                         f"got {len(flips)}")
    wrong = next((flip for flip in flips if not isinstance(flip, bool)), None)
    if wrong is not None:
        raise TypeError(f"{function}(): hflips must hold bools, got {wrong!r}")
    return [int(flip) for flip in flips]


def _batch_with_turned_files(encoded: list, flat: list[int], turned: list[int],
                             size: Optional[Tuple[int, int]], antialias: bool, threads: int,
                             out: Optional[torch.Tensor], options: dict, flips: list[int]):
    """decode_and_crop_jpeg_batch with apply_exif_orientation, when some files are turned: those
    go through the single calls (which turn them, custom_op/_orientation.py), the others through
    the pool, each result in its place; a failure names the image's index as the pool does."""
    name = "decode_and_crop_jpeg_batch"
    straight = [i for i in range(len(encoded)) if i not in set(turned)]
    results: list = [None] * len(encoded)
    if straight:
        pooled = decode_and_crop_jpeg_batch(
            [encoded[i] for i in straight], [flat[4 * i:4 * i + 4] for i in straight],
            size=size, antialias=antialias, num_threads=threads,
            hflips=[bool(flips[i]) for i in straight] if flips else None, **options)
        for index, result in zip(straight, pooled):
            results[index] = result
    for index in turned:
        box = flat[4 * index:4 * index + 4]
        try:
            if size is None:
                results[index] = decode_and_crop_jpeg(encoded[index], *box,
                                                      apply_exif_orientation=True, **options)
            else:
                results[index] = decode_and_resized_crop_jpeg(
                    encoded[index], *box, size, antialias=antialias,
                    apply_exif_orientation=True, **options)
        except JpegDecodeError as error:
            raise JpegDecodeError(f"{name}(): image {index}: {error}") from error
        if flips and flips[index]:
            results[index] = results[index].flip(-1)
    if size is None:
        return results
    _check_one_channel_count(name, options["mode"], results)
    if out is None:
        out = torch.empty((len(results), *results[0].shape), dtype=torch.uint8,
                          memory_format=torch.contiguous_format if options["contiguous"]
                          else torch.channels_last)
    for index, result in enumerate(results):
        out[index].copy_(result)
    return out


def _check_one_channel_count(function: str, mode: str, results: list[torch.Tensor]) -> None:
    """ValueError when the decoded windows, to be stacked, have different channel counts
    (mode "unchanged" over gray, colour and CMYK files)."""
    channels = sorted({result.shape[0] for result in results})
    if len(channels) > 1:
        raise ValueError(f"{function}(): mode={mode!r} gave {channels} channels for different "
                         "files, which cannot be stacked; use mode='rgb' or 'gray'")
