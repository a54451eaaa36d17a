"""The datasets' file reading: read_file gives the file's bytes; load_samples (a batch, its
JPEG headers read in one native call) gives exactly what load_sample gives file by file, or
the error it raises; _native.jpeg_sizes agrees with jpeg_size and marks unreadable headers."""

from __future__ import annotations

import io

import pytest
import torch
from PIL import Image

import custom_op
from custom_op._core import _native
from custom_op._decode._options import DecodeOptions
from custom_op.datasets._loading import load_sample, load_samples, read_file
from synthetic import make_photo
from test_orientation import exif_segment, with_exif


def _jpeg(height: int, width: int, seed: int, mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(make_photo(height, width, seed=seed)).convert(mode).save(buffer, "JPEG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("loading")
    png = io.BytesIO()
    Image.fromarray(make_photo(30, 20, seed=3)).save(png, "PNG")
    contents = {
        "color.jpg": _jpeg(40, 60, 1),
        "gray.jpg": _jpeg(33, 17, 2, "L"),
        "png_named.jpg": png.getvalue(),
        "bad_header.jpg": b"\xff\xd8\xff\xe0" + bytes(100),
        "turned.jpg": with_exif(_jpeg(24, 50, 4), exif_segment(6)),
    }
    for name, data in contents.items():
        (root / name).write_bytes(data)
    return [str(root / name) for name in contents]


def _same(loaded, expected) -> None:
    assert type(loaded) is type(expected)
    if isinstance(expected, custom_op.EncodedJpeg):
        assert torch.equal(loaded.encoded_bytes(), expected.encoded_bytes())
        assert (loaded.canvas_size, loaded.stored_channels, loaded.num_channels, loaded.source,
                loaded.orientation, loaded.options) == (
            expected.canvas_size, expected.stored_channels, expected.num_channels,
            expected.source, expected.orientation, expected.options)
    else:
        assert torch.equal(loaded, expected)


@pytest.mark.parametrize("options", [DecodeOptions(), DecodeOptions(mode="gray"),
                                     DecodeOptions(apply_exif_orientation=True)],
                         ids=["default", "gray", "exif"])
def test_load_samples_equal_load_sample(files, options) -> None:
    loaded = load_samples(files, options)
    assert len(loaded) == len(files)
    for path, sample in zip(files, loaded):
        if path.endswith("bad_header.jpg"):
            with pytest.raises(custom_op.JpegDecodeError) as raised:
                load_sample(path, options)
            assert isinstance(sample, custom_op.JpegDecodeError)
            assert str(sample) == str(raised.value) and str(sample).startswith(path)
        else:
            _same(sample, load_sample(path, options))


def test_load_samples_of_nothing_and_of_a_missing_file(files, tmp_path) -> None:
    assert load_samples([]) == []
    with pytest.raises(FileNotFoundError):
        load_samples([files[0], str(tmp_path / "missing.jpg")])


def test_read_file_gives_the_bytes(files, tmp_path) -> None:
    for path in files:
        raw = read_file(path)
        assert isinstance(raw, bytearray) and raw == open(path, "rb").read()
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    assert read_file(str(empty)) == bytearray()


def test_jpeg_sizes_agree_with_jpeg_size(files) -> None:
    datas = [open(path, "rb").read() for path in files]
    sizes = _native.jpeg_sizes(datas)
    for path, data, size in zip(files, datas, sizes):
        if path.endswith(("png_named.jpg", "bad_header.jpg")):
            assert size is None
        else:
            assert size == custom_op.jpeg_size(data)
    with pytest.raises(TypeError, match="uint8"):
        _native.jpeg_sizes([torch.zeros(4, dtype=torch.float32)])
