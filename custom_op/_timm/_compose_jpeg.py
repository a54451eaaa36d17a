"""ComposeJPEG: timm's and torchvision v1's PIL pipelines on encoded JPEGs.

timm's ``create_transform`` and torchvision's v1 ``transforms.Compose`` are
written for the PIL images that ImageFolder decodes in full. Handed an
EncodedJpeg (a 1-D tensor of the file's bytes), their first transform fails
("Tensor is not a torch image"). ComposeJPEG runs such a pipeline with its
first transform replaced by a decode of the window that transform keeps:

- the window (and, for resizes, the output size and interpolation) is drawn
  by the transform's own ``get_params`` on a stand-in with the header's size,
  so the random draws are the pipeline's own, from the same generators
  (Python's ``random`` for timm, torch's for torchvision);
- the window is decoded as EncodedJpeg's torchvision kernels decode it
  (custom_op/_torchvision/_tv_kernels.py: DCT scaling for bilinear resizes unless
  ``exact``), or, with ``exact=True``, at full scale and resized by the
  pipeline's own PIL call, so that every pixel equals timm's on
  ImageFolder's image;
- the rest of the pipeline runs as written. It gets a PIL image, unless
  every remaining transform does the same on a uint8 tensor (flips, crops,
  ToTensor, Normalize, RandomErasing: the evaluation recipe, timm's
  ``use_prefetcher`` recipes without colour jitter); then the decoded tensor
  goes on and ToTensor becomes the same division by 255 on it.

A first transform it does not know (a flip first, a padded RandomCrop, a
Lambda) gets the whole image decoded into a PIL image: the pipeline then
runs exactly as on ImageFolder.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from typing import Any, Callable, Optional, Union

import torch
from torchvision import transforms as v1
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F1
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F2

from .._torchvision._encoded_jpeg import DecodeOptions, EncodedJpeg
from .._torchvision._tv_geometry import resized_output_size

__all__ = ["ComposeJPEG", "for_encoded_images"]

PilOrTensor = Any  # a PIL.Image.Image or a torch.Tensor; PIL is imported only when used


@dataclasses.dataclass(frozen=True)
class _Window:
    """What the first transform keeps: a window and the size it is resized to (None: as is)."""

    top: int
    left: int
    height: int
    width: int
    size: Optional[list[int]] = None
    interpolation: InterpolationMode = InterpolationMode.BILINEAR
    antialias: bool = True


def _stand_in(encoded: EncodedJpeg) -> torch.Tensor:
    """A tensor of the image's [C, H, W] shape that owns one byte: what get_params looks at."""
    return torch.empty((), dtype=torch.uint8).expand(encoded.num_channels, *encoded.canvas_size)


def _drawn_interpolation(interpolation: Any) -> InterpolationMode:
    """timm's "random" interpolation is a tuple it draws from with Python's random, after the window."""
    if isinstance(interpolation, (tuple, list)):
        return random.choice(interpolation)
    return interpolation


def _as_size_list(size: Union[int, list[int], tuple[int, ...]]) -> list[int]:
    return [size] if isinstance(size, int) else list(size)


def _random_resized_crop_timm(transform: Any, encoded: EncodedJpeg) -> _Window:
    top, left, height, width = transform.get_params(_stand_in(encoded), transform.scale,
                                                    transform.ratio)
    return _Window(top, left, height, width, list(transform.size),
                   _drawn_interpolation(transform.interpolation))


def _random_resized_crop_v1(transform: v1.RandomResizedCrop, encoded: EncodedJpeg) -> _Window:
    top, left, height, width = transform.get_params(_stand_in(encoded), transform.scale,
                                                    transform.ratio)
    return _Window(top, left, height, width, list(transform.size), transform.interpolation,
                   transform.antialias is not False)


def _resize_v1(transform: v1.Resize, encoded: EncodedJpeg) -> _Window:
    height, width = encoded.canvas_size
    size = resized_output_size((height, width), _as_size_list(transform.size),
                               transform.max_size)
    return _Window(0, 0, height, width, size, transform.interpolation,
                   transform.antialias is not False)


def _resize_keep_ratio_timm(transform: Any, encoded: EncodedJpeg) -> _Window:
    # The arguments in the order timm's own __call__ passes them.
    size = transform.get_params(_stand_in(encoded), transform.size, transform.longest,
                                transform.random_scale_prob, transform.random_scale_range,
                                transform.random_scale_area, transform.random_aspect_prob,
                                transform.random_aspect_range)
    height, width = encoded.canvas_size
    return _Window(0, 0, height, width, list(size), _drawn_interpolation(transform.interpolation))


def _center_crop_v1(transform: v1.CenterCrop, encoded: EncodedJpeg) -> Optional[_Window]:
    crop_height, crop_width = transform.size
    height, width = encoded.canvas_size
    if crop_height > height or crop_width > width:
        return None  # torchvision pads: decode in full and let it
    # torchvision v1's centre anchor.
    return _Window(int(round((height - crop_height) / 2.0)), int(round((width - crop_width) / 2.0)),
                   crop_height, crop_width)


def _random_crop_v1(transform: v1.RandomCrop, encoded: EncodedJpeg) -> Optional[_Window]:
    height, width = encoded.canvas_size
    too_small = height < transform.size[0] or width < transform.size[1]
    if transform.padding is not None or (transform.pad_if_needed and too_small):
        return None  # padded first: decode in full and let torchvision pad
    top, left, crop_height, crop_width = transform.get_params(_stand_in(encoded), transform.size)
    return _Window(top, left, crop_height, crop_width)


_WindowOf = Callable[[Any, EncodedJpeg], Optional[_Window]]
_V1_WINDOWS: dict[type, _WindowOf] = {
    v1.RandomResizedCrop: _random_resized_crop_v1,
    v1.Resize: _resize_v1,
    v1.CenterCrop: _center_crop_v1,
    v1.RandomCrop: _random_crop_v1,
}


def _window_function(transform: Any) -> Optional[_WindowOf]:
    """How ``transform`` picks its window, or None for a transform that needs the whole image.

    The exact class only: a subclass may draw or crop differently. timm's
    classes are looked up only if timm is loaded (a timm transform implies it).
    """
    kind = type(transform)
    if kind in _V1_WINDOWS:
        return _V1_WINDOWS[kind]
    timm_transforms = sys.modules.get("timm.data.transforms")
    if timm_transforms is not None:
        if kind is getattr(timm_transforms, "RandomResizedCropAndInterpolation", None):
            return _random_resized_crop_timm
        if kind is getattr(timm_transforms, "ResizeKeepRatio", None):
            return _resize_keep_ratio_timm
    return None


def _to_pil(image: torch.Tensor) -> PilOrTensor:
    """A decoded uint8 [C, H, W] tensor as the PIL image ImageFolder would have given."""
    from PIL import Image

    channels = image.shape[0]
    if channels == 1:
        return Image.fromarray(image[0].numpy(), mode="L")
    if channels == 3:
        return Image.fromarray(image.permute(1, 2, 0).numpy(), mode="RGB")
    raise ValueError(f"ComposeJPEG: a PIL pipeline needs images of 1 or 3 channels, got "
                     f"{channels} (decode with mode='rgb', the default)")


def _empty_window(encoded: EncodedJpeg, window: _Window, pil_kernels: bool) -> PilOrTensor:
    """What Pillow makes of an empty window (timm draws 0 x 0 for a 1 x 1 image): an empty
    image, resized by the pipeline's own PIL call (black), as a PIL image or a tensor."""
    from PIL import Image

    if encoded.num_channels not in (1, 3):
        _to_pil(torch.empty((encoded.num_channels, 1, 1), dtype=torch.uint8))  # its ValueError
    image = Image.new("L" if encoded.num_channels == 1 else "RGB", (window.width, window.height))
    if window.size is not None:
        image = F1.resize(image, list(window.size), window.interpolation)
    return image if pil_kernels else F1.pil_to_tensor(image)


def _decode_window(encoded: EncodedJpeg, window: _Window, pil_kernels: bool) -> PilOrTensor:
    """The window, resized as the window says: a tensor, or with ``pil_kernels`` a PIL image."""
    if window.height <= 0 or window.width <= 0:
        return _empty_window(encoded, window, pil_kernels)
    whole = window.size is None or list(window.size) == [window.height, window.width]
    if pil_kernels:
        image = _to_pil(encoded.decode_window(window.top, window.left, window.height, window.width))
        if whole:
            return image
        return F1.resize(image, list(window.size), window.interpolation)  # the pipeline's own call
    if whole:
        return encoded.decode_window(window.top, window.left, window.height, window.width)
    return F2.resized_crop(encoded, window.top, window.left, window.height, window.width,
                           list(window.size), interpolation=window.interpolation,
                           antialias=window.antialias)


class _TensorToFloat:
    """ToTensor for a uint8 tensor: ``to(default float).div(255)``, what ToTensor computes on PIL."""

    def __call__(self, image: PilOrTensor) -> torch.Tensor:
        if not isinstance(image, torch.Tensor):
            return F1.to_tensor(image)
        return image.to(dtype=torch.get_default_dtype()).div(255)

    def __repr__(self) -> str:
        return "ToTensor(on uint8 tensors: .float().div(255))"


class _TensorAsIs:
    """PILToTensor for a uint8 tensor: the tensor as it is."""

    def __call__(self, image: PilOrTensor) -> torch.Tensor:
        return image if isinstance(image, torch.Tensor) else F1.pil_to_tensor(image)

    def __repr__(self) -> str:
        return "PILToTensor(on uint8 tensors: as is)"


def _on_tensors(transform: Any) -> Optional[Any]:
    """``transform``, or its tensor equivalent, if it gives on a decoded uint8 tensor what it
    gives on the PIL image (then converted); None if the pipeline must stay on PIL."""
    kind, name = type(transform), type(transform).__name__
    from_timm = kind.__module__.startswith("timm.")
    if kind is v1.ToTensor or (from_timm and name == "MaybeToTensor"):
        return _TensorToFloat()
    if kind is v1.PILToTensor or (from_timm and name == "MaybePILToTensor"):
        return _TensorAsIs()
    # Exact pixel operations on either type; Normalize and RandomErasing see float tensors
    # only after ToTensor, so they are the same objects on both routes.
    if kind in (v1.RandomHorizontalFlip, v1.RandomVerticalFlip, v1.CenterCrop, v1.Normalize,
                v1.RandomErasing) or (from_timm and name == "RandomErasing"):
        return transform
    return None


def _as_list(transform: Callable[[Any], Any]) -> list[Callable[[Any], Any]]:
    return list(transform.transforms) if isinstance(transform, v1.Compose) else [transform]


class ComposeJPEG:
    """A timm or torchvision v1 pipeline for PIL images, run on encoded JPEGs.

    The pipeline's first transform decodes only the window it keeps, with
    the pipeline's own random draws; the rest runs as written (timm's
    RandAugment, ColorJitter, ToTensor, Normalize, RandomErasing, ...). The
    first transforms that decode a window: timm's
    ``RandomResizedCropAndInterpolation`` (train) and ``ResizeKeepRatio``,
    torchvision v1's ``RandomResizedCrop``, ``Resize`` (evaluation),
    ``CenterCrop`` and unpadded ``RandomCrop``. Any other first transform
    gets the whole image, decoded into a PIL image.

    What the rest of the pipeline receives: a PIL image, the type it was
    written for; or, when every remaining transform gives the same on a
    uint8 tensor (flips, CenterCrop, ToTensor, PILToTensor, Normalize,
    RandomErasing, and timm's Maybe* versions), the decoded tensor, with
    ToTensor turned into the same ``float().div(255)`` on it.

    Pixels: evaluation pipelines (a whole-image ``Resize`` or timm's
    ``ResizeKeepRatio`` first) always decode the whole image at full scale
    and run the pipeline's own PIL resize: timm's output on ImageFolder's
    image bit for bit, so published accuracy is reproduced. Training
    pipelines with ``exact=True`` do the same for their window. With
    ``exact=False`` (the decode options' default), a training window's
    resize runs on the tensor as :class:`custom_op.EncodedJpeg` does under
    torchvision: windows of at least twice the output decode at a reduced
    DCT scale (bench/worst_error.py measures the largest difference), others
    get ATen's antialiased resize, which rounds differently from Pillow's
    (docs/timm.md, Pixels). Crops without a resize are
    exact either way.

    :class:`custom_op.JpegFolder` wraps a v1 Compose, or any single v1 or
    timm transform, in ComposeJPEG by itself, so
    ``JpegFolder("train", transform=timm.data.create_transform(224,
    is_training=True))`` works as written.

    Args:
        transform: A ``torchvision.transforms.Compose`` (what timm's
            ``create_transform`` returns) or a single v1/timm transform.
        decode_options: How raw bytes are decoded, by keyword (``mode``,
            ``strict``, ``exact``, ...; see :class:`custom_op.EncodedJpeg`).
            An EncodedJpeg input keeps its own options (JpegFolder's).

    Returns (when called):
        What the pipeline returns: for timm's train and eval transforms a
        float32 ``[3, H, W]`` tensor, normalised; uint8 with
        ``use_prefetcher=True``.

    Raises:
        TypeError: (when constructed) ``transform`` is not callable, or a
            ComposeJPEG already.
        JpegDecodeError: (when called) the bytes cannot be decoded.
        ValueError: (when called) the image decodes to channels a PIL image
            cannot hold (``mode="unchanged"`` on a CMYK file).

    Example:
        >>> import timm.data
        >>> train = ComposeJPEG(timm.data.create_transform(224, is_training=True))
        >>> train(custom_op.EncodedJpeg(open("cat.jpg", "rb").read())).shape
        torch.Size([3, 224, 224])
    """

    def __init__(self, transform: Callable[[Any], Any], **decode_options: Any) -> None:
        if isinstance(transform, ComposeJPEG) or not callable(transform):
            raise TypeError(f"ComposeJPEG: expected a torchvision v1 Compose or transform, got "
                            f"{type(transform).__name__}")
        self.transform = transform
        self.options = DecodeOptions.checked("ComposeJPEG", **decode_options)
        steps = _as_list(transform)
        self._window_of = _window_function(steps[0]) if steps else None
        self._first = steps[0] if self._window_of is not None else None
        #: An evaluation pipeline (a resize of the whole image first) decodes the whole image
        #: either way, so it always takes the exact route: timm's pixels, bit for bit, and the
        #: model's published accuracy; DCT scaling there would change pixels visibly
        #: (bench/worst_error.py measures by how much).
        self._evaluation = self._window_of in (_resize_v1, _resize_keep_ratio_timm)
        rest = steps[1:] if self._window_of is not None else steps
        on_tensors = [_on_tensors(step) for step in rest]
        #: The remaining transforms on decoded uint8 tensors, or None: they run on PIL.
        self._rest_on_tensors = None if None in on_tensors else v1.Compose(on_tensors)
        self._rest = v1.Compose(rest)

    def __call__(self, image: Any) -> Any:
        if not _is_encoded(image):
            return self.transform(_as_pil_input(image))
        encoded = (image if isinstance(image, EncodedJpeg)
                   else EncodedJpeg.with_options(image, self.options))
        pil_kernels = encoded.options.exact or self._evaluation
        stay_on_tensors = self._rest_on_tensors is not None and not pil_kernels
        if not stay_on_tensors and encoded.options.contiguous:
            # PIL stores pixels interleaved: HWC memory (a CHW view of it) converts without a
            # transposition, and ATen's uint8 resize is fastest on it.
            encoded = EncodedJpeg.with_options(
                encoded, dataclasses.replace(encoded.options, contiguous=False))
        window = None if self._window_of is None else self._window_of(self._first, encoded)
        if window is None:
            first = encoded.decode().as_subclass(torch.Tensor)
            if self._first is not None or not stay_on_tensors:
                first = _to_pil(first)
            if self._first is not None:
                first = self._first(first)  # e.g. a padded RandomCrop, on the PIL image
        else:
            first = _decode_window(encoded, window, pil_kernels)
        if not stay_on_tensors:
            return self._rest(first if not isinstance(first, torch.Tensor)
                              else _to_pil(first.as_subclass(torch.Tensor)))
        if not isinstance(first, torch.Tensor):
            first = F1.pil_to_tensor(first)
        return self._rest_on_tensors(first.as_subclass(torch.Tensor))

    def __repr__(self) -> str:
        route = "uint8 tensors" if self._rest_on_tensors is not None else "PIL images"
        first = "decodes in full" if self._first is None else f"{self._first!r} decodes its window"
        return f"ComposeJPEG(first: {first}; then on {route}:\n{self.transform!r})"


def _is_encoded(image: Any) -> bool:
    """Encoded bytes (an EncodedJpeg, a 1-D uint8 tensor, bytes-like) rather than pixels."""
    if isinstance(image, EncodedJpeg):
        return True
    if isinstance(image, torch.Tensor):
        return image.dim() == 1 and image.dtype == torch.uint8
    return isinstance(image, (bytes, bytearray, memoryview))


def _as_pil_input(image: Any) -> PilOrTensor:
    """A decoded image for the original pipeline: tensors (JpegFolder's PNGs) become PIL images."""
    if isinstance(image, torch.Tensor) and image.dim() == 3 and image.dtype == torch.uint8:
        return _to_pil(image.as_subclass(torch.Tensor))
    return image


def for_encoded_images(transform: Optional[Callable[[Any], Any]]) -> Optional[Callable[[Any], Any]]:
    """``transform`` in a :class:`ComposeJPEG` if it is a torchvision v1 pipeline (timm's), else as is.

    What JpegFolder does with its transform: a v1 ``Compose`` or any single
    transform of torchvision v1 or timm (all written for PIL images) is
    wrapped; v2 transforms, which take EncodedJpeg directly, and anything else
    (a function of the user's) are returned unchanged.
    """
    module = type(transform).__module__
    if isinstance(transform, v1.Compose):
        # A v1 Compose of v2 transforms already takes an EncodedJpeg, window decode included.
        if transform.transforms and isinstance(transform.transforms[0], v2.Transform):
            return transform
        return ComposeJPEG(transform)
    if module == v1.ToTensor.__module__ or (module.startswith("timm.data.") and callable(transform)):
        return ComposeJPEG(transform)
    return transform
