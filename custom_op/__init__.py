"""custom_op: decode only the part of a JPEG that a training pipeline keeps.

``import custom_op`` loads nothing native: the first call that decodes loads
the extension, building it first if this environment has none (see
custom_op/_loader.py and docs/install.md).
"""

from ._errors import JpegDecodeError
from ._loader import native as _C
from ._decode import (
    decode_and_crop_jpeg,
    decode_and_crop_jpeg_batch,
    decode_and_resized_crop_jpeg,
    jpeg_size,
    libjpeg_version,
)
from ._prepare import prepare_jpeg, seekable
from . import transforms
from .datasets import JpegFolder

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
