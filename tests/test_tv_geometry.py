"""custom_op/_torchvision/_tv_geometry.py against torchvision's own (private) helpers, over sweeps of inputs.

custom_op does not import torchvision's private geometry; these tests are where its
behaviour is pinned, so a torchvision release that changes it fails here, by name.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F1
from torchvision.transforms.v2.functional import _geometry

from custom_op._torchvision import _tv_geometry

CANVASES = [(1, 1), (1, 300), (300, 1), (7, 13), (375, 500), (500, 375), (533, 800), (64, 64)]
SIZES = [None, 1, 7, 224, 256, [256], [1], [224, 224], (100, 37), [3, 1000], [0, 5], [5, -1],
         (224, True)]
MAX_SIZES = [None, 2, 257, 300, 1000]


def _outcome(function, *args):
    try:
        return function(*args)
    except (ValueError, TypeError, KeyError):  # torchvision raises KeyError for unknown ints
        return "refused"


@pytest.mark.parametrize("canvas", CANVASES, ids=str)
def test_resized_output_size_is_torchvisions(canvas) -> None:
    for size, max_size in itertools.product(SIZES, MAX_SIZES):
        theirs = _outcome(_geometry._compute_resized_output_size, canvas, size, max_size)
        ours = _outcome(_tv_geometry.resized_output_size, canvas, size, max_size)
        if isinstance(theirs, list):
            theirs = [int(side) for side in theirs]
        assert ours == theirs, (size, max_size)
        if isinstance(size, int) or (isinstance(size, list) and len(size) == 1 or max_size is None
                                     and size is not None):
            # v1's helper, which ComposeJPEG's Resize replaced: the same where v1 takes the size
            listed = [size] if isinstance(size, int) else list(size)
            assert _outcome(F1._compute_resized_output_size, canvas, listed, max_size) == ours


def test_center_crop_geometry_is_torchvisions() -> None:
    for output in [1, 5, [5], [5, 9], (224, 200), 224.0]:
        assert _tv_geometry.center_crop_size(output) == \
            _geometry._center_crop_parse_output_size(output)
    for crop_h, crop_w, image_h, image_w in itertools.product([1, 2, 5, 224], [1, 3, 224],
                                                              [5, 6, 224, 225, 375], [3, 8, 500]):
        assert _tv_geometry.center_crop_anchor(crop_h, crop_w, image_h, image_w) == \
            _geometry._center_crop_compute_crop_anchor(crop_h, crop_w, image_h, image_w)


@pytest.mark.parametrize("value", [*InterpolationMode, *[mode.value for mode in InterpolationMode],
                                   0, 1, 2, 3, 4, 5, 6, -1, "Bilinear", "cubic", 2.0, None])
def test_interpolation_names_are_torchvisions(value) -> None:
    theirs = _outcome(_geometry._check_interpolation, value)
    ours = _outcome(_tv_geometry.interpolation_mode, value)
    assert ours == theirs


def test_a_misplaced_anchor_would_be_caught() -> None:
    """The sweep can fail: anchors rounded half up (an easy mistake) differ from torchvision's."""
    half_up = ((6 - 1) + 1) // 2
    assert half_up != _geometry._center_crop_compute_crop_anchor(1, 1, 6, 6)[0]
    assert _tv_geometry.center_crop_anchor(1, 1, 6, 6)[0] != half_up
