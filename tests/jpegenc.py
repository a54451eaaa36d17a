"""JPEG encoder for tests that covers every variant the decoder must handle.

Pillow cannot write 4:4:0 or 4:1:1 sampling, arithmetic coding, YCCK or
restart intervals in MCU rows.  This module compiles jpegenc.c (a thin layer
over the system libjpeg) on first use and calls it through ctypes.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import pathlib
import subprocess
import tempfile

import numpy as np

_SOURCE = pathlib.Path(__file__).with_name("jpegenc.c")
_CFLAGS = ("-std=c11", "-O2", "-shared", "-fPIC")
_LIBS = ("-ljpeg",)
_JMSG_LENGTH_MAX = 200  # from jpeglib.h: size of libjpeg's formatted messages

# J_COLOR_SPACE values from jpeglib.h; jpegenc.c asserts they match.
_COLOR_SPACE_IDS = {"gray": 1, "rgb": 2, "ycbcr": 3, "cmyk": 4, "ycck": 5}
_COMPONENTS = {"gray": 1, "rgb": 3, "ycbcr": 3, "cmyk": 4, "ycck": 4}
# JPEG colour spaces libjpeg can produce from 1-, 3- and 4-channel input.
_ALLOWED_OUTPUT = {1: ("gray",), 3: ("ycbcr", "rgb", "gray"), 4: ("cmyk", "ycck")}
_INPUT_SPACE = {1: "gray", 3: "rgb", 4: "cmyk"}

# (horizontal, vertical) factors of component 0; the chroma components are 1x1.
SAMPLING_FACTORS = {
    "4:4:4": (1, 1),
    "4:2:2": (2, 1),
    "4:2:0": (2, 2),
    "4:4:0": (1, 2),
    "4:1:1": (4, 1),
    "gray": (1, 1),
}
SAMPLINGS = tuple(SAMPLING_FACTORS)
COLORSPACES = tuple(_COLOR_SPACE_IDS)


def _compiler() -> str:
    return os.environ.get("CC", "cc")


def _library_path() -> pathlib.Path:
    """Cache path keyed by the source and build command, so edits rebuild."""
    recipe = repr((_compiler(), _CFLAGS, _LIBS)).encode()
    key = hashlib.sha256(_SOURCE.read_bytes() + recipe).hexdigest()[:16]
    # Per user: a library loaded from a folder others can write would be unsafe.
    cache = pathlib.Path(tempfile.gettempdir()) / f"custom_op_jpegenc-{os.getuid()}"
    return cache / f"jpegenc-{key}.so"


def _build(path: pathlib.Path) -> None:
    """Compile jpegenc.c to `path` via a temporary file and an atomic rename.

    Parallel pytest-xdist workers may all compile; each rename is atomic, so
    none ever loads a half-written library.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    command = [_compiler(), *_CFLAGS, "-o", temporary, str(_SOURCE), *_LIBS]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
        os.replace(temporary, path)
    except subprocess.CalledProcessError as error:
        raise RuntimeError(f"building {_SOURCE.name} failed:\n{error.stderr}") from error
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


@functools.lru_cache(maxsize=None)
def _library() -> ctypes.CDLL:
    """Build (once per source version) and load the encoder library."""
    path = _library_path()
    if not path.exists():
        _build(path)
    library = ctypes.CDLL(str(path))
    c_int, int_array = ctypes.c_int, ctypes.POINTER(ctypes.c_int)
    library.jpegenc_encode.argtypes = [
        ctypes.c_void_p, *[c_int] * 5, int_array, int_array, *[c_int] * 6,
        ctypes.POINTER(ctypes.POINTER(ctypes.c_ubyte)), ctypes.POINTER(ctypes.c_ulong),
        ctypes.c_char_p,
    ]
    library.jpegenc_encode.restype = c_int
    library.jpegenc_free.argtypes = [ctypes.POINTER(ctypes.c_ubyte)]
    library.jpegenc_free.restype = None
    return library


def _as_pixels(pixels: np.ndarray) -> np.ndarray:
    """Validate and return pixels as a C-contiguous HxWxC uint8 array."""
    if pixels.dtype != np.uint8:
        raise TypeError(f"pixels must be uint8, got {pixels.dtype}")
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    if pixels.ndim != 3 or pixels.shape[2] not in _ALLOWED_OUTPUT:
        raise ValueError(f"pixels must be HxW, HxWx3 or HxWx4, got shape {pixels.shape}")
    if pixels.shape[0] == 0 or pixels.shape[1] == 0:
        raise ValueError("pixels must not be empty")
    return np.ascontiguousarray(pixels)


def _output_space(channels: int, sampling: str, colorspace: str | None) -> str:
    """JPEG colour space for the input channels, sampling and requested colorspace."""
    if colorspace is None:
        colorspace = {1: "gray", 3: "gray" if sampling == "gray" else "ycbcr", 4: "cmyk"}[channels]
    if colorspace not in _ALLOWED_OUTPUT[channels]:
        raise ValueError(f"colorspace {colorspace!r} impossible from {channels}-channel pixels")
    if sampling == "gray" and colorspace != "gray":
        raise ValueError(f"sampling 'gray' conflicts with colorspace {colorspace!r}")
    return colorspace


def _component_factors(sampling: str, colorspace: str) -> tuple[list[int], list[int]]:
    """Per-component (h, v) factors: the sampling applies to component 0.

    Component 3 (K) of CMYK/YCCK repeats component 0, as common encoders do.
    A single component has nothing to be sampled against, so it stays 1x1.
    """
    if sampling not in SAMPLING_FACTORS:
        raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
    count = _COMPONENTS[colorspace]
    h, v = SAMPLING_FACTORS[sampling] if count > 1 else (1, 1)
    horizontal, vertical = [h] + [1] * (count - 1), [v] + [1] * (count - 1)
    if count == 4:
        horizontal[3], vertical[3] = h, v
    return horizontal, vertical


def _call_encoder(
    pixels: np.ndarray,
    in_space: str,
    jpeg_space: str,
    h_samp: list[int],
    v_samp: list[int],
    *,
    quality: int = 90,
    progressive: bool = False,
    restart_interval: int = 0,
    restart_rows: int = 0,
    arithmetic: bool = False,
    optimize: bool = False,
) -> bytes:
    """Call jpegenc_encode as is; libjpeg's own errors become RuntimeError."""
    library = _library()
    height, width, channels = pixels.shape
    out, size = ctypes.POINTER(ctypes.c_ubyte)(), ctypes.c_ulong()
    errbuf = ctypes.create_string_buffer(_JMSG_LENGTH_MAX)
    status = library.jpegenc_encode(
        pixels.ctypes.data, width, height, channels,
        _COLOR_SPACE_IDS[in_space], _COLOR_SPACE_IDS[jpeg_space],
        (ctypes.c_int * len(h_samp))(*h_samp), (ctypes.c_int * len(v_samp))(*v_samp),
        quality, int(progressive), restart_interval, restart_rows, int(arithmetic), int(optimize),
        ctypes.byref(out), ctypes.byref(size), errbuf,
    )
    if status != 0:
        raise RuntimeError(f"libjpeg: {errbuf.value.decode(errors='replace')}")
    try:
        return ctypes.string_at(out, size.value)
    finally:
        library.jpegenc_free(out)


def encode(
    pixels: np.ndarray,
    *,
    sampling: str = "4:2:0",
    quality: int = 90,
    progressive: bool = False,
    restart_interval: int = 0,
    restart_rows: int = 0,
    arithmetic: bool = False,
    optimize: bool = False,
    colorspace: str | None = None,
) -> bytes:
    """Encode HxW (gray), HxWx3 (RGB) or HxWx4 (CMYK) uint8 pixels to JPEG bytes.

    sampling: one of SAMPLINGS, the factors of component 0 ("gray" makes a
        grayscale JPEG from RGB).  Ignored for single-component output.
    restart_interval: MCUs between restart markers (0: none); restart_rows,
        if non-zero, sets the interval in MCU rows instead.
    optimize: optimal Huffman tables; not allowed with arithmetic coding.
    colorspace: JPEG colour space. Default "ycbcr" for 3 channels, "cmyk" for
        4; "rgb" stores RGB untransformed (Adobe transform 0); "ycck" converts
        4-channel input to YCCK.  4-channel values are stored as given;
        Adobe-marked CMYK is conventionally inverted, so Pillow returns 255 - x.
    """
    pixels = _as_pixels(pixels)
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be in 1..100, got {quality}")
    if not (0 <= restart_interval <= 65535 and 0 <= restart_rows <= 65535):
        raise ValueError("restart_interval and restart_rows must be in 0..65535")
    if arithmetic and optimize:  # libjpeg: "Requested features are incompatible"
        raise ValueError("optimize tunes Huffman tables; arithmetic coding has none")
    jpeg_space = _output_space(pixels.shape[2], sampling, colorspace)
    h_samp, v_samp = _component_factors(sampling, jpeg_space)
    return _call_encoder(
        pixels, _INPUT_SPACE[pixels.shape[2]], jpeg_space, h_samp, v_samp,
        quality=quality, progressive=progressive, restart_interval=restart_interval,
        restart_rows=restart_rows, arithmetic=arithmetic, optimize=optimize,
    )
