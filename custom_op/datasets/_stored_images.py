"""A stored image, as the sources hold it, turned into what v2 transforms crop.

Hugging Face's ``Image(decode=False)`` rows, Ray Data's ``read_parquet`` of them and
``read_binary_files``, MDS and LitData columns, tar members: each holds an image as its encoded
bytes, or as a ``{"bytes", "path"}`` dict whose bytes may be missing (then read from the path).
:func:`stored_image` makes an EncodedJpeg of a JPEG (nothing decoded) and decodes any other
format in full; :func:`stored_lane_sample` wraps the result as the batch lane's sample. Every
source goes through here, so they all refuse the same values with the same errors.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Union

from torchvision import tv_tensors

from .._core._errors import JpegDecodeError
from .._core._regular_files import read_row_path
from .._decode._options import DecodeOptions
from .._decode._single import JPEG_SIGNATURE
from .._index._jpeg_index import as_index
from .._torchvision._encoded_jpeg import EncodedJpeg
from ._lane_sample import LaneSample
from ._loading import _decode_with_pillow, _decode_with_torchvision, _how_it_starts

#: How an image is stored: the Image feature's {"bytes", "path"} dict, or bare bytes.
StoredImage = Union[Mapping[str, Any], bytes, bytearray, memoryview]


def stored_bytes(value: StoredImage, source: Optional[str], max_memory: int,
                 function: str = "hf_image") -> tuple[bytearray, str]:
    """The encoded bytes of a stored image and the name its errors carry."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytearray(value), source or "<image bytes>"
    if value is None:  # bad data like a damaged file, so that on_error="substitute" covers it
        raise JpegDecodeError(f"{source or '<image>'}: the row has no image (null)")
    if not isinstance(value, Mapping) or not {"bytes", "path"} & set(value):
        hint = " (a decoded image: cast the column to Image(decode=False))" if hasattr(
            value, "getpixel") else ""
        raise TypeError(f"{function}(): expected the {{'bytes', 'path'}} dict of an "
                        f"Image(decode=False) column, or bytes; got {type(value).__name__}{hint}")
    path = value.get("path")
    name = source or path or "<image bytes>"
    data = value.get("bytes")
    if data is None:
        # A dataset built from local files, not yet embedded (to_parquet keeps only the path).
        if not path:
            raise JpegDecodeError(f"{name}: the row's image has neither bytes nor a path")
        data = read_row_path(path, max_memory, name)  # never a FIFO or /dev/zero
    # One copy either way (EncodedJpeg copies read-only bytes); a bytearray is then shared.
    return bytearray(data), name


def stored_image(value: StoredImage, options: DecodeOptions, *, source: Optional[str] = None,
                 index: Any = None, function: str = "hf_image") -> Union[EncodedJpeg, tv_tensors.Image]:
    """hf_image's work for any source: see :func:`custom_op.datasets.hf_image`."""
    # Checked as the decoders check their index=, before anything is read, so that what
    # they take is taken here and nothing else is turned into bytes.
    checked = _checked_index(function, index)
    raw, name = stored_bytes(value, source, options.max_memory, function)
    if raw.startswith(JPEG_SIGNATURE):
        image = EncodedJpeg.with_options(raw, options, source=name)
        image.index_key = checked
        return image
    return _decode_other_format(raw, name, options.mode)


def stored_lane_sample(value: Any, options: DecodeOptions, label: Any, name: str,
                       key: Any, index: Optional[bytes] = None) -> LaneSample:
    """A stored image as the lane's sample: stored_image's EncodedJpeg (with its MCU-row
    ``index``, if given) or decoded image, or, when its header cannot be read, a sample carrying
    the error for the lane's ``on_error``."""
    try:
        return LaneSample(stored_image(value, options, source=name, index=index), label, name, key=key)
    except JpegDecodeError as error:
        return LaneSample(None, label, name, error, key=key)


def _decode_other_format(raw: bytearray, source: str, mode: str) -> tv_tensors.Image:
    """A PNG (or any non-JPEG) decoded by torchvision, by Pillow for the formats it lacks."""
    image = _decode_with_torchvision(raw, mode) if raw else None
    if image is None:
        try:
            image = _decode_with_pillow(raw, source, mode)
        except ModuleNotFoundError:  # no Pillow: say what torchvision said instead
            raise JpegDecodeError(f"{source}: not a JPEG ({_how_it_starts(raw)}), and "
                                  "torchvision cannot decode it") from None
    return tv_tensors.Image(image)


def _checked_index(function: str, index: Any) -> Optional[bytes]:
    """An ``index=`` refused unless the decoders take it (custom_op._index._jpeg_index.as_index),
    as the bytes the index cache holds (None for no index)."""
    tensor = as_index(function, index)
    return None if tensor is None else tensor.numpy().tobytes()
