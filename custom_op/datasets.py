"""JpegFolder: torchvision's ImageFolder, handing each JPEG's bytes to the transform undecoded.

ImageFolder decodes every file in full with Pillow and the transform then
throws most of the pixels away. JpegFolder finds the same files with the same
labels, reads each file's bytes, and leaves the decoding to a custom_op
transform, which decodes only the window it keeps::

    from torch.utils.data import DataLoader
    from torchvision.transforms import v2

    from custom_op.datasets import JpegFolder
    from custom_op.transforms import RandomResizedCropJPEG

    dataset = JpegFolder("/data/imagenet/train", transform=v2.Compose([
        RandomResizedCropJPEG(224),  # bytes in, uint8 [3, 224, 224] out
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),
    ]))
    loader = DataLoader(dataset, batch_size=256, shuffle=True, num_workers=8)

Files that are not JPEGs by content (ImageNet's train set holds a PNG and
several CMYK JPEGs under .JPEG names; a folder may hold .png or .bmp files)
are decoded in full and handed to the transform as a uint8 ``[3, H, W]``
tensor, which custom_op's transforms accept as well, so they never stop an
epoch. CMYK JPEGs need nothing special: custom_op decodes them to RGB.

This module does not import torchvision: the class discovery is written to
match torchvision.datasets.DatasetFolder's, and torchvision (or Pillow) is
imported only to decode a file that is not a JPEG.
"""

from __future__ import annotations

import importlib.util
import io
import os
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
from torch.utils.data import Dataset

from ._errors import JpegDecodeError

__all__ = ["IMG_EXTENSIONS", "JpegFolder", "load_sample"]

#: torchvision's IMG_EXTENSIONS: what ImageFolder lists by default.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

# Every JPEG starts with SOI (FF D8) and then another marker's FF; checking the content rather
# than the name catches ImageNet's PNG named n02105855_2933.JPEG.
_JPEG_SIGNATURE = b"\xff\xd8\xff"

Extensions = Union[str, tuple[str, ...]]
PathLike = Union[str, "os.PathLike[str]"]


def _find_classes(directory: PathLike) -> tuple[list[str], dict[str, int]]:
    """The sorted names of the subfolders of ``directory``, and their indices.

    Raises:
        FileNotFoundError: ``directory`` does not exist or has no subfolder.
    """
    classes = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
    return classes, {name: index for index, name in enumerate(classes)}


def _make_dataset(directory: PathLike, class_to_idx: dict[str, int],
                 extensions: Extensions = IMG_EXTENSIONS,
                 allow_empty: bool = False) -> list[tuple[str, int]]:
    """``(path, class index)`` of each file with one of ``extensions``, as DatasetFolder lists.

    Classes in sorted order; within a class, ``os.walk`` (following symbolic
    links) with its entries sorted, so subfolders of a class folder are
    searched too and the order does not depend on the file system.

    Raises:
        ValueError: ``class_to_idx`` is empty.
        FileNotFoundError: a class has no file with one of ``extensions``
            (unless ``allow_empty``).
    """
    directory = os.path.expanduser(directory)
    if not class_to_idx:
        raise ValueError("'class_to_index' must have at least one entry to collect any samples.")
    # Lower-cased on both sides, so (".JPEG",) lists what (".jpeg",) does; ImageFolder lower-cases
    # only the file name, so its extensions must be given in lower case.
    endings = tuple(ending.lower() for ending in
                    ((extensions,) if isinstance(extensions, str) else extensions))
    samples = []
    found = set()
    for name in sorted(class_to_idx):
        class_dir = os.path.join(directory, name)
        if not os.path.isdir(class_dir):
            continue
        for folder, _, filenames in sorted(os.walk(class_dir, followlinks=True)):
            for filename in sorted(filenames):
                path = os.path.join(folder, filename)
                if path.lower().endswith(endings):
                    samples.append((path, class_to_idx[name]))
                    found.add(name)
    empty = set(class_to_idx) - found
    if empty and not allow_empty:
        listed = extensions if isinstance(extensions, str) else ", ".join(extensions)
        raise FileNotFoundError(f"Found no valid file for the classes {', '.join(sorted(empty))}. "
                                f"Supported extensions are: {listed}")
    return samples


def _decode_with_torchvision(raw: bytearray) -> torch.Tensor | None:
    """uint8 RGB [3, H, W], or None when torchvision is missing or cannot read the format."""
    try:
        from torchvision.io import ImageReadMode, decode_image
    except ImportError:
        return None
    try:
        image = decode_image(torch.frombuffer(raw, dtype=torch.uint8), mode=ImageReadMode.RGB)
    except RuntimeError:
        return None  # e.g. BMP, PPM, TIFF, which torchvision does not decode: Pillow may
    if image.dim() == 4:
        image = image[0]  # an animated GIF: its first frame, as Pillow's convert("RGB") gives
    if image.dtype != torch.uint8:
        # 16-bit PNG: scaled to 8 bits (v2.ToDtype's rule), where Pillow would clip to 255.
        from torchvision.transforms.v2.functional import to_dtype
        image = to_dtype(image, torch.uint8, scale=True)
    return image.contiguous()  # PNGs come back as a CHW view of HWC memory


def _decode_with_pillow(raw: bytearray, path: str) -> torch.Tensor:
    """uint8 RGB [3, H, W] through Pillow, as ImageFolder's loader decodes."""
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError(f"{path}: not a JPEG, and neither torchvision nor Pillow is installed "
                          "(or able) to decode it in full") from error
    try:
        with Image.open(io.BytesIO(raw)) as image:
            pixels = np.array(image.convert("RGB"))  # a writable copy, so from_numpy does not warn
    except Exception as error:  # Pillow raises OSError, ValueError, SyntaxError... for bad data
        start = f"it starts with {bytes(raw[:4]).hex(' ')}" if raw else "the file is empty"
        raise JpegDecodeError(f"{path}: not a JPEG ({start}), and it could not be decoded as "
                              f"another image either: {error}") from error
    return torch.from_numpy(pixels).permute(2, 0, 1).contiguous()


def load_sample(path: str) -> torch.Tensor:
    """What JpegFolder hands its transform for ``path``: a JPEG's bytes, or the decoded image.

    Returns:
        A 1-D uint8 tensor of the file's bytes if it is a JPEG by content
        (it starts with FF D8 FF), else a contiguous uint8 ``[3, H, W]`` RGB
        tensor (see :class:`JpegFolder`).

    Raises:
        JpegDecodeError: the file is not a JPEG and cannot be decoded.
        ImportError: the file is not a JPEG and neither torchvision (for the
            formats it reads) nor Pillow is installed.
        OSError: the file cannot be read.
    """
    with open(path, "rb") as file:
        # A bytearray, not bytes: torch.frombuffer warns about read-only buffers.
        raw = bytearray(file.read())
    if raw.startswith(_JPEG_SIGNATURE):
        return torch.frombuffer(raw, dtype=torch.uint8)
    if importlib.util.find_spec("PIL") is not None:
        return _decode_with_pillow(raw, path)  # The pixels ImageFolder's loader gives.
    image = _decode_with_torchvision(raw) if raw else None  # frombuffer refuses an empty buffer
    return image if image is not None else _decode_with_pillow(raw, path)


class JpegFolder(Dataset):
    """torchvision.datasets.ImageFolder for custom_op: items are a JPEG's bytes, or a decoded image.

    Lists files and labels as ImageFolder does: the classes are the sorted
    names of ``root``'s subfolders, and each class folder is searched
    recursively for files whose names end with one of ``extensions`` (any
    case), in sorted order. ``classes``, ``class_to_idx``, ``samples``,
    ``targets`` and ``imgs`` equal ImageFolder's for the same root.

    An item is ``(transform(data), target_transform(class_index))``, where
    ``data`` is:

    - for a JPEG by content (the file starts with FF D8 FF, whatever its
      name): the file's bytes as a 1-D uint8 tensor, not yet decoded. JPEG
      transforms from :mod:`custom_op.transforms` decode the window they keep.
    - for anything else (a PNG named .JPEG, a .bmp file): the whole image
      decoded to a contiguous uint8 ``[3, H, W]`` RGB tensor with Pillow,
      exactly as ImageFolder's loader decodes it (with
      torchvision.io.decode_image when Pillow is not installed). The same transforms cut the same window
      from it, so such files do not stop an epoch. Gray and palette images
      become RGB and alpha is dropped, as ImageFolder's ``convert("RGB")``
      does.

    With ``transform=None`` the item is ``data`` itself: the bytes of a JPEG
    are then returned unchecked.

    Args:
        root: The folder that holds one subfolder per class. A str has ``~``
            expanded.
        transform: Called on ``data``; usually starts with
            :class:`custom_op.transforms.RandomResizedCropJPEG` or another
            transform that accepts both kinds of ``data``.
        target_transform: Called on the class index.
        extensions: The file name endings to list (any case): a tuple, or
            one str. ImageFolder's by default.
        allow_empty: If True, a class folder without any listed file is kept
            as a class with no samples; if False, it raises.

    Attributes:
        loader: :func:`load_sample`, which reads a file into ``data``.
        classes: The class names, sorted.
        class_to_idx: ``{class name: index}``.
        samples, imgs: ``[(path, class index)]``, paths as str.
        targets: ``[class index]``, one per sample.

    Raises:
        FileNotFoundError: (when constructed) ``root`` does not exist or has no
            subfolder ("Couldn't find any class folder in ..."), or a class
            has no file with one of ``extensions`` ("Found no valid file for
            the classes ...").
        JpegDecodeError: (when an item is read) a JPEG the transform cannot
            decode (truncated, corrupt, unsupported), or a non-JPEG file that
            neither torchvision nor Pillow can decode; the message starts with
            the file's path. ImageFolder with Pillow raises for the same files
            (an OSError from Pillow). Both kinds of bad file raise the one
            exception, so a single ``except custom_op.JpegDecodeError`` can
            skip them.

    Example:
        >>> dataset = JpegFolder("train", transform=RandomResizedCropJPEG(224))
        >>> image, label = dataset[0]
        >>> image.shape, dataset.classes[label]
        (torch.Size([3, 224, 224]), 'n01440764')
    """

    def __init__(
        self,
        root: PathLike,
        transform: Optional[Callable[[torch.Tensor], Any]] = None,
        target_transform: Optional[Callable[[int], Any]] = None,
        *,
        extensions: Extensions = IMG_EXTENSIONS,
        allow_empty: bool = False,
    ) -> None:
        super().__init__()
        self.root = os.path.expanduser(root) if isinstance(root, str) else root
        self.transform = transform
        self.target_transform = target_transform
        self.extensions = extensions
        self.loader = load_sample
        self.classes, self.class_to_idx = self.find_classes(self.root)
        self.samples = self.make_dataset(self.root, self.class_to_idx, extensions=extensions,
                                         allow_empty=allow_empty)
        self.targets = [target for _, target in self.samples]
        self.imgs = self.samples

    def find_classes(self, directory: PathLike) -> tuple[list[str], dict[str, int]]:
        """The classes and their indices; override it for another layout (ImageFolder's API)."""
        return _find_classes(directory)

    @staticmethod
    def make_dataset(directory: PathLike, class_to_idx: dict[str, int],
                     extensions: Extensions = IMG_EXTENSIONS,
                     allow_empty: bool = False) -> list[tuple[str, int]]:
        """The ``(path, class index)`` list; override it to list files otherwise, as ImageFolder."""
        return _make_dataset(directory, class_to_idx, extensions=extensions,
                             allow_empty=allow_empty)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        path, target = self.samples[index]
        sample = self.loader(path)
        if self.transform is not None:
            try:
                sample = self.transform(sample)
            except JpegDecodeError as error:
                raise JpegDecodeError(f"{path}: {error}") from error
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    def __repr__(self) -> str:
        lines = [f"Dataset {type(self).__name__}", f"    Number of datapoints: {len(self)}",
                 f"    Root location: {self.root}"]
        if self.transform is not None:
            lines.append(f"    Transform: {self.transform!r}")
        if self.target_transform is not None:
            lines.append(f"    Target transform: {self.target_transform!r}")
        return "\n".join(lines)
