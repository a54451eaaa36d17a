"""CocoJpegDetection: torchvision's CocoDetection whose images stay encoded until the crop."""

from __future__ import annotations

import os
from typing import Any

from torchvision.datasets import CocoDetection

from .._torchvision._encoded_jpeg import DecodeOptions, EncodedJpeg
from ._loading import load_sample


class CocoJpegDetection(CocoDetection):
    """``torchvision.datasets.CocoDetection`` with images as :class:`custom_op.EncodedJpeg`.

    Everything but the image is torchvision's: the annotation file is read by
    pycocotools (``pip install pycocotools``, as CocoDetection needs), the
    order of images and the targets are CocoDetection's, and
    ``torchvision.datasets.wrap_dataset_for_transforms_v2`` wraps it as it
    wraps CocoDetection (it finds CocoDetection's wrapper through the class
    hierarchy). Wrapped, an item is ``(EncodedJpeg, {"image_id", "boxes",
    "labels"})`` with the boxes a ``tv_tensors.BoundingBoxes`` in XYXY whose
    canvas size comes from the JPEG header; torchvision's detection transforms
    (``v2.RandomIoUCrop``, ``v2.RandomResizedCrop``, ``v2.Resize``,
    ``v2.SanitizeBoundingBoxes``) then crop the boxes as for a decoded image
    and decode only the window of the image.

    End such a pipeline with a transform that always decodes (``v2.Resize``)
    or with :class:`custom_op.transforms.DecodeJPEG`: ``v2.RandomIoUCrop``
    keeps the whole image in one of its options, and then leaves it encoded.
    Decode errors name the file, wherever in the pipeline they happen.

    Args:
        root: The folder of the images.
        annFile: The COCO-style JSON annotation file.
        transform, target_transform, transforms: As CocoDetection.
        decode_options: How the JPEGs are decoded, by keyword (``mode``,
            ``strict``, ``seek``, ``exact``, ``contiguous``, ``max_pixels``,
            ``max_scans``, ``max_memory``); see :class:`custom_op.EncodedJpeg`. Files that are not
            JPEGs are decoded in full (a ``tv_tensors.Image``).

    Example:
        >>> from torchvision.datasets import wrap_dataset_for_transforms_v2
        >>> from torchvision.transforms import v2
        >>> transforms = v2.Compose([v2.RandomIoUCrop(), v2.Resize((512, 512)),
        ...                          v2.SanitizeBoundingBoxes()])
        >>> dataset = wrap_dataset_for_transforms_v2(
        ...     CocoJpegDetection("images", "annotations.json", transforms=transforms))
        >>> image, target = dataset[0]     # target["boxes"] follow the crop
    """

    def __init__(self, root: str, annFile: str, transform: Any = None,
                 target_transform: Any = None, transforms: Any = None,
                 **decode_options: Any) -> None:
        self.options = DecodeOptions.checked("CocoJpegDetection", **decode_options)
        super().__init__(root, annFile, transform=transform, target_transform=target_transform,
                         transforms=transforms)

    def _load_image(self, id: int) -> EncodedJpeg:  # noqa: A002 (torchvision's name)
        path = os.path.join(self.root, self.coco.loadImgs(id)[0]["file_name"])
        return load_sample(path, self.options)
