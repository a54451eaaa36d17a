"""torchvision's geometry, from its public API or written here, never from its private modules.

Output sizes, centre anchors and interpolation names must be torchvision's exactly, or
EncodedJpeg's windows drift from the decoded pipeline's. torchvision keeps the helpers
that compute them private (``v2.functional._geometry``); private names change without
notice, so each is either computed through a public function or rewritten here, and
tests/test_tv_geometry.py pins every one against torchvision's own over a sweep of inputs.
docs/design.md lists the one private name still used (_KERNEL_REGISTRY) and why.
"""

from __future__ import annotations

import numbers
from typing import Any, Optional, Sequence, Union

import torch
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as F

#: Pillow's integer constants, which torchvision accepts for interpolation.
_PIL_INTERPOLATION = {0: InterpolationMode.NEAREST, 1: InterpolationMode.LANCZOS,
                      2: InterpolationMode.BILINEAR, 3: InterpolationMode.BICUBIC,
                      4: InterpolationMode.BOX, 5: InterpolationMode.HAMMING}

#: No boxes, only a canvas: what resize_bounding_boxes needs to compute a resized size.
_NO_BOXES = torch.empty((0, 4))


def resized_output_size(canvas_size: tuple[int, int], size: Optional[Union[int, Sequence[int]]],
                        max_size: Optional[int] = None) -> list[int]:
    """The ``[height, width]`` torchvision's v2 resize gives an image of ``canvas_size``.

    Computed by torchvision's public ``resize_bounding_boxes`` on an empty set of boxes: the
    same code path as its image resize, including its errors for bad ``size``/``max_size``.
    An explicit ``[height, width]`` of positive ints without ``max_size`` (RandomResizedCrop's
    size, every sample) is that size whatever the canvas, and skips the boxes' cost.
    """
    if (max_size is None and isinstance(size, (list, tuple)) and len(size) == 2
            and all(type(side) is int and side > 0 for side in size)):
        return [size[0], size[1]]
    boxes = tv_tensors.BoundingBoxes(_NO_BOXES, format="XYXY", canvas_size=tuple(canvas_size))
    _, new_size = F.resize_bounding_boxes(boxes, canvas_size=tuple(canvas_size), size=size,
                                          max_size=max_size)
    return [int(new_size[0]), int(new_size[1])]


def center_crop_size(output_size: Union[int, Sequence[int]]) -> list[int]:
    """``[height, width]`` of a centre crop's ``output_size`` (an int, or one or two ints)."""
    if isinstance(output_size, numbers.Number):
        return [int(output_size), int(output_size)]
    if isinstance(output_size, (tuple, list)) and len(output_size) == 1:
        return [output_size[0], output_size[0]]
    return list(output_size)


def center_crop_anchor(crop_height: int, crop_width: int, image_height: int,
                       image_width: int) -> tuple[int, int]:
    """The centre crop's top-left corner, rounded as torchvision's v2 rounds it (half to even)."""
    return (int(round((image_height - crop_height) / 2.0)),
            int(round((image_width - crop_width) / 2.0)))


def interpolation_mode(interpolation: Any) -> InterpolationMode:
    """``interpolation`` as an InterpolationMode: a mode, its name, or a Pillow constant."""
    if isinstance(interpolation, InterpolationMode):
        return interpolation
    if isinstance(interpolation, str):
        try:
            return InterpolationMode(interpolation)
        except ValueError:
            raise ValueError(f"Invalid interpolation mode: {interpolation!r}; the names are "
                             f"{[mode.value for mode in InterpolationMode]}") from None
    if isinstance(interpolation, int) and interpolation in _PIL_INTERPOLATION:
        return _PIL_INTERPOLATION[interpolation]
    raise ValueError("Argument interpolation should be an `InterpolationMode` or a "
                     f"corresponding Pillow integer constant, but got {interpolation}.")
