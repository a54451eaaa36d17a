"""The node's index store each part of a run meets: a new, empty one of its own.

By default custom_op keeps the indexes it builds in the user's store
(``~/.cache/custom_op/index-store``), so a second ``make bench`` would find the first
one's indexes and time other work, and a run would leave its images' entries behind.
Each part instead runs as a new job on a new node does: over an empty store, named by
``CUSTOM_OP_INDEX_STORE`` so that every process of the part (forked, spawned, Ray's,
the ship part's children) uses it, removed when the part ends. A store the user names
in ``CUSTOM_OP_INDEX_STORE`` is used as it is, for every part.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Iterator

import custom_op

STORE_ENV = "CUSTOM_OP_INDEX_STORE"


def users_store() -> str | None:
    """The store the user named for the run, or None: each part gets a new one."""
    return os.environ.get(STORE_ENV)


@contextlib.contextmanager
def fresh_index_store(part: str) -> Iterator[None]:
    """Runs the body over a new, empty store (this process's cache emptied too), unless the
    user named one."""
    if users_store() is not None:
        yield
        return
    with tempfile.TemporaryDirectory(prefix=f"custom_op-bench-{part}-store-") as folder:
        os.environ[STORE_ENV] = folder
        custom_op.configure_index_cache()  # this process resolves the store again
        try:
            yield
        finally:
            del os.environ[STORE_ENV]
            custom_op.configure_index_cache()
