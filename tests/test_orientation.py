"""EXIF orientation (issue 24 item 3): windows in the displayed image, pixels of decode-then-turn.

Files are made here: a photo-like image encoded by Pillow, with an Exif APP1
segment written by hand (both byte orders, SHORT and LONG values) or by
Pillow. The reference for every orientation is Pillow's
``ImageOps.exif_transpose`` of custom_op's full decode (which equals
torchvision's decode_jpeg for these files), so flips and transpositions are
checked against an implementation that is not ours.
"""

from __future__ import annotations

import io
import random
import struct

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import custom_op
from custom_op import EncodedJpeg
from custom_op._decode import _orientation
from custom_op.datasets import HfImageTransform, hf_image
from synthetic import make_photo
from _closeness import psnr

HEIGHT, WIDTH = 75, 118  # off the 16-pixel MCU grid both ways, not square
ORIENTATIONS = range(1, 9)


def exif_segment(orientation: int, *, order: str = "II", kind: int = 3) -> bytes:
    """An APP1 Exif segment whose IFD0 holds only the Orientation tag."""
    fmt = "<" if order == "II" else ">"
    value = struct.pack(fmt + ("HH" if kind == 3 else "I"), *((orientation, 0) if kind == 3
                                                               else (orientation,)))
    tiff = (order.encode() + struct.pack(fmt + "HI", 42, 8) + struct.pack(fmt + "H", 1)
            + struct.pack(fmt + "HHI", 0x0112, kind, 1) + value + struct.pack(fmt + "I", 0))
    payload = b"Exif\x00\x00" + tiff
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def with_exif(jpeg: bytes, segment: bytes) -> bytes:
    return jpeg[:2] + segment + jpeg[2:]


def encode(pixels: np.ndarray, **options) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90, **options)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def plain() -> bytes:
    return encode(make_photo(HEIGHT, WIDTH, seed=11))


@pytest.fixture(scope="module")
def files(plain) -> dict[int, bytes]:
    return {orientation: with_exif(plain, exif_segment(orientation))
            for orientation in ORIENTATIONS}


def turned_reference(data: bytes, orientation: int) -> torch.Tensor:
    """custom_op's full decode of the stored image, turned by Pillow's exif_transpose."""
    full = custom_op.decode_and_crop_jpeg(data, 0, 0, HEIGHT, WIDTH)
    image = Image.fromarray(full.permute(1, 2, 0).contiguous().numpy())
    image.getexif()[0x0112] = orientation
    turned = np.array(ImageOps.exif_transpose(image))
    return torch.from_numpy(turned).permute(2, 0, 1)


def windows(height: int, width: int, count: int = 6) -> list[tuple[int, int, int, int]]:
    rng = random.Random(height * 1000 + width)
    chosen = [(0, 0, height, width), (height - 1, width - 1, 1, 1), (0, 0, 1, width)]
    for _ in range(count):
        h, w = rng.randint(1, height), rng.randint(1, width)
        chosen.append((rng.randint(0, height - h), rng.randint(0, width - w), h, w))
    return chosen


@pytest.mark.parametrize("orientation", ORIENTATIONS)
@pytest.mark.parametrize("order, kind", [("II", 3), ("MM", 3), ("MM", 4)])
def test_the_tag_is_read(plain, orientation: int, order: str, kind: int) -> None:
    data = with_exif(plain, exif_segment(orientation, order=order, kind=kind))
    assert _orientation.exif_orientation(data) == orientation
    assert _orientation.exif_orientation(torch.frombuffer(bytearray(data), dtype=torch.uint8)) \
        == orientation


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_pillow_written_exif_is_read(orientation: int) -> None:
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encode(make_photo(20, 30, seed=2), exif=exif.tobytes())
    assert _orientation.exif_orientation(data) == orientation


def test_junk_means_orientation_one(plain) -> None:
    """Never raises: every truncation of a tagged header, bad values, random bytes."""
    tagged = with_exif(plain, exif_segment(6))
    for end in range(0, 80):
        assert _orientation.exif_orientation(tagged[:end]) in (1, 6)
    for bad in (0, 9, 65535):
        assert _orientation.exif_orientation(with_exif(plain, exif_segment(bad))) == 1
    rng = random.Random(0)
    for _ in range(300):
        junk = bytearray(tagged[:60])
        for _ in range(4):
            junk[rng.randrange(2, len(junk))] = rng.randrange(256)
        assert _orientation.exif_orientation(bytes(junk)) in range(1, 9)
    assert _orientation.exif_orientation(plain) == 1


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_jpeg_size_reports_the_displayed_size(files, orientation: int) -> None:
    data = files[orientation]
    displayed = turned_reference(data, orientation).shape[1:]
    assert custom_op.jpeg_size(data, apply_exif_orientation=True)[:2] == tuple(displayed)
    assert custom_op.jpeg_size(data)[:2] == (HEIGHT, WIDTH)  # off by default


@pytest.mark.parametrize("contiguous", [False, True])
@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_crops_equal_decode_then_turn(files, orientation: int, contiguous: bool) -> None:
    data = files[orientation]
    reference = turned_reference(data, orientation)
    for y, x, h, w in windows(*reference.shape[1:]):
        ours = custom_op.decode_and_crop_jpeg(data, y, x, h, w, apply_exif_orientation=True,
                                              contiguous=contiguous)
        assert torch.equal(ours, reference[:, y:y + h, x:x + w]), (y, x, h, w)
        if contiguous:
            assert ours.is_contiguous()
        else:
            assert ours.permute(1, 2, 0).is_contiguous(), ours.stride()


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_only_the_stored_window_is_decoded(files, orientation: int, monkeypatch) -> None:
    calls = []
    native = custom_op._C.decode_and_crop_jpeg

    def recording(data, y, x, h, w, *args, **kwargs):
        calls.append((y, x, h, w))
        return native(data, y, x, h, w, *args, **kwargs)

    monkeypatch.setattr(custom_op._decode._single._C, "decode_and_crop_jpeg", recording)
    custom_op.decode_and_crop_jpeg(files[orientation], 2, 3, 10, 20, apply_exif_orientation=True)
    transposed = orientation >= 5
    assert len(calls) == 1 and calls[0][2:] == ((20, 10) if transposed else (10, 20))


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_window_outside_the_displayed_image_is_refused(files, orientation: int) -> None:
    height, width = turned_reference(files[orientation], orientation).shape[1:]
    with pytest.raises(ValueError, match="does not fit in the"):
        custom_op.decode_and_crop_jpeg(files[orientation], 0, 0, height + 1, width,
                                       apply_exif_orientation=True)


@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_full_scale_resized_crops_equal_turn_then_resize(files, orientation: int,
                                                          antialias: bool) -> None:
    """Windows under twice the output decode at full scale: the turned window, then resized."""
    data = files[orientation]
    reference = turned_reference(data, orientation)
    height, width = reference.shape[1:]
    for y, x, h, w in [(3, 4, height - 10, width - 9), (0, 0, height, width)]:
        for size in [(h * 2 // 3, w * 3 // 4), (h + 7, w + 3), (5, 6)]:
            if not antialias or min(h * 4 // 8 - size[0], w * 4 // 8 - size[1]) < 0:
                ours = custom_op.decode_and_resized_crop_jpeg(
                    data, y, x, h, w, size, antialias=antialias, apply_exif_orientation=True)
                theirs = F.resized_crop(reference, y, x, h, w, list(size), antialias=antialias)
                assert torch.equal(ours, theirs), (y, x, h, w, size)


@pytest.mark.parametrize("size", [None, (24, 20)])
@pytest.mark.parametrize("contiguous", [False, True])
def test_batch_with_turned_files_equals_the_single_calls(files, size, contiguous: bool) -> None:
    """Every orientation in one batch (the turned files go apart from the pool): each result
    equals its single call, in the batch's layout; a batch without the option decodes as stored."""
    datas = [files[orientation] for orientation in ORIENTATIONS]
    box = (2, 3, min(HEIGHT, WIDTH) - 5, min(HEIGHT, WIDTH) - 7)  # inside every displayed image
    batch = custom_op.decode_and_crop_jpeg_batch(datas, [box] * len(datas), size=size,
                                                 contiguous=contiguous,
                                                 apply_exif_orientation=True)
    for index, data in enumerate(datas):
        if size is None:
            single = custom_op.decode_and_crop_jpeg(data, *box, contiguous=contiguous,
                                                    apply_exif_orientation=True)
        else:
            single = custom_op.decode_and_resized_crop_jpeg(data, *box, size,
                                                            apply_exif_orientation=True)
        assert torch.equal(batch[index], single), ORIENTATIONS[index]
    if size is not None:
        layout = torch.contiguous_format if contiguous else torch.channels_last
        assert batch.is_contiguous(memory_format=layout)
    as_stored = custom_op.decode_and_crop_jpeg_batch(datas[5:6], [box], size=size)
    assert not torch.equal(as_stored[0], batch[5])  # orientation 6 turns the window


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_scaled_resized_crops_are_turned(files, orientation: int) -> None:
    """At reduced DCT scales the stored window is resized, then turned: close to the reference
    (the floor is the unturned file's own PSNR, less 0.5 dB), far above a wrong turn."""
    data = files[orientation]
    reference = turned_reference(data, orientation)
    height, width = reference.shape[1:]
    size = (height // 4, width // 4)
    ours = custom_op.decode_and_resized_crop_jpeg(data, 0, 0, height, width, size,
                                                  apply_exif_orientation=True)
    theirs = F.resize(reference, list(size))
    plain_ours = custom_op.decode_and_resized_crop_jpeg(data, 0, 0, HEIGHT, WIDTH,
                                                        (HEIGHT // 4, WIDTH // 4))
    plain_theirs = F.resize(turned_reference(data, 1), [HEIGHT // 4, WIDTH // 4])
    floor = psnr(plain_ours, plain_theirs) - 0.5
    assert psnr(ours, theirs) >= floor
    if orientation != 1:
        unturned = F.resize(turned_reference(data, 1), list(size)) if orientation < 5 else None
        if unturned is not None:
            assert psnr(unturned, theirs) < floor



TRANSFORMS = {
    "rrc": lambda: v2.RandomResizedCrop((20, 30)),
    "random-crop": lambda: v2.RandomCrop((40, 25)),
    "center-crop": lambda: v2.CenterCrop((33, 50)),
    "resize-center-crop": lambda: v2.Compose([v2.Resize(48), v2.CenterCrop(40)]),
    "flip-rrc": lambda: v2.Compose([v2.RandomHorizontalFlip(), v2.RandomResizedCrop(24)]),
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_encoded_jpeg_draws_in_displayed_coordinates(files, orientation: int, name: str) -> None:
    """Same seed, same window and pixels as the transform on the turned decode (exact=True)."""
    data = files[orientation]
    reference = turned_reference(data, orientation)
    encoded = EncodedJpeg(data, apply_exif_orientation=True, exact=True)
    assert encoded.canvas_size == tuple(reference.shape[1:])
    assert encoded.orientation == orientation
    assert torch.equal(encoded.decode(), reference)
    for seed in range(4):
        transform = TRANSFORMS[name]()
        torch.manual_seed(seed)
        theirs = transform(v2.functional.to_image(reference))
        torch.manual_seed(seed)
        ours = transform(encoded)
        assert torch.equal(ours, theirs), f"seed {seed}"


@pytest.mark.parametrize("orientation", [1, 6])
def test_encoded_jpeg_is_as_stored_by_default(files, orientation: int) -> None:
    encoded = EncodedJpeg(files[orientation])
    assert encoded.canvas_size == (HEIGHT, WIDTH) and encoded.orientation == 1


def test_turned_encoded_jpeg_pickles(files) -> None:
    import pickle

    encoded = EncodedJpeg(files[6], apply_exif_orientation=True)
    copy = pickle.loads(pickle.dumps(encoded))
    assert copy.orientation == 6 and copy.canvas_size == (WIDTH, HEIGHT)
    assert torch.equal(copy.decode(), encoded.decode())


def test_hugging_face_helpers_turn_by_default(files) -> None:
    """As datasets' Image() (exif_transpose): a rotated photo comes out as displayed."""
    row = {"bytes": files[6], "path": "phone.jpg"}
    assert hf_image(row).canvas_size == (WIDTH, HEIGHT)
    out = HfImageTransform(v2.CenterCrop(30))({"image": [row]})["image"][0]
    assert torch.equal(out, F.center_crop(turned_reference(files[6], 6), [30, 30]))
    kept = HfImageTransform(apply_exif_orientation=False)({"image": [row]})["image"][0]
    assert kept.shape[1:] == (HEIGHT, WIDTH)


def test_compose_jpeg_takes_the_option(files) -> None:
    """timm / v1 pipelines (ImageFolder's PIL images are not turned): off by default, on when
    asked, drawing in the displayed image."""
    from torchvision import transforms as v1

    from custom_op.transforms import ComposeJPEG

    pipeline = v1.Compose([v1.RandomCrop((30, 20)), v1.PILToTensor()])
    reference = turned_reference(files[8], 8)
    for seed in range(3):
        torch.manual_seed(seed)
        theirs = pipeline(F.to_pil_image(reference))
        torch.manual_seed(seed)
        ours = ComposeJPEG(pipeline, apply_exif_orientation=True)(files[8])
        assert torch.equal(ours, theirs), f"seed {seed}"
    torch.manual_seed(0)
    stored = pipeline(F.to_pil_image(turned_reference(files[8], 1)))
    torch.manual_seed(0)
    assert torch.equal(ComposeJPEG(pipeline)(files[8]), stored)
