"""custom_op's registered PyTorch operators: their fake kernels, and the handles the API calls.

The native extension defines ``torch.ops.custom_op.decode_and_crop_jpeg`` and
``torch.ops.custom_op.decode_and_resized_crop_jpeg`` with ``TORCH_LIBRARY``
(custom_op/decode_and_crop_jpeg.cpp), so that ``torch.compile`` can put a
decode in a graph. This module gives them what a graph needs besides the
kernel: a fake kernel, which says the output's shape, dtype and strides
without reading the data. The C++ library names this module
(``set_python_module``), so torch asks for it if it is missing.

The output's size is the window's (or ``size``) and so is known to the
caller; only its channel count may depend on the data: 3 for "rgb", 1 for
"gray", and for "unchanged" the file's own count (1, 3 or 4), an unbacked
size in the graph. The strides follow ``contiguous``: CHW planes, or a CHW
view of HWC memory, as the kernel returns.

torch accepts a fake kernel only for an operator that exists, so they are
registered when the extension is loaded (custom_op/_loader.py calls
:func:`register_fake_kernels`); importing this module loads nothing native.
:func:`crop` and :func:`resized_crop` load the extension on first use, also
when that first use is inside ``torch.compile``.
"""

from __future__ import annotations

import sys
import threading

import torch

from ._loader import MODULE_NAME, native

#: Mode codes as the kernels take them (see _decode.MODES).
_RGB, _GRAY = 0, 1


def _empty_output(data: torch.Tensor, mode: int, height: int, width: int,
                  contiguous: bool) -> torch.Tensor:
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


def _decode_and_crop_jpeg_fake(data: torch.Tensor, crop_y: int, crop_x: int, crop_height: int,
                               crop_width: int, mode: int, strict: bool, max_pixels: int,
                               max_scans: int, seek: bool, contiguous: bool,
                               max_memory: int) -> torch.Tensor:
    return _empty_output(data, mode, crop_height, crop_width, contiguous)


def _decode_and_resized_crop_jpeg_fake(data: torch.Tensor, crop_y: int, crop_x: int,
                                       crop_height: int, crop_width: int, out_height: int,
                                       out_width: int, scale_num: int, antialias: bool,
                                       mode: int, strict: bool, max_pixels: int, max_scans: int,
                                       seek: bool, contiguous: bool,
                                       max_memory: int) -> torch.Tensor:
    return _empty_output(data, mode, out_height, out_width, contiguous)


_registered = False
_register_lock = threading.Lock()


def register_fake_kernels() -> None:
    """Registers the fake kernels, once; the extension must be loaded (its operators exist)."""
    global _registered
    with _register_lock:
        if _registered:
            return
        torch.library.register_fake("custom_op::decode_and_crop_jpeg",
                                    _decode_and_crop_jpeg_fake)
        torch.library.register_fake("custom_op::decode_and_resized_crop_jpeg",
                                    _decode_and_resized_crop_jpeg_fake)
        _registered = True


def _loaded() -> bool:
    """Loads the extension (which defines the operators and registers their fakes) if needed.

    A constant to torch.compile: when the first decode of a process is inside
    a compiled function, Dynamo runs this once while tracing (loading is no
    part of a graph), then finds the operators under torch.ops.
    """
    if MODULE_NAME not in sys.modules:
        native.build_key  # noqa: B018 - the attribute access loads custom_op._C
    return True


# What torch.compiler.assume_constant_result(_loaded) does, without its import of torch._dynamo,
# which would add 3 s to `import custom_op` (Dynamo is imported when something compiles, and
# reads the mark then). tests/test_compile.py checks both: a first decode inside a compiled
# function works, and importing and decoding leave torch._dynamo unimported.
_loaded._dynamo_marked_constant = True  # type: ignore[attr-defined]


def crop() -> torch._ops.OpOverload:
    """``torch.ops.custom_op.decode_and_crop_jpeg.default``, the extension loaded."""
    _loaded()
    return torch.ops.custom_op.decode_and_crop_jpeg.default


def resized_crop() -> torch._ops.OpOverload:
    """``torch.ops.custom_op.decode_and_resized_crop_jpeg.default``, the extension loaded."""
    _loaded()
    return torch.ops.custom_op.decode_and_resized_crop_jpeg.default
