"""Prepare a dataset for seeking: ``python -m custom_op.prepare SRC DST``.

Every file under SRC is written to the same relative path under DST:

- a JPEG (by content: it starts with FF D8 FF, whatever its name) is rewritten
  losslessly by :func:`custom_op.prepare_jpeg`: the same pixels, restart
  markers every few MCUs and optimised Huffman tables, so that
  decode_and_crop_jpeg decodes only the segments that cover a crop;
- a tar shard (``*.tar``, WebDataset's format) becomes a tar of the same
  members in the same order, each JPEG member prepared the same way;
- a parquet file (``*.parquet``, a Hugging Face Hub dataset's) becomes one
  with the same schema, rows and row groups, each JPEG of its image column
  (``--image-column``; by default every ``datasets`` Image column) prepared
  the same way; it needs pyarrow, without which it is copied unchanged;
- anything else (a PNG named .JPEG, a text file, an empty file) and every JPEG
  that prepare_jpeg refuses (damaged, 12-bit, lossless, bytes after the
  end-of-image marker) is copied byte for byte, and the summary lists it with
  the reason; a JPEG too large to prepare within --max-memory, and a sparse
  shard member (tar --sparse), are copied as they are without being read
  whole.

The work runs on every core, resumes an interrupted run (an output made
from its source as it is now is kept), never leaves a half-written file or
shard under a final name, even after a kill or a power cut, keeps the mode
bits and times of files and folders, and ends with a summary::

    python -m custom_op.prepare /data/imagenet/train /data/imagenet-prepared/train --verify

``--verify`` decodes every input and output in full and requires the same
pixels, and checks that every output is seekable (two full decodes per file);
a parquet file is read back and compared with its source row by row. The
exit status is 0 only when everything was prepared as asked, 4 when JPEGs
were refused and copied unprepared (``--accept-refused``: 0), 1 on a failure.

The same is available from Python::

    from custom_op.prepare import prepare_tree
    summary = prepare_tree("/data/train", "/data/train-prepared", workers=8)
    print(summary.report())

The modules, in the order a run uses them: ``cli`` (the command line),
``tree`` (prepare_tree), ``walk`` (folder checks, listing, the plan),
``pool`` (worker processes with a bounded queue; ``ray_engine``, the same
work as Ray tasks on a cluster with ``--engine ray``), ``files``, ``shards`` and
``parquet`` (one file's, one shard's and one parquet file's work, in a
worker; ``parquet`` imports pyarrow, so it is imported only when needed,
with ``parquet_check`` and ``parquet_read_back``), ``journal`` (identities
where DST keeps no extended attributes),
``layout`` (--verify's check of metadata and trailing bytes), ``workspace``
(DST's lock and private folder), ``folders`` (DST's folders, their modes and
times), ``atomic`` (temporary files, durable renames, resuming), ``progress``
(the bar), ``summary`` (counts and report), ``items`` (the Task and Outcome
passed between them). The one-file functions
themselves are in custom_op/_decode/_prepared.py.
"""

from .._core._extras import require

require("prepare", "custom_op.prepare")

from .atomic import PRIVATE_FOLDER  # noqa: E402 (after the check that names the extra)
from .cli import main
from .items import EMPTY_FILE, NOT_A_JPEG
from .summary import Summary
from .tree import prepare_tree
from .workspace import DestinationBusy

__all__ = ["EMPTY_FILE", "NOT_A_JPEG", "PRIVATE_FOLDER", "DestinationBusy", "Summary", "main",
           "prepare_tree"]
