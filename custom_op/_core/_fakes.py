"""Fake kernels: the checks they share, and those of the extension's own operators.

The public operators' fake kernels live beside their definitions (custom_op/_core/_ops.py)
and use the checks here. The extension's operators (``torch.ops.custom_op_jpeg._*``,
registered by custom_op/decode_and_crop_jpeg.cpp) get theirs from :func:`register_native`,
so that each passes ``torch.library.opcheck`` and traces under torch.compile: the batch, the
header reads, the box and grid decodes, prepare and the thread probe. Each fake checks,
without the data, what its kernel checks without the data, with the same error types and
messages, through ``torch._check_*``, which keeps symbolic sizes symbolic (a guard on a range,
never on a value); while torch.compile traces, they leave the checks to the kernels, which
raise when the graph runs (see _check_value). What only the data decides is an unbacked size in the graph: a header's
numbers, the channel count of "unchanged", prepare's length, the batch's failure texts.

torch registers a fake kernel as a Meta kernel of an operator that must exist already, so
custom_op/_core/_native.py calls :func:`register_native` once the extension is loaded.
"""

from __future__ import annotations

import torch

from ._build_config import OPERATOR_NAMESPACE

_BATCH = "decode_and_crop_jpeg_batch"
#: The batch kernel's message for inconsistent list lengths (binding/batch.h, run_batch).
_LENGTHS = ("boxes must hold 4 numbers per image, hflips one per image or none "
            "(this is a bug in custom_op)")
#: A JPEG side is at most 65535 pixels; a channel count 1 to 4.
_MAX_SIDE = 65535
#: Mode codes as the kernels take them (see _arguments.MODES).
_RGB, _GRAY = 0, 1


def _traced() -> bool:
    """Whether torch.compile is tracing (Dynamo, and the AOT dispatch of its graph)."""
    from torch._guards import TracingContext

    return TracingContext.try_get() is not None


def _check_value(condition, message) -> None:
    """torch._check_value, except while torch.compile traces: an error raised there reaches
    the caller as Dynamo's TorchRuntimeError, not as itself. The kernel makes the same check
    when the graph runs and raises the eager type and message then."""
    if not _traced():
        torch._check_value(condition, message)


def _check_type(condition, message) -> None:
    """torch._check_type, except while torch.compile traces (see _check_value)."""
    if not _traced():
        torch._check_type(condition, message)


def check_data(function: str, data: torch.Tensor) -> None:
    """What the kernels check of the encoded bytes (binding/stable_tensors.h, span_of_tensor)."""
    _check_type(data.dtype == torch.uint8, lambda: f"{function}(): data must be a uint8 tensor")
    _check_value(data.dim() == 1 and data.device.type == "cpu" and data.is_contiguous(),
                       lambda: f"{function}(): data must be a 1-D contiguous CPU tensor")


def check_window(function: str, crop_y, crop_x, crop_height, crop_width) -> None:
    """What the kernels check of a window without the file (csrc/jpeg_decoder.h, check_window).

    The window's fit inside the image needs the file's header: only the real
    kernel checks that (ValueError at run time, naming the image's size).
    """
    def message() -> str:
        return (f"{function}(): crop window (crop_y={crop_y}, crop_x={crop_x}, "
                f"crop_height={crop_height}, crop_width={crop_width}) does not fit in the image")

    for value, minimum in ((crop_y, 0), (crop_x, 0), (crop_height, 1), (crop_width, 1)):
        _check_value(value >= minimum, message)


def check_common(mode: int, max_pixels: int, max_scans: int, max_memory: int) -> None:
    _check_value(0 <= mode <= 2, lambda: (f"mode must be 0 (rgb), 1 (gray) or "
                                                f"2 (unchanged), got {mode}"))
    _check_value(max_pixels >= 1 and max_scans >= 1 and max_memory >= 1,
                       lambda: "max_pixels, max_scans and max_memory must be positive")


def check_resize(out_height, out_width, scale_num: int) -> None:
    """What the kernels check of a resize (decode_and_crop_jpeg.cpp, make_resize)."""
    _check_value(0 <= scale_num <= 8, lambda: (
        f"scale_num must be 1..8 (or 0: the rule chooses) and the output size 1..65535, got "
        f"scale_num={scale_num} and {out_height} x {out_width}"))
    for side in (out_height, out_width):
        _check_value(side >= 1, lambda: (
            f"scale_num must be 1..8 (or 0: the rule chooses) and the output size 1..65535, got "
            f"scale_num={scale_num} and {out_height} x {out_width}"))
        _check_value(side <= 65535, lambda: (
            f"scale_num must be 1..8 (or 0: the rule chooses) and the output size 1..65535, got "
            f"scale_num={scale_num} and {out_height} x {out_width}"))


def empty_output(data: torch.Tensor, mode: int, height, width, contiguous: bool) -> torch.Tensor:
    """A fake [C, height, width] uint8 result laid out as the kernel lays it out."""
    if mode == _RGB:
        channels = 3
    elif mode == _GRAY:
        channels = 1
    else:  # "unchanged": the file's channel count, known only after reading its header
        channels = torch.library.get_ctx().new_dynamic_size(min=1, max=4)
    # While torch.compile traces, a bad side is left to the kernel (see _check_value): the
    # placeholder must still be a valid size.
    height, width = (side if isinstance(side, torch.SymInt) else max(side, 0)
                     for side in (height, width))
    if contiguous:
        return data.new_empty((channels, height, width))
    return data.new_empty((height, width, channels)).permute(2, 0, 1)


def _dynamic(minimum: int = 0, maximum=None) -> torch.SymInt:
    return torch.library.get_ctx().new_dynamic_size(min=minimum, max=maximum)


def check_index(function: str, index) -> None:
    """What the kernels check of an MCU-row index tensor (as of the data, span_of_tensor)."""
    if index is not None:
        _check_type(index.dtype == torch.uint8,
                    lambda: f"{function}(): index must be a uint8 tensor")
        _check_value(index.dim() == 1 and index.device.type == "cpu" and index.is_contiguous(),
                     lambda: f"{function}(): index must be a 1-D contiguous CPU tensor")


def crop_fake(data, crop_y, crop_x, crop_height, crop_width, mode, strict, max_pixels,
              max_scans, seek, exact_edges, contiguous, max_memory, index=None):
    function = "decode_and_crop_jpeg"
    check_data(function, data)
    check_index(function, index)
    check_window(function, crop_y, crop_x, crop_height, crop_width)
    check_common(mode, max_pixels, max_scans, max_memory)
    return empty_output(data, mode, crop_height, crop_width, contiguous)


def resized_crop_fake(data, crop_y, crop_x, crop_height, crop_width, out_height, out_width,
                       scale_num, antialias, mode, strict, max_pixels, max_scans, seek,
                       contiguous, max_memory, index=None):
    function = "decode_and_resized_crop_jpeg"
    check_data(function, data)
    check_index(function, index)
    check_window(function, crop_y, crop_x, crop_height, crop_width)
    check_resize(out_height, out_width, scale_num)
    check_common(mode, max_pixels, max_scans, max_memory)
    return empty_output(data, mode, out_height, out_width, contiguous)


def _box_resized_fake(data, crop_y, crop_x, crop_height, crop_width, box, out_height, out_width,
                      scale_num, antialias, mode, strict, max_pixels, max_scans, seek,
                      contiguous, max_memory):
    function = "decode_box_resized"
    check_data(function, data)
    check_window(function, crop_y, crop_x, crop_height, crop_width)
    check_resize(out_height, out_width, scale_num)
    _check_value(len(box) == 4 and scale_num != 8,
                       lambda: "box must hold 4 numbers and scale_num be below 8")
    check_common(mode, max_pixels, max_scans, max_memory)
    return empty_output(data, mode, out_height, out_width, contiguous)


def _grid_crop_fake(data, grid_height, grid_width, crop_y, crop_x, crop_height, crop_width,
                    antialias, mode, strict, max_pixels, max_scans, seek, contiguous, max_memory):
    function = "decode_grid_crop"
    check_data(function, data)
    check_window(function, crop_y, crop_x, crop_height, crop_width)
    check_common(mode, max_pixels, max_scans, max_memory)
    return empty_output(data, mode, crop_height, crop_width, contiguous)


def _check_batch(datas, boxes, scale_nums, out_height, out_width, mode, antialias, max_pixels,
                 max_scans, max_memory, hflips, indexes) -> None:
    """What run_batch (binding/batch.h) checks before it decodes anything."""
    count = len(datas)
    resize = out_height > 0
    _check_value(len(boxes) == 4 * count and (not resize or len(scale_nums) == count)
                 and (not hflips or len(hflips) == count)
                 and (not indexes or len(indexes) == count), lambda: _LENGTHS)
    for index in indexes or ():
        if index.numel() > 0:  # an empty tensor stands for "no index" and is not read
            check_index(_BATCH, index)
    for index, data in enumerate(datas):
        check_data(_BATCH, data)
        if resize:
            check_resize(out_height, out_width, scale_nums[index])
    check_common(mode, max_pixels, max_scans, max_memory)


def _outcomes(datas) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's codes (one per image) and messages (a length only the data decides)."""
    like = datas[0]
    return (like.new_empty((len(datas),), dtype=torch.uint8),
            like.new_empty((_dynamic(),), dtype=torch.uint8))


def _batch_fake(datas, boxes, scale_nums, out_height, out_width, mode, antialias, strict,
                max_pixels, max_scans, num_threads, seek, contiguous, max_memory, hflips,
                indexes):
    _check_batch(datas, boxes, scale_nums, out_height, out_width, mode, antialias, max_pixels,
                 max_scans, max_memory, hflips, indexes)
    images = []
    for index, data in enumerate(datas):
        height, width = (out_height, out_width) if out_height > 0 else \
            (boxes[4 * index + 2], boxes[4 * index + 3])
        images.append(empty_output(data, mode, height, width, contiguous))
    return (images, *_outcomes(datas))


def _batch_into_fake(datas, boxes, scale_nums, out_height, out_width, mode, antialias, strict,
                     max_pixels, max_scans, num_threads, seek, out, contiguous, max_memory,
                     hflips, indexes):
    _check_batch(datas, boxes, scale_nums, out_height, out_width, mode, antialias, max_pixels,
                 max_scans, max_memory, hflips, indexes)
    memory_format = torch.contiguous_format if contiguous else torch.channels_last
    _check_value(
        out.dtype == torch.uint8 and out.device.type == "cpu" and out.dim() == 4
        and out.shape[0] == len(datas) and out_height >= 1 and out.shape[2] == out_height
        and out.shape[3] == out_width and out.is_contiguous(memory_format=memory_format),
        lambda: ("out must be a uint8 N x C x size tensor in the requested memory format "
                 "(this is a bug in custom_op)"))
    return _outcomes(datas)


def _header_fake(data, max_pixels) -> list:
    check_data("jpeg_size", data)
    return [_dynamic(1, _MAX_SIDE), _dynamic(1, _MAX_SIDE), _dynamic(1, 4)]


def _headers_fake(datas, max_pixels) -> list:
    for data in datas:
        check_data("jpeg_sizes", data)
    return [_dynamic(0, maximum) for _ in datas for maximum in (_MAX_SIDE, _MAX_SIDE, 4)]


def _restart_geometry_fake(data) -> list:
    check_data("seekable", data)
    return [_dynamic() for _ in range(5)]


def _prepare_fake(data, max_pixels, max_scans, segment_width, max_memory):
    check_data("prepare_jpeg", data)
    _check_value(segment_width >= 1,
                       lambda: f"segment_width must be positive, got {segment_width}")
    check_common(0, max_pixels, max_scans, max_memory)
    return data.new_empty((_dynamic(),)), _dynamic(0, _MAX_SIDE * _MAX_SIDE), _dynamic(0, 1)


def _threads_fake(num_threads) -> list:
    return [_dynamic(1) for _ in range(max(num_threads, 1) * 4)]


def _index_fake(data) -> torch.Tensor:
    check_data("jpeg_index", data)
    return data.new_empty((_dynamic(),))


#: The outcomes csrc/index_stats.h counts, in the order of its IndexOutcome: the length of
#: _index_stats's list, and the names custom_op.index_stats() gives its counts.
INDEX_OUTCOMES = ("indexed", "unneeded", "not_indexable", "refused", "cut_failed",
                  "cut_decode_failed")


def _index_stats_fake() -> list:
    return [_dynamic() for _ in INDEX_OUTCOMES]


#: Every operator the extension registers, with its fake kernel.
FAKES = {
    "_decode_and_crop_jpeg": crop_fake,
    "_decode_and_resized_crop_jpeg": resized_crop_fake,
    "_decode_box_resized": _box_resized_fake,
    "_decode_grid_crop": _grid_crop_fake,
    "_decode_batch": _batch_fake,
    "_decode_batch_into": _batch_into_fake,
    "_jpeg_size": _header_fake,
    "_jpeg_sizes": _headers_fake,
    "_restart_geometry": _restart_geometry_fake,
    "_prepare_jpeg": _prepare_fake,
    "_intra_op_threads_in_batch": _threads_fake,
    "_jpeg_index": _index_fake,
    "_index_stats": _index_stats_fake,
}


_registered = False


def register_native() -> None:
    """Registers FAKES for the extension's operators (once; they must be loaded)."""
    global _registered, _LIBRARY
    if _registered:
        return
    _registered = True
    _LIBRARY = torch.library.Library(OPERATOR_NAMESPACE, "FRAGMENT")
    for name, fake in FAKES.items():
        torch.library.register_fake(f"{OPERATOR_NAMESPACE}::{name}", fake, lib=_LIBRARY)


#: Kept alive for the process once set: dropping it would unregister the fake kernels.
_LIBRARY = None
