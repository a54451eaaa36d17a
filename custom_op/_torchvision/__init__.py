"""The torchvision v2 integration: EncodedJpeg (_encoded_jpeg, its options in custom_op/_decode/_options.py),
what each v2 functional does to it (_tv_kernels), the resize it records and computes in one
decode (_fused_resize) and torchvision's size arithmetic (_tv_geometry).

The kernels are registered here, in the package's __init__: Python runs it before any module
of the package, so importing EncodedJpeg from anywhere, or unpickling one in a spawned
DataLoader worker (pickle imports custom_op._torchvision._encoded_jpeg), registers them.
Neither _encoded_jpeg nor _tv_kernels imports the other at run time.
"""

from .._core._extras import require

require("torchvision", "custom_op.EncodedJpeg (and custom_op.transforms, custom_op.datasets)")

from .._decode._options import DecodeOptions  # noqa: E402 (after the check that names the extra)
from ._encoded_jpeg import EncodedJpeg
from . import _tv_kernels

_tv_kernels.register_kernels(EncodedJpeg)

__all__ = ["DecodeOptions", "EncodedJpeg"]
