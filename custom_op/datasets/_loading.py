"""Reading one image file for custom_op's datasets: a JPEG stays encoded, anything else is decoded.

A JPEG (by content: it starts with FF D8 FF, whatever its name) becomes an
:class:`custom_op.EncodedJpeg` that names its file in decode errors, so that a
crop later decodes only its window. Anything else (ImageNet's train set holds
a PNG named .JPEG; folders hold .png or .bmp files) is decoded in full with
Pillow, as torchvision's ImageFolder loader decodes it, into a
``tv_tensors.Image`` with the channels the decode options' mode gives; with
torchvision.io when Pillow is missing. Such files never stop an epoch: the same
transforms crop them.
"""

from __future__ import annotations

import importlib.util
import io
import os
import warnings
from typing import Optional, Sequence, Union

import numpy as np
import torch
from torchvision import tv_tensors

from .._core import _native
from .._decode._single import JPEG_SIGNATURE
from .._index._cache import IndexKey
from .._index._sidecar import sidecar_of_folder
from .._torchvision._encoded_jpeg import DecodeOptions, EncodedJpeg
from .._core._errors import JpegDecodeError

#: Pillow's mode for each decode mode: "unchanged" gives RGB, as ImageFolder does.
_PILLOW_MODES = {"rgb": "RGB", "gray": "L", "unchanged": "RGB"}


def _how_it_starts(raw: bytearray) -> str:
    """The file's first bytes, for a message about a file that is not a JPEG."""
    return f"it starts with {bytes(raw[:4]).hex(' ')}" if raw else "the file is empty"


def _decode_with_torchvision(raw: bytearray, mode: str) -> torch.Tensor | None:
    """uint8 [C, H, W], or None when torchvision cannot read the format."""
    try:
        from torchvision.io import ImageReadMode, decode_image
    except ImportError:  # a torchvision without its (deprecated) decoders: Pillow decodes
        return None
    from torchvision.transforms.v2.functional import to_dtype

    read_mode = ImageReadMode.GRAY if mode == "gray" else ImageReadMode.RGB
    try:
        # torchvision 0.29 deprecates its decoders and warns on every call: the warning is
        # about this call of ours, so it does not reach the user (Pillow takes over when
        # torchvision.io has no decoders at all: the ImportError above returns None).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            image = decode_image(torch.frombuffer(raw, dtype=torch.uint8), mode=read_mode)
    except RuntimeError:
        return None  # e.g. BMP, PPM, TIFF, which torchvision does not decode
    if image.dim() == 4:
        image = image[0]  # an animated GIF: its first frame, as Pillow's convert("RGB") gives
    if image.dtype != torch.uint8:
        # 16-bit PNG: scaled to 8 bits (v2.ToDtype's rule), where Pillow would clip to 255.
        image = to_dtype(image, torch.uint8, scale=True)
    return image.contiguous()  # PNGs come back as a CHW view of HWC memory


def _decode_with_pillow(raw: bytearray, path: str, mode: str) -> torch.Tensor:
    """uint8 [C, H, W] through Pillow, as ImageFolder's loader decodes."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(raw)) as image:
            pixels = np.array(image.convert(_PILLOW_MODES[mode]))  # writable: from_numpy won't warn
    except Exception as error:  # Pillow raises OSError, ValueError, SyntaxError... for bad data
        raise JpegDecodeError(f"{path}: not a JPEG ({_how_it_starts(raw)}), and it could not be "
                              f"decoded as another image either: {error}") from error
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    return torch.from_numpy(pixels).permute(2, 0, 1).contiguous()


def _decode_other_format(raw: bytearray, path: str, mode: str) -> torch.Tensor:
    if importlib.util.find_spec("PIL") is not None:
        return _decode_with_pillow(raw, path, mode)  # the pixels ImageFolder's loader gives
    image = _decode_with_torchvision(raw, mode) if raw else None  # frombuffer refuses b""
    if image is None:
        raise JpegDecodeError(f"{path}: not a JPEG ({_how_it_starts(raw)}), and torchvision cannot "
                              "decode it (Pillow, which reads more formats, is not installed)")
    return image


def read_file(path: str) -> bytearray:
    """The file's bytes in a bytearray (torch.frombuffer shares a writable buffer, copies a
    read-only one), read into a buffer of the size the file has: about half the time of
    ``open(path, "rb").read()`` and a copy. A file that shrinks or grows meanwhile is read
    to its end all the same.

    Raises:
        OSError: The file cannot be read.
    """
    return _read_with_key(path)[0]


def _read_with_key(path: str) -> tuple[bytearray, IndexKey]:
    """read_file's bytes, and the file's key in the MCU-row index cache (from the same fstat)."""
    with open(path, "rb", buffering=0) as file:
        stat = os.fstat(file.fileno())
        raw = bytearray(stat.st_size)
        with memoryview(raw) as view:
            filled = 0
            while filled < len(raw):
                got = file.readinto(view[filled:])
                if not got:
                    break
                filled += got
        del raw[filled:]
        raw += file.readall()  # empty unless the file grew
    folder, name = os.path.split(path)
    return raw, IndexKey(sidecar_of_folder(folder), name, stat.st_size, stat.st_mtime_ns)


def sample_from_bytes(raw: bytearray, path: str, options: DecodeOptions = DecodeOptions(),
                      index_key: Optional[IndexKey] = None
                      ) -> Union[EncodedJpeg, tv_tensors.Image]:
    """What :func:`load_sample` makes of the bytes ``raw`` of the file ``path``; a JPEG's crops
    use the MCU-row index cache under ``index_key`` (None: no index)."""
    if raw.startswith(JPEG_SIGNATURE):
        sample = EncodedJpeg.with_options(raw, options, source=path)
        sample.index_key = index_key
        return sample
    return tv_tensors.Image(_decode_other_format(raw, path, options.mode))


def load_sample(path: str, options: DecodeOptions = DecodeOptions()
                ) -> Union[EncodedJpeg, tv_tensors.Image]:
    """Reads ``path`` into what custom_op's datasets hand their transforms.

    Args:
        path: The file.
        options: How the JPEG will be decoded (mode, strict, ...); for other
            formats only ``options.mode`` matters.

    Returns:
        An :class:`custom_op.EncodedJpeg` (its header read, nothing decoded)
        if the file is a JPEG by content, else the decoded
        ``tv_tensors.Image`` (3 channels, or 1 for ``mode="gray"``).

    Raises:
        JpegDecodeError: The JPEG's header cannot be read, or the file is not
            a JPEG and cannot be decoded; the message starts with ``path``.
        OSError: The file cannot be read.
    """
    raw, key = _read_with_key(path)
    return sample_from_bytes(raw, path, options, key)


def load_samples(paths: Sequence[str], options: DecodeOptions = DecodeOptions()
                 ) -> list[Union[EncodedJpeg, tv_tensors.Image, JpegDecodeError]]:
    """:func:`load_sample` of each path, a batch's JPEG headers read in one native call.

    What the batch lane reads a batch with: the per-file call into the
    extension cost more than the header it read. Each result is what
    ``load_sample`` returns, or the JpegDecodeError it raises (for the
    lane's ``on_error``). Non-JPEGs, files whose header fails (read again
    alone for the error that names them) and EXIF orientation (read per
    file) take load_sample's own way.

    Raises:
        OSError: A file cannot be read.
    """
    raws, keys = zip(*(_read_with_key(path) for path in paths)) if paths else ((), ())
    jpegs = [] if options.apply_exif_orientation else \
        [index for index, raw in enumerate(raws) if raw.startswith(JPEG_SIGNATURE)]
    tensors = {index: torch.frombuffer(raws[index], dtype=torch.uint8) for index in jpegs}
    headers = dict(zip(jpegs, _native.jpeg_sizes([tensors[index] for index in jpegs],
                                                 options.max_pixels)))
    samples: list[Union[EncodedJpeg, tv_tensors.Image, JpegDecodeError]] = []
    for index, (path, raw) in enumerate(zip(paths, raws)):
        header = headers.get(index)
        try:
            samples.append(sample_from_bytes(raw, path, options, keys[index]) if header is None
                           else EncodedJpeg.from_header(tensors[index], header, options,
                                                        source=path, index_key=keys[index]))
        except JpegDecodeError as error:
            samples.append(error)
    return samples
