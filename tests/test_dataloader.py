"""custom_op in DataLoader workers, started by "fork" and by "spawn".

Workers read encoded bytes and decode a random crop; the main process checks
the shapes, that the same seeds give the same batches, that every crop is the
window RandomCropJPEG drew (torchvision's RandomCrop draws, replayed from the worker's generator state), and
that a corrupt file raises custom_op.JpegDecodeError in the main process
rather than crashing or hanging the loader.
"""

from __future__ import annotations

import pathlib

import pytest
import torch
from torch.utils.data import DataLoader

import custom_op
from _datasets import EncodedJpegFolder
from custom_op.synthetic import write_jpeg_folder
from custom_op.transforms import RandomCropJPEG

CONTEXTS = ["fork", "spawn"]
IMAGES = 8
HEIGHT, WIDTH = 48, 72
CROP = (32, 40)
BATCH = 3


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> list[pathlib.Path]:
    root = tmp_path_factory.mktemp("jpegs")
    return write_jpeg_folder(root, IMAGES, HEIGHT, WIDTH, seed=3)


def make_loader(dataset, context: str, seed: int, shuffle: bool = True) -> DataLoader:
    return DataLoader(dataset, batch_size=BATCH, shuffle=shuffle, num_workers=2,
                      multiprocessing_context=context, timeout=60,
                      generator=torch.Generator().manual_seed(seed))


def full_decode(data: bytes) -> torch.Tensor:
    height, width, _ = custom_op.jpeg_size(data)
    return custom_op.decode_and_crop_jpeg(data, 0, 0, height, width)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("context", CONTEXTS)
def test_workers_decode_reproducible_exact_crops(folder, context: str) -> None:
    transform = RandomCropJPEG(CROP)
    dataset = EncodedJpegFolder(folder, transform)
    first = list(make_loader(dataset, context, seed=7))
    again = list(make_loader(dataset, context, seed=7))

    assert [len(images) for images, _, _ in first] == [3, 3, 2]
    seen = []
    for images, indices, states in first:
        assert images.dtype == torch.uint8 and images.shape[1:] == (3, *CROP)
        for image, index, state in zip(images, indices.tolist(), states):
            seen.append(index)
            data = pathlib.Path(folder[index]).read_bytes()
            torch.set_rng_state(state.clone())  # replay the worker's draws (a row view is refused)
            params = transform.make_params([custom_op.EncodedJpeg(data)])
            y, x, h, w = (params[key] for key in ("top", "left", "height", "width"))
            assert torch.equal(image, full_decode(data)[:, y:y + h, x:x + w]), f"image {index}"
    assert sorted(seen) == list(range(IMAGES))

    assert len(again) == len(first)
    for (images_a, indices_a, _), (images_b, indices_b, _) in zip(first, again):
        assert torch.equal(indices_a, indices_b)
        assert torch.equal(images_a, images_b)


def _header_only(data: bytes) -> bytes:
    """The file cut right after its first SOS segment: a valid header, no pixels."""
    pos = 2
    while data[pos + 1] != 0xDA:
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    return data[:pos + 2 + int.from_bytes(data[pos + 2:pos + 4], "big")]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("context, corruption, message", [
    ("fork", "header_only", r"decode_and_crop_jpeg\(\): Premature end of JPEG file"),
    ("fork", "not_jpeg", r"jpeg_size\(\): Not a JPEG file: starts with 0x6e 0x6f"),
    ("spawn", "header_only", r"decode_and_crop_jpeg\(\): Premature end of JPEG file"),
], ids=["fork-header_only", "fork-not_jpeg", "spawn-header_only"])
def test_corrupt_file_raises_decode_error_in_main_process(folder, tmp_path: pathlib.Path,
                                                          context: str, corruption: str,
                                                          message: str) -> None:
    paths = []
    for index, path in enumerate(folder):
        copy = tmp_path / f"{index}.jpg"
        copy.write_bytes(path.read_bytes())
        paths.append(copy)
    broken = paths[4]
    if corruption == "header_only":
        broken.write_bytes(_header_only(broken.read_bytes()))
    else:
        broken.write_bytes(b"no JPEG here, just text\n" * 20)
    loader = make_loader(EncodedJpegFolder(paths, RandomCropJPEG(CROP)), context, seed=1,
                         shuffle=False)
    batches = iter(loader)
    assert next(batches)[0].shape == (BATCH, 3, *CROP)  # images 0-2 are fine
    with pytest.raises(custom_op.JpegDecodeError, match=message) as raised:
        next(batches)  # images 3-5 hold the broken one
    assert type(raised.value) is custom_op.JpegDecodeError
    assert "DataLoader worker process" in str(raised.value)
    # The loader goes on after the error. Draining it also lets its workers exit
    # at once: left with undelivered batches they take seconds to shut down.
    rest = list(batches)
    assert [images.shape for images, _, _ in rest] == [(2, 3, *CROP)]
