"""What each torchvision v2 functional does to an EncodedJpeg.

torchvision's v2 transforms call functionals (``F.crop``, ``F.resize``, ...),
which look a kernel up by the input's type along its MRO
(``torchvision.transforms.v2.functional.register_kernel``). For EncodedJpeg:

- ``get_size``, ``get_dimensions``, ``get_num_channels`` answer from the header.
- ``crop``, ``center_crop`` and ``resized_crop`` decode only the window. A
  window reaching outside the image (torchvision pads it with zeros) decodes
  the whole image and lets torchvision pad: such crops are rare, and
  torchvision's own code then decides every padded pixel.
- ``resize`` decodes nothing: it returns the EncodedJpeg with the resize
  pending (custom_op/_torchvision/_fused_resize.py), and reports the resized size. A crop
  that follows (the evaluation recipe ``Resize(N)`` + ``CenterCrop(M)``)
  decodes only the window its rectangle of the resized image needs; any other
  functional, a second resize or a resized crop first computes the resize
  (whole decode and resize, as the resize alone would).
- Every other functional that has a ``tv_tensors.Image`` kernel gets a kernel
  that decodes the whole image and calls the functional again on the decoded
  Image. Without it, the lookup would reach the Image kernel with a 1-D byte
  tensor: wrong pixels or a TypeError deep inside torchvision.

Geometry (output sizes, centre anchors, interpolation names) comes from
custom_op/_torchvision/_tv_geometry.py: torchvision's public API or code of ours pinned
against torchvision's private helpers by tests/test_tv_geometry.py. The tests
also compare every path with torchvision's result on the decoded image.

Imports run one way: this module never imports _encoded_jpeg at run time (only for type
checking); the package's __init__ imports both and calls :func:`register_kernels`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

import torch
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2.functional import register_kernel
# The one private torchvision name used: the registry of every functional's kernels, to give
# each functional with an Image kernel a decode-first kernel (docs/design.md says why).
from torchvision.transforms.v2.functional._utils import _KERNEL_REGISTRY

from .._decode._single import decode_and_resized_crop_jpeg
from ._fused_resize import PendingResize, native_size, resized_window
from ._tv_geometry import (center_crop_anchor, center_crop_size, interpolation_mode,
                           resized_output_size)

if TYPE_CHECKING:  # the class imports this module to register its kernels, never the reverse
    from ._encoded_jpeg import EncodedJpeg


def _resized_window(encoded: "EncodedJpeg", top: int, left: int, height: int, width: int,
                    size: tuple[int, int], interpolation: InterpolationMode,
                    antialias: bool) -> tv_tensors.Image:
    """The window resized to ``size`` ([height, width]), as torchvision resizes a decoded crop,
    in the layout torchvision's pipeline gives it (_in_decoded_pipeline_layout).

    Bilinear resizes use custom_op's resized decode, which decodes at a
    reduced DCT scale when the output is at most half the window and
    otherwise resizes the exact window with the ATen kernel torchvision uses.
    With ``exact``, other interpolations and sizes the native core cannot
    take, _fused_resize.resized_window decides (torchvision's pixels).
    """
    if (interpolation == InterpolationMode.BILINEAR and not encoded.options.exact
            and native_size(size)):
        arguments = encoded.options.decode_arguments()
        # The kernel writes either layout at the same cost, so it writes the decoded
        # pipeline's own (see _in_decoded_pipeline_layout) instead of a copy making it after.
        arguments["contiguous"] = _decoded_pipeline_is_planar(encoded, width)
        with encoded.errors_named():
            pixels = decode_and_resized_crop_jpeg(encoded.encoded_bytes(), top, left,
                                                  height, width, size, antialias=antialias,
                                                  index=encoded.window_index(height),
                                                  **arguments)
        return pixels.as_subclass(tv_tensors.Image)
    resized = resized_window(encoded, top, left, height, width, size, interpolation, antialias)
    return _in_decoded_pipeline_layout(resized, encoded, width)


def _inside(encoded: "EncodedJpeg", top: int, left: int, height: int, width: int) -> bool:
    image_height, image_width = encoded.canvas_size
    return (top >= 0 and left >= 0 and height >= 1 and width >= 1
            and top + height <= image_height and left + width <= image_width)


def get_size(encoded: "EncodedJpeg") -> list[int]:
    return list(encoded.canvas_size)


def get_dimensions(encoded: "EncodedJpeg") -> list[int]:
    return [encoded.num_channels, *encoded.canvas_size]


def get_num_channels(encoded: "EncodedJpeg") -> int:
    return encoded.num_channels


def crop(encoded: "EncodedJpeg", top: int, left: int, height: int, width: int) -> tv_tensors.Image:
    if not _inside(encoded, top, left, height, width):
        return F.crop(encoded.decode(), top, left, height, width)
    return encoded.decode_window(top, left, height, width)


def center_crop(encoded: "EncodedJpeg", output_size: list[int]) -> tv_tensors.Image:
    crop_height, crop_width = center_crop_size(output_size)
    image_height, image_width = encoded.canvas_size
    if crop_height > image_height or crop_width > image_width:
        return F.center_crop(encoded.decode(), output_size)
    top, left = center_crop_anchor(crop_height, crop_width, image_height, image_width)
    return encoded.decode_window(top, left, crop_height, crop_width)


def resized_crop(encoded: "EncodedJpeg", top: int, left: int, height: int, width: int,
                 size: list[int], interpolation: Any = InterpolationMode.BILINEAR,
                 antialias: Optional[bool] = True) -> tv_tensors.Image:
    interpolation = interpolation_mode(interpolation)
    if encoded.pending_resize is not None or not _inside(encoded, top, left, height, width):
        return F.resized_crop(encoded.decode(), top, left, height, width, size,
                              interpolation=interpolation, antialias=antialias)
    output_size = resized_output_size((height, width), size=size)
    if tuple(output_size) == (height, width):  # torchvision returns the crop as it is
        return encoded.decode_window(top, left, height, width)
    return _resized_window(encoded, top, left, height, width, tuple(output_size),
                           interpolation, False if antialias is None else antialias)


def _in_decoded_pipeline_layout(resized: tv_tensors.Image, encoded: "EncodedJpeg",
                                width: int) -> tv_tensors.Image:
    """A resized crop in the memory layout torchvision's resized_crop gives on decode_jpeg's
    output (unless the options ask for planes), so that layout-following random ops
    (randn_like, v2.GaussianNoise) draw the same pixels for the same seed.

    A crop narrower than the image is a strided, non-dense view of HWC memory, which ATen's
    interpolate resizes into contiguous CHW; a full-width crop is dense channels-last, and
    stays so (torchvision restrides it for that, pytorch/pytorch#68430).
    """
    if not _decoded_pipeline_is_planar(encoded, width) or resized.is_contiguous():
        return resized
    return tv_tensors.Image(resized.as_subclass(torch.Tensor).contiguous())


def _decoded_pipeline_is_planar(encoded: "EncodedJpeg", width: int) -> bool:
    """Whether a resized crop ``width`` wide comes out as contiguous CHW planes in the decoded
    pipeline (or the options ask for planes): see _in_decoded_pipeline_layout."""
    return encoded.options.contiguous or width != encoded.canvas_size[1]


def resize(encoded: "EncodedJpeg", size: Optional[list[int]],
           interpolation: Any = InterpolationMode.BILINEAR, max_size: Optional[int] = None,
           antialias: Optional[bool] = True) -> Any:
    interpolation = interpolation_mode(interpolation)
    if encoded.pending_resize is not None:  # two resizes: torchvision resamples twice
        return F.resize(encoded.decode(), size, interpolation=interpolation, max_size=max_size,
                        antialias=antialias)
    height, width = encoded.canvas_size
    output_size = resized_output_size((height, width), size=size, max_size=max_size)
    if tuple(output_size) == (height, width):
        return encoded.decode()
    return encoded.with_pending_resize(PendingResize(
        (int(output_size[0]), int(output_size[1])), interpolation,
        False if antialias is None else antialias, encoded.options.exact))


def _decode_first(functional: Callable[..., Any]) -> Callable[..., Any]:
    """A kernel that decodes the whole image, then applies ``functional`` to the Image."""

    def kernel(encoded: "EncodedJpeg", *args: Any, **kwargs: Any) -> Any:
        return functional(encoded.decode(), *args, **kwargs)

    kernel.__name__ = f"{functional.__name__}_after_full_decode"
    return kernel


#: The functionals EncodedJpeg answers itself, and how.
_KERNELS = {F.get_size: get_size, F.get_dimensions: get_dimensions, F.get_num_channels: get_num_channels, F.crop: crop, F.center_crop: center_crop, F.resized_crop: resized_crop, F.resize: resize}


def register_kernels(cls: type) -> None:
    """Registers the kernels above for ``cls`` (EncodedJpeg), and the decode-first kernel for
    every other functional that has an Image kernel.

    Called by custom_op/_torchvision/__init__.py, which Python runs before any module of the
    package, so whatever makes an EncodedJpeg (unpickling one in a spawned DataLoader worker
    too) has them.
    """
    for functional, kernel in _KERNELS.items():
        register_kernel(functional, cls)(kernel)
    for functional, kernels in list(_KERNEL_REGISTRY.items()):
        if tv_tensors.Image in kernels and cls not in kernels:
            register_kernel(functional, cls)(_decode_first(functional))
