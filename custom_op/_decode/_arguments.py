"""The decode functions' argument checks: types, values and their messages, in one place.

TypeError for wrong types, ValueError for bad values, naming the value, before
any native call. A size that torch.compile made symbolic passes through as it
is (see _as_int), so the checks never fix a window's value in a graph.
"""

from __future__ import annotations

import operator
from typing import Tuple, Union

import torch

#: What ``data`` may be: the encoded file's bytes.
JpegData = Union[torch.Tensor, bytes, bytearray, memoryview, "numpy.ndarray"]  # noqa: F821

MODES = {"rgb": 0, "gray": 1, "unchanged": 2}

_INT32_MAX = 2**31 - 1
#: The mode names exactly as MODES spells them (a str's hash and compare, nothing else).
_CANONICAL_MODES = frozenset(MODES)


def mode_name(function: str, mode: Union[str, "torchvision.io.ImageReadMode"]) -> str:  # noqa: F821
    """The canonical name of ``mode``: "rgb", "gray" or "unchanged".

    Accepts the names in any case, and torchvision.io.ImageReadMode's RGB, GRAY
    and UNCHANGED (recognised by name, so that custom_op need not import
    torchvision).
    """
    if type(mode) is str and mode in _CANONICAL_MODES:  # the common case: a name as MODES spells it
        return mode
    if type(mode).__name__ == "ImageReadMode" and type(mode).__module__.startswith("torchvision"):
        if mode.name.lower() not in MODES:
            raise ValueError(f"{function}(): mode must be one of {sorted(MODES)} (any case) or "
                             f"ImageReadMode.RGB, GRAY or UNCHANGED, got {mode}")
        return mode.name.lower()
    if not isinstance(mode, str):
        raise TypeError(f"{function}(): mode must be a str, one of {sorted(MODES)}, or a "
                        f"torchvision.io.ImageReadMode, got {type(mode).__name__}")
    if mode.lower() not in MODES:
        raise ValueError(f"{function}(): mode must be one of {sorted(MODES)} (any case), "
                         f"got {mode!r}")
    return mode.lower()


def _normalize_mode(function: str, mode: Union[str, "torchvision.io.ImageReadMode"]) -> int:  # noqa: F821
    return MODES[mode_name(function, mode)]


def _as_encoded(data: JpegData, function: str) -> torch.Tensor | memoryview:
    """Checks ``data`` and returns it as a tensor or a byte memoryview, without a copy."""
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8:
            raise TypeError(f"{function}(): data must be a uint8 tensor, got dtype {data.dtype}")
        if data.dim() != 1:
            raise ValueError(f"{function}(): data must be a 1-D tensor, got shape {tuple(data.shape)}")
        if not data.is_cpu:
            raise ValueError(f"{function}(): data must be on the CPU, got device {data.device}")
        if not data.is_contiguous():
            raise ValueError(f"{function}(): data must be contiguous, got stride {data.stride()}; "
                             "call .contiguous() first")
        return data
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"{function}(): data must be a 1-D uint8 torch.Tensor, bytes, bytearray, "
                        f"memoryview or numpy array, got {type(data).__name__}") from None
    if view.format not in ("B", "b", "c") or view.itemsize != 1:
        dtype = getattr(data, "dtype", view.format)
        raise TypeError(f"{function}(): data must hold uint8 bytes, got {dtype}")
    if view.ndim != 1:
        raise ValueError(f"{function}(): data must be 1-D, got shape {view.shape}")
    if not view.c_contiguous:
        raise ValueError(f"{function}(): data must be contiguous")
    return view


def _as_int(function: str, name: str, value: int, minimum: int) -> int:
    """``value`` checked as an int >= minimum.

    An int passes as it is, and so does a size that torch.compile made
    symbolic (Dynamo presents a SymInt as an int): comparing it guards on a
    range only, where operator.index would fix its value and recompile for
    every new window. Other integer types (numpy's) go through operator.index.
    """
    if type(value) is int and minimum <= value <= _INT32_MAX:  # every call's case, checked once
        return value
    if isinstance(value, bool):
        raise TypeError(f"{function}(): {name} must be an int, got bool {value}")
    if isinstance(value, (int, torch.SymInt)):
        number = value
    else:
        try:
            number = operator.index(value)
        except TypeError:
            raise TypeError(f"{function}(): {name} must be an int, got {type(value).__name__} "
                            f"{value!r}") from None
    if number < minimum:
        raise ValueError(f"{function}(): {name} must be >= {minimum}, got {number}")
    if number > _INT32_MAX:
        raise ValueError(f"{function}(): {name}={number} is beyond any JPEG's size (at most 65535)")
    return number


def _as_window(function: str, crop_y: int, crop_x: int, crop_height: int, crop_width: int,
               *, prefix: str = "") -> tuple[int, int, int, int]:
    """Checks a window's four ints; ``prefix`` qualifies their names in messages."""
    return (_as_int(function, f"{prefix}crop_y", crop_y, 0),
            _as_int(function, f"{prefix}crop_x", crop_x, 0),
            _as_int(function, f"{prefix}crop_height", crop_height, 1),
            _as_int(function, f"{prefix}crop_width", crop_width, 1))


def _check_flags(function: str, **flags: bool) -> None:
    for flag, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{function}(): {flag} must be a bool, got {type(value).__name__}")


def _as_limit(function: str, name: str, value: int) -> int:
    if type(value) is int and 1 <= value <= 2**62:  # every call's case, checked once
        return value
    if isinstance(value, bool):
        raise TypeError(f"{function}(): {name} must be an int, got bool {value}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{function}(): {name} must be an int, got {type(value).__name__}") from None
    if number < 1 or number > 2**62:
        raise ValueError(f"{function}(): {name} must be between 1 and 2**62, got {number}")
    return number


def _as_size(function: str, size: Union[int, Tuple[int, int]]) -> tuple[int, int]:
    if isinstance(size, (int, torch.SymInt)) and not isinstance(size, bool):
        pair = (size, size)
    elif isinstance(size, (tuple, list)) and len(size) == 2:
        pair = tuple(size)
    else:
        raise TypeError(f"{function}(): size must be an int or a (height, width) pair, got {size!r}")
    height = _as_int(function, "size[0]", pair[0], 1)
    width = _as_int(function, "size[1]", pair[1], 1)
    if not isinstance(height, torch.SymInt) and not isinstance(width, torch.SymInt) \
            and max(height, width) > 65535:  # symbolic sizes: the fake kernel checks this
        raise ValueError(f"{function}(): size={size!r} is larger than 65535")
    return height, width


def _as_boxes(function: str, boxes, count: int) -> list[int]:
    """Flattens N windows (a list of 4-sequences or an N x 4 integer tensor) to 4N ints."""
    if isinstance(boxes, torch.Tensor):
        if boxes.dtype.is_floating_point or boxes.dtype == torch.bool or boxes.dim() != 2 \
                or boxes.shape[1] != 4:
            raise TypeError(f"{function}(): boxes must be an N x 4 integer tensor, got "
                            f"{boxes.dtype} of shape {tuple(boxes.shape)}")
        boxes = boxes.tolist()
    boxes = list(boxes)
    if len(boxes) != count:
        raise ValueError(f"{function}(): got {count} images but {len(boxes)} boxes")
    flat = []
    for index, box in enumerate(boxes):
        if len(box) != 4:
            raise ValueError(f"{function}(): box {index} must be (crop_y, crop_x, crop_height, "
                             f"crop_width), got {box!r}")
        flat.extend(_as_window(function, *box, prefix=f"boxes[{index}]."))
    return flat


def _check_out(function: str, out: torch.Tensor, stackable: bool, shape: tuple,
               memory_format: torch.memory_format) -> None:
    """TypeError/ValueError naming what is wrong with a caller's ``out`` buffer."""
    if not isinstance(out, torch.Tensor) or out.dtype != torch.uint8 or out.device.type != "cpu":
        raise TypeError(f"{function}(): out must be a uint8 CPU tensor, got "
                        f"{getattr(out, 'dtype', type(out).__name__)} on "
                        f"{getattr(out, 'device', '-')}")
    if not stackable:
        raise ValueError(f"{function}(): out needs size and mode 'rgb' or 'gray' (a stacked result)")
    if tuple(out.shape) != shape or not out.is_contiguous(memory_format=memory_format):
        raise ValueError(f"{function}(): out must be {list(shape)} in {memory_format}, got "
                         f"{list(out.shape)} with strides {out.stride()}")
