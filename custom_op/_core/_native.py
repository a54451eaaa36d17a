"""The native core's functions, as the rest of custom_op calls them.

The extension (custom_op/decode_and_crop_jpeg.cpp) offers operators on
torch's stable ABI, which take tensors, and a small limited-API module
(``custom_op._C``: the build key, the libjpeg-turbo version, the scale rule).
This module is the one place that bridges them to what the decode functions,
the torchvision kernels and prepare hand over:

- encoded bytes of any buffer (bytes, bytearray, memoryview, numpy) become a
  uint8 tensor over the same memory (``torch.frombuffer``, no copy; the
  memoryview stays referenced by the tensor, so a bytearray cannot be resized
  under the decode);
- a tagged RuntimeError from an operator becomes its Python type
  (custom_op/_core/_errors.py);
- results come back as the types callers expect (tuples, bytes, None).

The operators are called through ``torch.ops``, which releases the GIL while
the kernel runs (tests/test_decode.py checks that two threads decode at once).
The first call loads the extension (building it in a cold source checkout).
"""

from __future__ import annotations

import ctypes
import sys
import warnings
from typing import Optional, Sequence, Union

import torch

from . import _fakes, _loader
from ._build_config import OPERATOR_NAMESPACE
from ._errors import translate

#: The core's default max_memory (csrc/limits.h), for this module's defaults. The module's
#: DEFAULT_MAX_MEMORY and build_key attributes are the native module's own (__getattr__).
_DEFAULT_MAX_MEMORY = 256 << 20
#: What the batch operators take for an image without an MCU-row index.
_NO_INDEX = torch.empty(0, dtype=torch.uint8)

Buffer = Union[torch.Tensor, bytes, bytearray, memoryview]

with warnings.catch_warnings():
    # torch.frombuffer warns once per process that a read-only buffer (bytes) gives a tensor
    # that could write to it; the decodes only read. Spend that one warning here, silenced,
    # rather than on a user's first decode.
    warnings.simplefilter("ignore")
    torch.frombuffer(b"\xff", dtype=torch.uint8)


def _load_existing_build() -> None:
    """Loads the extension at import when a build exists (milliseconds, no process), so that its
    operators are registered; a cold checkout builds on the first decode instead, and a build
    that does not load raises its ImportError there, not in ``import custom_op``."""
    try:
        loaded = _loader.load_existing_build()
    except ImportError:
        return
    if loaded is not None:
        _fakes.register_native()


_load_existing_build()


def as_tensor(data: Buffer) -> torch.Tensor:
    """``data`` as a 1-D uint8 tensor over the same memory (tensors pass through)."""
    if isinstance(data, torch.Tensor):
        return data
    view = data if isinstance(data, memoryview) else memoryview(data)
    if view.nbytes == 0:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(view, dtype=torch.uint8)


def ops() -> torch._ops._OpNamespace:
    """``torch.ops.custom_op_jpeg`` (OPERATOR_NAMESPACE), the extension loaded (built in a cold
    checkout)."""
    module()
    return getattr(torch.ops, OPERATOR_NAMESPACE)


def module():
    """The limited-API module custom_op._C, loaded (built in a cold checkout), its operators'
    fake kernels registered."""
    loaded = sys.modules.get(_loader.MODULE_NAME) or _loader.load_extension()
    _fakes.register_native()  # once; a load by custom_op.build or check registers here too
    return loaded


def _held(value):
    """A tensor argument as a new tensor over the same storage (``detach``, about a microsecond).

    torch runs the kernel with the GIL released; meanwhile another thread may
    ``set_()`` the caller's tensor, which frees its bytes if nothing else holds
    them. The stable ABI has no handle on a storage, so the call holds this
    alias instead, made while this thread still has the GIL: its storage is
    the one the kernel reads, whatever happens to the caller's tensor.
    (``resize_()`` in place, or writing to the bytes, remains the caller's
    business, as for every PyTorch operator.)
    """
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
        return [tensor.detach() for tensor in value]
    return value


#: Argument types that reach an operator as they are: only tensors (and lists of them) are held.
_PLAIN_ARGUMENTS = frozenset({int, bool, float, str, type(None)})

#: The operators' handles by name, looked up once (a lookup on torch.ops costs a microsecond).
_overloads: dict = {}


def call(name: str, *args):
    """Calls the operator ``torch.ops.custom_op_jpeg.<name>``, its errors given their Python types."""
    operator = _overloads.get(name)
    if operator is None:
        operator = _overloads.setdefault(name, getattr(ops(), name).default)
    try:
        return operator(*[arg if type(arg) in _PLAIN_ARGUMENTS else _held(arg) for arg in args])
    except RuntimeError as error:
        raise translate(error) from None


#: The core's default max_pixels (csrc/limits.h), for the header reads' default.
_DEFAULT_MAX_PIXELS = 1 << 28


def jpeg_size(data: Buffer, max_pixels: int = _DEFAULT_MAX_PIXELS) -> tuple[int, int, int]:
    """(height, width, channels); a header over ``max_pixels`` raises JpegDecodeError."""
    return tuple(call("_jpeg_size", as_tensor(data), max_pixels))


def jpeg_sizes(datas: Sequence[Buffer], max_pixels: int = _DEFAULT_MAX_PIXELS
               ) -> list[Optional[tuple[int, int, int]]]:
    """(height, width, channels) of each file, or None where the header cannot be read or is
    over ``max_pixels``."""
    if not datas:
        return []
    flat = call("_jpeg_sizes", [as_tensor(data) for data in datas], max_pixels)
    return [None if flat[i] == 0 else (flat[i], flat[i + 1], flat[i + 2])
            for i in range(0, len(flat), 3)]


def restart_geometry(data: Buffer) -> Optional[tuple[int, int, int, int, int]]:
    """(interval, mcus_per_row, mcu_rows, mcu_height, mcu_width), or None without restarts."""
    geometry = call("_restart_geometry", as_tensor(data))
    return tuple(geometry) if geometry[0] else None


def decode_and_crop_jpeg(data: Buffer, crop_y: int, crop_x: int, crop_height: int,
                         crop_width: int, mode: int, strict: bool, max_pixels: int,
                         max_scans: int, seek: bool = True, exact_edges: bool = True,
                         contiguous: bool = False,
                         max_memory: int = _DEFAULT_MAX_MEMORY,
                         index: Optional[torch.Tensor] = None) -> torch.Tensor:
    """As the operator; ``index`` is a serialized MCU-row index as a uint8 tensor, or None."""
    return call("_decode_and_crop_jpeg", as_tensor(data), crop_y, crop_x, crop_height,
                crop_width, mode, strict, max_pixels, max_scans, seek, exact_edges, contiguous,
                max_memory, index)


def decode_and_resized_crop_jpeg(data: Buffer, crop_y: int, crop_x: int, crop_height: int,
                                 crop_width: int, out_height: int, out_width: int,
                                 scale_num: int, antialias: bool, mode: int, strict: bool,
                                 max_pixels: int, max_scans: int, seek: bool = True,
                                 contiguous: bool = False,
                                 max_memory: int = _DEFAULT_MAX_MEMORY,
                                 index: Optional[torch.Tensor] = None) -> torch.Tensor:
    """As the operator; ``scale_num`` 0 lets the kernel choose by the scale rule."""
    return call("_decode_and_resized_crop_jpeg", as_tensor(data), crop_y, crop_x, crop_height,
                crop_width, out_height, out_width, scale_num, antialias, mode, strict,
                max_pixels, max_scans, seek, contiguous, max_memory, index)


def tensor_bytes(tensor: torch.Tensor, limit: Optional[int] = None) -> bytes:
    """The first ``limit`` bytes (all by default) of a uint8 CPU tensor, copied without numpy:
    the core needs torch alone, and ``Tensor.numpy()`` raises where numpy is not installed."""
    tensor = tensor.contiguous()
    size = tensor.numel() if limit is None else min(limit, tensor.numel())
    return ctypes.string_at(tensor.data_ptr(), size) if size else b""


def jpeg_index(data: Buffer) -> Optional[bytes]:
    """The serialized MCU-row index of the file, or None when it cannot be indexed."""
    index = call("_jpeg_index", as_tensor(data))
    return tensor_bytes(index) if index.numel() else None


def index_stats() -> list[int]:
    """The counts of csrc/index_stats.h, in the order of its IndexOutcome."""
    return call("_index_stats")


def decode_box_resized(data: Buffer, crop_y: int, crop_x: int, crop_height: int,
                       crop_width: int, box: Sequence[float], out_height: int, out_width: int,
                       scale_num: int, antialias: bool, mode: int, strict: bool,
                       max_pixels: int, max_scans: int, seek: bool, contiguous: bool,
                       max_memory: int) -> torch.Tensor:
    return call("_decode_box_resized", as_tensor(data), crop_y, crop_x, crop_height, crop_width,
                [float(v) for v in box], out_height, out_width, scale_num, antialias, mode,
                strict, max_pixels, max_scans, seek, contiguous, max_memory)


def decode_grid_crop(data: Buffer, grid_height: int, grid_width: int, crop_y: int, crop_x: int,
                     crop_height: int, crop_width: int, antialias: bool, mode: int, strict: bool,
                     max_pixels: int, max_scans: int, seek: bool, contiguous: bool,
                     max_memory: int) -> torch.Tensor:
    return call("_decode_grid_crop", as_tensor(data), grid_height, grid_width, crop_y, crop_x,
                crop_height, crop_width, antialias, mode, strict, max_pixels, max_scans, seek,
                contiguous, max_memory)


def decode_batch(datas: Sequence[Buffer], boxes: Sequence[int], scale_nums: Sequence[int],
                 out_height: int, out_width: int, mode: int, antialias: bool, strict: bool,
                 max_pixels: int, max_scans: int, num_threads: int, seek: bool = True,
                 out: Optional[torch.Tensor] = None, contiguous: bool = False,
                 max_memory: int = _DEFAULT_MAX_MEMORY, hflips: Sequence[int] = (),
                 errors: str = "raise", indices: Optional[Sequence[int]] = None,
                 indexes: Sequence[Optional[torch.Tensor]] = ()):
    """The batch on the extension's threads; ``scale_nums`` may hold 0 (the rule chooses);
    ``hflips`` is empty or one 0/1 per image; ``indexes`` is empty or one MCU-row index
    tensor (or None) per image.

    Returns the per-image results (slices of ``out`` when given). Every image is decoded once,
    whatever the others do: with ``errors="raise"`` the first failed image's exception is then
    raised, with ``"return"`` the result is ``(images, failures)``, ``failures`` holding None or
    the exception per image (a failed image's result is zeros). A failure names its image by
    its number in ``indices`` (default: its position in ``datas``)."""
    tensors = [as_tensor(data) for data in datas]
    if not tensors:  # no tensor for the dispatcher to dispatch on: nothing to do
        return batch_outcome([], [], errors)
    arguments = (tensors, list(boxes), list(scale_nums), out_height, out_width, mode, antialias,
                 strict, max_pixels, max_scans, num_threads, seek)
    # The operator takes an empty tensor for an image without an index (binding/batch.h).
    index_list = [_NO_INDEX if index is None else index for index in indexes]
    if out is None:
        images, codes, messages = call("_decode_batch", *arguments, contiguous, max_memory,
                                       list(hflips), index_list)
    else:
        codes, messages = call("_decode_batch_into", *arguments, out, contiguous, max_memory,
                               list(hflips), index_list)
        images = list(out.unbind(0))
    failures = batch_failures(codes, messages, range(len(tensors)) if indices is None else indices)
    return batch_outcome(images, failures, errors)


def batch_outcome(results: list, failures: Sequence[Optional[BaseException]], errors: str):
    """What a batch call gives once every image was decoded: with ``errors="return"``
    ``(results, failures)``; with ``"raise"`` the results, or the first failure raised."""
    if errors == "return":
        return results, failures
    first = next((failure for failure in failures if failure is not None), None)
    if first is not None:
        raise first
    return results


def batch_failures(codes: torch.Tensor, messages: torch.Tensor,
                   indices: Sequence[int]) -> list[Optional[BaseException]]:
    """The batch operators' outcomes (binding/batch.h) as None or an exception per image, whose
    message names the batch function and the image's number in ``indices``."""
    count = codes.numel()
    if messages.numel() == count:  # one NUL per image and no text: every image decoded
        return [None] * count
    texts = bytes(messages.tolist()).split(b"\0")[:count]
    failures: list[Optional[BaseException]] = [None] * count
    for position, text in enumerate(texts):
        if text:
            bare = translate(RuntimeError(text.decode("utf-8", "replace")))
            failures[position] = type(bare)(
                f"decode_and_crop_jpeg_batch(): image {indices[position]}: {bare}")
    return failures


def prepare_jpeg(data: Buffer, max_pixels: int, max_scans: int, segment_width: int,
                 max_memory: int = _DEFAULT_MAX_MEMORY) -> tuple[bytes, int, bool]:
    """(the prepared file's bytes, its restart interval, whether the input was progressive)."""
    prepared, interval, was_progressive = call("_prepare_jpeg", as_tensor(data), max_pixels,
                                               max_scans, segment_width, max_memory)
    return tensor_bytes(prepared), interval, bool(was_progressive)


def choose_scale(crop_height: float, crop_width: float, out_height: int, out_width: int,
                 antialias: bool) -> int:
    """The DCT scale numerator by the one rule (csrc/scale_rule.h)."""
    return module().choose_scale(float(crop_height), float(crop_width), out_height, out_width,
                                 bool(antialias))


def libjpeg_version() -> str:
    return module().libjpeg_version()


def libjpeg_crop_width_fault() -> bool:
    return module().libjpeg_crop_width_fault()


def __getattr__(name: str):
    """DEFAULT_MAX_MEMORY and build_key, read from the native module (loading it)."""
    if name in ("DEFAULT_MAX_MEMORY", "build_key"):
        return getattr(module(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _intra_op_threads_in_batch(num_threads: int) -> list[int]:
    return call("_intra_op_threads_in_batch", num_threads)
