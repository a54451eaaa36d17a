"""custom_op: decode only the part of a JPEG that a training pipeline keeps.

``import custom_op`` builds the native extension the first time it runs in an
environment (see custom_op/_build.py), then loads that build on every later
import.
"""

from ._errors import JpegDecodeError
from ._build import load_extension as _load_extension

_C = _load_extension()

from ._decode import (  # noqa: E402
    decode_and_crop_jpeg,
    decode_and_crop_jpeg_batch,
    decode_and_resized_crop_jpeg,
    jpeg_size,
    libjpeg_version,
)
from ._prepare import prepare_jpeg, seekable  # noqa: E402
from . import transforms  # noqa: E402
from .datasets import JpegFolder  # noqa: E402

__all__ = [
    "decode_and_crop_jpeg",
    "decode_and_crop_jpeg_batch",
    "decode_and_resized_crop_jpeg",
    "jpeg_size",
    "libjpeg_version",
    "prepare_jpeg",
    "seekable",
    "JpegDecodeError",
    "transforms",
    "JpegFolder",
]
__version__ = "0.1.0"
