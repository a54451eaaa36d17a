"""max_scans bounds the work of a file's scans, not only their number.

A progressive scan walks every block of its components whatever its bytes:
a run of empty blocks costs a few bits per 32767 blocks. So a 264 KB gray
file of 11136 x 11136 pixels with 100 scans (tests/_flat_progressive.py)
used to cost seconds per 64 x 64 crop under the default limits. Each scan
now counts once per 2 megapixels it decodes in full (custom_op/csrc/
jpeg_errors.h), counted as the scans arrive, before libjpeg decodes them;
small images count their scans exactly as before.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
import torch

import custom_op
from _flat_progressive import flat_progressive
from jpegenc import encode

# A guard against a hang, not a benchmark: refused files stop at the scan
# that crosses the limit, before decoding it.
HANG_SECONDS = 20.0
NEEDED = re.compile(r"a max_scans of (\d+) or more accepts them")


@pytest.fixture(scope="module")
def huge_flat(native_extension) -> bytes:
    """The issue's file: 11136 x 11136 gray, one DC scan and 99 AC scans (the extension
    loaded, or built, outside the timed calls)."""
    return flat_progressive(11136, 11136, 99)


@pytest.mark.parametrize("refine", [False, True], ids=["first-scans", "refinements"])
def test_a_large_image_with_many_cheap_scans_is_refused(huge_flat: bytes, refine: bool) -> None:
    data = huge_flat if not refine else flat_progressive(11136, 11136, 99, refine=True)
    assert len(data) < 300_000
    start = time.perf_counter()
    with pytest.raises(custom_op.JpegDecodeError, match=r"more work than max_scans=256 allows") as error:
        custom_op.decode_and_crop_jpeg(data, 0, 0, 64, 64, strict=False)
    assert time.perf_counter() - start < HANG_SECONDS
    message = str(error.value)
    needed = int(NEEDED.search(message).group(1))
    assert needed > 256, message
    # Well under 256 scans: it is their work that the limit refuses.
    assert re.search(r"its first (\d+) scans", message) and int(
        re.search(r"its first (\d+) scans", message).group(1)) < 100


def test_the_resized_and_batch_paths_refuse_it_too(huge_flat: bytes) -> None:
    with pytest.raises(custom_op.JpegDecodeError, match="max_scans"):
        custom_op.decode_and_resized_crop_jpeg(huge_flat, 0, 0, 4096, 4096, (32, 32))
    with pytest.raises(custom_op.JpegDecodeError, match="max_scans"):
        custom_op.decode_and_crop_jpeg_batch([huge_flat], [(0, 0, 64, 64)])


def test_raising_max_scans_as_told_accepts_the_work() -> None:
    """2048 x 2048 with 200 AC scans: 201 scans, each AC scan counting twice."""
    data = flat_progressive(2048, 2048, 200)
    with pytest.raises(custom_op.JpegDecodeError, match="more work than max_scans=256") as error:
        custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 8)
    assert int(NEEDED.search(str(error.value)).group(1)) == 257
    out = custom_op.decode_and_crop_jpeg(data, 2000, 2000, 48, 48, max_scans=1 + 200 * 2)
    assert torch.equal(out, torch.full((3, 48, 48), 128, dtype=torch.uint8))
    with pytest.raises(custom_op.JpegDecodeError, match="max_scans"):
        custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 8, max_scans=200 * 2)


def test_small_images_count_their_scans_as_before() -> None:
    data = flat_progressive(512, 512, 40)  # 41 scans of 4096 blocks.
    assert custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 8, max_scans=41).shape == (3, 8, 8)
    with pytest.raises(custom_op.JpegDecodeError, match=r"more than 40 scans \(limit max_scans=40\)"):
        custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 8, max_scans=40)


def test_an_ordinary_progressive_photo_decodes_under_the_defaults() -> None:
    """A 12-megapixel 4:4:4 progressive photo (libjpeg's standard scan script;
    4:4:4 has the most blocks per pixel). docs/design.md counts larger ones."""
    rows = np.linspace(0, 255, 3000, dtype=np.float32)[:, None, None]
    columns = np.linspace(0, 255, 4000, dtype=np.float32)[None, :, None]
    pixels = ((rows + columns * np.array([1.0, 0.5, 0.2], dtype=np.float32)) % 256).astype(np.uint8)
    data = encode(pixels, sampling="4:4:4", progressive=True, quality=85)
    crop = custom_op.decode_and_crop_jpeg(data, 2900, 3900, 100, 100)
    assert crop.shape == (3, 100, 100)
