"""custom_op's public PyTorch operators, their kernels' error types, and their fake kernels.

``torch.ops.custom_op_jpeg.decode_and_crop_jpeg`` and
``torch.ops.custom_op_jpeg.decode_and_resized_crop_jpeg`` are defined here, when
``custom_op`` is imported (a few milliseconds, no process, nothing native
needed): so they exist right after the import, as torchvision's do, also in a
cold source checkout before the extension is built. Their CPU kernel is a
thin Python function that calls the extension's stable-ABI operator of the
same name with a leading underscore (custom_op/decode_and_crop_jpeg.cpp; its
first call loads, or in a cold checkout builds, the extension) and gives a
tagged error its Python type (custom_op/_core/_errors.py). That is why the
public operators are Python-defined: a stable-ABI kernel can only raise
RuntimeError, and a kernel of ours on the call path is the one place where
``torch.ops`` calls and compiled graphs (whose generated code calls the
operator) both pass. docs/design.md ("The binding") gives the cost.

The fake kernels give torch.compile the output's shape, dtype and strides
without reading the data, and check what the real kernels check, with the
same error types and messages, through ``torch._check_*``, which keeps
symbolic sizes symbolic (a guard on a range, never on a value): random
windows share one graph. The output's size is the window's (or the resize's)
and so is known to the caller; only its channel count may depend on the data:
3 for "rgb", 1 for "gray", and for "unchanged" the file's own count (1, 3 or
4), an unbacked size in the graph. The strides follow ``contiguous``.
"""

from __future__ import annotations

import torch

from . import _native
from ._build_config import OPERATOR_NAMESPACE

#: Mode codes as the kernels take them (see _decode.MODES).
_RGB, _GRAY = 0, 1

_CROP_SCHEMA = ("decode_and_crop_jpeg(Tensor data, SymInt crop_y, SymInt crop_x, "
                "SymInt crop_height, SymInt crop_width, int mode, bool strict, int max_pixels, "
                "int max_scans, bool seek, bool contiguous, int max_memory, Tensor? index=None) -> Tensor")
_RESIZED_SCHEMA = ("decode_and_resized_crop_jpeg(Tensor data, SymInt crop_y, SymInt crop_x, "
                   "SymInt crop_height, SymInt crop_width, SymInt out_height, SymInt out_width, "
                   "int scale_num, bool antialias, int mode, bool strict, int max_pixels, "
                   "int max_scans, bool seek, bool contiguous, int max_memory, "
                   "Tensor? index=None) -> Tensor")


def check_data(function: str, data: torch.Tensor) -> None:
    """What the kernels check of the encoded bytes (binding/stable_tensors.h, span_of_tensor)."""
    torch._check_type(data.dtype == torch.uint8, lambda: f"{function}(): data must be a uint8 tensor")
    torch._check_value(data.dim() == 1 and data.device.type == "cpu" and data.is_contiguous(),
                       lambda: f"{function}(): data must be a 1-D contiguous CPU tensor")


def check_index(function: str, index) -> None:
    """What the kernels check of an index tensor (binding/stable_tensors.h, span_of_tensor)."""
    if index is not None:
        torch._check_type(index.dtype == torch.uint8,
                          lambda: f"{function}(): index must be a uint8 tensor")
        torch._check_value(index.dim() == 1 and index.device.type == "cpu"
                           and index.is_contiguous(),
                           lambda: f"{function}(): index must be a 1-D contiguous CPU tensor")


def check_window(function: str, crop_y, crop_x, crop_height, crop_width) -> None:
    """What the kernels check of a window without the file (csrc/jpeg_decoder.h, check_window).

    The window's fit inside the image needs the file's header: only the real
    kernel checks that (ValueError at run time, naming the image's size).
    """
    def message() -> str:
        return (f"{function}(): crop window (crop_y={crop_y}, crop_x={crop_x}, "
                f"crop_height={crop_height}, crop_width={crop_width}) does not fit in the image")

    for value, minimum in ((crop_y, 0), (crop_x, 0), (crop_height, 1), (crop_width, 1)):
        torch._check_value(value >= minimum, message)


def _check_common(mode: int, max_pixels: int, max_scans: int, max_memory: int) -> None:
    torch._check_value(0 <= mode <= 2, lambda: (f"mode must be 0 (rgb), 1 (gray) or "
                                                f"2 (unchanged), got {mode}"))
    torch._check_value(max_pixels >= 1 and max_scans >= 1 and max_memory >= 1,
                       lambda: "max_pixels, max_scans and max_memory must be positive")


def check_resize(out_height, out_width, scale_num: int) -> None:
    """What the kernels check of a resize (decode_and_crop_jpeg.cpp, make_resize)."""
    torch._check_value(0 <= scale_num <= 8, lambda: (
        f"scale_num must be 1..8 (or 0: the rule chooses) and the output size 1..65535, got "
        f"scale_num={scale_num} and {out_height} x {out_width}"))
    for side in (out_height, out_width):
        torch._check_value(side >= 1, lambda: (
            f"scale_num must be 1..8 (or 0: the rule chooses) and the output size 1..65535, got "
            f"scale_num={scale_num} and {out_height} x {out_width}"))
        torch._check_value(side <= 65535, lambda: (
            f"scale_num must be 1..8 (or 0: the rule chooses) and the output size 1..65535, got "
            f"scale_num={scale_num} and {out_height} x {out_width}"))


def _empty_output(data: torch.Tensor, mode: int, height, width, contiguous: bool) -> torch.Tensor:
    """A fake [C, height, width] uint8 result laid out as the kernel lays it out."""
    if mode == _RGB:
        channels = 3
    elif mode == _GRAY:
        channels = 1
    else:  # "unchanged": the file's channel count, known only after reading its header
        channels = torch.library.get_ctx().new_dynamic_size(min=1, max=4)
    if contiguous:
        return data.new_empty((channels, height, width))
    return data.new_empty((height, width, channels)).permute(2, 0, 1)


def _crop_fake(data, crop_y, crop_x, crop_height, crop_width, mode, strict, max_pixels,
               max_scans, seek, contiguous, max_memory, index=None):
    function = "decode_and_crop_jpeg"
    check_data(function, data)
    check_index(function, index)
    check_window(function, crop_y, crop_x, crop_height, crop_width)
    _check_common(mode, max_pixels, max_scans, max_memory)
    return _empty_output(data, mode, crop_height, crop_width, contiguous)


def _resized_crop_fake(data, crop_y, crop_x, crop_height, crop_width, out_height, out_width,
                       scale_num, antialias, mode, strict, max_pixels, max_scans, seek,
                       contiguous, max_memory, index=None):
    function = "decode_and_resized_crop_jpeg"
    check_data(function, data)
    check_index(function, index)
    check_window(function, crop_y, crop_x, crop_height, crop_width)
    check_resize(out_height, out_width, scale_num)
    _check_common(mode, max_pixels, max_scans, max_memory)
    return _empty_output(data, mode, out_height, out_width, contiguous)


def _crop_kernel(data, crop_y, crop_x, crop_height, crop_width, mode, strict, max_pixels,
                 max_scans, seek, contiguous, max_memory, index=None):
    return _native.decode_and_crop_jpeg(data, crop_y, crop_x, crop_height, crop_width, mode,
                                        strict, max_pixels, max_scans, seek, True, contiguous,
                                        max_memory, index)


def _resized_crop_kernel(data, crop_y, crop_x, crop_height, crop_width, out_height, out_width,
                         scale_num, antialias, mode, strict, max_pixels, max_scans, seek,
                         contiguous, max_memory, index=None):
    return _native.decode_and_resized_crop_jpeg(data, crop_y, crop_x, crop_height, crop_width,
                                                out_height, out_width, scale_num, antialias,
                                                mode, strict, max_pixels, max_scans, seek,
                                                contiguous, max_memory, index)


def _define() -> torch.library.Library:
    """Defines the public operators with their CPU and fake kernels (once: at import)."""
    library = torch.library.Library(OPERATOR_NAMESPACE, "FRAGMENT")
    for schema, kernel, fake in ((_CROP_SCHEMA, _crop_kernel, _crop_fake),
                                 (_RESIZED_SCHEMA, _resized_crop_kernel, _resized_crop_fake)):
        name = schema.split("(", 1)[0]
        library.define(schema)
        library.impl(name, kernel, "CPU")
        torch.library.register_fake(f"{OPERATOR_NAMESPACE}::{name}", fake, lib=library)
    return library


#: Kept alive for the process: dropping it would unregister the operators.
_LIBRARY = _define()
#: The public operators' handles, as the decode functions call them.
CROP = getattr(torch.ops, OPERATOR_NAMESPACE).decode_and_crop_jpeg.default
RESIZED_CROP = getattr(torch.ops, OPERATOR_NAMESPACE).decode_and_resized_crop_jpeg.default


def crop() -> torch._ops.OpOverload:
    """``torch.ops.custom_op_jpeg.decode_and_crop_jpeg.default``."""
    return CROP


def resized_crop() -> torch._ops.OpOverload:
    """``torch.ops.custom_op_jpeg.decode_and_resized_crop_jpeg.default``."""
    return RESIZED_CROP
