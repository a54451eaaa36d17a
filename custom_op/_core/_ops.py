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
operator) both pass (docs/design.md, "The binding").

The fake kernels are those of the extension's operators they call
(custom_op/_core/_fakes.py): they give torch.compile the output's shape, dtype
and strides without reading the data, and check what the real kernels check,
with the same error types and messages, through ``torch._check_*``, which
keeps symbolic sizes symbolic (a guard on a range, never on a value): random
windows share one graph. The output's size is the window's (or the resize's)
and so is known to the caller; only its channel count may depend on the data:
3 for "rgb", 1 for "gray", and for "unchanged" the file's own count (1, 3 or
4), an unbacked size in the graph. The strides follow ``contiguous``.
"""

from __future__ import annotations

import torch

from . import _fakes, _native
from ._build_config import OPERATOR_NAMESPACE

_CROP_SCHEMA = ("decode_and_crop_jpeg(Tensor data, SymInt crop_y, SymInt crop_x, "
                "SymInt crop_height, SymInt crop_width, int mode, bool strict, int max_pixels, "
                "int max_scans, bool seek, bool contiguous, int max_memory, Tensor? index=None) "
                "-> Tensor")
_RESIZED_SCHEMA = ("decode_and_resized_crop_jpeg(Tensor data, SymInt crop_y, SymInt crop_x, "
                   "SymInt crop_height, SymInt crop_width, SymInt out_height, SymInt out_width, "
                   "int scale_num, bool antialias, int mode, bool strict, int max_pixels, "
                   "int max_scans, bool seek, bool contiguous, int max_memory, "
                   "Tensor? index=None) -> Tensor")


def _crop_fake(data, crop_y, crop_x, crop_height, crop_width, mode, strict, max_pixels,
               max_scans, seek, contiguous, max_memory, index=None):
    """The fake of the extension's operator this one calls, with exact edges (as the kernel)."""
    return _fakes.crop_fake(data, crop_y, crop_x, crop_height, crop_width, mode, strict,
                            max_pixels, max_scans, seek, True, contiguous, max_memory, index)


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
                                 (_RESIZED_SCHEMA, _resized_crop_kernel, _fakes.resized_crop_fake)):
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
