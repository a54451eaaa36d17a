"""custom_op: decode only the part of a JPEG that a training pipeline keeps.

``import custom_op`` defines the operators (``torch.ops.custom_op_jpeg.*``) and
loads the native extension if this environment has a build (a few
milliseconds, no process); with none, the first call that decodes builds it
(see custom_op/_core/_loader.py and docs/install.md). The parts that need torchvision
(EncodedJpeg, the transforms, the datasets and the lane) are imported on first use too,
so the decode functions alone do not pay for importing torchvision.
"""

import importlib as _importlib

from ._core._errors import JpegDecodeError
from ._core import _native as _C
from ._decode._single import (
    decode_and_crop_jpeg,
    decode_and_resized_crop_jpeg,
    jpeg_size,
    libjpeg_version,
)
from ._decode._batch import decode_and_crop_jpeg_batch
from ._index._jpeg_index import index_stats, jpeg_index
from ._index._cache import configure_index_cache, index_cache_stats
from ._decode._prepared import prepare_jpeg, seekable

#: Public names imported on first access: {name: (module, attribute or None for the module)}.
_LAZY = {
    "EncodedJpeg": ("._torchvision", "EncodedJpeg"),
    "DecodeOptions": ("._torchvision", "DecodeOptions"),
    "JpegFolder": (".datasets", "JpegFolder"),
    "CocoJpegDetection": (".datasets", "CocoJpegDetection"),
    "transforms": (".transforms", None),
    "datasets": (".datasets", None),
    "lane": (".lane", None),
}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'custom_op' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = _importlib.import_module(module_name, __name__)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list:
    # The API only: the private submodules, _C and the helpers above stay
    # reachable by name but do not clutter dir() or tab completion.
    return sorted(__all__ + ["__version__"])


__all__ = [
    "configure_index_cache",
    "decode_and_crop_jpeg",
    "decode_and_crop_jpeg_batch",
    "decode_and_resized_crop_jpeg",
    "index_cache_stats",
    "index_stats",
    "jpeg_index",
    "jpeg_size",
    "libjpeg_version",
    "prepare_jpeg",
    "seekable",
    "JpegDecodeError",
    "EncodedJpeg",
    "DecodeOptions",
    "JpegFolder",
    "CocoJpegDetection",
    "transforms",
    "datasets",
    "lane",
]
__version__ = "0.1.0"

# Tracebacks and reprs name the exception where users import it from; pickling
# finds it there too (the native extension raises this same class).
JpegDecodeError.__module__ = __name__
