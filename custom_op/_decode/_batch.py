"""The batch call: windows of many JPEGs decoded (and resized, and mirrored) on a pool of C++
threads, the GIL released; its argument checks in Python, the pool in C++
(binding/thread_pool.h)."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import torch

from .._core import _deferred_errors
from .._core import _native as _C
from . import _orientation
from ._arguments import (MODES, JpegData, _as_boxes, _as_encoded, _as_int, _as_limit,
                         _as_size, _check_flags, _check_out, _normalize_mode)
from .._core._errors import JpegDecodeError
from .._index._jpeg_index import as_index
from ._single import (DEFAULT_MAX_MEMORY, DEFAULT_MAX_PIXELS, DEFAULT_MAX_SCANS, SCALE_AUTO,
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
    errors: str = "raise",
    indexes: Optional[Sequence[Optional[JpegData]]] = None,
) -> Union[List[torch.Tensor], torch.Tensor, Tuple[Union[List[Optional[torch.Tensor]],
                                                         torch.Tensor], List[Optional[Exception]]]]:
    """Decodes one window of each of several JPEGs on a pool of C++ threads.

    Each result equals the one-at-a-time call: :func:`decode_and_crop_jpeg`
    without ``size``, :func:`decode_and_resized_crop_jpeg` with it. The GIL is
    released for the whole batch. Every file is decoded once, whatever the
    others do: a file that fails costs that file alone.

    Args:
        datas: a sequence of encoded files (1-D uint8 tensors, bytes, ...).
        boxes: one ``(crop_y, crop_x, crop_height, crop_width)`` per file, as a
            list or an N x 4 integer tensor.
        size: if given (int or ``(height, width)``), every window is resized
            to it and the result is stacked.
        mode, antialias, strict, max_pixels, max_scans, max_memory, seek,
            contiguous, apply_exif_orientation: as for the single calls;
            max_memory bounds each image's decode (one per thread at a time).
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
        errors: ``"raise"`` (the default): a file that cannot be decoded
            raises, once the others are decoded. ``"return"``: nothing raises
            for a file; the call returns ``(images, failures)`` instead, with
            ``failures`` a list holding, per image, None or the exception its
            decode raised (JpegDecodeError for bad data, ValueError for a
            window outside the image, MemoryError).
        indexes: one MCU-row index per image (:func:`jpeg_index`'s bytes, or
            None for an image without one), as ``index=`` of the single calls:
            the rows above each window are skipped; an index that is not its
            file's is refused and that image decoded the ordinary way, with
            the same pixels.

    Returns:
        Without ``size``: a list of uint8 ``[C, h, w]`` tensors (views of HWC
        memory, or contiguous CHW with ``contiguous=True``). With it: one
        uint8 tensor ``[N, C, size[0], size[1]]`` in ``torch.channels_last``
        memory format (NHWC), or contiguous NCHW with ``contiguous=True``.
        With ``errors="return"``: ``(images, failures)``, where a failed
        image is None in the list, or zeros in the stacked tensor.

    Raises:
        TypeError, ValueError: bad arguments, or (with ``size``) files whose
            channel counts differ in ``mode="unchanged"``.
        JpegDecodeError: (``errors="raise"``) a file cannot be decoded; the
            message names the first failing file's index:
            ``decode_and_crop_jpeg_batch(): image 3: Premature end of JPEG file ...``.
        MemoryError, RuntimeError: as :func:`decode_and_crop_jpeg`.

    Example:
        >>> images, failures = custom_op.decode_and_crop_jpeg_batch(
        ...     [good, broken], [(0, 0, 64, 64)] * 2, size=32, errors="return")
        >>> images.shape, [type(failure).__name__ for failure in failures]
        (torch.Size([2, 3, 32, 32]), ['NoneType', 'JpegDecodeError'])
    """
    arguments = (datas, boxes, size, mode, antialias, strict, num_threads, max_pixels, max_scans,
                 seek, contiguous, max_memory, out, apply_exif_orientation, hflips, errors,
                 indexes)
    if torch.compiler.is_compiling():  # argument errors raised when the graph runs
        return _deferred_errors.checked_in_graph(lambda: _batch(*arguments), (1, 3, 1, 1))
    return _batch(*arguments)


def _batch(datas, boxes, size, mode, antialias, strict, num_threads, max_pixels, max_scans, seek,
           contiguous, max_memory, out, apply_exif_orientation, hflips, errors, indexes):
    """decode_and_crop_jpeg_batch, its arguments checked here."""
    name = "decode_and_crop_jpeg_batch"
    if isinstance(datas, (bytes, bytearray, torch.Tensor)):
        raise TypeError(f"{name}(): datas must be a sequence of encoded files, got one "
                        f"{type(datas).__name__}")
    encoded = [_as_encoded(data, name) for data in datas]
    flat = _as_boxes(name, boxes, len(encoded))
    mode_code = _normalize_mode(name, mode)
    _check_flags(name, strict=strict, antialias=antialias, seek=seek, contiguous=contiguous,
                 apply_exif_orientation=apply_exif_orientation)
    if errors not in ("raise", "return"):
        raise ValueError(f"{name}(): errors must be 'raise' or 'return', got {errors!r}")
    threads = torch.get_num_threads() if num_threads is None else \
        _as_int(name, "num_threads", num_threads, 1)
    out_size = (0, 0) if size is None else _as_size(name, size)
    flips = _as_flips(name, hflips, len(encoded))
    index_tensors = _as_indexes(name, indexes, len(encoded))
    limits = dict(max_pixels=_as_limit(name, "max_pixels", max_pixels),
                  max_scans=_as_limit(name, "max_scans", max_scans),
                  max_memory=_as_limit(name, "max_memory", max_memory))
    # Every mode but "unchanged" knows its channel count before decoding, so
    # the threads write straight into the stacked result. torch.stack would
    # copy it once more on ATen's OpenMP threads, which then spin-wait on the
    # cores the next batch decodes on (2 threads: 1.66x -> 1.97x 1 thread).
    memory_format = torch.contiguous_format if contiguous else torch.channels_last
    stackable = size is not None and mode_code != MODES["unchanged"]
    channels = 3 if mode_code == MODES["rgb"] else 1
    if out is not None:  # checked whichever path decodes the files
        _check_out(name, out, stackable, (len(encoded), channels, *out_size), memory_format)
    elif stackable:
        out = torch.empty((len(encoded), channels, *out_size), dtype=torch.uint8,
                          memory_format=memory_format)
    turned = [i for i, data in enumerate(encoded) if _orientation.exif_orientation(data) != 1] \
        if apply_exif_orientation else []
    if turned:
        options = dict(mode=mode, strict=strict, seek=seek, contiguous=contiguous, **limits)
        results, failures = _batch_with_turned_files(
            encoded, flat, turned, None if size is None else out_size, antialias, threads, out,
            options, flips, index_tensors)
    else:
        scales = [] if size is None else [SCALE_AUTO] * len(encoded)  # the kernel's rule
        results, failures = _C.decode_batch(
            encoded, flat, scales, out_size[0], out_size[1], mode_code, antialias, strict,
            limits["max_pixels"], limits["max_scans"], threads, seek, out,
            contiguous=contiguous, max_memory=limits["max_memory"], hflips=flips,
            errors="return", indexes=index_tensors)
        results = _stacked(name, mode, results, out, size, out_size, channels, memory_format,
                           failures)
    return _C.batch_outcome(results, failures, errors)


def _stacked(function: str, mode: str, results: list, out: Optional[torch.Tensor],
             size: Optional[Tuple[int, int]], out_size: Tuple[int, int], channels: int,
             memory_format: torch.memory_format, failures: list):
    """The pool's results as the caller gets them: ``out`` when it was decoded into, the list
    (None for a failed image) without ``size``, else stacked (zeros for a failed image)."""
    if out is not None:
        return out
    if size is None:
        return [None if failure is not None else result
                for result, failure in zip(results, failures)]
    decoded = [result for result, failure in zip(results, failures) if failure is None]
    _check_one_channel_count(function, mode, decoded)
    if not results:
        return torch.empty((0, channels, *out_size), dtype=torch.uint8,
                           memory_format=memory_format)
    like = decoded[0] if decoded else results[0]
    results = [result if failure is None else like.new_zeros(like.shape)
               for result, failure in zip(results, failures)]
    if memory_format == torch.contiguous_format:
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
    for index, flip in enumerate(flips):
        if not isinstance(flip, bool):
            raise TypeError(f"{function}(): hflips must hold bools, got {flip!r} "
                            f"({type(flip).__name__}) at hflips[{index}]")
    return [int(flip) for flip in flips]


def _batch_with_turned_files(encoded: list, flat: list[int], turned: list[int],
                             size: Optional[Tuple[int, int]], antialias: bool, threads: int,
                             out: Optional[torch.Tensor], options: dict, flips: list[int],
                             indexes: list):
    """decode_and_crop_jpeg_batch with apply_exif_orientation, when some files are turned: those
    go through the single calls (which turn them, custom_op/_decode/_orientation.py), the others through
    the pool, each result in its place, as ``(results, failures)``; a failure names the image's
    index in the caller's batch, as the pool does. ``out``, if given, is checked already."""
    name = "decode_and_crop_jpeg_batch"
    turned_set = set(turned)
    straight = [i for i in range(len(encoded)) if i not in turned_set]
    results: list = [None] * len(encoded)
    failures: list = [None] * len(encoded)
    if straight:
        out_size = (0, 0) if size is None else size
        pooled, pooled_failures = _C.decode_batch(
            [encoded[i] for i in straight], [v for i in straight for v in flat[4 * i:4 * i + 4]],
            [] if size is None else [SCALE_AUTO] * len(straight), out_size[0], out_size[1],
            _normalize_mode(name, options["mode"]), antialias, options["strict"],
            options["max_pixels"], options["max_scans"], threads, options["seek"],
            contiguous=options["contiguous"], max_memory=options["max_memory"],
            hflips=[flips[i] for i in straight] if flips else (), errors="return",
            indices=straight, indexes=[indexes[i] for i in straight] if indexes else ())
        for index, result, failure in zip(straight, pooled, pooled_failures):
            results[index], failures[index] = (None, failure) if failure else (result, None)
    for index in turned:
        box = flat[4 * index:4 * index + 4]
        file_index = indexes[index] if indexes else None
        try:
            if size is None:
                result = decode_and_crop_jpeg(encoded[index], *box, apply_exif_orientation=True,
                                              index=file_index, **options)
            else:
                result = decode_and_resized_crop_jpeg(encoded[index], *box, size,
                                                      antialias=antialias, index=file_index,
                                                      apply_exif_orientation=True, **options)
        except (JpegDecodeError, ValueError, MemoryError) as error:
            failures[index] = type(error)(f"{name}(): image {index}: {error}")
            continue
        results[index] = result.flip(-1) if flips and flips[index] else result
    if size is None:
        return results, failures
    decoded = [result for result in results if result is not None]
    _check_one_channel_count(name, options["mode"], decoded)
    if out is None:
        shape = decoded[0].shape if decoded else (3, *size)
        out = torch.empty((len(results), *shape), dtype=torch.uint8,
                          memory_format=torch.contiguous_format if options["contiguous"]
                          else torch.channels_last)
    for index, result in enumerate(results):
        if result is None:
            out[index].zero_()
        else:
            out[index].copy_(result)
    return out, failures


def _as_indexes(function: str, indexes: Optional[Sequence[Optional[JpegData]]],
                count: int) -> list[Optional[torch.Tensor]]:
    """``indexes`` as the kernel's list (a uint8 tensor or None per image, or empty for none);
    each checked as ``index=`` of the single calls is."""
    if indexes is None:
        return []
    if isinstance(indexes, (bytes, bytearray, torch.Tensor)):
        raise TypeError(f"{function}(): indexes must be a sequence of one index (or None) per "
                        f"image, got one {type(indexes).__name__}")
    checked = [as_index(function, index) for index in indexes]
    if len(checked) != count:
        raise ValueError(f"{function}(): indexes must hold one index (or None) per image "
                         f"({count}), got {len(checked)}")
    return checked


def _check_one_channel_count(function: str, mode: str, results: list[torch.Tensor]) -> None:
    """ValueError when the decoded windows, to be stacked, have different channel counts
    (mode "unchanged" over gray, colour and CMYK files)."""
    channels = sorted({result.shape[0] for result in results})
    if len(channels) > 1:
        raise ValueError(f"{function}(): mode={mode!r} gave {channels} channels for different "
                         "files, which cannot be stacked; use mode='rgb' or 'gray'")
