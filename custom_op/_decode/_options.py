"""DecodeOptions: how an EncodedJpeg, the *JPEG transforms, ComposeJPEG and the datasets decode.

Beside the decode functions, whose keywords its fields are; it depends on their checks only
(custom_op/_torchvision/_encoded_jpeg.py re-exports it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._arguments import _as_limit, _check_flags, mode_name
from ._single import DEFAULT_MAX_MEMORY, DEFAULT_MAX_PIXELS, DEFAULT_MAX_SCANS


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
    """How an EncodedJpeg is decoded; see :class:`EncodedJpeg` for each field."""

    mode: str = "rgb"
    strict: bool = True
    seek: bool = True
    exact: bool = False
    contiguous: bool = False
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_scans: int = DEFAULT_MAX_SCANS
    max_memory: int = DEFAULT_MAX_MEMORY
    apply_exif_orientation: bool = False

    @classmethod
    def checked(cls, function: str, **options: Any) -> "DecodeOptions":
        """The options given by keyword, validated (TypeError/ValueError naming the bad one).

        Every class that decodes (EncodedJpeg, the ``*JPEG`` transforms, the
        datasets) takes its options by these names and hands them here.
        """
        if not options:
            return _DEFAULT_OPTIONS  # nothing to check: the per-sample case of EncodedJpeg(data)
        unknown = sorted(set(options) - {field.name for field in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(f"{function}(): unknown decode option(s) {', '.join(unknown)}; the "
                            f"options are {', '.join(f.name for f in dataclasses.fields(cls))}")
        values = {**dataclasses.asdict(cls()), **options}
        _check_flags(function, **{name: values[name] for name in (
            "strict", "seek", "exact", "contiguous", "apply_exif_orientation")})
        limits = {name: _as_limit(function, name, values[name])
                  for name in ("max_pixels", "max_scans", "max_memory")}
        return cls(**{**values, **limits, "mode": mode_name(function, values["mode"])})

    def decode_arguments(self) -> dict[str, Any]:
        """The keyword arguments of the decode functions that these options set."""
        return {name: getattr(self, name) for name in _DECODE_ARGUMENTS}


#: The fields that are the decode functions' keywords: all but ``exact``, which decides how the
#: transforms resize (the whole image's resize, reproduced exactly) and is no decode keyword.
_DECODE_ARGUMENTS = tuple(field.name for field in dataclasses.fields(DecodeOptions) if field.name != "exact")

#: The defaults, validated by construction; frozen, so one instance serves every file.
_DEFAULT_OPTIONS = DecodeOptions()
