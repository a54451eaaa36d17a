"""Generated data for the tests, the benchmarks, the fuzzer's seeds and the demo datasets.

Not part of the custom_op package (pip does not install it): it imports
Pillow, which custom_op does not need at run time, and only the repository's
own tools use it. It sits at the repository root, beside tests/, bench/,
fuzz/ and sagemaker/, its four users, so each imports it as ``synthetic``
with the root on the path (pytest's ``pythonpath``, ``python -m bench`` from
the root, a path line in the scripts).

- ``images``: photo-like pixels (dead leaves), noise, checkerboards,
  ImageFolder trees of such JPEGs, and COCO-style detection sets of them.
- ``shards``: WebDataset-style tar shards (key.jpg, key.cls) of those images,
  or of any ImageFolder-style tree.
"""

from .images import (has_size, make_checkerboard, make_photo, make_smooth_noise, photo_jpeg,
                     write_coco_annotations, write_coco_detection, write_jpeg_folder)
from .shards import folder_samples, generated_samples, write_shards

__all__ = ["folder_samples", "generated_samples", "has_size", "make_checkerboard", "make_photo",
           "make_smooth_noise", "photo_jpeg", "write_coco_annotations", "write_coco_detection",
           "write_jpeg_folder", "write_shards"]
