"""custom_op's exception, and the translation of the native operators' tagged errors.

JpegDecodeError lives in a module of its own so that it pickles by a stable
name across processes. The operators run on torch's stable ABI, where a
kernel cannot raise a Python exception: it throws a RuntimeError whose message
starts with a tag naming the Python type, ``[custom_op.ValueError]
decode_and_crop_jpeg(): ...`` (custom_op/binding/errors.h). :func:`translate`
turns such a RuntimeError back into that type with the text after the tag;
custom_op/_core/_native.py and the public operators' kernels (custom_op/_core/_ops.py)
call it, so eager calls, ``torch.ops.custom_op_jpeg.*`` and compiled graphs raise
the same types (docs/design.md, "The binding").
"""

from __future__ import annotations

import re


class JpegDecodeError(RuntimeError):
    """The bytes could not be decoded: not a JPEG, truncated, corrupt, unsupported
    (12-bit, lossless), or over a limit (max_pixels, max_scans).

    The message starts with the function's name and carries libjpeg's own text,
    e.g. ``decode_and_crop_jpeg(): Not a JPEG file: starts with 0x89 0x50``.
    """


#: The Python types a tag may name (binding/errors.h throws exactly these).
_TAGGED_TYPES = {"ValueError": ValueError, "TypeError": TypeError, "MemoryError": MemoryError,
                 "JpegDecodeError": JpegDecodeError}
#: A tag, and the message up to the end of its line: torch may add lines after it (a C++
#: frame, "Exception raised from ...") that are not custom_op's.
_TAG = re.compile(r"\[custom_op\.(\w+)\] ([^\n]*)")


def translate(error: RuntimeError) -> BaseException:
    """The exception a native operator's RuntimeError stands for.

    Returns ``error`` itself when it carries no tag (an internal failure, a
    RuntimeError by design), else a new exception of the tagged type.
    """
    if type(error) is not RuntimeError:  # already translated, or torch's own subclass
        return error
    match = _TAG.search(str(error))
    if match is None or match.group(1) not in _TAGGED_TYPES:
        return error
    return _TAGGED_TYPES[match.group(1)](match.group(2))
