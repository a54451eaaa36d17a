"""JpegFolder: torchvision's ImageFolder whose items are encoded JPEGs, decoded by the crop."""

from __future__ import annotations

import functools
import logging
import os
from typing import Any, Callable, Optional, Union

from torchvision.datasets import DatasetFolder
from torchvision.datasets.folder import IMG_EXTENSIONS

from .._torchvision._encoded_jpeg import DecodeOptions
from .._torchvision._fused_head import fused_transform
from .._core._errors import JpegDecodeError
from .._timm._compose_jpeg import for_encoded_images
from ..transforms import decode_remaining
from ._loading import load_sample

__all__ = ["IMG_EXTENSIONS", "JpegFolder", "ON_ERROR_POLICIES"]

_log = logging.getLogger("custom_op.datasets")

#: What JpegFolder does with a file that cannot be decoded.
ON_ERROR_POLICIES = ("raise", "substitute")
#: How many following samples a "substitute" policy tries before it gives up.
_SUBSTITUTE_ATTEMPTS = 10

Extensions = Union[str, tuple[str, ...]]
PathLike = Union[str, "os.PathLike[str]"]


class JpegFolder(DatasetFolder):
    """torchvision's ImageFolder for custom_op: each JPEG arrives at the transform undecoded.

    It is a ``torchvision.datasets.DatasetFolder``: the classes, their order,
    the file listing, ``extensions``, ``is_valid_file`` and ``allow_empty``
    are torchvision's own, and ``classes``, ``class_to_idx``, ``samples``,
    ``targets`` equal ImageFolder's for the same root. An item is
    ``(transform(image), target_transform(class_index))``, where ``image`` is:

    - for a JPEG by content (whatever its name): an
      :class:`custom_op.EncodedJpeg`, so that torchvision's own crops in
      ``transform`` (``v2.RandomResizedCrop``, ``v2.RandomCrop``, ...) decode
      only their window;
    - for anything else (a PNG named .JPEG, a .bmp): the image decoded in
      full by Pillow as ImageFolder decodes it, a ``tv_tensors.Image``.

    Whatever the transform leaves undecoded (no crop at all, or a crop that
    kept the whole image) is decoded in full, so items always hold pixels;
    with ``transform=None`` the item is the EncodedJpeg itself.

    Args:
        root: The folder holding one subfolder per class.
        transform: Applied to the image; any torchvision v2 transform or
            pipeline. A torchvision v1 ``Compose`` (timm's
            ``create_transform``) or v1/timm transform is run by
            :class:`custom_op.transforms.ComposeJPEG`: its first crop or
            resize decodes the window, the rest gets a PIL image. Keep its output uint8 and normalise the batch on the
            device (:class:`custom_op.transforms.NormalizeBatch`): see
            the README for why.
        target_transform: Applied to the class index.
        extensions: File name endings to list, any case (torchvision
            compares them with the lower-cased file name; they are
            lower-cased here too). ImageFolder's by default, unless
            ``is_valid_file`` is given.
        is_valid_file: As DatasetFolder: a function of the path that decides
            which files are listed (instead of ``extensions``).
        allow_empty: As DatasetFolder: keep classes without any file.
        decode_options: How the JPEGs are decoded, by keyword (``mode``,
            ``strict``, ``seek``, ``exact``, ``contiguous``, ``max_pixels``,
            ``max_scans``, ``max_memory``); see :class:`custom_op.EncodedJpeg`.
        on_error: ``"raise"`` (the default): a file that cannot be decoded
            raises JpegDecodeError naming it, which stops the epoch. A
            damaged file may pass one epoch and fail a later one, since only
            the window is decoded; validate a dataset before training with
            ``python -m custom_op.prepare SRC DST --verify`` instead of hiding
            errors. ``"substitute"``: the item is replaced by the next
            sample that decodes (up to 10 tried), and each replacement is
            logged as a warning on the ``custom_op.datasets`` logger, naming
            the file and counting the replacements in this process
            (``substitutions``); never silent.

    Raises:
        FileNotFoundError: (when constructed) ``root`` has no class folder, or
            a class has no file (unless ``allow_empty``): torchvision's
            messages.
        ValueError: (when constructed) ``on_error`` is not a policy, or both
            ``extensions`` and ``is_valid_file`` are given.
        JpegDecodeError: (when an item is read, ``on_error="raise"``) the
            file cannot be decoded; the message starts with its path.

    Example:
        >>> from torchvision.transforms import v2
        >>> dataset = JpegFolder("train", transform=v2.Compose([
        ...     v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()]))
        >>> image, label = dataset[0]          # only the window was decoded
        >>> image.shape, image.dtype
        (torch.Size([3, 224, 224]), torch.uint8)
    """

    def __init__(
        self,
        root: PathLike,
        transform: Optional[Callable[[Any], Any]] = None,
        target_transform: Optional[Callable[[int], Any]] = None,
        *,
        extensions: Optional[Extensions] = None,
        is_valid_file: Optional[Callable[[str], bool]] = None,
        allow_empty: bool = False,
        on_error: str = "raise",
        **decode_options: Any,
    ) -> None:
        if on_error not in ON_ERROR_POLICIES:
            raise ValueError(f"JpegFolder: on_error must be one of {ON_ERROR_POLICIES}, "
                             f"got {on_error!r}")
        self.options = DecodeOptions.checked("JpegFolder", **decode_options)
        self.on_error = on_error
        self.substitutions = 0
        if extensions is None and is_valid_file is None:
            extensions = IMG_EXTENSIONS
        if extensions is not None:
            extensions = tuple(ending.lower() for ending in
                               ((extensions,) if isinstance(extensions, str) else extensions))
        super().__init__(os.path.expanduser(root) if isinstance(root, str) else root,
                         loader=functools.partial(load_sample, options=self.options),
                         extensions=extensions, transform=for_encoded_images(transform),
                         target_transform=target_transform, is_valid_file=is_valid_file,
                         allow_empty=allow_empty)
        self.imgs = self.samples

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        try:
            return self._item(index)
        except JpegDecodeError as error:
            if self.on_error == "raise":
                raise
            return self._substitute(index, error)

    def _item(self, index: int) -> tuple[Any, Any]:
        path, target = self.samples[index]
        image = self.loader(path)
        if self.transform is not None:
            image = decode_remaining(fused_transform(self)(image))
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target

    def _substitute(self, index: int, error: JpegDecodeError) -> tuple[Any, Any]:
        """The first of the following samples that decodes, logged; raises if none does."""
        for offset in range(1, min(_SUBSTITUTE_ATTEMPTS, len(self) - 1) + 1):
            replacement = (index + offset) % len(self)
            try:
                item = self._item(replacement)
            except JpegDecodeError:
                continue
            self.substitutions += 1
            _log.warning("JpegFolder: sample %d replaced by sample %d (%d replacements so far in "
                         "process %d): %s", index, replacement, self.substitutions, os.getpid(),
                         error)
            return item
        raise JpegDecodeError(f"{error} (and none of the next {_SUBSTITUTE_ATTEMPTS} samples "
                              "decoded either)") from error
