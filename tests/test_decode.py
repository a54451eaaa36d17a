"""custom_op.decode_and_crop_jpeg and jpeg_size: exactness, references, inputs and errors.

The central claim is that a crop equals, bit for bit, the same window of a full
decode by the same libjpeg-turbo. The windows tested sit where crop decoders go
wrong: image edges, MCU boundaries (8, 16 and 32 pixels) and just beside them,
1 to 4 pixel wide windows, and every window of the tiny images.

Against other decoders the comparisons are exact as well (tolerance 0): Pillow
and torchvision bundle libjpeg-turbo builds of their own, and libjpeg-turbo's
islow IDCT, fancy upsampling and colour conversion give the same integers in
every version and with or without SIMD. For CMYK, custom_op converts as Pillow
does (R = C * K / 255, rounded, on the stored samples).

Which cases: the windows of every corpus file are compared in one (mode, layout) each, chosen so
that every mode meets every layout and every sampling, coding, colour space and content
(tests/_speeds.py, corpus_pairs). The C++ core test (fuzz/core_test.cc, under ASan/UBSan and
valgrind in .ci/run) decodes every file of its seed corpus in every mode, strict and not, whole
and through its windows, and checks each window against the whole decode and HWC against CHW:
the exhaustive (file, mode, layout, window) set. The other tests here take every file.
"""

from __future__ import annotations

import io
import re
import threading
import time
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch
import torchvision.io
from PIL import Image

import custom_op
from _windows import Window, chosen_windows, mismatches, report, windows_for

if TYPE_CHECKING:
    from conftest import JpegCase

MODES = ("rgb", "gray", "unchanged")
MODE_CODES = {"rgb": 0, "gray": 1, "unchanged": 2}
FOUR_CHANNEL = ("cmyk", "ycck")
_STRICT_HINT = "pass strict=False"
# Files the single-file tests use: a baseline 4:2:0 photo and a progressive 4:2:2 one.
BASELINE_420 = "420-base-q90-120x200"
PROGRESSIVE_422 = "422-prog-q60-120x200"

def pillow_open(data: bytes) -> Image.Image:
    """Opens and loads a JPEG with Pillow, also when arithmetic coded.

    Pillow's decoder buffer is 64 KiB by default, too small for an
    arithmetic-coded file that is larger, so it is widened to the file's size.
    """
    image = Image.open(io.BytesIO(data))
    image.decodermaxblock = max(image.decodermaxblock, len(data))
    image.load()
    return image


def full_decode(data, mode: str = "rgb") -> torch.Tensor:
    height, width, _ = custom_op.jpeg_size(data)
    return custom_op.decode_and_crop_jpeg(data, 0, 0, height, width, mode=mode)


def hwc(tensor: torch.Tensor) -> np.ndarray:
    """CHW tensor -> HxWxC numpy array, for comparing with Pillow."""
    return tensor.permute(1, 2, 0).numpy()


def marker_offsets(data: bytes) -> list[tuple[int, int]]:
    """(marker, offset) of every header segment, up to and including the first SOS."""
    found, pos = [], 2
    while pos + 4 <= len(data):
        assert data[pos] == 0xFF, f"no marker at offset {pos}"
        marker = data[pos + 1]
        found.append((marker, pos))
        if marker == 0xDA:
            break
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    return found


# ---------------------------------------------------------------- exactness


@pytest.mark.corpus_pairs(mode=MODES, contiguous=(False, True))
def test_crop_equals_window_of_full_decode(corpus_case: JpegCase, mode: str,
                                           contiguous: bool) -> None:
    # The reference is the default layout's full decode, so the contiguous
    # windows also show that both layouts hold the same pixels.
    data = corpus_case.data
    full = full_decode(data, mode)
    windows = windows_for(corpus_case.id, corpus_case.height, corpus_case.width)

    def decode(data, y, x, h, w):
        return custom_op.decode_and_crop_jpeg(data, y, x, h, w, mode=mode, contiguous=contiguous)

    failures = mismatches(data, windows, full, decode)
    assert not failures, report(failures, len(windows))


def test_pillow_photo_crops_equal_window_of_full_decode(pillow_photo: bytes) -> None:
    full = full_decode(pillow_photo)
    windows = chosen_windows(533, 800, seed=533)
    failures = mismatches(pillow_photo, windows, full, custom_op.decode_and_crop_jpeg)
    assert not failures, report(failures, len(windows))


@pytest.mark.parametrize("case_id", [BASELINE_420, PROGRESSIVE_422, "422-base-q100-257x256"])
def test_edge_cure_is_needed_and_sufficient(corpus_by_id, case_id: str) -> None:
    """Without widening the decoded region, crops starting on a 16-pixel boundary go wrong.

    This proves the corpus notices edge errors with fancy chroma upsampling,
    and that the cure (on by default) removes all of them.
    """
    case = corpus_by_id[case_id]
    full = full_decode(case.data)
    windows = [(8, x, 24, w) for x in range(16, case.width - 17, 16) for w in (1, 5, 16, 17)]

    def decode_with(exact_edges: bool):
        def decode(data, y, x, h, w):
            return custom_op._C.decode_and_crop_jpeg(data, y, x, h, w, MODE_CODES["rgb"], True,
                                                     2**28, 256, exact_edges=exact_edges)
        return decode

    uncured = mismatches(case.data, windows, full, decode_with(exact_edges=False))
    cured = mismatches(case.data, windows, full, decode_with(exact_edges=True))
    assert uncured, "no window differs without the edge cure: the test cannot see edge errors"
    assert not cured, report(cured, len(windows))


# ---------------------------------------------------------------- references


def test_rgb_equals_pillow(corpus_case: JpegCase) -> None:
    """Full decode in mode rgb equals Pillow's RGB conversion exactly, for every file."""
    ours = hwc(full_decode(corpus_case.data, "rgb"))
    reference = np.asarray(pillow_open(corpus_case.data).convert("RGB"))
    assert ours.shape == reference.shape
    diff = np.abs(ours.astype(int) - reference)
    assert diff.max() == 0, f"max abs diff {diff.max()} in {(diff > 0).sum()} samples"


def test_pillow_photo_equals_pillow(pillow_photo: bytes) -> None:
    ours = hwc(full_decode(pillow_photo))
    np.testing.assert_array_equal(ours, np.asarray(pillow_open(pillow_photo).convert("RGB")))


@pytest.mark.corpus(lambda recipe: recipe["sampling"] == "gray")
def test_grayscale_file_equals_pillow_luminance(corpus_case: JpegCase) -> None:
    """A grayscale file: unchanged and gray give Pillow's "L"; rgb replicates it."""
    image = pillow_open(corpus_case.data)
    assert image.mode == "L"
    luminance = np.asarray(image)
    for mode in ("gray", "unchanged"):
        np.testing.assert_array_equal(full_decode(corpus_case.data, mode)[0].numpy(), luminance)
    rgb = hwc(full_decode(corpus_case.data, "rgb"))
    np.testing.assert_array_equal(rgb, np.repeat(luminance[:, :, None], 3, axis=2))


@pytest.mark.corpus(lambda recipe: recipe["colorspace"] in FOUR_CHANNEL)
def test_cmyk_and_ycck_equal_pillow(corpus_case: JpegCase) -> None:
    """unchanged gives the stored samples (Pillow's CMYK, which Pillow inverts: 255 - x);
    rgb gives Pillow's RGB conversion; gray gives Pillow's luma of that RGB."""
    image = pillow_open(corpus_case.data)
    assert image.mode == "CMYK"
    unchanged = hwc(full_decode(corpus_case.data, "unchanged"))
    np.testing.assert_array_equal(unchanged, 255 - np.asarray(image))
    rgb = image.convert("RGB")
    np.testing.assert_array_equal(hwc(full_decode(corpus_case.data, "rgb")), np.asarray(rgb))
    gray = full_decode(corpus_case.data, "gray")[0].numpy()
    np.testing.assert_array_equal(gray, np.asarray(rgb.convert("L")))


@pytest.mark.filterwarnings("ignore:The image decoding and encoding:DeprecationWarning")
@pytest.mark.corpus(lambda recipe: recipe["colorspace"] not in FOUR_CHANNEL)
def test_gray_mode_equals_torchvision_luma(corpus_case: JpegCase) -> None:
    """mode gray on a YCbCr (or gray, or RGB) file is libjpeg's luma, as torchvision's GRAY."""
    encoded = torch.frombuffer(bytearray(corpus_case.data), dtype=torch.uint8)
    reference = torchvision.io.decode_jpeg(encoded, mode=torchvision.io.ImageReadMode.GRAY)
    ours = full_decode(corpus_case.data, "gray")
    assert torch.equal(ours, reference), (
        f"max abs diff {int((ours.int() - reference.int()).abs().max())}")


# ---------------------------------------------------------------- inputs, shapes


INPUT_KINDS = ["tensor", "tensor_slice", "bytes", "bytearray", "memoryview", "memoryview_slice",
               "numpy", "numpy_slice"]


def _input_kinds(data: bytes) -> dict[str, object]:
    padded = b"\x00\x07\x09" + data + b"\x05"  # the file inside a larger buffer
    padded_tensor = torch.frombuffer(bytearray(padded), dtype=torch.uint8)
    padded_array = np.frombuffer(padded, dtype=np.uint8)
    return {
        "tensor": torch.frombuffer(bytearray(data), dtype=torch.uint8),
        "tensor_slice": padded_tensor[3:3 + len(data)],
        "bytes": data,
        "bytearray": bytearray(data),
        "memoryview": memoryview(data),
        "memoryview_slice": memoryview(padded)[3:3 + len(data)],
        "numpy": np.frombuffer(data, dtype=np.uint8).copy(),
        "numpy_slice": padded_array[3:3 + len(data)],
    }


@pytest.mark.parametrize("kind", INPUT_KINDS)
@pytest.mark.parametrize("case_id", [PROGRESSIVE_422, "cmyk-444-base-q75-57x91"])
def test_input_kinds_agree(corpus_by_id, case_id: str, kind: str) -> None:
    case = corpus_by_id[case_id]
    data = _input_kinds(case.data)[kind]
    assert custom_op.jpeg_size(data) == custom_op.jpeg_size(case.data)
    for mode in MODES:
        for window in [(0, 0, case.height, case.width), (5, 17, 31, 33)]:
            got = custom_op.decode_and_crop_jpeg(data, *window, mode=mode)
            expected = custom_op.decode_and_crop_jpeg(case.data, *window, mode=mode)
            assert torch.equal(got, expected), f"{kind}, mode={mode}, window={window}"


_PILLOW_CHANNELS = {"L": 1, "RGB": 3, "CMYK": 4}


def test_jpeg_size_matches_pillow(corpus_case: JpegCase) -> None:
    image = Image.open(io.BytesIO(corpus_case.data))
    height, width, channels = custom_op.jpeg_size(corpus_case.data)
    assert (width, height) == image.size
    assert channels == _PILLOW_CHANNELS[image.mode] == corpus_case.channels
    assert (height, width) == (corpus_case.height, corpus_case.width)


def has_layout(tensor: torch.Tensor, contiguous: bool) -> bool:
    """Whether a [C, H, W] result is contiguous CHW, or (default) a view of contiguous HWC memory."""
    if contiguous:
        return tensor.is_contiguous()
    return tensor.permute(1, 2, 0).is_contiguous() and tensor.stride(0) == 1


@pytest.mark.parametrize("contiguous", [False, True], ids=["hwc", "chw"])
@pytest.mark.parametrize("mode", MODES)
def test_shape_dtype_and_layout(corpus_case: JpegCase, mode: str, contiguous: bool) -> None:
    expected_channels = {"rgb": 3, "gray": 1, "unchanged": corpus_case.channels}[mode]
    h, w = (corpus_case.height + 1) // 2, (corpus_case.width + 2) // 3
    y, x = corpus_case.height - h, corpus_case.width - w
    crop = custom_op.decode_and_crop_jpeg(corpus_case.data, y, x, h, w, mode=mode,
                                          contiguous=contiguous)
    assert crop.shape == (expected_channels, h, w)
    assert crop.dtype == torch.uint8
    assert has_layout(crop, contiguous), crop.stride()
    assert crop.device.type == "cpu"


@pytest.mark.filterwarnings("ignore:The image decoding and encoding:DeprecationWarning")
def test_default_layout_is_torchvisions(pillow_photo: bytes) -> None:
    ours = custom_op.decode_and_crop_jpeg(pillow_photo, 0, 0, 533, 800)
    theirs = torchvision.io.decode_jpeg(torch.frombuffer(bytearray(pillow_photo), dtype=torch.uint8))
    assert ours.stride() == theirs.stride() == (1, 800 * 3, 3)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("spelling", ["RGB", "Rgb", "GRAY", "Gray", "UNCHANGED", "UnChanged"])
def test_mode_is_case_insensitive(corpus_by_id, spelling: str) -> None:
    data = corpus_by_id["ycck-420-rst-q100-41x75"].data
    got = custom_op.decode_and_crop_jpeg(data, 3, 9, 20, 30, mode=spelling)
    expected = custom_op.decode_and_crop_jpeg(data, 3, 9, 20, 30, mode=spelling.lower())
    assert torch.equal(got, expected)


# ---------------------------------------------------------------- errors


@pytest.fixture(scope="module")
def sample(corpus_by_id) -> JpegCase:
    return corpus_by_id[BASELINE_420]


def test_wrong_dtype_raises_type_error(sample: JpegCase) -> None:
    data = torch.frombuffer(bytearray(sample.data), dtype=torch.uint8)
    for bad in (data.float(), data.to(torch.int8), data.to(torch.int32)):
        with pytest.raises(TypeError, match=r"data must be a uint8 tensor, got dtype"):
            custom_op.decode_and_crop_jpeg(bad, 0, 0, 8, 8)
        with pytest.raises(TypeError, match=r"uint8"):
            custom_op.jpeg_size(bad)
    with pytest.raises(TypeError, match=r"uint8"):
        floats = np.frombuffer(sample.data, dtype=np.uint8).astype(np.float32)
        custom_op.decode_and_crop_jpeg(floats, 0, 0, 8, 8)
    for not_a_buffer in (sample.data.decode("latin-1"), list(sample.data[:10]), None, 12):
        with pytest.raises(TypeError, match=r"data must be a 1-D uint8 torch.Tensor, bytes"):
            custom_op.decode_and_crop_jpeg(not_a_buffer, 0, 0, 8, 8)


def test_two_dimensional_input_raises_value_error(sample: JpegCase) -> None:
    data = torch.frombuffer(bytearray(sample.data[:len(sample.data) // 2 * 2]), dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"1-D tensor, got shape \(2, "):
        custom_op.decode_and_crop_jpeg(data.reshape(2, -1), 0, 0, 8, 8)
    with pytest.raises(ValueError, match=r"1-D"):
        custom_op.decode_and_crop_jpeg(data.numpy().reshape(2, -1), 0, 0, 8, 8)


def test_non_contiguous_input_raises_value_error(sample: JpegCase) -> None:
    doubled = torch.frombuffer(bytearray(sample.data), dtype=torch.uint8).repeat_interleave(2)
    strided = doubled[::2]
    assert torch.equal(strided, torch.frombuffer(bytearray(sample.data), dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"contiguous"):
        custom_op.decode_and_crop_jpeg(strided, 0, 0, 8, 8)
    with pytest.raises(ValueError, match=r"contiguous"):
        custom_op.decode_and_crop_jpeg(doubled.numpy()[::2], 0, 0, 8, 8)
    # The same bytes made contiguous decode.
    assert custom_op.decode_and_crop_jpeg(strided.contiguous(), 0, 0, 8, 8).shape == (3, 8, 8)


@pytest.mark.parametrize("empty", [b"", bytearray(), torch.empty(0, dtype=torch.uint8),
                                   np.empty(0, dtype=np.uint8)],
                         ids=["bytes", "bytearray", "tensor", "numpy"])
def test_empty_input_raises_decode_error(empty) -> None:
    with pytest.raises(custom_op.JpegDecodeError, match=r"^decode_and_crop_jpeg\(\): Empty input"):
        custom_op.decode_and_crop_jpeg(empty, 0, 0, 1, 1)
    with pytest.raises(custom_op.JpegDecodeError, match=r"^jpeg_size\(\): Empty input"):
        custom_op.jpeg_size(empty)


def _png_bytes() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (9, 7), (10, 200, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def _random_bytes() -> bytes:
    data = np.random.default_rng(5).integers(0, 256, size=2000, dtype=np.uint8).tobytes()
    assert data[:2] != b"\xff\xd8"
    return data


@pytest.mark.parametrize("data, first_bytes", [
    (_png_bytes(), "0x89 0x50"),
    (_random_bytes(), None),
    (b"Just some text, certainly not a JPEG file.\n", "0x4a 0x75"),
], ids=["png", "random", "text"])
def test_not_a_jpeg_raises_decode_error(data: bytes, first_bytes: str | None) -> None:
    first_bytes = first_bytes or f"0x{data[0]:02x} 0x{data[1]:02x}"
    message = f"Not a JPEG file: starts with {first_bytes}"
    with pytest.raises(custom_op.JpegDecodeError, match=rf"^decode_and_crop_jpeg\(\): {message}"):
        custom_op.decode_and_crop_jpeg(data, 0, 0, 1, 1)
    with pytest.raises(custom_op.JpegDecodeError, match=rf"^jpeg_size\(\): {message}"):
        custom_op.jpeg_size(data)


def test_decode_error_is_a_runtime_error() -> None:
    assert issubclass(custom_op.JpegDecodeError, RuntimeError)
    with pytest.raises(RuntimeError):
        custom_op.decode_and_crop_jpeg(b"\xff\xd8", 0, 0, 1, 1)


TRUNCATED_FILES = [BASELINE_420, PROGRESSIVE_422, "420-rst-q60-120x200",
                   "ycck-444-arith-q95-120x200", "420-prog-q100-257x256"]


@pytest.mark.parametrize("divisor", [2, 3, 4])
@pytest.mark.parametrize("case_id", TRUNCATED_FILES)
def test_truncated_file_raises_in_strict_mode(corpus_by_id, case_id: str, divisor: int) -> None:
    case = corpus_by_id[case_id]
    data = case.data[:len(case.data) // divisor]
    with pytest.raises(custom_op.JpegDecodeError,
                       match=rf"^decode_and_crop_jpeg\(\): [Pp]remature end.*{_STRICT_HINT}"):
        custom_op.decode_and_crop_jpeg(data, 0, 0, case.height, case.width)
    # The header is intact, so the size can still be read.
    assert custom_op.jpeg_size(data) == (case.height, case.width, case.channels)
    for mode in MODES:
        decoded = custom_op.decode_and_crop_jpeg(data, 0, 0, case.height, case.width, mode=mode,
                                                 strict=False)
        channels = {"rgb": 3, "gray": 1, "unchanged": case.channels}[mode]
        assert decoded.shape == (channels, case.height, case.width)


@pytest.mark.parametrize("case_id, rows", [(BASELINE_420, 16), ("422-base-q100-257x256", 32),
                                           ("420-rst-q60-120x200", 16)])
def test_damage_below_the_window_goes_unseen_in_baseline_files(corpus_by_id, case_id: str,
                                                                rows: int) -> None:
    """A window in the intact top of a truncated baseline file decodes in strict mode,
    because the rows below the window are never read."""
    case = corpus_by_id[case_id]
    data = case.data[:len(case.data) // 2]
    with pytest.raises(custom_op.JpegDecodeError, match=r"[Pp]remature end"):
        custom_op.decode_and_crop_jpeg(data, 0, 0, case.height, case.width, strict=True)
    crop = custom_op.decode_and_crop_jpeg(data, 0, 3, rows, case.width - 5, strict=True)
    expected = full_decode(case.data)[:, :rows, 3:case.width - 2]
    assert torch.equal(crop, expected)


@pytest.mark.parametrize("before", ["DQT", "DHT", "SOF", "SOS"])
@pytest.mark.parametrize("case_id", [BASELINE_420, PROGRESSIVE_422])
def test_extraneous_bytes_before_marker_are_harmless(corpus_by_id, case_id: str,
                                                      before: str) -> None:
    """libjpeg warns "extraneous bytes before marker"; strict mode ignores that warning."""
    case = corpus_by_id[case_id]
    codes = {"DQT": 0xDB, "DHT": 0xC4, "SOF": (0xC0, 0xC1, 0xC2), "SOS": 0xDA}[before]
    codes = codes if isinstance(codes, tuple) else (codes,)
    offset = next(pos for marker, pos in marker_offsets(case.data) if marker in codes)
    junk = bytes([0x00, 0x13, 0x37, 0x42, 0xFE])
    data = case.data[:offset] + junk + case.data[offset:]
    for mode in MODES:
        clean = full_decode(case.data, mode)
        assert torch.equal(custom_op.decode_and_crop_jpeg(data, 0, 0, case.height, case.width,
                                                          mode=mode, strict=True), clean)
        assert torch.equal(custom_op.decode_and_crop_jpeg(data, 17, 33, 40, 50, mode=mode,
                                                          strict=True),
                           clean[:, 17:57, 33:83])


def test_extraneous_bytes_between_progressive_scans_are_harmless(corpus_by_id) -> None:
    case = corpus_by_id["420-prog-q100-257x256"]
    data = case.data
    scans = [i for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] == 0xDA]
    assert len(scans) > 3
    for offset in reversed(scans[1:4]):
        data = data[:offset] + b"\x01\x02\x03" + data[offset:]
    assert torch.equal(full_decode(data), full_decode(case.data))


_OUTSIDE = {  # side crossed by one pixel -> window
    "top": (-1, 0, 120, 200),
    "left": (0, -1, 120, 200),
    "bottom": (1, 0, 120, 200),
    "right": (0, 1, 120, 200),
    "bottom_by_height": (0, 0, 121, 200),
    "right_by_width": (0, 0, 120, 201),
    "bottom_right_corner": (119, 199, 2, 2),
    "below_the_image": (120, 0, 1, 1),
    "right_of_the_image": (0, 200, 1, 1),
}


def _window_message(window: Window) -> str:
    y, x, h, w = window
    return (rf"crop window \(crop_y={y}, crop_x={x}, crop_height={h}, crop_width={w}\) "
            rf"does not fit in the 120 x 200 \(height x width\) image")


@pytest.mark.parametrize("side", list(_OUTSIDE))
def test_window_outside_the_image_raises_value_error(sample: JpegCase, side: str) -> None:
    window = _OUTSIDE[side]
    y, x = window[:2]
    if y < 0 or x < 0:
        # Negative offsets are refused before the file is read, naming the argument.
        name, value = ("crop_y", y) if y < 0 else ("crop_x", x)
        expected = rf"{name} must be >= 0, got {value}"
    else:
        expected = _window_message(window)
    with pytest.raises(ValueError, match=expected):
        custom_op.decode_and_crop_jpeg(sample.data, *window)
    # The native check behind it names the window and the image size for every side.
    with pytest.raises(ValueError, match=_window_message(window)):
        custom_op._C.decode_and_crop_jpeg(sample.data, *window, MODE_CODES["rgb"], True, 2**28, 256,
                                          True)


@pytest.mark.parametrize("window", [(0, 0, 120, 200), (119, 0, 1, 200), (0, 199, 120, 1)],
                         ids=["whole", "last_row", "last_column"])
def test_window_exactly_at_the_image_edge_is_accepted(sample: JpegCase, window) -> None:
    assert custom_op.decode_and_crop_jpeg(sample.data, *window).shape == (3, *window[2:])


@pytest.mark.parametrize("name, index, value, message", [
    ("crop_y", 0, -1, r"crop_y must be >= 0, got -1"),
    ("crop_x", 1, -7, r"crop_x must be >= 0, got -7"),
    ("crop_height", 2, 0, r"crop_height must be >= 1, got 0"),
    ("crop_width", 3, 0, r"crop_width must be >= 1, got 0"),
    ("crop_height", 2, -3, r"crop_height must be >= 1, got -3"),
    ("crop_width", 3, -1, r"crop_width must be >= 1, got -1"),
])
def test_negative_or_zero_arguments_raise_value_error(sample: JpegCase, name, index, value,
                                                      message) -> None:
    args = [0, 0, 8, 8]
    args[index] = value
    with pytest.raises(ValueError, match=message):
        custom_op.decode_and_crop_jpeg(sample.data, *args)


@pytest.mark.parametrize("index, name", list(enumerate(["crop_y", "crop_x", "crop_height",
                                                        "crop_width"])))
@pytest.mark.parametrize("value", [2**31, 2**40, 2**70])
def test_integers_beyond_32_bits_raise_value_error(sample: JpegCase, index: int, name: str,
                                                   value: int) -> None:
    args = [0, 0, 8, 8]
    args[index] = value
    with pytest.raises(ValueError, match=rf"{name}={value} is beyond any JPEG's size"):
        custom_op.decode_and_crop_jpeg(sample.data, *args)


@pytest.mark.parametrize("index, name", list(enumerate(["crop_y", "crop_x", "crop_height",
                                                        "crop_width"])))
@pytest.mark.parametrize("value, kind", [(1.0, "float"), (2.5, "float"), (True, "bool"),
                                         (False, "bool"), ("3", "str"), (None, "NoneType")],
                         ids=["1.0", "2.5", "True", "False", "str", "None"])
def test_non_integer_arguments_raise_type_error(sample: JpegCase, index: int, name: str, value,
                                                kind: str) -> None:
    args = [1, 1, 8, 8]
    args[index] = value
    with pytest.raises(TypeError, match=rf"{name} must be an int, got {kind}"):
        custom_op.decode_and_crop_jpeg(sample.data, *args)


def test_numpy_and_torch_integers_are_accepted(sample: JpegCase) -> None:
    expected = custom_op.decode_and_crop_jpeg(sample.data, 3, 5, 7, 9)
    for args in [(np.int64(3), np.uint8(5), np.int32(7), 9),
                 (torch.tensor(3), 5, 7, torch.tensor(9))]:
        assert torch.equal(custom_op.decode_and_crop_jpeg(sample.data, *args), expected)


@pytest.mark.parametrize("mode", ["rgba", "grey", "", "L", "RGB "])
def test_unknown_mode_raises_value_error(sample: JpegCase, mode: str) -> None:
    valid = re.escape("mode must be one of ['gray', 'rgb', 'unchanged']")
    with pytest.raises(ValueError, match=valid):
        custom_op.decode_and_crop_jpeg(sample.data, 0, 0, 8, 8, mode=mode)


def test_non_string_mode_raises_type_error(sample: JpegCase) -> None:
    with pytest.raises(TypeError, match=r"mode must be a str"):
        custom_op.decode_and_crop_jpeg(sample.data, 0, 0, 8, 8, mode=0)


def test_max_pixels_limit_raises_decode_error(sample: JpegCase) -> None:
    with pytest.raises(custom_op.JpegDecodeError, match=r"120 x 200 .* = 24000 pixels, more than "
                                                        r"max_pixels=23999"):
        custom_op.decode_and_crop_jpeg(sample.data, 0, 0, 8, 8, max_pixels=23999)
    crop = custom_op.decode_and_crop_jpeg(sample.data, 0, 0, 8, 8, max_pixels=24000)
    assert crop.shape == (3, 8, 8)


def test_max_scans_limit_raises_decode_error(corpus_by_id) -> None:
    data = corpus_by_id[PROGRESSIVE_422].data
    with pytest.raises(custom_op.JpegDecodeError, match=r"more than 2 scans \(limit max_scans=2\)"):
        custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 8, max_scans=2)
    assert custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 8, max_scans=256).shape == (3, 8, 8)


# ---------------------------------------------------------------- threads, speed


def test_concurrent_decodes_in_two_threads_match_serial(corpus_by_id, pillow_photo: bytes) -> None:
    """Decoding with the GIL released in two threads gives the serial results, errors included."""
    files = [pillow_photo, corpus_by_id["420-prog-q100-257x256"].data,
             corpus_by_id["ycck-444-arith-q95-120x200"].data, corpus_by_id[BASELINE_420].data]
    jobs = []
    for index, data in enumerate(files):
        height, width, _ = custom_op.jpeg_size(data)
        for mode in MODES:
            jobs.append((data, (0, 0, height, width), mode))
            jobs.append((data, (height // 3, width // 5 + index, height // 2, width // 2), mode))
    broken = files[1][:len(files[1]) // 3]
    jobs.append((broken, (0, 0, 257, 256), "rgb"))

    def run(job):
        data, window, mode = job
        try:
            return custom_op.decode_and_crop_jpeg(data, *window, mode=mode)
        except custom_op.JpegDecodeError as error:
            return str(error)

    serial = [run(job) for job in jobs]
    assert isinstance(serial[-1], str) and "Premature end" in serial[-1]
    results: dict[int, list] = {}
    start = threading.Barrier(2)

    def worker(number: int) -> None:
        order = jobs if number == 0 else jobs[::-1]
        start.wait()
        results[number] = [run(job) for _ in range(3) for job in order]

    threads = [threading.Thread(target=worker, args=(number,)) for number in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(results) == [0, 1]
    for number, got in results.items():
        expected = (serial if number == 0 else serial[::-1]) * 3
        for index, (a, b) in enumerate(zip(got, expected)):
            if isinstance(b, str):
                same = a == b
            else:
                same = isinstance(a, torch.Tensor) and torch.equal(a, b)
            assert same, f"thread {number}, job {index % len(jobs)} differs from the serial decode"


def test_one_crop_of_a_533x800_photo_costs_less_than_its_full_decode(pillow_photo: bytes) -> None:
    """A guard against pathological slowness, not a benchmark (make bench measures speed): a
    224x224 crop, an eighth of the photo, takes less time than the full decode, each the
    fastest of five calls taken in turn, so that the machine's speed and load cancel out."""
    def fastest(*window) -> float:
        start = time.perf_counter()
        custom_op.decode_and_crop_jpeg(pillow_photo, *window)
        return time.perf_counter() - start

    crop = custom_op.decode_and_crop_jpeg(pillow_photo, 150, 280, 224, 224)  # warm-up
    assert crop.shape == (3, 224, 224)
    crops, fulls = [], []
    for _ in range(5):
        crops.append(fastest(150, 280, 224, 224))
        fulls.append(fastest(0, 0, 533, 800))
    assert min(crops) < min(fulls), f"a 224x224 crop took {min(crops):.4f} s, the whole photo " \
                                    f"{min(fulls):.4f} s"


# --------------------------------------------------------------------------
# The DCT scale rule (csrc/scale_rule.h), one rule for every path.
# --------------------------------------------------------------------------

@pytest.mark.parametrize(("window", "size", "antialias", "expected"), [
    ((800, 800), (100, 100), True, 1), ((800, 800), (101, 100), True, 2),
    ((400, 800), (100, 100), True, 2), ((300, 300), (100, 100), True, 4),
    ((200, 200), (100, 100), True, 4), ((199, 200), (100, 100), True, 8),
    ((800, 800), (100, 100), False, 8), ((200.5, 200.0), (100, 100), True, 4),
])
def test_choose_scale_is_the_native_rule(window, size, antialias: bool, expected: int) -> None:
    """The smallest of 1/8, 1/4, 1/2 whose decoded window still covers ``size``, and never a
    reduced scale without antialias (issue 24 item 5); fractional sides as the grid crops give."""
    assert custom_op._decode._single.choose_scale(*window, size, antialias) == expected
    assert custom_op._C.choose_scale(*window, *size, antialias) == expected


def _smooth_photo_like(height: int, width: int) -> bytes:
    """Low-frequency noise upscaled bicubically, as simplejpeg's generate_image."""
    small = np.random.default_rng(7).integers(0, 256, (height // 16, width // 16, 3), dtype=np.uint8)
    image = Image.fromarray(small).resize((width, height), Image.BICUBIC)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


@pytest.mark.parametrize("data_kind", ["tensor", "bytes"])
def test_resize_without_antialias_is_never_dct_scaled(data_kind: str) -> None:
    """A shrink by 8 without antialias equals torchvision's resized_crop of a full decode bit
    for bit: it used to be decoded at 1/8 scale (21-22 dB from torchvision, issue 24 item 5)."""
    from torchvision.transforms.v2 import functional as F

    data = _smooth_photo_like(480, 640)
    source = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data_kind == "tensor" else data
    window, size = (16, 24, 400, 560), (50, 70)
    ours = custom_op.decode_and_resized_crop_jpeg(source, *window, size, antialias=False)
    reference = F.resized_crop(full_decode(data), *window, list(size), antialias=False)
    assert torch.equal(ours, reference)


def test_batch_applies_the_same_scale_rule() -> None:
    """The batch lets the kernel choose too: each result equals the single call's, antialiased
    (reduced scale) or not (full scale)."""
    data = _smooth_photo_like(480, 640)
    boxes = [(0, 0, 480, 640), (16, 24, 400, 560)]
    for antialias in (True, False):
        batch = custom_op.decode_and_crop_jpeg_batch([data, data], boxes, size=(60, 80),
                                                     antialias=antialias)
        for box, result in zip(boxes, batch):
            single = custom_op.decode_and_resized_crop_jpeg(data, *box, (60, 80),
                                                            antialias=antialias)
            assert torch.equal(result, single)


def test_two_threads_decode_at_once() -> None:
    """The operators run with the GIL released (torch.ops releases it): two threads' decodes
    overlap, which a held GIL would serialise. Checked by the events' order, not by timing:
    thread B starts and finishes a tiny decode while thread A's long decode is running."""
    pixels = np.random.default_rng(5).integers(0, 256, (2048, 2048, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=95, progressive=True)
    big = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    small = _smooth_photo_like(64, 64)
    custom_op.decode_and_crop_jpeg(big, 0, 0, 8, 8)  # loaded, warm
    events: list[str] = []
    started = threading.Event()

    def long_decode() -> None:
        started.set()
        custom_op.decode_and_crop_jpeg(big, 0, 0, 2048, 2048)
        events.append("long done")

    worker = threading.Thread(target=long_decode)
    worker.start()
    started.wait()
    time.sleep(0.005)  # let the worker enter the kernel (a hang guard elsewhere bounds the test)
    custom_op.decode_and_crop_jpeg(small, 0, 0, 8, 8)
    events.append("short done")
    worker.join()
    assert events == ["short done", "long done"]
