"""Generated data for the tests, the benchmarks, the fuzzer's seeds and the demo datasets.

Not part of the custom_op package (pip does not install it): it imports
Pillow, which custom_op does not need at run time, and only the repository's
own tools use it. It sits at the repository root, beside tests/, bench/,
fuzz/ and sagemaker/, its four users, so each imports it as ``synthetic``
with the root on the path (pytest's ``pythonpath``, ``python -m bench`` from
the root, a path line in the scripts).

- ``images``: photo-like pixels (dead leaves), noise, checkerboards, and
  ImageFolder trees of such JPEGs.
"""

from .images import make_checkerboard, make_photo, make_smooth_noise, write_jpeg_folder

__all__ = ["make_checkerboard", "make_photo", "make_smooth_noise", "write_jpeg_folder"]
