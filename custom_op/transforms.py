"""Transforms for pipelines that start from encoded JPEGs and keep uint8 until the device.

torchvision's own v2 transforms already decode only the window of a
:class:`custom_op.EncodedJpeg` (see custom_op/_torchvision/_tv_kernels.py), so a pipeline
needs nothing from here but the input type::

    transform = v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()])
    image = transform(custom_op.EncodedJpeg(torchvision.io.read_file("cat.jpg")))

This module adds:

- ``RandomCropJPEG``, ``CenterCropJPEG``, ``RandomResizedCropJPEG``,
  ``ResizeJPEG``: torchvision's ``RandomCrop``, ``CenterCrop``,
  ``RandomResizedCrop`` and ``Resize``, with the same arguments and the same
  random draws, that also take raw encoded bytes (a 1-D uint8 tensor, bytes,
  bytearray, memoryview, numpy array) and decode with their own options
  (``mode``, ``strict``, ``seek``, ``exact``, ``contiguous``,
  ``max_pixels``, ``max_scans``, ``max_memory``). Their output never holds an undecoded JPEG;
  ``ResizeJPEG``'s may hold a resize still pending, which a following crop
  (``CenterCropJPEG``, ``v2.CenterCrop``) decodes as one window and any other
  operation computes in full (custom_op/_torchvision/_fused_resize.py).
- ``evaluation_transform``: torchvision's classification presets
  (``ResNet50_Weights.DEFAULT.transforms()``) as the equivalent v2 pipeline,
  so that the evaluation recipe decodes only the central window.
- ``ComposeJPEG``: timm's ``create_transform`` pipelines and torchvision v1
  ``Compose``s (written for PIL images) on encoded JPEGs, their first crop or
  resize decoding only its window (custom_op/_timm/_compose_jpeg.py, docs/timm.md).
- ``DecodeJPEG``: decodes, in full, any EncodedJpeg still in a sample (a
  pipeline whose crop left the image alone, e.g. RandomIoUCrop's "keep"
  option, or no crop at all).
- ``NormalizeBatch``: the tail of the uint8 recipe. Converting to float and
  normalising every image in the DataLoader workers costs more than the
  window decode saves, and moves four times the bytes through shared memory;
  normalise the uint8 batch once, after it reaches the device.

Samples may be a bare image or any structure torchvision's v2 transforms
accept: ``(image, label)``, ``(image, {"boxes": ..., "labels": ...})``, dicts.
The image of a sample is found as torchvision finds it: an EncodedJpeg or a
``tv_tensors.Image`` if there is one, else the first plain tensor (or, here,
the first bytes-like object) in depth-first order.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ._core._extras import require

require("torchvision", "custom_op.transforms")

from torchvision import tv_tensors  # noqa: E402 (after the check that names the extra)
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from ._timm._compose_jpeg import ComposeJPEG
from ._torchvision._encoded_jpeg import DecodeOptions, EncodedJpeg

__all__ = ["CenterCropJPEG", "ComposeJPEG", "DecodeJPEG", "NormalizeBatch", "RandomCropJPEG",
           "RandomResizedCropJPEG", "ResizeJPEG", "decode_remaining", "evaluation_transform"]

_BYTES_LIKE = (bytes, bytearray, memoryview)


def _is_numpy_array(value: Any) -> bool:
    return type(value).__module__ == "numpy" and type(value).__name__ == "ndarray"


def _is_image_candidate(value: Any) -> bool:
    """What torchvision would take for the image when the sample has no explicit one, or bytes."""
    return ((isinstance(value, torch.Tensor) and not isinstance(value, tv_tensors.TVTensor))
            or isinstance(value, _BYTES_LIKE) or _is_numpy_array(value))


def _image_index(leaves: list[Any]) -> Optional[int]:
    """The index of the sample's image among its flattened leaves, or None."""
    for index, leaf in enumerate(leaves):
        if isinstance(leaf, (tv_tensors.Image, tv_tensors.Video)):
            return index
    return next((index for index, leaf in enumerate(leaves) if _is_image_candidate(leaf)), None)


def _checked_decoded_image(image: torch.Tensor, name: str) -> torch.Tensor:
    """A decoded [C, H, W] input, checked; raises for tensors that are neither kind of input."""
    if image.dim() == 1:
        raise TypeError(f"{name}: a 1-D tensor must hold encoded JPEG bytes as uint8, "
                        f"got dtype {image.dtype}")
    if image.dim() != 3:
        raise ValueError(f"{name}: expected a 1-D uint8 tensor of encoded JPEG bytes or a decoded "
                         f"uint8 [C, H, W] image, got a {image.dim()}-D tensor of shape "
                         f"{tuple(image.shape)}")
    if image.dtype != torch.uint8:
        raise TypeError(f"{name}: a decoded [C, H, W] image must be uint8, got dtype {image.dtype}")
    return image


def _to_mode(image: torch.Tensor, mode: str, name: str) -> torch.Tensor:
    """Gives a decoded image the channels ``mode`` promises, as the decoder would.

    "rgb" repeats a single gray channel three times; "gray" applies
    torchvision's rgb_to_grayscale (0.2989 R + 0.587 G + 0.114 B, truncated)
    to three channels; "unchanged" keeps the channels.
    """
    channels = image.shape[-3]
    if mode == "unchanged":
        return image
    if channels not in (1, 3):
        raise ValueError(f"{name}: mode={mode!r} needs a decoded image with 1 or 3 channels, "
                         f"got {channels} channels (shape {tuple(image.shape)})")
    if mode == "rgb":
        return image if channels == 3 else F.grayscale_to_rgb(image)
    return image if channels == 1 else F.rgb_to_grayscale(image, num_output_channels=1)


def decode_remaining(sample: Any, *, keep_pending_resize: bool = False) -> Any:
    """``sample`` with every EncodedJpeg in it decoded in full (a ``tv_tensors.Image``).

    With ``keep_pending_resize``, an EncodedJpeg whose resize is pending stays
    as it is, for a crop that follows to decode as one window.
    """
    if isinstance(sample, torch.Tensor) and not isinstance(sample, EncodedJpeg):
        return sample  # a decoded image, every sample's case: no tree to walk
    leaves, spec = tree_flatten(sample)

    def undecoded(leaf: Any) -> bool:
        return isinstance(leaf, EncodedJpeg) and not (keep_pending_resize
                                                      and leaf.pending_resize is not None)

    if not any(map(undecoded, leaves)):
        return sample
    return tree_unflatten([leaf.decode() if undecoded(leaf) else leaf for leaf in leaves], spec)


class _DecodesJpeg:
    """Mixin for the *JPEG transforms: encoded input in, decoded output out, with own options.

    Before torchvision's transform runs, the sample's image becomes an
    EncodedJpeg with this transform's options (raw bytes are wrapped; an
    EncodedJpeg is re-wrapped, sharing its bytes). A decoded image (a
    [C, H, W] uint8 tensor or tv_tensors.Image) is transformed by torchvision
    as usual and then given the channels of ``mode``. After the transform,
    any EncodedJpeg left in the sample is decoded in full.
    """

    #: Whether the output may keep a resize pending (ResizeJPEG) instead of computing it.
    _keeps_pending_resize = False

    def forward(self, *inputs: Any) -> Any:
        name = type(self).__name__
        sample = inputs if len(inputs) > 1 else inputs[0]
        leaves, spec = tree_flatten(sample)
        index = _image_index(leaves)
        if index is None:
            raise TypeError(f"{name}: no image in the sample: expected encoded JPEG bytes (a 1-D "
                            "uint8 tensor, bytes, bytearray, memoryview or numpy array), an "
                            "EncodedJpeg or a decoded uint8 [C, H, W] image, got "
                            f"{type(sample).__name__}")
        image = leaves[index]
        decoded = (isinstance(image, torch.Tensor) and not isinstance(image, EncodedJpeg)
                   and (isinstance(image, tv_tensors.TVTensor) or image.dim() != 1
                        or image.dtype != torch.uint8))
        if decoded:
            if not isinstance(image, tv_tensors.TVTensor):
                _checked_decoded_image(image, name)
        else:
            leaves[index] = EncodedJpeg.with_options(image, self.options)
        output = super().forward(tree_unflatten(leaves, spec))
        if not decoded:
            return decode_remaining(output, keep_pending_resize=self._keeps_pending_resize)
        out_leaves, out_spec = tree_flatten(output)
        out_leaves[index] = _to_mode(out_leaves[index], self.options.mode, name)
        return tree_unflatten(out_leaves, out_spec)

    def extra_repr(self) -> str:
        options = ", ".join(f"{key}={value!r}" for key, value in vars(self.options).items())
        return f"{super().extra_repr()}, {options}"


class RandomCropJPEG(_DecodesJpeg, v2.RandomCrop):
    """torchvision's ``v2.RandomCrop`` that decodes only the window of an encoded JPEG.

    Same arguments, same draws from torch's global generator, same padding
    (``padding``, ``pad_if_needed``: a padded image is decoded in full first)
    and the same treatment of boxes, masks and labels in the sample. Takes
    encoded bytes, an :class:`custom_op.EncodedJpeg` or a decoded uint8
    ``[C, H, W]`` image (cropped by torchvision, then given ``mode``'s
    channels).

    Args:
        size, padding, pad_if_needed, fill, padding_mode: As
            ``torchvision.transforms.v2.RandomCrop``.
        decode_options: How encoded input is decoded, by keyword: ``mode``,
            ``strict``, ``seek``, ``exact``, ``contiguous``, ``max_pixels``,
            ``max_scans``, ``max_memory``; see :class:`custom_op.EncodedJpeg`.

    Returns (when called):
        The sample, its image a ``tv_tensors.Image`` ``[C, height, width]``
        (for raw bytes or a plain decoded tensor too).

    Raises (when called):
        ValueError: the image is smaller than ``size`` and not padded (as
            torchvision), or a decoded image has channels ``mode`` cannot give.
        TypeError: the sample has no image of either kind.
        JpegDecodeError: the bytes cannot be decoded.

    Example:
        >>> RandomCropJPEG(256)(open("cat.jpg", "rb").read()).shape
        torch.Size([3, 256, 256])
    """

    def __init__(self, size: Union[int, Sequence[int]], padding: Any = None,
                 pad_if_needed: bool = False, fill: Any = 0, padding_mode: str = "constant",
                 **decode_options: Any) -> None:
        super().__init__(size, padding, pad_if_needed, fill, padding_mode)
        self.options = DecodeOptions.checked(type(self).__name__, **decode_options)


class CenterCropJPEG(_DecodesJpeg, v2.CenterCrop):
    """torchvision's ``v2.CenterCrop`` that decodes only the central window of an encoded JPEG.

    An image smaller than ``size`` is padded with zeros, as torchvision does
    (decoded in full first). Options, input, returns and raises as
    :class:`RandomCropJPEG`.
    """

    def __init__(self, size: Union[int, Sequence[int]], **decode_options: Any) -> None:
        super().__init__(size)
        self.options = DecodeOptions.checked(type(self).__name__, **decode_options)


class RandomResizedCropJPEG(_DecodesJpeg, v2.RandomResizedCrop):
    """torchvision's ``v2.RandomResizedCrop`` that decodes only the window of an encoded JPEG.

    The window is drawn by torchvision's own code (the same window and
    generator state for the same seed). With bilinear interpolation (the
    default) the window is decoded at the smallest DCT scale that keeps it at
    least ``size`` (1/2, 1/4 or 1/8 when the output is at most half the
    window), unless ``exact=True``; when no scaling applies, the pixels equal
    torchvision's on the decoded image bit for bit. Other interpolations
    (bicubic, as timm's recipes use; nearest) decode the window at full scale
    and resize it with torchvision's kernel: torchvision's pixels, exactly.

    Args:
        size, scale, ratio, interpolation, antialias: As
            ``torchvision.transforms.v2.RandomResizedCrop``.
        decode_options: As :class:`RandomCropJPEG`.

    Returns, raises: as :class:`RandomCropJPEG`.

    Example:
        >>> transform = RandomResizedCropJPEG(224, interpolation=v2.InterpolationMode.BICUBIC)
        >>> transform(torchvision.io.read_file("cat.jpg")).shape
        torch.Size([3, 224, 224])
    """

    def __init__(self, size: Union[int, Sequence[int]], scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
                 interpolation: Any = v2.InterpolationMode.BILINEAR,
                 antialias: Optional[bool] = True, **decode_options: Any) -> None:
        super().__init__(size, scale, ratio, interpolation, antialias)
        self.options = DecodeOptions.checked(type(self).__name__, **decode_options)


class ResizeJPEG(_DecodesJpeg, v2.Resize):
    """torchvision's ``v2.Resize`` whose resize waits for the crop that follows it.

    On encoded input the output is an :class:`custom_op.EncodedJpeg` with the
    resize pending: it reports the resized size, and a following crop
    (``CenterCropJPEG``, ``v2.CenterCrop``, ``v2.RandomCrop``) decodes only
    the window its rectangle of the resized image needs. So the evaluation
    recipe ``ResizeJPEG(256)`` then ``CenterCropJPEG(224)`` decodes the
    central window alone: at 1/2, 1/4 or 1/8 scale when the window is at
    least twice the output (bilinear, not ``exact``), else at full scale,
    then bit for bit torchvision's decode_jpeg + Resize + CenterCrop. Any
    other operation on the output (a flip, ToDtype, collating a batch)
    computes the resize of the whole image first, as ``v2.Resize`` would
    have. Arguments as ``torchvision.transforms.v2.Resize`` plus the
    ``decode_options`` of :class:`RandomCropJPEG`.

    Example:
        >>> recipe = v2.Compose([ResizeJPEG(256), CenterCropJPEG(224)])
        >>> recipe(open("cat.jpg", "rb").read()).shape   # only the centre was decoded
        torch.Size([3, 224, 224])
    """

    _keeps_pending_resize = True

    def __init__(self, size: Union[int, Sequence[int], None],
                 interpolation: Any = v2.InterpolationMode.BILINEAR,
                 max_size: Optional[int] = None, antialias: Optional[bool] = True,
                 **decode_options: Any) -> None:
        super().__init__(size, interpolation, max_size, antialias)
        self.options = DecodeOptions.checked(type(self).__name__, **decode_options)


class _ClassificationTail(v2.Transform):
    """The float conversion and normalisation of torchvision's ImageClassification preset.

    With the preset's own (v1) functionals, so that the values are its own bit
    for bit: ``v2.ToDtype(scale=True)`` multiplies by 1/255 where
    ``convert_image_dtype`` divides by 255, which differs in the last bit.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        self.mean, self.std = list(mean), list(std)

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        if not isinstance(inpt, torch.Tensor) or not (
                isinstance(inpt, tv_tensors.Image) or not isinstance(inpt, tv_tensors.TVTensor)):
            return inpt
        from torchvision.transforms import functional as F1

        image = F1.convert_image_dtype(inpt.as_subclass(torch.Tensor), torch.float)
        return F1.normalize(image, mean=self.mean, std=self.std)

    def extra_repr(self) -> str:
        return f"mean={self.mean}, std={self.std}"


def evaluation_transform(preset: torch.nn.Module, **decode_options: Any) -> v2.Compose:
    """torchvision's classification preset as a v2 pipeline that decodes only the central window.

    ``weights.transforms()`` of torchvision's classification models (an
    ``ImageClassification`` module: resize, centre crop, float conversion,
    normalisation) calls torchvision's v1 functionals, which see an encoded
    file as bytes. This gives the same steps as v2 transforms:
    ``ResizeJPEG(resize_size)``, ``CenterCropJPEG(crop_size)``, then the
    preset's own conversion and normalisation. The resize and the crop decode
    as one window (see :class:`ResizeJPEG`). By default (``exact=True``
    here) the tensor equals the preset's on the decoded image bit for bit,
    so a model's published accuracy is reproduced. ``exact=False`` decodes
    windows of at least twice the output at a reduced DCT scale: faster,
    but not torchvision's pixels (docs/benchmarks.md, eval; bench/worst_error.py
    measures the largest difference).

    Args:
        preset: The preset module: anything with ``resize_size``,
            ``crop_size``, ``mean``, ``std``, ``interpolation`` and
            ``antialias`` attributes, as ``ImageClassification`` has.
        decode_options: How encoded input is decoded, by keyword: ``mode``,
            ``strict``, ``seek``, ``exact`` (default True here), ``contiguous``,
            ``max_pixels``, ``max_scans``, ``max_memory``,
            ``apply_exif_orientation``; see :class:`custom_op.EncodedJpeg`.

    Returns:
        A ``v2.Compose`` that takes encoded bytes, an EncodedJpeg or a decoded
        uint8 image and returns the normalised float ``[C, crop, crop]``
        tensor.

    Raises:
        TypeError: ``preset`` lacks one of the attributes above, or a decode
            option is unknown.

    Example:
        >>> from torchvision.models import ResNet50_Weights
        >>> transform = evaluation_transform(ResNet50_Weights.DEFAULT.transforms())
        >>> transform(open("cat.jpg", "rb").read()).shape
        torch.Size([3, 224, 224])
    """
    needed = ("resize_size", "crop_size", "mean", "std", "interpolation", "antialias")
    missing = [name for name in needed if not hasattr(preset, name)]
    if missing:
        raise TypeError(f"evaluation_transform(): preset must be a torchvision ImageClassification "
                        f"preset (weights.transforms()); {type(preset).__name__} has no "
                        f"{', '.join(missing)}")
    decode_options = {"exact": True, **decode_options}  # evaluation reproduces accuracy
    return v2.Compose([
        ResizeJPEG(preset.resize_size, interpolation=preset.interpolation,
                   antialias=preset.antialias, **decode_options),
        CenterCropJPEG(preset.crop_size, **decode_options),
        _ClassificationTail(preset.mean, preset.std),
    ])


class DecodeJPEG(v2.Transform):
    """Decodes, in full, every :class:`custom_op.EncodedJpeg` in a sample; leaves the rest alone.

    Put it after the crops of a pipeline whose crop may leave the image
    undecoded (``v2.RandomIoUCrop`` keeps the whole image in one of its
    options; ``v2.RandomCrop`` does nothing when the image is exactly the crop
    size), so that what reaches the DataLoader's collate is always decoded.
    :class:`custom_op.JpegFolder` and the other custom_op datasets do this
    themselves after their transform.
    """

    _transformed_types = (EncodedJpeg,)

    def transform(self, inpt: EncodedJpeg, params: dict[str, Any]) -> tv_tensors.Image:
        return inpt.decode()


class NormalizeBatch(torch.nn.Module):
    """uint8 images to normalised floats in one step, for a batch on its device.

    ``v2.ToDtype(dtype, scale=True)`` followed by ``v2.Normalize(mean, std)``,
    with torchvision's own functionals (so the values are theirs, bit for
    bit), applied to a whole ``[N, C, H, W]`` batch. Use it after the
    DataLoader, on the device: the DataLoader then moves uint8 batches, a
    quarter of the bytes of float32 ones, and the workers spend their time
    decoding.

    Args:
        mean, std: Per-channel values, as for ``v2.Normalize``.
        dtype: The floating-point type of the result.

    Raises (when called):
        TypeError: the batch is not uint8 (it was converted earlier).
        ValueError: the batch is not ``[N, C, H, W]`` or ``[C, H, W]``.

    Example:
        >>> normalize = NormalizeBatch([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        >>> for images, labels in loader:
        ...     images = normalize(images.to(device, non_blocking=True))
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float], *,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        if not dtype.is_floating_point:
            raise TypeError(f"NormalizeBatch: dtype must be a floating-point type, got {dtype}")
        self.mean = [float(value) for value in mean]
        self.std = [float(value) for value in std]
        self.dtype = dtype

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        if not isinstance(batch, torch.Tensor) or batch.dtype != torch.uint8:
            got = batch.dtype if isinstance(batch, torch.Tensor) else type(batch).__name__
            raise TypeError(f"NormalizeBatch: expected a uint8 batch, got {got}; keep the "
                            "pipeline's images uint8 until this step")
        if batch.dim() not in (3, 4):
            raise ValueError(f"NormalizeBatch: expected [N, C, H, W] or [C, H, W], got shape "
                             f"{tuple(batch.shape)}")
        # A tv_tensors.Image batch gives a plain result, as a plain batch does. Plain batches
        # skip as_subclass, which Dynamo cannot trace: that keeps fullgraph compiles working.
        if type(batch) is not torch.Tensor:
            batch = batch.as_subclass(torch.Tensor)
        scaled = F.to_dtype(batch, self.dtype, scale=True)
        return F.normalize(scaled, self.mean, self.std, inplace=True)

    def extra_repr(self) -> str:
        return f"mean={self.mean}, std={self.std}, dtype={self.dtype}"

