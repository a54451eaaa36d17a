"""Hostile input: damaged, hand-patched and non-JPEG files through the Python API.

Every file here is made by the test itself from valid photo-like JPEGs
(tests/jpegenc.py over synthetic/images.py): truncations, bit flips, removed
tables, patched frame headers (zero and huge sizes, 12-bit, lossless), a
progressive file with thousands of scans, and PNG, GIF and random bytes with
and without a JPEG signature. For every file, in a mode and strictness chosen so
that every damage and every base file meets every mode and both
strictnesses, and every mode both (tests/_speeds.py), the result is a uint8
tensor of the right shape or custom_op.JpegDecodeError: never another
exception, never a crash, never slow. The C++ core test (fuzz/core_test.cc,
under ASan/UBSan in .ci/run) decodes every seed file and its truncated,
bit-flipped and half-scanned copies in every mode, strict and not, and the
fuzzer (make fuzz-short) any bytes in any mode: the exhaustive set. The fuzz
regressions below run in every mode and strictness. Files the fuzzer saved in
fuzz/regressions/ are replayed the same way, and a corrupt file decoded
10,000 times must not grow the process.
"""

from __future__ import annotations

import io
import os
import pathlib
import time
from collections.abc import Callable

import jpegenc
import numpy as np
import pytest
import torch
from PIL import Image

import _speeds
import custom_op
from synthetic import make_photo

# Every call here is timed against a hang guard: the extension is built before any is.
pytestmark = pytest.mark.usefixtures("native_extension")

MODES = ("rgb", "gray", "unchanged")
# Generous for a machine busy with other work: these files decode in about a
# millisecond, so anything near the bound means the decoder is spinning.
CALL_SECONDS = 2.0
REGRESSIONS = pathlib.Path(__file__).resolve().parents[1] / "fuzz" / "regressions"

_SOF_MARKERS = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_RST_MARKERS = range(0xD0, 0xD8)

# The valid files that damage starts from: id -> (height, width, channels, encode() options).
_BASES = {
    "b420": (72, 104, 3, {}),
    "p420": (72, 104, 3, {"progressive": True}),
    "r444": (64, 80, 3, {"sampling": "4:4:4", "restart_interval": 2}),
    "a422": (64, 80, 3, {"sampling": "4:2:2", "arithmetic": True}),
    "gray": (64, 80, 1, {}),
    "cmyk": (48, 64, 4, {"sampling": "4:4:4", "colorspace": "cmyk"}),
    "ycckp": (48, 64, 4, {"colorspace": "ycck", "progressive": True}),
}


def _pixels(height: int, width: int, channels: int, seed: int) -> np.ndarray:
    photo = make_photo(height, width, seed)
    if channels == 1:
        return np.ascontiguousarray(photo[:, :, 1])
    if channels == 4:
        return np.ascontiguousarray(np.concatenate([photo, photo[:, :, :1] // 2 + 100], axis=2))
    return photo


def _segments(data: bytes) -> list[tuple[int, int, int]]:
    """(marker, start, end) of every marker segment up to EOI.

    An SOS segment's end includes its entropy-coded data, which ends at the
    first 0xFF followed by neither a stuffed 0x00 nor a restart marker.
    """
    found, pos = [], 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xD9:
            found.append((marker, pos, pos + 2))
            break
        end = pos + 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
        if marker == 0xDA:
            while end + 1 < len(data) and not (
                data[end] == 0xFF and data[end + 1] != 0x00 and data[end + 1] not in _RST_MARKERS
            ):
                end += 1
        found.append((marker, pos, end))
        pos = end
    return found


def _first(data: bytes, markers: set[int]) -> tuple[int, int, int]:
    return next(segment for segment in _segments(data) if segment[0] in markers)


def _without(data: bytes, markers: set[int]) -> bytes:
    """`data` with every segment of the given markers cut out."""
    for marker, start, end in reversed(_segments(data)):
        if marker in markers:
            data = data[:start] + data[end:]
    return data


def _patch_sof(data: bytes, *, marker: int | None = None, precision: int | None = None,
               height: int | None = None, width: int | None = None) -> bytes:
    """Rewrites fields of the frame header: ff Cn, length(2), P, Y(2), X(2), ..."""
    _, start, _ = _first(data, _SOF_MARKERS)
    patched = bytearray(data)
    if marker is not None:
        patched[start + 1] = marker
    if precision is not None:
        patched[start + 4] = precision
    if height is not None:
        patched[start + 5:start + 7] = height.to_bytes(2, "big")
    if width is not None:
        patched[start + 7:start + 9] = width.to_bytes(2, "big")
    return bytes(patched)


def _drop_last_component(data: bytes) -> bytes:
    """Declares one component fewer in the frame and in every scan that has others.

    From three YCbCr components this is a two-component frame, which libjpeg
    reads (its colour space is "unknown") and custom_op must refuse; from one,
    a frame without components; from CMYK, RGB with the wrong data.
    """
    out = bytearray()
    dropped = None
    pos = 0
    for marker, start, end in _segments(data):
        out += data[pos:start]
        segment = bytearray(data[start:end])
        length = int.from_bytes(segment[2:4], "big")
        if marker in _SOF_MARKERS and segment[9] >= 1:
            count = segment[9]
            dropped = segment[10 + 3 * (count - 1)]
            del segment[10 + 3 * (count - 1):10 + 3 * count]
            segment[9] = count - 1
            segment[2:4] = (length - 3).to_bytes(2, "big")
        elif marker == 0xDA and dropped is not None and segment[4] > 1:
            ids = [segment[5 + 2 * i] for i in range(segment[4])]
            if dropped in ids:
                i = ids.index(dropped)
                del segment[5 + 2 * i:7 + 2 * i]
                segment[4] -= 1
                segment[2:4] = (length - 2).to_bytes(2, "big")
        out += segment
        pos = end
    return bytes(out + data[pos:])


def _duplicate(data: bytes, markers: set[int]) -> bytes:
    """`data` with the first segment of the given markers written twice."""
    _, start, end = _first(data, markers)
    return data[:end] + data[start:end] + data[end:]


def _flip(data: bytes, offset: int) -> bytes:
    patched = bytearray(data)
    patched[offset] ^= 1 << (offset % 8)
    return bytes(patched)


def _header_end(data: bytes) -> int:
    """The offset of the first scan's entropy-coded data."""
    _, start, _ = _first(data, {0xDA})
    return start + 2 + int.from_bytes(data[start + 2:start + 4], "big")


# Damage applied to every base file: id -> function of the file's bytes.
_SWEEP = [1, 2, 3, 5, 11, 21, 40, 80, 120, 160, 200, 240, 280, 330, 400, 480, 560, 640, 720, 800]
_DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "cut2": lambda d: d[:len(d) // 2],
    "cut3": lambda d: d[:len(d) // 3],
    "cut4": lambda d: d[:len(d) // 4],
    "noeoi": lambda d: d[:-2],
    # Offsets in thousandths of the file, dense where the markers are.
    **{f"sw{k}": (lambda d, k=k: d[:max(1, len(d) * k // 1000)]) for k in _SWEEP},
    **{f"hf{i}": (lambda d, i=i: _flip(d, 2 + i * (_header_end(d) - 2) // 10)) for i in range(10)},
    **{f"ef{i}": (lambda d, i=i: _flip(d, _header_end(d) + i * (len(d) - 2 - _header_end(d)) // 8))
       for i in range(8)},
    "nodht": lambda d: _without(d, {0xC4}),
    "nodqt": lambda d: _without(d, {0xDB}),
    "nosof": lambda d: _without(d, _SOF_MARKERS),
    "nosos": lambda d: _without(d, {0xDA}),
    "h0": lambda d: _patch_sof(d, height=0),
    "w0": lambda d: _patch_sof(d, width=0),
    "huge": lambda d: _patch_sof(d, height=65500, width=65500),
    "tall": lambda d: _patch_sof(d, height=65500),
    "p12": lambda d: _patch_sof(d, precision=12),
    "sof3": lambda d: _patch_sof(d, marker=0xC3),
    "lesscomp": _drop_last_component,
    "twosof": lambda d: _duplicate(d, _SOF_MARKERS),
}


def _many_scans(count: int) -> bytes:
    """A progressive file whose DC scan is repeated `count` times.

    The scan's successive approximation is patched to Al = 0, so that libjpeg
    sees each repeat as a valid first DC scan (no "inconsistent progression"
    warning) and only max_scans can stop it.
    """
    data = jpegenc.encode(_pixels(48, 64, 3, 7), progressive=True, quality=80)
    _, start, end = _first(data, {0xDA})
    scan = bytearray(data[start:end])
    header_length = int.from_bytes(scan[2:4], "big")
    assert scan[2 + header_length - 3:2 + header_length - 1] == b"\x00\x00", "not a DC scan"
    scan[2 + header_length - 1] = 0x00  # Ah = 0, Al = 0
    return data[:start] + bytes(scan) * count + b"\xff\xd9"


def _not_jpeg() -> dict[str, bytes]:
    picture = Image.fromarray(_pixels(24, 32, 3, 3))
    files = {}
    for kind in ("png", "gif", "bmp"):
        buffer = io.BytesIO()
        picture.save(buffer, format=kind.upper())
        files[kind] = buffer.getvalue()
    rng = np.random.default_rng(11)
    for i, size in enumerate((1, 7, 300, 5000)):
        files[f"rand{i}"] = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    files["ffs"] = b"\xff" * 4000
    files["zeros"] = bytes(4000)
    signed = {f"{name}+soi": b"\xff\xd8" + data for name, data in files.items()}
    return {**files, **signed, "empty": b"", "soi": b"\xff\xd8", "soieoi": b"\xff\xd8\xff\xd9"}


_OTHER_NAMES = [*_not_jpeg().keys(), "scans5k"]
HOSTILE_NAMES = [f"{base}-{damage}" for base in _BASES for damage in _DAMAGE] + _OTHER_NAMES


@pytest.fixture(scope="session")
def bases() -> dict[str, bytes]:
    return {
        name: jpegenc.encode(_pixels(height, width, channels, seed), **options)
        for seed, (name, (height, width, channels, options)) in enumerate(_BASES.items())
    }


@pytest.fixture(scope="session")
def hostile(bases: dict[str, bytes]) -> dict[str, bytes]:
    files = {f"{base}-{damage}": make(data) for base, data in bases.items()
             for damage, make in _DAMAGE.items()}
    files.update(_not_jpeg())
    files["scans5k"] = _many_scans(5000)
    return files


def _timed(function: Callable, *args, seconds: float = CALL_SECONDS, **kwargs):
    """Calls function(*args, **kwargs), failing if it returns or raises too late."""
    start = time.perf_counter()
    try:
        return function(*args, **kwargs)
    finally:
        elapsed = time.perf_counter() - start
        assert elapsed < seconds, f"{function.__name__} took {elapsed:.3f} s (bound {seconds} s)"


def _windows(height: int, width: int) -> list[tuple[int, int, int, int]]:
    """The whole image, both corners and a window in the middle."""
    return [
        (0, 0, height, width),
        (0, 0, 1, 1),
        (height - 1, width - 1, 1, 1),
        (height // 3, width // 3, height // 3 + 1, width // 3 + 1),
    ]


def _check_file(data: bytes, mode: str, strict: bool) -> None:
    """Each call gives a uint8 tensor of the right shape or JpegDecodeError."""
    try:
        height, width, channels = _timed(custom_op.jpeg_size, data)
    except custom_op.JpegDecodeError as error:
        assert str(error).startswith("jpeg_size(): "), str(error)
        if strict:
            with pytest.raises(custom_op.JpegDecodeError, match=r"^decode_and_crop_jpeg\(\): "):
                _timed(custom_op.decode_and_crop_jpeg, data, 0, 0, 1, 1, mode=mode, strict=strict)
            return
        # jpeg_size() reads headers strictly, so a lenient decode may still work.
        try:
            out = _timed(custom_op.decode_and_crop_jpeg, data, 0, 0, 1, 1, mode=mode, strict=strict)
        except custom_op.JpegDecodeError as error:
            assert str(error).startswith("decode_and_crop_jpeg(): "), str(error)
            return
        assert out.dtype == torch.uint8 and out.shape[1:] == (1, 1)
        assert out.shape[0] in {"rgb": (3,), "gray": (1,), "unchanged": (1, 3, 4)}[mode]
        return
    expected_channels = {"rgb": 3, "gray": 1, "unchanged": channels}[mode]
    for y, x, h, w in _windows(height, width):
        try:
            out = _timed(custom_op.decode_and_crop_jpeg, data, y, x, h, w, mode=mode, strict=strict)
        except custom_op.JpegDecodeError as error:
            assert str(error).startswith("decode_and_crop_jpeg(): "), str(error)
            assert len(str(error)) > len("decode_and_crop_jpeg(): "), "no message"
            continue
        assert out.dtype == torch.uint8
        assert tuple(out.shape) == (expected_channels, h, w)
        assert out.permute(1, 2, 0).is_contiguous()  # the default layout: HWC memory


#: Each hostile file with what a pairwise choice pairs its mode and strictness with.
_HOSTILE_ATTRIBUTES = {**{f"{base}-{damage}": {"base": base, "damage": damage}
                          for base in _BASES for damage in _DAMAGE},
                       **{name: {"base": "none", "damage": name} for name in _OTHER_NAMES}}


@pytest.mark.parametrize("name, mode, strict", _speeds.covering_params(
    _HOSTILE_ATTRIBUTES, {"mode": MODES, "strict": (True, False)},
    {"strict": lambda strict: "strict" if strict else "lenient"}))
def test_hostile_file(hostile: dict[str, bytes], name: str, mode: str, strict: bool) -> None:
    _check_file(hostile[name], mode, strict)


@pytest.mark.parametrize("base", list(_BASES))
def test_huge_header_fails_fast(hostile: dict[str, bytes], bases: dict[str, bytes],
                                base: str) -> None:
    """Refused at the header, at a cost that does not grow with the claim: 65500 x 65500 costs
    no more than 4 times a claim just over max_pixels (16385 x 16385, 16 times fewer pixels),
    each the fastest of five calls taken in turn, so that the machine's speed cancels out."""
    data = hostile[f"{base}-huge"]
    just_over = _patch_sof(bases[base], height=16385, width=16385)
    for function, args in ((custom_op.jpeg_size, ()), (custom_op.decode_and_crop_jpeg, (0, 0, 1, 1))):
        def refusal_seconds(file: bytes) -> float:
            start = time.perf_counter()
            with pytest.raises(custom_op.JpegDecodeError, match="max_pixels"):
                function(file, *args)
            return time.perf_counter() - start

        huge, smaller = zip(*[(refusal_seconds(data), refusal_seconds(just_over)) for _ in range(5)])
        assert min(huge) <= 4 * min(smaller), (function.__name__, min(huge), min(smaller))


_UNSUPPORTED = [(base, damage) for base in _BASES for damage in ("h0", "w0", "p12", "sof3")] + [
    (base, "lesscomp") for base in ("b420", "p420", "r444", "a422", "gray")]


@pytest.mark.parametrize(("base", "damage"), _UNSUPPORTED, ids=[f"{b}-{d}" for b, d in _UNSUPPORTED])
def test_unsupported_frame_raises(hostile: dict[str, bytes], base: str, damage: str) -> None:
    """Empty, 12-bit, lossless and two- or zero-component frames fail at the header."""
    with pytest.raises(custom_op.JpegDecodeError, match=r"^jpeg_size\(\): \S"):
        custom_op.jpeg_size(hostile[f"{base}-{damage}"])
    for strict in (True, False):
        with pytest.raises(custom_op.JpegDecodeError, match=r"^decode_and_crop_jpeg\(\): \S"):
            custom_op.decode_and_crop_jpeg(hostile[f"{base}-{damage}"], 0, 0, 1, 1, strict=strict)


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lenient"])
def test_thousands_of_scans_hit_max_scans(hostile: dict[str, bytes], strict: bool) -> None:
    data = hostile["scans5k"]
    with pytest.raises(custom_op.JpegDecodeError, match="max_scans"):
        _timed(custom_op.decode_and_crop_jpeg, data, 0, 0, 48, 64, strict=strict)
    # The same file is fine under a higher limit: the limit, not the file, failed.
    out = _timed(custom_op.decode_and_crop_jpeg, data, 0, 0, 48, 64, strict=strict, max_scans=10_000)
    assert tuple(out.shape) == (3, 48, 64)


# A baseline file with a restart marker after every MCU row (16 pixels), one
# of which is removed: libjpeg finds the next one instead, resynchronises and
# leaves MCU row _DAMAGED_ROW (rows 128-143) gray. Windows above it never read
# the damage; windows inside and below it do (rows above a window are
# entropy-decoded to be skipped).
_DAMAGED_ROW = 8
_DAMAGE_WINDOWS = {
    "above": (0, 10, 96, 60),  # ends 32 rows above, beyond upsampling's context row
    "inside": (120, 5, 30, 70),
    "below": (200, 0, 56, 96),  # starts 56 rows below, after two clean restarts
}


@pytest.fixture(scope="session")
def restart_damage() -> tuple[bytes, bytes]:
    """(clean, damaged) 256 x 96 files."""
    clean = jpegenc.encode(_pixels(256, 96, 3, 21), sampling="4:2:0", restart_rows=1)
    restarts = [pos for pos in range(_header_end(clean), len(clean) - 1)
                if clean[pos] == 0xFF and clean[pos + 1] in _RST_MARKERS]
    assert len(restarts) == 256 // 16 - 1
    cut = restarts[_DAMAGED_ROW - 1]
    return clean, clean[:cut] + clean[cut + 2:]


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lenient"])
@pytest.mark.parametrize("where", list(_DAMAGE_WINDOWS))
def test_window_around_damage(restart_damage: tuple[bytes, bytes], where: str, strict: bool) -> None:
    clean, damaged = restart_damage
    window = _DAMAGE_WINDOWS[where]
    expected = custom_op.decode_and_crop_jpeg(clean, *window)
    if where != "above" and strict:
        with pytest.raises(custom_op.JpegDecodeError, match="Corrupt JPEG data.*strict=True"):
            _timed(custom_op.decode_and_crop_jpeg, damaged, *window, strict=strict)
        return
    out = _timed(custom_op.decode_and_crop_jpeg, damaged, *window, strict=strict)
    assert out.shape == expected.shape
    if where == "inside":
        assert not torch.equal(out, expected), "the damage did not show"
    else:
        torch.testing.assert_close(out, expected, rtol=0, atol=0)


def _first_scans(data: bytes, count: int) -> bytes:
    """A progressive file ended (validly, with EOI) after its first `count` scans."""
    scans = [start for marker, start, _ in _segments(data) if marker == 0xDA]
    return data[:scans[count]] + b"\xff\xd9"


def _cut_inside_scan(data: bytes, index: int) -> bytes:
    """The file truncated halfway through the entropy-coded data of scan `index`
    (a cut inside a table segment would be an error, not a warning)."""
    marker, start, end = [segment for segment in _segments(data) if segment[0] == 0xDA][index]
    header_end = start + 2 + int.from_bytes(data[start + 2:start + 4], "big")
    return data[:(header_end + end) // 2]


# libjpeg "smooths" the blocks of a progressive file whose coefficients are
# not all known (it ended early or was truncated), estimating the missing
# low-frequency AC coefficients from the DC values of a 5 x 5 block
# neighbourhood. libjpeg-turbo 2.1's decompress_smooth_data starts that
# neighbourhood at jpeg_crop_scanline's first column as if it were the image's
# left edge, so without the two extra iMCU columns that region_for adds for
# progressive files, the first two block columns of a crop would differ from a
# full decode (found by fuzz/core_test.cc).
@pytest.mark.parametrize("case", ["first4scans-strict", "truncated-lenient"])
def test_incomplete_progressive_window_matches_whole(case: str) -> None:
    data = jpegenc.encode(_pixels(64, 96, 3, 1), progressive=True, quality=90)
    data = _first_scans(data, 4) if case.startswith("first") else _cut_inside_scan(data, 4)
    strict = case.endswith("-strict")
    whole = custom_op.decode_and_crop_jpeg(data, 0, 0, 64, 96, strict=strict)
    for y, x, h, w in [(8, 24, 16, 16), (0, 17, 64, 40), (33, 50, 20, 30)]:
        out = custom_op.decode_and_crop_jpeg(data, y, x, h, w, strict=strict)
        torch.testing.assert_close(out, whole[:, y:y + h, x:x + w], rtol=0, atol=0)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# Leaking the output tensor (22 or 74 KB here) or the decompressor (tens of
# KB) on the error path would add hundreds of MB over 10,000 calls.
_REPEATS = 10_000
_WARM_UP = 500
_RSS_GROWTH_BYTES = 4 << 20


@pytest.mark.parametrize("kind", ["corrupt", "truncated"])
def test_memory_stays_flat_on_errors(restart_damage: tuple[bytes, bytes], bases: dict[str, bytes],
                                     kind: str) -> None:
    """Fails in decode(), after the output tensor and libjpeg's buffers exist."""
    data = restart_damage[1] if kind == "corrupt" else bases["b420"][:len(bases["b420"]) // 2]
    height, width, _ = custom_op.jpeg_size(data)

    def fail_repeatedly(times: int) -> None:
        for _ in range(times):
            try:
                custom_op.decode_and_crop_jpeg(data, 0, 0, height, width)
            except custom_op.JpegDecodeError:
                continue
            pytest.fail("the damaged file decoded without an error")

    fail_repeatedly(_WARM_UP)
    before = _rss_bytes()
    fail_repeatedly(_REPEATS)
    growth = _rss_bytes() - before
    assert growth < _RSS_GROWTH_BYTES, f"RSS grew by {growth / 2**20:.1f} MiB over {_REPEATS} calls"


def _regression_files() -> list:
    files = sorted(path for path in REGRESSIONS.glob("*")
                   if path.is_file() and not path.name.startswith(".") and path.name != "README.md")
    if not files:
        return [pytest.param(None, id="none", marks=pytest.mark.skip(reason="fuzz/regressions/ is empty"))]
    return [pytest.param(path, id=path.name[:20]) for path in files]


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lenient"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", _regression_files())
def test_fuzz_regression(path: pathlib.Path, mode: str, strict: bool) -> None:
    _check_file(path.read_bytes(), mode, strict)


# ---------------------------------------------------------------- memory, overflow, errors, threads

_REPO = pathlib.Path(__file__).resolve().parents[1]
# The refusals below must not depend on how much the header claims.
MEMORY_REFUSAL_RSS_BYTES = 64 << 20


def _flat_progressive(size: int, progressive: bool = True) -> bytes:
    """A valid 4:2:0 file of size x size mid-gray pixels.

    Progressive: one DC scan whose Huffman table has a single one-bit code,
    for a difference of 0: one zero bit per block. libjpeg still needs its
    whole-image coefficient buffer (768 MiB at 16384 x 16384) for the
    file's 786 KiB. Baseline: the same with an AC table whose one code is
    end-of-block, two bits per block.
    """
    def segment(marker: int, body: bytes) -> bytes:
        return bytes([0xFF, marker]) + (len(body) + 2).to_bytes(2, "big") + body

    components = bytes([1, 0x22, 0, 2, 0x11, 0, 3, 0x11, 0])
    one_code = bytes([1] + [0] * 15) + b"\x00"  # one code of one bit, for the symbol 0
    tables = b"\x00" + one_code + (b"" if progressive else b"\x10" + one_code)
    header = (b"\xff\xd8" + segment(0xDB, b"\x00" + bytes([1] * 64))
              + segment(0xC2 if progressive else 0xC0,
                        bytes([8]) + size.to_bytes(2, "big") * 2 + bytes([3]) + components)
              + segment(0xC4, tables)
              + segment(0xDA, bytes([3, 1, 0, 2, 0, 3, 0, 0, 0 if progressive else 63, 0])))
    blocks = (size // 16) ** 2 * 6 * (1 if progressive else 2)
    data = bytearray(blocks // 8)
    if blocks % 8:
        data.append(0xFF >> (blocks % 8))  # the last bits are padding ones
    return header + bytes(data) + b"\xff\xd9"


def _run_python(code: str, timeout: float = 120) -> str:
    """Runs `code` in a fresh interpreter (for limits and crashes that must not
    touch this process); returns its stdout, failing on a non-zero exit."""
    import subprocess
    import sys
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_REPO), str(_REPO / "tests")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=_REPO)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.parametrize("progressive", [True, False])
def test_flat_file_is_valid(progressive: bool) -> None:
    data = _flat_progressive(64, progressive)
    out = custom_op.decode_and_crop_jpeg(data, 0, 0, 64, 64)  # strict: no warning
    assert torch.equal(out, torch.full((3, 64, 64), 128, dtype=torch.uint8))


_HUGE_PROGRESSIVE = ("flat16384-strict", "patched16384-lenient")


@pytest.mark.parametrize("case", _HUGE_PROGRESSIVE)
def test_huge_progressive_refused_by_max_memory_then_accepted(case: str) -> None:
    """Both 16384 x 16384 progressive cases: refused by default with the process's peak RSS
    growing by less than 64 MiB, at a cost that does not grow with the claim (no more than 4
    times the same file's refusal at 10240 x 10240, 2.6 times fewer pixels, each the fastest of
    three calls taken in turn, so that the machine's speed cancels out), then decoded
    when max_memory is raised to the value the message names (and, for the
    patched file, whose scans are seconds of work, max_scans too)."""
    out = _run_python(f"""
import re, resource, time, torch, custom_op, test_hostile, jpegenc
case = {case!r}
def made(size):
    if case.startswith("flat"):
        return test_hostile._flat_progressive(size), True
    small = jpegenc.encode(test_hostile._pixels(72, 104, 3, 1), progressive=True)
    return test_hostile._patch_sof(small, height=size, width=size), False
data, strict = made(16384)
smaller, _ = made(10240)
custom_op.decode_and_crop_jpeg(test_hostile._flat_progressive(64), 0, 0, 8, 8)  # warm
def refusal(file):
    start = time.perf_counter()
    try:
        custom_op.decode_and_crop_jpeg(file, 100, 200, 64, 64, strict=strict)
        raise SystemExit("not refused")
    except custom_op.JpegDecodeError as error:
        return time.perf_counter() - start, str(error)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
seconds, message = refusal(data)
growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak
times = [(refusal(data)[0], refusal(smaller)[0]) for _ in range(2)] + [(seconds, refusal(smaller)[0])]
seconds = min(huge for huge, _ in times) / min(less for _, less in times)
needed = int(re.search(r"a max_memory of (\\d+) or more accepts it", message).group(1))
scans = {{}}
if case.startswith("patched"):
    # Its ten scans of a 72 x 104 photo each walk 6.3 million blocks (the
    # data runs out and libjpeg goes on): seconds of work, which max_scans
    # refuses in turn, naming the value that accepts them.
    try:
        custom_op.decode_and_crop_jpeg(data, 100, 200, 64, 64, strict=strict, max_memory=needed)
        raise SystemExit("not refused by max_scans")
    except custom_op.JpegDecodeError as error:
        assert "more work than max_scans=256 allows" in str(error), str(error)
    scans = {{"max_scans": 10**6}}
crop = custom_op.decode_and_crop_jpeg(data, 100, 200, 64, 64, strict=strict, max_memory=needed,
                                      **scans)
assert crop.shape == (3, 64, 64), crop.shape
print(seconds, growth, needed, repr(message))
""")
    seconds, growth, needed, message = out.split(" ", 3)
    assert "max_memory=268435456" in message and "a max_memory of " in message
    assert "(libjpeg keeps every coefficient of a progressive or multi-scan image)" in message
    assert float(seconds) <= 4, f"refusing 16384 x 16384 took {seconds} times 10240 x 10240's"
    assert int(growth) < MEMORY_REFUSAL_RSS_BYTES
    assert int(needed) >= 768 << 20  # the coefficient buffer alone


@pytest.mark.parametrize("function", ["crop", "resized", "batch", "prepare"])
def test_max_memory_is_honoured_by_every_path(function: str) -> None:
    """A 2048 x 2048 progressive file needs about 12 MiB of coefficients;
    prepare needs them for a baseline file too."""
    data = _flat_progressive(2048, progressive=function != "prepare")
    calls = {
        "crop": lambda **kw: custom_op.decode_and_crop_jpeg(data, 0, 0, 64, 64, **kw),
        "resized": lambda **kw: custom_op.decode_and_resized_crop_jpeg(data, 0, 0, 512, 512, 64, **kw),
        "batch": lambda **kw: custom_op.decode_and_crop_jpeg_batch([data], [(0, 0, 64, 64)], size=32,
                                                                   **kw),
        "prepare": lambda **kw: custom_op.prepare_jpeg(data, **kw),
    }
    why = ("the rewrite keeps every coefficient of the file" if function == "prepare" else
           "libjpeg keeps every coefficient of a progressive or multi-scan image")
    with pytest.raises(custom_op.JpegDecodeError,
                       match=rf"\({why}\), more than max_memory=8388608; a max_memory of \d+ or more"):
        calls[function](max_memory=8 << 20)
    assert calls[function](max_memory=64 << 20) is not None
    assert calls[function]() is not None  # the default holds it


def test_resize_buffers_count_against_max_memory() -> None:
    """A baseline file needs no coefficient buffer; resizing a large window
    to a large size needs custom_op's own buffers, which are counted too."""
    data = jpegenc.encode(_pixels(512, 512, 3, 5))
    custom_op.decode_and_resized_crop_jpeg(data, 0, 0, 512, 512, 4000, max_memory=1 << 30)
    # The message does not blame coefficients a baseline file does not keep.
    with pytest.raises(custom_op.JpegDecodeError,
                       match=r"bytes of working memory, more than max_memory=16777216; a max_memory"):
        custom_op.decode_and_resized_crop_jpeg(data, 0, 0, 512, 512, 4000, max_memory=16 << 20)


@pytest.mark.parametrize("value", [0, -1, -2**63, True, 1.5])
def test_bad_max_memory(value) -> None:
    with pytest.raises((TypeError, ValueError), match="max_memory"):
        custom_op.decode_and_crop_jpeg(_flat_progressive(16), 0, 0, 1, 1, max_memory=value)


_INT64_MAX = 2**63 - 1
_INT64_MIN = -2**63
_EXTREME_WINDOWS = [(_INT64_MAX, 0, 1, 1), (0, _INT64_MAX, 1, 1), (0, 0, _INT64_MAX, 1),
                    (0, 0, 1, _INT64_MAX), (1, 1, _INT64_MAX, _INT64_MAX),
                    (_INT64_MAX, _INT64_MAX, _INT64_MAX, _INT64_MAX), (_INT64_MIN, 0, 1, 1),
                    (0, 0, _INT64_MIN, 1), (-1, -1, 2, 2), (5, 5, -3, 10), (63, 0, _INT64_MAX - 62, 1)]


@pytest.mark.parametrize("window", _EXTREME_WINDOWS)
def test_native_window_check_with_extreme_ints(window) -> None:
    """The binding's own checks (direct _C calls skip the Python ones) must
    not form sums that overflow int64."""
    data = _flat_progressive(64)
    with pytest.raises(ValueError, match="does not fit"):
        custom_op._C.decode_and_crop_jpeg(data, *window, 0, True, 1 << 28, 256)
    with pytest.raises(ValueError, match="does not fit"):
        custom_op._C.decode_and_resized_crop_jpeg(data, *window, 8, 8, 8, True, 0, True, 1 << 28, 256)
    with pytest.raises(ValueError, match="does not fit"):
        custom_op._C.decode_batch([data], list(window), [], 0, 0, 0, True, True, 1 << 28, 256, 1)


@pytest.mark.parametrize("out_height, out_width, scale_num", [
    (_INT64_MAX, 8, 8), (8, _INT64_MIN, 8), (8, 8, 2**32 + 4), (8, 8, -2**32 + 4), (8, 8, _INT64_MAX),
    (2**32 + 8, 8, 8)])
def test_native_resize_arguments_with_extreme_ints(out_height: int, out_width: int,
                                                   scale_num: int) -> None:
    data = _flat_progressive(64)
    with pytest.raises(ValueError, match="scale_num must be 1..8"):
        custom_op._C.decode_and_resized_crop_jpeg(data, 0, 0, 8, 8, out_height, out_width, scale_num,
                                                  True, 0, True, 1 << 28, 256)
    with pytest.raises(ValueError, match="scale_num must be 1..8"):
        custom_op._C.decode_batch([data], [0, 0, 8, 8], [scale_num], out_height, out_width, 0, True,
                                  True, 1 << 28, 256, 1)


@pytest.mark.parametrize("limit", [_INT64_MAX, 2**62])
def test_native_limits_and_segment_width_with_extreme_ints(limit: int) -> None:
    data = jpegenc.encode(_pixels(64, 80, 3, 2))
    out = custom_op._C.decode_and_crop_jpeg(data, 0, 0, 8, 8, 0, True, limit, limit, max_memory=limit)
    assert out.shape == (3, 8, 8)
    prepared, interval, _ = custom_op._C.prepare_jpeg(data, limit, limit, limit, max_memory=limit)
    assert interval == 5  # one segment per MCU row: the widest there is
    assert torch.equal(custom_op.decode_and_crop_jpeg(prepared, 0, 0, 64, 80),
                       custom_op.decode_and_crop_jpeg(data, 0, 0, 64, 80))
    for bad in (0, -1, _INT64_MIN):
        with pytest.raises(ValueError, match="positive"):
            custom_op._C.decode_and_crop_jpeg(data, 0, 0, 8, 8, 0, True, 1 << 28, 256, max_memory=bad)


_OUT_OF_MEMORY = """
import resource, torch, custom_op, test_hostile
data = test_hostile._flat_progressive(16384)
baseline = test_hostile._flat_progressive(16384, progressive=False)  # prepare keeps its coefficients
small = test_hostile._flat_progressive(64, progressive=False)
custom_op.decode_and_crop_jpeg(small, 0, 0, 8, 8)
custom_op.prepare_jpeg(small)
with open("/proc/self/statm") as statm:
    mapped = int(statm.read().split()[0]) * resource.getpagesize()
# Room for small allocations, not for 768 MiB of coefficients or an 805 MB output.
resource.setrlimit(resource.RLIMIT_AS, (mapped + (256 << 20), resource.RLIM_INFINITY))
calls = {
    "libjpeg": lambda: custom_op.decode_and_crop_jpeg(data, 0, 0, 64, 64, max_memory=1 << 40),
    "output": lambda: custom_op.decode_and_crop_jpeg(data, 0, 0, 16384, 16384, max_memory=1 << 40),
    "batch": lambda: custom_op.decode_and_crop_jpeg_batch([small, data], [(0, 0, 8, 8), (0, 0, 64, 64)],
                                                          size=8, max_memory=1 << 40),
    "prepare": lambda: custom_op.prepare_jpeg(baseline, max_memory=1 << 40),
}
for name, call in calls.items():
    try:
        call()
        print(name, "no-error")
    except MemoryError as error:
        print(name, "MemoryError", str(error).split("(")[0].replace(" ", "_"))
    except Exception as error:
        print(name, type(error).__name__, str(error).replace(" ", "_"))
"""


def test_allocation_failures_raise_memory_error_not_decode_error() -> None:
    """With max_memory raised past what the process may map (RLIMIT_AS), the
    allocation itself fails, in libjpeg or in ATen: that is MemoryError, so
    code that skips undecodable files does not skip good ones, and prepare
    does not call them refused."""
    results = dict(line.split(" ", 1) for line in _run_python(_OUT_OF_MEMORY).splitlines())
    assert set(results) == {"libjpeg", "output", "batch", "prepare"}
    for name, result in results.items():
        assert result.startswith("MemoryError "), f"{name}: {result}"


def test_inconsistent_stacked_output_is_reported_as_a_bug() -> None:
    """A stacked output of the wrong channel count is a state the Python layer
    never creates: the binding refuses it, saying so, and never as bad data."""
    data = jpegenc.encode(_pixels(64, 80, 3, 2))
    wrong = torch.empty((1, 1, 8, 8), dtype=torch.uint8, memory_format=torch.channels_last)
    with pytest.raises(ValueError, match="bug in custom_op"):
        custom_op._C.decode_batch([data], [0, 0, 16, 16], [8], 8, 8, 0, True, True, 1 << 28, 256, 1,
                                  True, wrong)


_SET_WHILE_DECODING = """
import threading, time, torch, custom_op, jpegenc, test_hostile
pixels = test_hostile._pixels(2048, 2048, 3, 4)
data = torch.frombuffer(bytearray(jpegenc.encode(pixels, progressive=True, quality=95)), dtype=torch.uint8)
expected = custom_op.decode_and_crop_jpeg(data.clone(), 0, 0, 2048, 2048)
result = {}
def decode():
    result["out"] = custom_op.decode_and_crop_jpeg(data, 0, 0, 2048, 2048)
for _ in range(3):
    worker = threading.Thread(target=decode)
    worker.start()
    time.sleep(0.01)
    keep = data.clone()
    data.set_(torch.empty(0, dtype=torch.uint8))  # frees the bytes unless the decode holds them
    junk = [torch.full((len(keep),), 0x55, dtype=torch.uint8) for _ in range(4)]
    worker.join()
    assert torch.equal(result["out"], expected)
    data = keep
print("ok")
"""


def test_tensor_set_while_decoding_keeps_the_bytes_alive() -> None:
    """The decode reads the tensor's bytes with the GIL released; another
    thread's set_() must not free them (the storage is held for the call)."""
    assert _run_python(_SET_WHILE_DECODING).strip() == "ok"


def test_exit_after_a_decode_error_is_clean() -> None:
    """The exception class the module keeps must not be released after the
    interpreter finalised."""
    out = _run_python("""
import custom_op
try:
    custom_op.decode_and_crop_jpeg(b"not a jpeg", 0, 0, 1, 1)
except custom_op.JpegDecodeError:
    print("raised")
""")
    assert out.strip() == "raised"


def _thread_count() -> int:
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("Threads:")).split()[1])


@pytest.mark.parametrize("num_threads", [1, 2, 4])
def test_batch_threads_run_aten_on_themselves(num_threads: int) -> None:
    """ATen sizes the OpenMP team of a parallel kernel (the resize) by the
    calling thread's setting: inside the batch it is 1 on every thread, so
    N batch threads never start N teams; outside, torch's setting is intact."""
    previous = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        seen = custom_op._C._intra_op_threads_in_batch(num_threads)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(previous)
    assert seen == [1] * len(seen)
    assert after == 4


def test_batch_threads_do_not_start_openmp_teams() -> None:
    """The same, seen from outside: with 4 torch threads and num_threads=4, at
    most the 3 extra batch threads appear while resizing. (torch 2.14's uint8
    resize starts no team for one image anyway; the check above is the one
    that fails without the bound, this one guards against kernels that do.)"""
    datas = [jpegenc.encode(_pixels(375, 500, 3, seed)) for seed in range(4)] * 16
    boxes = [(0, 0, 375, 500)] * len(datas)  # resized 1.7x: full scale, ATen's kernel
    previous = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        torch.nn.functional.interpolate(torch.rand(1, 3, 300, 300), size=(100, 100))  # start the team
        baseline, peak, running = _thread_count(), 0, True

        def watch() -> None:
            nonlocal peak
            while running:
                peak = max(peak, _thread_count())
                time.sleep(0.0005)

        import threading
        watcher = threading.Thread(target=watch)
        watcher.start()
        baseline += 1
        for _ in range(3):
            out = custom_op.decode_and_crop_jpeg_batch(datas, boxes, size=224, num_threads=4)
        running = False
        watcher.join()
    finally:
        torch.set_num_threads(previous)
    assert out.shape == (len(datas), 3, 224, 224)
    assert peak - baseline <= 3, f"{peak - baseline} threads appeared during the batch"


def test_python_and_native_default_max_memory_agree() -> None:
    from custom_op._decode._single import DEFAULT_MAX_MEMORY

    assert DEFAULT_MAX_MEMORY == custom_op._C.DEFAULT_MAX_MEMORY == 256 << 20
