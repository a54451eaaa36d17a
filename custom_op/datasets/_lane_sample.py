"""LaneSample, what a source hands the batch lane: defined with the sources, below the lane, so
that the sources (which make them) and custom_op/lane/ (which decodes them) import it downwards
and never each other in a circle."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional


@dataclasses.dataclass
class LaneSample:
    """One sample on its way through the lane: what the dataset read, its label, its name."""

    image: Any  # an EncodedJpeg, a tv_tensors.Image (a file that is not a JPEG), None: error
    label: Any
    name: str
    error: Optional[Exception] = None  # why the file could not be read (on_error="substitute")
    #: What the sample's random stream is keyed by: its dataset index, or for a tar member
    #: "<shard file name>/<member key>" (a str); None for a source that gives none.
    key: Any = None
