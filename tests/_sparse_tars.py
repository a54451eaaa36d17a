"""Tar shards with a sparse member, written by GNU tar itself in each of its sparse formats.

``tar --sparse`` stores a file's data without its holes, with a map of where
the data goes: in a GNU type-S header (``--format=gnu``), or in pax records
(``--format=posix``, ``--sparse-version`` 0.0, 0.1 or 1.0). Only GNU tar writes
these, so the tests run it; without tar on the machine they fail (there is no
other honest way to make such a shard).
"""

from __future__ import annotations

import io
import pathlib
import subprocess
import tarfile

#: --format and --sparse-version of each sparse layout GNU tar writes.
SPARSE_FORMATS = {"gnu": ("gnu", None), "pax-0.0": ("posix", "0.0"), "pax-0.1": ("posix", "0.1"),
                  "pax-1.0": ("posix", "1.0")}
#: The sparse member's name in every shard.
SPARSE_NAME = "sample0001.jpg"


def write_sparse_file(path: pathlib.Path, head: bytes) -> bytes:
    """``head``, a 1 MiB hole, a tail, a hole to 3 MiB: a file tar stores as sparse; its bytes."""
    with open(path, "wb") as file:
        file.write(head)
        file.seek(1 << 20)
        file.write(b"tail of a sparse file " * 50)
        file.truncate(3 << 20)
    return path.read_bytes()


def write_sparse_shard(shard: pathlib.Path, folder: pathlib.Path, names: list[str],
                       layout: str) -> None:
    """Runs GNU tar over ``names`` in ``folder`` (in that order) with --sparse, as ``layout``."""
    tar_format, version = SPARSE_FORMATS[layout]
    command = ["tar", "--sparse", f"--format={tar_format}", "-cf", str(shard), "-C", str(folder)]
    if version is not None:
        command.insert(2, f"--sparse-version={version}")
    subprocess.run(command + names, check=True, capture_output=True)


def stored_member(shard: bytes, name: str) -> bytes:
    """The member's stored bytes in a shard: from its first header block (a pax or long-name
    header when it has one) to the end of its data blocks, as tarfile locates them."""
    with tarfile.open(fileobj=io.BytesIO(shard), mode="r|") as tar:
        for info in tar:
            if info.name == name:
                return shard[info.offset:tar.offset]
    raise AssertionError(f"no member {name!r}")
