"""custom_op.EncodedJpeg under torchvision's own v2 transforms.

The reference for every case is the same torchvision pipeline, with the same
seed, on the decoded image (custom_op's full decode, which equals
torchvision's decode_jpeg for these files). With ``exact=True`` the images
must be equal bit for bit; by default too wherever no DCT scaling applies
(every crop, and resizes to more than half the window), and within a PSNR
floor where it does. Boxes, masks, keypoints and labels must always be equal:
torchvision transforms them, from the header's size alone.

Which cases: every torchvision transform under every sample structure, each on a file and with
an exactness chosen so that every transform and every structure meets every file and both
exactnesses (tests/_speeds.py). That the pixels of each window, mode and DCT scale of each kind
of file are the full decode's is the C++ core test's (fuzz/core_test.cc under ASan/UBSan and
valgrind in .ci/run: every window against the whole decode, the resized path at every scale) and
test_decode.py's; here what is checked is the transforms' arithmetic on an EncodedJpeg.
"""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import tv_tensors
from torchvision.io import ImageReadMode
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import _speeds
import custom_op
from custom_op import EncodedJpeg
from synthetic import make_photo
from _closeness import assert_close, psnr
from _cpu_seed import seed_cpu

# Files: small corpus files with every sampling of interest, and one photo-like file big enough
# for DCT scaling to apply to typical crops.
FILES = ["420-base-q90-120x200", "422-prog-q60-120x200", "gray-base-q50-7x13",
         "cmyk-444-base-q75-57x91", "420-prog-q100-257x256"]
SEEDS = range(3)
#: Resized outputs decoded at a reduced DCT scale: the lowest PSNR the right code measures over
#: this file's cases (22.33 dB), less 0.5 dB. Each case must also beat the reference moved by
#: one pixel (assert_close), which catches a misregistered window the floor alone would not.
PSNR_FLOOR_DB = 21.8


@pytest.fixture(scope="module")
def big_photo() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(make_photo(375, 500, seed=3)).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def files(corpus_by_id, big_photo) -> dict[str, bytes]:
    chosen = {case_id: corpus_by_id[case_id].data for case_id in FILES}
    chosen["photo-375x500"] = big_photo
    return chosen


def decoded(data: bytes, mode: str = "rgb") -> tv_tensors.Image:
    return EncodedJpeg(data, mode=mode).decode()





def boxes_for(height: int, width: int) -> tv_tensors.BoundingBoxes:
    h, w = height, width
    return tv_tensors.BoundingBoxes(
        [[0, 0, max(w // 2, 1), max(h // 2, 1)], [w // 4, h // 4, w - 1, h - 1],
         [w // 3, 0, w // 3 + max(w // 5, 1), h]],
        format="XYXY", canvas_size=(h, w))


def sample_of(structure: str, image, height: int, width: int):
    """``image`` in one of the sample structures v2 pipelines pass."""
    boxes = boxes_for(height, width)
    labels = torch.tensor([1, 2, 3])
    mask = tv_tensors.Mask((torch.arange(height * width).reshape(height, width) % 7 == 0)
                           .to(torch.uint8))
    keypoints = tv_tensors.KeyPoints([[0, 0], [width - 1, height - 1], [width / 2, height / 3]],
                                     canvas_size=(height, width))
    if structure == "bare":
        return image
    if structure == "tuple-label":
        return (image, 7)
    if structure == "detection":
        return (image, {"boxes": boxes, "labels": labels})
    return {"image": image, "boxes": boxes, "labels": labels, "mask": mask,
            "keypoints": keypoints}


def computed_resizes(sample):
    """``sample`` with every EncodedJpeg whose resize is pending replaced by the resized image."""
    leaves, spec = torch.utils._pytree.tree_flatten(sample)
    return torch.utils._pytree.tree_unflatten(
        [leaf.decode() if isinstance(leaf, EncodedJpeg) and leaf.pending_resize is not None
         else leaf for leaf in leaves], spec)


def run(transform, sample, seed: int):
    seed_cpu(seed)
    return transform(sample)


def assert_same_sample(got, expected, *, exact: bool, where: str) -> None:
    """Images equal (or above the PSNR floor when ``exact`` is False); everything else equal."""
    got_leaves = torch.utils._pytree.tree_flatten(got)[0]
    expected_leaves = torch.utils._pytree.tree_flatten(expected)[0]
    assert len(got_leaves) == len(expected_leaves), where
    for ours, theirs in zip(got_leaves, expected_leaves):
        assert type(ours) is type(theirs), f"{where}: {type(ours)} != {type(theirs)}"
        if isinstance(theirs, tv_tensors.Image):
            assert ours.shape == theirs.shape, where
            if exact:
                assert torch.equal(ours, theirs), f"{where}: {psnr(ours, theirs):.1f} dB"
            else:
                assert_close(ours, theirs, PSNR_FLOOR_DB, where)
        elif isinstance(theirs, torch.Tensor):
            assert torch.equal(ours, theirs), where
            for attribute in ("format", "canvas_size"):
                assert getattr(ours, attribute, None) == getattr(theirs, attribute, None), where
        else:
            assert ours == theirs, where


# torchvision's own transforms, by id. "scales" marks those whose resize may use DCT scaling.
TRANSFORMS = {
    "RandomResizedCrop": lambda h, w: v2.RandomResizedCrop((max(h // 3, 1), max(w // 3, 1))),
    "RandomResizedCrop-bicubic": lambda h, w: v2.RandomResizedCrop(
        (max(h // 2, 1), max(w // 2, 1)), interpolation=v2.InterpolationMode.BICUBIC),
    "RandomCrop": lambda h, w: v2.RandomCrop((max(h - 3, 1), max(w // 2, 1))),
    "RandomCrop-pad": lambda h, w: v2.RandomCrop((h + 5, w + 2), pad_if_needed=True),
    "CenterCrop": lambda h, w: v2.CenterCrop((max(h // 2, 1), max(w - 2, 1))),
    "CenterCrop-larger": lambda h, w: v2.CenterCrop((h + 4, w + 3)),
    "Resize": lambda h, w: v2.Resize(max(min(h, w) // 3, 1)),
    "Resize-CenterCrop": lambda h, w: v2.Compose([v2.Resize(max(min(h, w) // 2, 2)),
                                                  v2.CenterCrop(max(min(h, w) // 2 - 1, 1))]),
    "RandomIoUCrop": lambda h, w: v2.Compose([v2.RandomIoUCrop(), v2.Resize((32, 48)),
                                              v2.SanitizeBoundingBoxes()]),
    "flip-then-crop": lambda h, w: v2.Compose([v2.RandomHorizontalFlip(p=1.0),
                                               v2.RandomCrop((max(h // 2, 1), max(w // 2, 1)))]),
    "ColorJitter": lambda h, w: v2.ColorJitter(brightness=0.5, hue=0.1),
    "ToDtype-Normalize": lambda h, w: v2.Compose([
        v2.CenterCrop(max(min(h, w) // 2, 1)), v2.ToDtype(torch.float32, scale=True),
        v2.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3])]),
}
RESIZING = {"RandomResizedCrop", "Resize", "Resize-CenterCrop", "RandomIoUCrop"}
STRUCTURES = ["bare", "tuple-label", "detection", "dict"]


def _applicable(name: str, structure: str, file_id: str) -> bool:
    if name == "RandomIoUCrop":
        return structure in ("detection", "dict")
    if name == "ToDtype-Normalize" or name == "ColorJitter":
        return not file_id.startswith("gray")  # torchvision's hue and Normalize need 3 channels
    return True


#: (transform, sample structure) by id, each run on a file and with an exactness chosen so that
#: every transform and every structure meets every file and both exactnesses (tests/_speeds.py).
PIPELINES = {f"{name}-{structure}": {"name": name, "structure": structure}
             for name in TRANSFORMS for structure in STRUCTURES
             if any(_applicable(name, structure, file_id) for file_id in FILES)}
CASES = _speeds.covering_params(
    PIPELINES, {"file_id": FILES + ["photo-375x500"], "exact": (True, False)},
    {"exact": lambda exact: "exact" if exact else "scaled"},
    allowed=lambda pipeline, case: _applicable(*PIPELINES[pipeline].values(), case["file_id"]))


@pytest.mark.parametrize("pipeline, file_id, exact", CASES)
def test_torchvision_transforms_equal_the_decoded_run(files, pipeline: str, file_id: str,
                                                      exact: bool) -> None:
    name, structure = PIPELINES[pipeline]["name"], PIPELINES[pipeline]["structure"]
    data = files[file_id]
    encoded = EncodedJpeg(data, exact=exact)
    height, width = encoded.canvas_size
    transform = TRANSFORMS[name](height, width)
    for seed in SEEDS:
        got = run(transform, sample_of(structure, encoded, height, width), seed)
        expected = run(transform, sample_of(structure, decoded(data), height, width), seed)
        # A resize last in the pipeline stays pending: the resized image, computed when used.
        got = computed_resizes(got)
        leaves = torch.utils._pytree.tree_flatten(got)[0]
        if not any(isinstance(leaf, EncodedJpeg) for leaf in leaves):
            assert_same_sample(got, expected, exact=exact or name not in RESIZING,
                               where=f"seed {seed}")
        else:  # RandomIoUCrop's "keep the whole image" option touches nothing
            pytest.fail(f"seed {seed}: an EncodedJpeg left the pipeline undecoded")


@pytest.mark.parametrize("file_id", FILES + ["photo-375x500"])
def test_resized_crop_without_scaling_is_exact_by_default(files, file_id: str) -> None:
    """Windows less than twice the output decode at full scale: torchvision's pixels exactly."""
    encoded = EncodedJpeg(files[file_id])
    full = encoded.decode()
    height, width = encoded.canvas_size
    for top, left, crop_height, crop_width in [(0, 0, height, width),
                                               (height // 3, width // 4, height // 2 + 1,
                                                width // 2 + 1)]:
        size = [max(crop_height * 2 // 3, 1), max(crop_width * 3 // 4, 1)]
        for antialias in (True, False):
            got = F.resized_crop(encoded, top, left, crop_height, crop_width, size,
                                 antialias=antialias)
            expected = F.resized_crop(full, top, left, crop_height, crop_width, size,
                                      antialias=antialias)
            assert torch.equal(got, expected)


def test_scaled_resize_holds_the_psnr_floor_and_exact_switch_matches(files) -> None:
    data = files["photo-375x500"]
    full = decoded(data)
    for size in ([60, 80], [30, 40], [100, 100]):
        scaled = F.resized_crop(EncodedJpeg(data), 20, 30, 300, 400, size)
        exact = F.resized_crop(EncodedJpeg(data, exact=True), 20, 30, 300, 400, size)
        reference = F.resized_crop(full, 20, 30, 300, 400, size)
        assert torch.equal(exact, reference)
        assert_close(scaled, reference, PSNR_FLOOR_DB, str(size))


@pytest.mark.parametrize("mode, channels", [("rgb", 3), ("GRAY", 1), ("unchanged", 4),
                                            (ImageReadMode.RGB, 3), (ImageReadMode.GRAY, 1),
                                            (ImageReadMode.UNCHANGED, 4)])
def test_modes_and_image_read_modes(files, mode, channels: int) -> None:
    encoded = EncodedJpeg(files["cmyk-444-base-q75-57x91"], mode=mode)
    assert F.get_dimensions(encoded) == [channels, 57, 91]
    assert F.get_num_channels(encoded) == channels
    assert F.center_crop(encoded, [10, 20]).shape == (channels, 10, 20)


@pytest.mark.parametrize("mode", [ImageReadMode.RGB_ALPHA, ImageReadMode.GRAY_ALPHA, "cmyk", 3])
def test_bad_modes_are_refused(files, mode) -> None:
    error = TypeError if isinstance(mode, int) else ValueError
    with pytest.raises(error, match="EncodedJpeg.*mode"):
        EncodedJpeg(files["420-base-q90-120x200"], mode=mode)


def test_sizes_come_from_the_header_without_decoding(files, monkeypatch) -> None:
    encoded = EncodedJpeg(files["420-base-q90-120x200"])

    def refuse(*args, **kwargs):
        raise AssertionError("decoded")

    monkeypatch.setattr(custom_op._torchvision._encoded_jpeg, "decode_and_crop_jpeg", refuse)
    assert F.get_size(encoded) == [120, 200]
    assert F.get_dimensions(encoded) == [3, 120, 200]
    assert v2.RandomResizedCrop(8).make_params([encoded])["height"] >= 1


@pytest.mark.parametrize("make", [lambda b: b, bytearray, lambda b: torch.tensor(list(b),
                                  dtype=torch.uint8), lambda b: np.frombuffer(b, np.uint8),
                                  memoryview], ids=["bytes", "bytearray", "tensor", "numpy",
                                                    "memoryview"])
def test_every_kind_of_input_gives_the_same_image(files, make) -> None:
    data = files["422-prog-q60-120x200"]
    encoded = EncodedJpeg(make(data))
    assert encoded.canvas_size == (120, 200) and bytes(encoded.numpy()) == data
    assert torch.equal(F.crop(encoded, 5, 6, 30, 40), decoded(data)[:, 5:35, 6:46])


def test_tensor_input_is_shared_not_copied(files) -> None:
    tensor = torch.frombuffer(bytearray(files["420-base-q90-120x200"]), dtype=torch.uint8)
    assert EncodedJpeg(tensor).data_ptr() == tensor.data_ptr()


def test_bad_inputs_raise(files) -> None:
    with pytest.raises(custom_op.JpegDecodeError, match="Not a JPEG file"):
        EncodedJpeg(b"\x89PNG\r\n\x1a\n" + bytes(100))
    with pytest.raises(custom_op.JpegDecodeError, match=r"^cat\.jpg: "):
        EncodedJpeg(b"", source="cat.jpg")
    with pytest.raises(TypeError, match="uint8"):
        EncodedJpeg(torch.zeros(10, dtype=torch.float32))
    with pytest.raises(TypeError, match="strict must be a bool"):
        EncodedJpeg(files["420-base-q90-120x200"], strict=1)
    with pytest.raises(ValueError, match="max_pixels"):
        EncodedJpeg(files["420-base-q90-120x200"], max_pixels=0)


def test_decode_errors_name_the_source(files) -> None:
    data = files["422-prog-q60-120x200"]
    truncated = EncodedJpeg(data[:len(data) // 2], source="shard-7.tar/n01/img.jpg")
    message = r"^shard-7\.tar/n01/img\.jpg: .*Premature end of JPEG file"
    for transform in (v2.RandomResizedCrop(32), v2.CenterCrop(16), v2.RandomHorizontalFlip(1.0)):
        with pytest.raises(custom_op.JpegDecodeError, match=message):
            transform(truncated)
    lenient = EncodedJpeg(truncated, strict=False)
    assert lenient.source == truncated.source
    assert v2.CenterCrop(16)(lenient).shape == (3, 16, 16)


def test_pickles_clones_and_moves_with_its_metadata(files) -> None:
    encoded = EncodedJpeg(files["gray-base-q50-7x13"], mode="unchanged", seek=False,
                          source="a.jpg")
    for copy in (pickle.loads(pickle.dumps(encoded)), encoded.clone(), encoded.to("cpu"),
                 encoded.detach()):
        assert type(copy) is EncodedJpeg
        assert (copy.canvas_size, copy.num_channels, copy.options, copy.source) == \
            ((7, 13), 1, encoded.options, "a.jpg")
        assert torch.equal(copy.decode(), encoded.decode())


@pytest.mark.parametrize("operation", [lambda e: e.float(), lambda e: e.reshape(1, 1, -1),
                                       lambda e: e + 1, lambda e: torch.stack([e, e]),
                                       lambda e: v2.AugMix()(e)],
                         ids=["float", "reshape", "add", "stack", "AugMix"])
def test_computing_on_the_bytes_as_pixels_is_refused(files, operation) -> None:
    """Transforms that bypass the v2 functionals (AugMix) must not turn bytes into garbage."""
    encoded = EncodedJpeg(files["420-base-q90-120x200"])
    # Python turns a TypeError from an operator (e + 1) into its own "unsupported operand".
    with pytest.raises(TypeError, match=r"cannot run on an EncodedJpeg: it holds a JPEG's "
                                        r"encoded bytes, not pixels. Decode it first|"
                                        r"unsupported operand type\(s\) for \+: 'EncodedJpeg'"):
        operation(encoded)


TO_OTHER_DTYPES = {
    "dtype": lambda e: e.to(torch.float32),
    "dtype-keyword": lambda e: e.to(dtype=torch.float32),
    "device-dtype": lambda e: e.to("cpu", torch.float32),
    "device-dtype-keywords": lambda e: e.to(device=torch.device("cpu"), dtype=torch.int64),
    "dtype-non-blocking": lambda e: e.to(torch.float16, non_blocking=True, copy=True),
    "other-tensor": lambda e: e.to(torch.zeros(1)),
    "torch.Tensor.to": lambda e: torch.Tensor.to(e, torch.float64),
}


@pytest.mark.parametrize("form", list(TO_OTHER_DTYPES))
def test_to_another_dtype_is_refused_like_float(files, form: str) -> None:
    """.to() that changes the dtype computes on the bytes as .float() does: refused alike; with
    a resize pending, it gets the resized image, as every other operation does."""
    encoded = EncodedJpeg(files["420-base-q90-120x200"])
    with pytest.raises(TypeError, match=r"^to\(\) cannot run on an EncodedJpeg: it holds a "
                                        r"JPEG's encoded bytes, not pixels. Decode it first"):
        TO_OTHER_DTYPES[form](encoded)
    pending = F.resize(encoded, [30, 50])
    converted = TO_OTHER_DTYPES[form](pending)
    assert converted.shape == (3, 30, 50) and converted.dtype != torch.uint8
    assert torch.equal(converted, pending.decode().to(converted.dtype))


@pytest.mark.parametrize("move", [lambda e: e.to(torch.uint8), lambda e: e.to("cpu"),
                                  lambda e: e.to("cpu", torch.uint8, copy=True),
                                  lambda e: e.to(torch.zeros(1, dtype=torch.uint8))],
                         ids=["uint8", "device", "device-uint8", "uint8-tensor"])
def test_to_without_a_dtype_change_keeps_the_file(files, move) -> None:
    encoded = EncodedJpeg(files["420-base-q90-120x200"])
    moved = move(encoded)
    assert type(moved) is EncodedJpeg and torch.equal(moved.decode(), encoded.decode())


class _InMemory(Dataset):
    """EncodedJpegs made in the main process, so they are pickled into spawned workers."""

    def __init__(self, datas: list[bytes]) -> None:
        self.items = [EncodedJpeg(data, mode="gray") for data in datas]
        self.transform = v2.Compose([v2.RandomResizedCrop(16), v2.RandomHorizontalFlip()])

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        return self.transform(self.items[index]), index


@pytest.mark.timeout(180)
def test_pickles_into_spawned_data_loader_workers(files) -> None:
    dataset = _InMemory([files[file_id] for file_id in FILES])
    loader = DataLoader(dataset, batch_size=2, num_workers=2, multiprocessing_context="spawn",
                        timeout=120)
    images = torch.cat([batch for batch, _ in loader])
    assert images.shape == (len(FILES), 1, 16, 16) and images.dtype == torch.uint8


def test_decode_jpeg_transform_decodes_what_is_left(files) -> None:
    encoded = EncodedJpeg(files["420-base-q90-120x200"])
    pipeline = v2.Compose([v2.RandomCrop((120, 200)), custom_op.transforms.DecodeJPEG()])
    image, label = pipeline(encoded, 3)
    assert type(image) is tv_tensors.Image and label == 3
    assert torch.equal(image, encoded.decode())


@pytest.mark.parametrize("transform", [
    v2.RandomResizedCrop(64, antialias=False),
    v2.Resize(60, antialias=False),
    v2.Compose([v2.Resize(120, antialias=False), v2.CenterCrop(64)]),
], ids=["rrc", "resize", "resize-centercrop"])
def test_resizes_without_antialias_are_exact(big_photo, transform) -> None:
    """Issue 24 item 5: without antialias, no path decodes at a reduced DCT scale, so the
    pixels equal torchvision's (a scaled decode gave 21-22 dB and up to 135 levels)."""
    for seed in SEEDS:
        seed_cpu(seed)
        theirs = transform(decoded(big_photo))
        seed_cpu(seed)
        ours = transform(EncodedJpeg(big_photo))
        assert torch.equal(ours, theirs), f"seed {seed}: {psnr(ours, theirs):.1f} dB"


def test_resized_crop_functional_without_antialias_is_exact(big_photo) -> None:
    ours = F.resized_crop(EncodedJpeg(big_photo), 10, 20, 300, 400, [50, 60], antialias=False)
    theirs = F.resized_crop(decoded(big_photo), 10, 20, 300, 400, [50, 60], antialias=False)
    assert torch.equal(ours, theirs), f"{psnr(ours, theirs):.1f} dB"


def decode_jpeg_output(data: bytes) -> torch.Tensor:
    """torchvision's own decode (deprecated in 0.29, hence the filter): the layout to match."""
    import warnings

    from torchvision.io import decode_jpeg

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))


@pytest.mark.parametrize("interpolation", [v2.InterpolationMode.BILINEAR,
                                           v2.InterpolationMode.BICUBIC])
@pytest.mark.parametrize("transform", ["resize-1x1", "rrc-1", "rrc-1x2"])
@pytest.mark.parametrize("contiguous", [False, True])
def test_tiny_resizes_give_torchvisions_pixels(big_photo, transform: str, interpolation,
                                               contiguous: bool) -> None:
    """Issue 24 item 7: Resize((1, 1)) or RandomResizedCrop(1) with bicubic hit an ATen
    INTERNAL ASSERT on contiguous CHW uint8; the decoded pipeline (HWC memory) does not."""
    make = {"resize-1x1": lambda: v2.Resize((1, 1), interpolation=interpolation),
            "rrc-1": lambda: v2.RandomResizedCrop(1, interpolation=interpolation),
            "rrc-1x2": lambda: v2.RandomResizedCrop((1, 2), interpolation=interpolation)}[transform]
    for seed in SEEDS:
        seed_cpu(seed)
        theirs = make()(tv_tensors.Image(decode_jpeg_output(big_photo)))
        seed_cpu(seed)
        ours = make()(EncodedJpeg(big_photo, exact=True, contiguous=contiguous))
        assert torch.equal(ours, theirs), f"seed {seed}"
        assert ours.is_contiguous() or not contiguous


LAYOUT_FOLLOWING = {
    "rrc-noise": lambda: v2.Compose([v2.RandomResizedCrop(48), v2.ToDtype(torch.float32, scale=True),
                                     v2.GaussianNoise(sigma=0.2)]),
    "crop-noise": lambda: v2.Compose([v2.RandomCrop(40), v2.ToDtype(torch.float32, scale=True),
                                      v2.GaussianNoise(sigma=0.2)]),
    "resize-crop-noise": lambda: v2.Compose([v2.Resize(300), v2.CenterCrop(64),
                                             v2.ToDtype(torch.float32, scale=True),
                                             v2.GaussianNoise(sigma=0.2)]),
    "crop-randn-like": lambda: v2.Compose([v2.RandomCrop(40), v2.Lambda(
        lambda image: image.float() + torch.randn_like(image, dtype=torch.float32))]),
}


@pytest.mark.parametrize("pipeline", list(LAYOUT_FOLLOWING))
def test_layout_following_random_ops_draw_the_same_pixels(big_photo, pipeline: str) -> None:
    """Issue 24 item 7: randn_like follows its input's memory layout, so same seed, same pixels
    needs our output's layout to be what torchvision's pipeline on decode_jpeg's has."""
    for seed in SEEDS:
        seed_cpu(seed)
        theirs = LAYOUT_FOLLOWING[pipeline]()(tv_tensors.Image(decode_jpeg_output(big_photo)))
        seed_cpu(seed)
        ours = LAYOUT_FOLLOWING[pipeline]()(EncodedJpeg(big_photo, exact=True))
        assert torch.equal(ours, theirs), f"seed {seed}"
