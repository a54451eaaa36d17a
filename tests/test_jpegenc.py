"""Checks that tests/jpegenc.py really writes the JPEG variants it claims to.

Each file is decoded by Pillow and its markers are parsed, so a test of the
crop decoder that uses these files exercises what its id says it does.
"""

from __future__ import annotations

import io
import math

import jpegenc
import numpy as np
import pytest
from PIL import Image

_SOF_MARKERS = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_STANDALONE = {0x01, *range(0xD0, 0xDA)}  # TEM, RST0..7, SOI, EOI: no length field
_RST = range(0xD0, 0xD8)
_SHORT = {s: s.replace(":", "") for s in jpegenc.SAMPLINGS}  # "4:2:0" -> "420" for test ids
_MODES = {  # id -> encode() options
    "base": {},
    "opt": {"optimize": True},
    "prog": {"progressive": True},
    "arith": {"arithmetic": True},
    "arithprog": {"arithmetic": True, "progressive": True},
}
_RESTARTS = {"norst": {}, "rst3": {"restart_interval": 3}, "rstrow": {"restart_rows": 1}}


def _markers(data: bytes) -> list[tuple[int, bytes]]:
    """Every marker with its segment payload, skipping entropy-coded data.

    Segments are skipped by their length, and in entropy-coded data 0xFF is
    always followed by 0x00 (stuffing), 0xFF (fill) or a marker.
    """
    found, pos = [], 0
    while pos + 1 < len(data):
        if data[pos] != 0xFF or data[pos + 1] in (0x00, 0xFF):
            pos += 1
            continue
        marker = data[pos + 1]
        if marker in _STANDALONE:
            found.append((marker, b""))
            pos += 2
            continue
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        found.append((marker, data[pos + 4 : pos + 2 + length]))
        pos += 2 + length
    return found


def _frame(data: bytes) -> dict:
    """SOF type, size and per-component (h, v) factors of a JPEG."""
    marker, payload = next((m, p) for m, p in _markers(data) if m in _SOF_MARKERS)
    count = payload[5]
    factors = [(payload[7 + 3 * i] >> 4, payload[7 + 3 * i] & 15) for i in range(count)]
    return {
        "sof": marker,
        "height": int.from_bytes(payload[1:3], "big"),
        "width": int.from_bytes(payload[3:5], "big"),
        "factors": factors,
    }


def _restart_count(data: bytes) -> int:
    return sum(marker in _RST for marker, _ in _markers(data))


def _adobe_transform(data: bytes) -> int | None:
    """Transform flag of the APP14 Adobe segment, or None without one."""
    for marker, payload in _markers(data):
        if marker == 0xEE and payload.startswith(b"Adobe"):
            return payload[11]
    return None


def _expected_restarts(frame: dict, interval: int, rows: int) -> int:
    """RST markers in a single-scan (sequential) file: one between intervals."""
    h_max = max(h for h, _ in frame["factors"])
    v_max = max(v for _, v in frame["factors"])
    if len(frame["factors"]) == 1:  # a lone component is not interleaved: 8x8 MCUs
        h_max = v_max = 1
    per_row = math.ceil(frame["width"] / (8 * h_max))
    mcus = per_row * math.ceil(frame["height"] / (8 * v_max))
    interval = rows * per_row if rows else interval
    return math.ceil(mcus / interval) - 1 if interval else 0


# (progressive, arithmetic) -> SOF marker: baseline, progressive, SOF9, SOF10.
_EXPECTED_SOF = {(False, False): 0xC0, (True, False): 0xC2, (False, True): 0xC9, (True, True): 0xCA}


def _pixels(height: int, width: int, channels: int, seed: int = 0) -> np.ndarray:
    """Smooth colour ramps plus noise: detail in every channel, any size."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    ramps = np.stack([(x * 7 + y * 3 + 40 * c) % 256 for c in range(channels)], axis=-1)
    noisy = ramps + rng.integers(-20, 21, ramps.shape)
    return np.clip(noisy, 0, 255).astype(np.uint8).squeeze(-1 if channels == 1 else ())


def _decode(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    # Pillow feeds libjpeg 64 KiB at a time, and libjpeg's arithmetic decoder
    # cannot suspend for more input ("broken data stream"): feed it whole.
    image.decodermaxblock = max(image.decodermaxblock, len(data))
    image.load()  # forces the full decode, not just the header
    return image


def _sampling_cases() -> list:
    return [
        pytest.param(sampling, mode, restart, id=f"{_SHORT[sampling]}-{mode}-{restart}")
        for sampling in jpegenc.SAMPLINGS
        for mode in _MODES
        for restart in _RESTARTS
    ]


@pytest.mark.parametrize(("sampling", "mode", "restart"), _sampling_cases())
def test_ycbcr_and_gray_variants(sampling: str, mode: str, restart: str) -> None:
    options = {**_MODES[mode], **_RESTARTS[restart]}
    data = jpegenc.encode(_pixels(53, 67, 3), sampling=sampling, **options)
    image, frame = _decode(data), _frame(data)
    assert (image.mode, image.size) == ("L" if sampling == "gray" else "RGB", (67, 53))
    assert frame["sof"] == _EXPECTED_SOF[mode.endswith("prog"), mode.startswith("arith")]
    if sampling == "gray":
        assert frame["factors"] == [(1, 1)]
    else:
        assert frame["factors"] == [jpegenc.SAMPLING_FACTORS[sampling], (1, 1), (1, 1)]
    restarts = _restart_count(data)
    if restart == "norst":
        assert restarts == 0
    elif mode.endswith("prog"):  # several scans with differing MCU counts
        assert restarts > 0
    else:
        interval, rows = options.get("restart_interval", 0), options.get("restart_rows", 0)
        assert restarts == _expected_restarts(frame, interval, rows) > 0


_FOUR_CHANNEL = [
    pytest.param(space, sampling, mode, id=f"{space}-{_SHORT[sampling]}-{mode}")
    for space in ("cmyk", "ycck")
    for sampling in ("4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1")
    for mode in ("base", "prog", "arith")
]


@pytest.mark.parametrize(("colorspace", "sampling", "mode"), _FOUR_CHANNEL)
def test_cmyk_and_ycck(colorspace: str, sampling: str, mode: str) -> None:
    options = {"sampling": sampling, "colorspace": colorspace, "restart_interval": 2}
    data = jpegenc.encode(_pixels(41, 59, 4), **options, **_MODES[mode])
    image, frame = _decode(data), _frame(data)
    assert (image.mode, image.size) == ("CMYK", (59, 41))
    factors = jpegenc.SAMPLING_FACTORS[sampling]
    assert frame["factors"] == [factors, (1, 1), (1, 1), factors]  # K follows component 0
    assert _adobe_transform(data) == (2 if colorspace == "ycck" else 0)
    assert _restart_count(data) > 0


@pytest.mark.parametrize("sampling", ["4:4:4", "4:2:0", "4:1:1"], ids=["444", "420", "411"])
def test_rgb_colorspace(sampling: str) -> None:
    data = jpegenc.encode(_pixels(30, 45, 3), sampling=sampling, colorspace="rgb")
    image, frame = _decode(data), _frame(data)
    assert (image.mode, image.size) == ("RGB", (45, 30))
    assert _adobe_transform(data) == 0  # tells decoders not to apply YCbCr->RGB
    assert frame["factors"][0] == jpegenc.SAMPLING_FACTORS[sampling]


_ODD_SIZES = [(1, 1), (7, 13), (257, 256)]
_ODD_SAMPLINGS = ["4:4:4", "4:2:0", "4:4:0", "4:1:1", "gray"]


@pytest.mark.parametrize("size", _ODD_SIZES, ids=[f"{h}x{w}" for h, w in _ODD_SIZES])
@pytest.mark.parametrize("sampling", _ODD_SAMPLINGS, ids=[_SHORT[s] for s in _ODD_SAMPLINGS])
@pytest.mark.parametrize("mode", ["base", "prog", "arith"])
def test_odd_sizes(size: tuple[int, int], sampling: str, mode: str) -> None:
    height, width = size
    pixels = _pixels(height, width, 3)
    data = jpegenc.encode(pixels, sampling=sampling, restart_interval=1, **_MODES[mode])
    frame = _frame(data)
    assert _decode(data).size == (width, height)
    assert (frame["height"], frame["width"]) == size


def test_gray_input() -> None:
    data = jpegenc.encode(_pixels(20, 30, 1))
    assert _decode(data).mode == "L"
    assert _frame(data)["factors"] == [(1, 1)]


@pytest.mark.parametrize(
    ("channels", "colorspace", "tolerance"),
    [(3, "ycbcr", 1.0), (3, "rgb", 0.5), (1, "gray", 0.5), (4, "cmyk", 0.5), (4, "ycck", 1.0)],
    ids=["ycbcr", "rgb", "gray", "cmyk", "ycck"],
)
def test_pixels_survive(channels: int, colorspace: str, tolerance: float) -> None:
    """At 4:4:4 and quality 100 the decoded image matches: no stride mix-ups."""
    pixels = _pixels(33, 50, channels)
    data = jpegenc.encode(pixels, sampling="4:4:4", quality=100, colorspace=colorspace)
    decoded = np.asarray(_decode(data)).astype(int)
    expected = 255 - pixels.astype(int) if channels == 4 else pixels  # Adobe CMYK is inverted
    assert np.abs(decoded - expected).mean() < tolerance


def test_deterministic() -> None:
    pixels = _pixels(40, 40, 3)
    assert jpegenc.encode(pixels, progressive=True) == jpegenc.encode(pixels, progressive=True)


def test_argument_errors() -> None:
    pixels = _pixels(16, 16, 3)
    with pytest.raises(ValueError, match="sampling"):
        jpegenc.encode(pixels, sampling="4:1:0")
    with pytest.raises(ValueError, match="colorspace"):
        jpegenc.encode(pixels, colorspace="cmyk")
    with pytest.raises(TypeError):
        jpegenc.encode(pixels.astype(np.float32))
    with pytest.raises(ValueError):
        jpegenc.encode(pixels[:, :, :2])
    with pytest.raises(ValueError, match="arithmetic"):
        jpegenc.encode(pixels, arithmetic=True, optimize=True)


def test_libjpeg_error_is_raised_and_recovered() -> None:
    """A libjpeg error (4x4 luma makes 18 blocks per MCU, over 10) raises and
    leaves the encoder usable: the setjmp path cleaned up after itself."""
    pixels = _pixels(16, 16, 3)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="libjpeg"):
            jpegenc._call_encoder(pixels, "rgb", "ycbcr", [4, 1, 1], [4, 1, 1])
    assert _decode(jpegenc.encode(pixels)).size == (16, 16)


@pytest.mark.parametrize("arithmetic", [False, True], ids=["huff", "arith"])
def test_output_buffer_growth(arithmetic: bool) -> None:
    """Noise at quality 100 needs several doublings of the 64 KiB output buffer."""
    pixels = np.random.default_rng(1).integers(0, 256, (384, 512, 3), dtype=np.uint8)
    data = jpegenc.encode(pixels, sampling="4:4:4", quality=100, arithmetic=arithmetic)
    assert len(data) > 4 * 65536
    decoded = np.asarray(_decode(data)).astype(int)
    assert np.abs(decoded - pixels).mean() < 3.0
