"""Hugging Face datasets through custom_op: Image(decode=False) rows become EncodedJpegs.

A small dataset written by ``datasets`` itself (JPEG rows, one PNG row, and a
JPEG whose header reads but whose data is missing) is used map-style
(``set_transform``) and streaming (``to_iterable_dataset().map``), in this
process and in DataLoader workers started by fork and by spawn. Everything
runs offline on local files.
"""

from __future__ import annotations

import io
import logging
import os
import sys

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # local files only, in workers too
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from PIL import Image as PILImage
from torch.utils.data import DataLoader
from torchvision import tv_tensors
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import datasets  # noqa: E402 - requirements-dev.txt installs it
from datasets import Image  # noqa: E402

import custom_op  # noqa: E402
from custom_op.datasets import HfImageTransform, hf_image  # noqa: E402
from synthetic import make_smooth_noise, photo_jpeg  # noqa: E402
from synthetic.hub import hub_dataset, write_hub_dataset  # noqa: E402

HEIGHT, WIDTH = 48, 64
CROP = 32
ROWS = 8
PNG_ROW = 3


def _png(seed: int) -> bytes:
    buffer = io.BytesIO()
    PILImage.fromarray(make_smooth_noise(HEIGHT, WIDTH, seed)).save(buffer, format="PNG")
    return buffer.getvalue()


def _header_only(data: bytes) -> bytes:
    """The JPEG cut right after its first SOS segment: the header reads, the pixels do not."""
    pos = 2
    while data[pos + 1] != 0xDA:
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    return data[:pos + 2 + int.from_bytes(data[pos + 2:pos + 4], "big")]


def _samples() -> list[tuple[bytes, str, int]]:
    samples = [(photo_jpeg(HEIGHT, WIDTH, 5, index), f"img_{index:03d}.JPEG", index % 2)
               for index in range(ROWS)]
    samples[PNG_ROW] = (_png(PNG_ROW), "img_003.png", 1)
    return samples


SAMPLES = _samples()


def _full_decode(data: bytes) -> torch.Tensor:
    height, width, _ = custom_op.jpeg_size(data)
    return custom_op.decode_and_crop_jpeg(data, 0, 0, height, width)


def _expected(index: int) -> torch.Tensor:
    """Row ``index`` decoded in full: custom_op for JPEGs, torchvision for the PNG."""
    data = SAMPLES[index][0]
    if index == PNG_ROW:
        return decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                            mode=ImageReadMode.RGB)
    return _full_decode(data)


@pytest.fixture(scope="module")
def rows():
    """The dataset, its image column cast to Image(decode=False)."""
    return hub_dataset(SAMPLES, ["even", "odd"]).cast_column("image", Image(decode=False))


@pytest.fixture(scope="module")
def damaged_rows():
    samples = list(SAMPLES)
    samples[1] = (_header_only(samples[1][0]), "broken.JPEG", 1)
    return hub_dataset(samples, ["even", "odd"]).cast_column("image", Image(decode=False))


def test_hf_image_gives_an_encoded_jpeg_named_by_its_path(rows) -> None:
    image = hf_image(rows[0]["image"], custom_op.DecodeOptions(mode="gray"))
    assert isinstance(image, custom_op.EncodedJpeg)
    assert image.source == "img_000.JPEG" and image.canvas_size == (HEIGHT, WIDTH)
    assert image.options.mode == "gray"
    assert hf_image(SAMPLES[0][0], source="row 0").source == "row 0"  # a plain binary value


def test_an_index_is_taken_in_every_form_the_decoders_take_and_nothing_else() -> None:
    data = photo_jpeg(4 * HEIGHT, 4 * WIDTH, 5, 0)
    index = custom_op.jpeg_index(data)
    assert index  # a baseline photo without restart markers can be indexed
    plain = custom_op.decode_and_crop_jpeg(data, 150, 20, 24, 32)
    forms = {"bytes": index, "bytearray": bytearray(index), "memoryview": memoryview(index),
             "numpy": np.frombuffer(index, dtype=np.uint8),
             "tensor": torch.frombuffer(bytearray(index), dtype=torch.uint8)}
    for form, given in forms.items():
        image = hf_image(data, index=given)
        assert image.index_key == index, form
        assert torch.equal(F.crop(image, 150, 20, 24, 32).as_subclass(torch.Tensor), plain), form
    assert hf_image(data).index_key is None
    refused = [(5, TypeError, "got int"), ("ab", TypeError, "got str"),
               (torch.tensor([1, 2]), TypeError, "uint8 tensor"), ([1, 2], TypeError, "got list"),
               (b"", ValueError, "empty")]
    for given, error, message in refused:
        with pytest.raises(error, match=rf"^hf_image\(\): index .*{message}"):
            hf_image(data, index=given)


def test_png_rows_are_decoded_by_torchvision(rows) -> None:
    image = hf_image(rows[PNG_ROW]["image"])
    assert type(image) is tv_tensors.Image and image.is_contiguous()
    assert torch.equal(image.as_subclass(torch.Tensor), _expected(PNG_ROW))


def test_a_row_without_bytes_is_read_from_its_path(tmp_path) -> None:
    path = tmp_path / "cat.jpg"
    path.write_bytes(SAMPLES[0][0])
    image = hf_image({"bytes": None, "path": str(path)})
    assert image.source == str(path)
    assert torch.equal(image.decode().as_subclass(torch.Tensor), _expected(0))


def test_a_null_image_is_bad_data() -> None:
    with pytest.raises(custom_op.JpegDecodeError, match="row 5: the row has no image"):
        hf_image(None, source="row 5")


def test_a_decoded_pil_image_is_refused_with_the_fix() -> None:
    with pytest.raises(TypeError, match=r"cast the column to Image\(decode=False\)"):
        hf_image(PILImage.new("RGB", (4, 4)))


def test_set_transform_decodes_only_the_window_with_the_same_pixels(rows) -> None:
    dataset = rows.with_transform(HfImageTransform(v2.CenterCrop(CROP), exact=True))
    items = dataset.__getitems__(list(range(ROWS)))  # what a DataLoader asks for
    for index, item in enumerate(items):
        assert item["label"] == SAMPLES[index][2]
        assert type(item["image"]) is tv_tensors.Image and item["image"].dtype == torch.uint8
        assert torch.equal(item["image"].as_subclass(torch.Tensor),
                           F.center_crop(_expected(index), [CROP]))
    assert dataset[2]["image"].shape == (3, CROP, CROP)  # one row, as dataset[i] gives it


def test_no_transform_gives_whole_images(rows) -> None:
    item = rows.with_transform(HfImageTransform())[0]
    assert torch.equal(item["image"].as_subclass(torch.Tensor), _expected(0))


def test_a_damaged_row_raises_naming_its_path(damaged_rows) -> None:
    dataset = damaged_rows.with_transform(HfImageTransform(v2.RandomResizedCrop(CROP)))
    with pytest.raises(custom_op.JpegDecodeError, match=r"^broken\.JPEG: "):
        dataset.__getitems__([0, 1, 2])


def test_substitute_replaces_the_whole_row_with_the_next_good_one_and_logs(
        damaged_rows, caplog: pytest.LogCaptureFixture) -> None:
    transform = HfImageTransform(v2.CenterCrop(CROP), on_error="substitute", exact=True)
    dataset = damaged_rows.with_transform(transform)
    with caplog.at_level(logging.WARNING, logger="custom_op.datasets"):
        items = dataset.__getitems__([0, 1, 2])
    assert [item["label"] for item in items] == [0, 0, 0]  # row 1 (odd) became row 2 (even)
    assert torch.equal(items[1]["image"], items[2]["image"])
    assert transform.substitutions == 1
    assert "row 1 of the batch replaced by row 2" in caplog.text and "broken.JPEG" in caplog.text


def test_substitute_without_another_row_raises(damaged_rows) -> None:
    dataset = damaged_rows.with_transform(
        HfImageTransform(v2.CenterCrop(CROP), on_error="substitute"))
    with pytest.raises(custom_op.JpegDecodeError, match="no other row of this batch of 1"):
        dataset[1]


def test_bad_arguments_are_named(rows) -> None:
    with pytest.raises(ValueError, match="'skip'"):
        HfImageTransform(on_error="skip")
    with pytest.raises(TypeError, match="unknown decode option"):
        HfImageTransform(colour="rgb")
    with pytest.raises(ValueError, match=r"no column 'img'.*\['image', 'label'\]"):
        rows.with_transform(HfImageTransform(column="img"))[0]


def test_streaming_map_row_by_row_and_batched(rows) -> None:
    transform = HfImageTransform(v2.CenterCrop(CROP), exact=True)
    streams = [rows.to_iterable_dataset().map(transform),
               rows.to_iterable_dataset().map(transform, batched=True, batch_size=3)]
    for stream in streams:
        items = list(stream)
        assert [item["label"] for item in items] == [label for _, _, label in SAMPLES]
        for index, item in enumerate(items):
            assert torch.equal(item["image"].as_subclass(torch.Tensor),
                               F.center_crop(_expected(index), [CROP]))


@pytest.fixture(scope="module")
def parquet_rows(tmp_path_factory: pytest.TempPathFactory):
    """The same rows as a Hub-style parquet folder, loaded by load_dataset("parquet")."""
    root = tmp_path_factory.mktemp("hub")
    write_hub_dataset(root, SAMPLES, class_names=["even", "odd"], files=2, rows_per_group=3)
    loaded = datasets.load_dataset("parquet", data_dir=str(root), split="train",
                                   cache_dir=str(root / "cache"))
    return loaded.cast_column("image", Image(decode=False))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("context, kind", [("fork", "map-style"), ("fork", "streaming"),
                                           ("spawn", "map-style")])
def test_dataloader_workers(parquet_rows, context: str, kind: str) -> None:
    """Two workers; spawn (a second or more per worker to import torch) only for map-style."""
    transform = HfImageTransform(v2.RandomResizedCrop(CROP))
    if kind == "map-style":
        dataset = parquet_rows.with_transform(transform)
    else:
        dataset = parquet_rows.to_iterable_dataset(num_shards=2).map(transform, batched=True,
                                                                     batch_size=4)
    loader = DataLoader(dataset, batch_size=3, num_workers=2, multiprocessing_context=context,
                        timeout=120)
    batches = list(loader)
    images = torch.cat([batch["image"] for batch in batches])
    labels = torch.cat([batch["label"] for batch in batches]).tolist()
    assert images.shape == (ROWS, 3, CROP, CROP) and images.dtype == torch.uint8
    expected = [label for _, _, label in SAMPLES]
    # Map-style keeps the order; two workers over two streaming shards interleave them.
    assert labels == expected if kind == "map-style" else sorted(labels) == sorted(expected)


def test_png_rows_decode_without_a_warning_and_without_torchvision_io(rows, monkeypatch) -> None:
    """torchvision 0.29 deprecates torchvision.io decoding: our own call must not warn the user,
    and a torchvision without it must leave Pillow to decode (issue 23 item 6)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expected = hf_image(rows[PNG_ROW]["image"])
    monkeypatch.setitem(sys.modules, "torchvision.io", None)  # makes the import fail
    assert torch.equal(hf_image(rows[PNG_ROW]["image"]).as_subclass(torch.Tensor),
                       expected.as_subclass(torch.Tensor))
