"""decode_and_crop_jpeg_batch's per-image outcomes (issue 31, items 8 and 10).

One file that cannot be decoded costs that file: the others are decoded once, in the same
call, and with ``errors="return"`` each image's exception (or None) comes back beside the
images. A failure names its image's index in the caller's batch, also when EXIF-turned files
go through single calls. ``out=`` is checked the same way whichever path decodes the files.
"""

from __future__ import annotations

import io

import pytest
import torch
from PIL import Image

import custom_op
from synthetic import make_photo
from test_orientation import exif_segment, with_exif

BOX = (2, 3, 40, 50)
SIZE = (24, 20)


def _jpeg(seed: int, height: int = 60, width: int = 80) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(make_photo(height, width, seed=seed)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    good = _jpeg(1)
    return {"good": good, "other": _jpeg(2), "truncated": good[: len(good) // 2],
            "not-jpeg": bytes(200), "turned": with_exif(_jpeg(3), exif_segment(6))}


def _batch(files, names, **options):
    return custom_op.decode_and_crop_jpeg_batch([files[name] for name in names],
                                                [BOX] * len(names), **options)


@pytest.mark.parametrize("size", [None, SIZE], ids=["crops", "stacked"])
@pytest.mark.parametrize("exif", [False, True], ids=["stored", "turned"])
def test_errors_return_gives_each_image_its_outcome(files, size, exif) -> None:
    names = ["good", "truncated", "other", "not-jpeg"] + (["turned"] if exif else [])
    images, failures = _batch(files, names, size=size, errors="return",
                              apply_exif_orientation=exif)
    assert [type(failure).__name__ for failure in failures] == (
        ["NoneType", "JpegDecodeError", "NoneType", "JpegDecodeError"] + (["NoneType"] if exif else []))
    assert str(failures[1]).startswith("decode_and_crop_jpeg_batch(): image 1: Premature end")
    assert str(failures[3]).startswith("decode_and_crop_jpeg_batch(): image 3: Not a JPEG file")
    for index, name in enumerate(names):
        if failures[index] is not None:
            assert images[index] is None if size is None else not images[index].any()
            continue
        if size is None:
            expected = custom_op.decode_and_crop_jpeg(files[name], *BOX,
                                                      apply_exif_orientation=exif)
        else:
            expected = custom_op.decode_and_resized_crop_jpeg(files[name], *BOX, SIZE,
                                                              apply_exif_orientation=exif)
        assert torch.equal(images[index], expected), name


def test_errors_return_into_out(files) -> None:
    out = torch.full((3, 3, *SIZE), 7, dtype=torch.uint8).contiguous(memory_format=torch.channels_last)
    images, failures = _batch(files, ["good", "truncated", "other"], size=SIZE, out=out,
                              errors="return")
    assert images is out and failures[0] is None and failures[2] is None
    assert isinstance(failures[1], custom_op.JpegDecodeError)
    assert not out[1].any()
    assert torch.equal(out[2], custom_op.decode_and_resized_crop_jpeg(files["other"], *BOX, SIZE))


def test_errors_raise_names_the_first_failure_after_decoding_all(files) -> None:
    out = torch.empty((3, 3, *SIZE), dtype=torch.uint8, memory_format=torch.channels_last)
    with pytest.raises(custom_op.JpegDecodeError,
                       match=r"^decode_and_crop_jpeg_batch\(\): image 1: Premature end"):
        _batch(files, ["good", "truncated", "other"], size=SIZE, out=out)
    assert torch.equal(out[2], custom_op.decode_and_resized_crop_jpeg(files["other"], *BOX, SIZE))


@pytest.mark.parametrize("size", [None, SIZE], ids=["crops", "stacked"])
def test_failure_with_turned_files_names_its_own_index(files, size) -> None:
    """The turned file goes through a single call, the others through the pool: image 2 failed,
    not image 1 (the pool's index among the files it was given)."""
    with pytest.raises(custom_op.JpegDecodeError,
                       match=r"^decode_and_crop_jpeg_batch\(\): image 2: Premature end"):
        _batch(files, ["turned", "good", "truncated"], size=size, apply_exif_orientation=True)


def test_errors_must_be_a_policy(files) -> None:
    with pytest.raises(ValueError, match="errors must be 'raise' or 'return', got 'ignore'"):
        _batch(files, ["good"], errors="ignore")


@pytest.mark.parametrize("exif", [False, True], ids=["stored", "turned"])
@pytest.mark.parametrize(("out", "size", "error", "message"), [
    (torch.empty((2, 3, *SIZE)), SIZE, TypeError, "out must be a uint8 CPU tensor, got torch.float32"),
    (torch.empty((2, 1, *SIZE), dtype=torch.uint8, memory_format=torch.channels_last), SIZE,
     ValueError, r"out must be \[2, 3, 24, 20\] in torch.channels_last, got \[2, 1, 24, 20\]"),
    (torch.empty((2, 3, *SIZE), dtype=torch.uint8), SIZE, ValueError,
     r"out must be \[2, 3, 24, 20\] in torch.channels_last, got \[2, 3, 24, 20\] with strides"),
    (torch.empty((2, 3, *SIZE), dtype=torch.uint8), None, ValueError, "out needs size"),
], ids=["float32", "channels", "layout", "no-size"])
def test_out_is_checked_on_every_path(files, exif, out, size, error, message) -> None:
    """Issue 31 item 10: with one EXIF-turned file in the batch, out= was not checked at all."""
    with pytest.raises(error, match=message):
        _batch(files, ["turned", "good"], size=size, out=out, apply_exif_orientation=exif)
