"""FusedHead (custom_op/_torchvision/_fused_head.py) against the v2 pipeline it stands for.

The head runs RandomResizedCrop and the flip itself on an EncodedJpeg; everything a user
can observe must be the pipeline's: the pixels, their memory layout (strides, which
layout-following random ops read), the generator's state afterwards, and the fallbacks
(other inputs, other heads, hooks).
"""

from __future__ import annotations

import io

import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode, v2

import custom_op
from custom_op._torchvision._fused_head import FusedHead, split_head

from _cpu_seed import seed_cpu
from conftest import make_photo

PIPELINES = {
    "rrc-flip": lambda: v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()]),
    "rrc-rect-noaa-flip03-jitter": lambda: v2.Compose([
        v2.RandomResizedCrop((60, 90), antialias=False), v2.RandomHorizontalFlip(p=0.3),
        v2.ColorJitter(0.3, 0.3)]),
    "rrc-alone-large": lambda: v2.RandomResizedCrop(400, scale=(0.5, 1.0)),
    "rrc-nearest-tail2": lambda: v2.Compose([
        v2.RandomResizedCrop(64, interpolation=InterpolationMode.NEAREST),
        v2.RandomHorizontalFlip(), v2.RandomVerticalFlip(), v2.ToDtype(torch.float32, scale=True)]),
}

FILES = {  # (height, width, Pillow mode, subsampling)
    "color-420": (300, 460, "RGB", "4:2:0"),
    "color-444-full-width": (120, 90, "RGB", "4:4:4"),
    "gray": (250, 330, "L", "4:4:4"),
    "cmyk": (140, 210, "CMYK", "4:4:4"),
}


def _jpeg(name: str) -> bytes:
    height, width, mode, subsampling = FILES[name]
    image = Image.fromarray(make_photo(height, width, seed=len(name))).convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90, subsampling=subsampling)
    return buffer.getvalue()


def _outcome(transform, encoded: custom_op.EncodedJpeg, seed: int):
    seed_cpu(seed)
    output = transform(encoded)
    return output, torch.get_rng_state()


@pytest.mark.parametrize("file", FILES)
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_the_fused_head_is_the_pipeline(pipeline: str, file: str) -> None:
    transform = PIPELINES[pipeline]()
    fused = FusedHead(transform)
    assert fused.fusable
    encoded = custom_op.EncodedJpeg(_jpeg(file))
    for seed in range(12):
        theirs, their_state = _outcome(transform, encoded, seed)
        ours, our_state = _outcome(fused, encoded, seed)
        assert type(ours) is type(theirs)
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        assert ours.stride() == theirs.stride(), seed
        assert torch.equal(ours, theirs), seed
        assert torch.equal(our_state, their_state), seed


def test_other_inputs_and_heads_take_the_transform_as_it_is() -> None:
    calls = []
    pipeline = v2.Compose([v2.RandomResizedCrop(32), v2.Lambda(lambda x: calls.append(1) or x)])
    fused = FusedHead(pipeline)
    decoded = tv_tensors.Image(torch.zeros(3, 50, 60, dtype=torch.uint8))
    assert fused(decoded).shape == (3, 32, 32) and calls == [1]
    assert not FusedHead(v2.Compose([v2.RandomHorizontalFlip(), v2.RandomResizedCrop(8)])).fusable

    class MyCrop(v2.RandomResizedCrop):
        pass

    assert split_head(v2.Compose([MyCrop(8)]))[0] is None
    assert not FusedHead(lambda image: image).fusable


def test_hooks_on_the_head_still_run() -> None:
    transform = v2.Compose([v2.RandomResizedCrop(48), v2.RandomHorizontalFlip()])
    seen = []
    transform.transforms[1].register_forward_hook(lambda module, args, output: seen.append(1))
    encoded = custom_op.EncodedJpeg(_jpeg("color-420"))
    theirs, _ = _outcome(transform, encoded, 5)
    ours, _ = _outcome(FusedHead(transform), encoded, 5)
    assert torch.equal(ours, theirs) and seen == [1, 1]


def test_jpeg_folder_items_are_the_pipelines(tmp_path) -> None:
    for index, name in enumerate(FILES):
        folder = tmp_path / ("a" if index % 2 else "b")
        folder.mkdir(exist_ok=True)
        (folder / f"{name}.jpg").write_bytes(_jpeg(name))
    transform = PIPELINES["rrc-flip"]()
    dataset = custom_op.JpegFolder(tmp_path, transform=transform)
    for index, (path, _) in enumerate(dataset.samples):
        seed_cpu(index)
        theirs = transform(custom_op.EncodedJpeg(open(path, "rb").read()))
        seed_cpu(index)
        ours, _ = dataset[index]
        assert torch.equal(ours, theirs) and ours.stride() == theirs.stride(), path
    dataset.transform = v2.Compose([v2.CenterCrop(20)])  # replaced: the new one is used
    assert dataset[0][0].shape == (3, 20, 20)
