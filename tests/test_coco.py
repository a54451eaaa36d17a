"""custom_op.datasets.CocoJpegDetection: torchvision's CocoDetection with encoded images.

Wrapped with torchvision's wrap_dataset_for_transforms_v2 and run through
torchvision's detection transforms, it must give the boxes and labels that the
same pipeline gives on torchvision's CocoDetection, for the same seed, and
the pixels that pipeline gives on the decoded image (decoded by custom_op
here, so that the comparison is exact; Pillow's own libjpeg-turbo may differ
by a rounding step).
"""

from __future__ import annotations

import pathlib

import pytest
import torch
from torchvision import tv_tensors
from torchvision.datasets import CocoDetection, wrap_dataset_for_transforms_v2
from torchvision.transforms import v2

import custom_op
from custom_op.datasets import CocoJpegDetection
from synthetic import write_coco_detection

IMAGES = 4
HEIGHT, WIDTH = 133, 200


class _DecodedCoco(CocoDetection):
    """The reference: CocoDetection whose images custom_op decodes in full."""

    def _load_image(self, id: int) -> tv_tensors.Image:  # noqa: A002
        path = pathlib.Path(self.root) / self.coco.loadImgs(id)[0]["file_name"]
        return custom_op.EncodedJpeg(path.read_bytes()).decode()


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("coco")
    annotations = write_coco_detection(root, IMAGES, HEIGHT, WIDTH, seed=2)
    return str(root / "images"), str(annotations)


PIPELINES = {
    "iou-crop": lambda: v2.Compose([v2.RandomIoUCrop(), v2.Resize((64, 96)),
                                    v2.SanitizeBoundingBoxes()]),
    "resized-crop": lambda: v2.Compose([v2.RandomResizedCrop((72, 72), scale=(0.3, 1.0)),
                                        v2.RandomHorizontalFlip(),
                                        v2.SanitizeBoundingBoxes()]),
    "eval": lambda: v2.Compose([v2.Resize(100), v2.CenterCrop(96)]),
}


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_boxes_and_pixels_equal_the_decoded_run(coco, pipeline: str) -> None:
    root, annotations = coco
    ours = wrap_dataset_for_transforms_v2(
        CocoJpegDetection(root, annotations, transforms=PIPELINES[pipeline](), exact=True))
    reference = wrap_dataset_for_transforms_v2(
        _DecodedCoco(root, annotations, transforms=PIPELINES[pipeline]()))
    pillow = wrap_dataset_for_transforms_v2(
        CocoDetection(root, annotations, transforms=v2.Compose([v2.ToImage(),
                                                                PIPELINES[pipeline]()])))
    assert len(ours) == len(reference) == IMAGES
    for index in range(IMAGES):
        for seed in range(4):
            outputs = []
            for dataset in (ours, reference, pillow):
                torch.manual_seed(seed)
                outputs.append(dataset[index])
            (image, target), (expected_image, expected), (_, from_pillow) = outputs
            assert type(image) is tv_tensors.Image
            assert torch.equal(image, expected_image), f"image {index} seed {seed}"
            for key in ("boxes", "labels"):
                assert torch.equal(target[key], expected[key]), key
                assert torch.equal(target[key], from_pillow[key]), key
            assert target["image_id"] == expected["image_id"] == index + 1
            assert target["boxes"].canvas_size == expected["boxes"].canvas_size


def test_decode_errors_name_the_image(coco, tmp_path: pathlib.Path) -> None:
    root, annotations = coco
    broken = tmp_path / "images"
    broken.mkdir()
    for path in pathlib.Path(root).iterdir():
        data = path.read_bytes()
        (broken / path.name).write_bytes(data[:len(data) // 3] if path.name.startswith("00001")
                                         else data)
    dataset = wrap_dataset_for_transforms_v2(
        CocoJpegDetection(str(broken), annotations, transforms=v2.Resize(64)))
    with pytest.raises(custom_op.JpegDecodeError, match=r"00001\.jpg: .*Premature end"):
        image, _ = dataset[1]
        image.decode()  # a Resize last in the pipeline decodes when the image is first used
