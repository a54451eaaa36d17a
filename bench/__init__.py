"""Timing scripts for custom_op: no asserts, only measurements.

Run everything on defaults from the repository root with ``python -m bench``
(or ``make bench``); ``python -m bench PART ...`` runs one part and
``python -m bench --help`` lists them. Results go to bench/results/ as JSON
plus one PNG chart per question. The layout:

  __main__.py        the command line: which parts, on which images, where results go
  machine.py         the machine's description printed above every table
  images.py          the images a part reads: generated or real photos, cached
  photos.py          where the real photos come from and how they are fitted
  timing.py          interleaved timing and statistics shared by the parts
  sampling.py        RandomResizedCrop windows drawn by torchvision's own code
  loaders.py         DataLoader throughput: interleaved epochs, images/s
  report.py          tables, ratios and the JSON file
  chart.py           the PNG figures
  *_bench.py         one experiment each (see each module's docstring)

Importing this package pins the math libraries to one thread. Those
libraries read their environment variables only once, when torch loads, and
every benchmark module is imported through this package, so the pinning
always comes first.
"""

import os as _os
import sys as _sys

# One thread per process: the single-decode parts measure one decode on one
# core, and DataLoader workers are single-threaded anyway.
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                     "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "TF_NUM_INTRAOP_THREADS",
                     "TF_NUM_INTEROP_THREADS")
#: False when torch was imported before this package, so the pinning came late.
THREADS_PINNED_BEFORE_TORCH = "torch" not in _sys.modules
for _variable in _THREAD_VARIABLES:
    _os.environ[_variable] = "1"
