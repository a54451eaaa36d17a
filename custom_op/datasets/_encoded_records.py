"""What the MDS and LitData readers share: records whose image column holds encoded bytes.

A format module says how to read one record's image bytes and label without
its library's decoder (``record``); this base turns them into what the
per-sample pipeline and the batch lane read, as JpegFolder and HfRows do: an
EncodedJpeg for a JPEG, the image decoded in full for a PNG or another format.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

from torch.utils.data import Dataset
from torchvision import tv_tensors

from .._torchvision._encoded_jpeg import DecodeOptions, EncodedJpeg
from .._torchvision._fused_head import fused_transform
from ..transforms import decode_remaining
from ._folder import ON_ERROR_POLICIES
from ._stored_images import stored_image
from ._stored_images import stored_lane_sample
from ._lane_sample import LaneSample


class EncodedRecords(Dataset):
    """A map-style dataset of ``(image, label)`` items and a batch lane source in one (a
    DistributedSampler splits it between ranks as any map-style dataset).

    Subclasses set ``self.options`` (DecodeOptions) and implement ``__len__``
    and ``record(index) -> (image bytes, label, name)``.
    """

    options: DecodeOptions

    def __init__(self, what: str, transform: Optional[Callable[[Any], Any]],
                 on_error: str) -> None:
        if on_error not in ON_ERROR_POLICIES:
            raise ValueError(f"{what}: on_error must be one of {ON_ERROR_POLICIES}, "
                             f"got {on_error!r}")
        if transform is not None and not callable(transform):
            raise TypeError(f"{what}: transform must be callable, got {transform!r}")
        self.transform = transform
        self.on_error = on_error

    def __len__(self) -> int:
        raise NotImplementedError

    def record(self, index: int) -> tuple[Any, Any, str]:
        """The encoded image of record ``index``, its label, and the name its errors carry."""
        raise NotImplementedError

    def _checked_index(self, index: int) -> int:
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"{type(self).__name__}: an index must be an int, got {index!r}")
        if not -len(self) <= index < len(self):
            raise IndexError(f"{type(self).__name__}: index {index} out of range for "
                             f"{len(self)} records")
        return index % len(self)

    def image(self, index: int) -> tuple[Union[EncodedJpeg, tv_tensors.Image], Any, str]:
        """Record ``index``'s image as the transforms take it (stored_image), label and name."""
        value, label, name = self.record(self._checked_index(int(index)))
        return stored_image(value, self.options, source=name), label, name

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        image, label, _ = self.image(index)
        if self.transform is not None:
            image = decode_remaining(fused_transform(self)(image))
        return image, label

    def lane_samples(self, indices: Sequence[int]) -> list[LaneSample]:
        """The batch lane's view: each record's image, label and name; a record that cannot be
        read becomes a sample with its error, for the lane's ``on_error``."""
        samples = []
        for index in indices:
            value, label, name = self.record(self._checked_index(int(index)))
            samples.append(stored_lane_sample(value, self.options, label, name, key=int(index)))
        return samples
