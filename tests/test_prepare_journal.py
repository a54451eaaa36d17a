"""Resuming on a DST whose file system keeps no user extended attributes (tmpfs, some NFS).

There the outputs cannot carry their source's identity, and prepare compared
only mtimes: a different source with the same mtime kept its stale output,
and a DST pre-filled by ``cp -a`` was reported done and never prepared. Now a
journal in DST keeps the identities. The file system is made to refuse user
attributes by patching os.setxattr and os.getxattr, as tmpfs before Linux 6.6
and many network file systems refuse them (ENOTSUP).
"""

from __future__ import annotations

import errno
import os
import pathlib
import shutil

import pytest

from custom_op.prepare import prepare_tree
from custom_op.prepare.journal import JOURNAL_NAME
from jpegenc import encode
from synthetic import make_photo


def _jpeg(seed: int) -> bytes:
    return encode(make_photo(32, 48, seed), sampling="4:2:0")


@pytest.fixture
def no_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args, **_kwargs):
        raise OSError(errno.ENOTSUP, "Operation not supported")
    for name in ("setxattr", "getxattr", "removexattr"):
        monkeypatch.setattr(os, name, refuse)


def _tree(src: pathlib.Path) -> None:
    (src / "d").mkdir(parents=True)
    for seed in range(3):
        (src / "d" / f"{seed}.jpg").write_bytes(_jpeg(seed))


def _run(src: pathlib.Path, dst: pathlib.Path):
    return prepare_tree(src, dst, workers=1, progress=False)


def test_a_rerun_resumes_from_the_journal(tmp_path: pathlib.Path, no_attributes) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src)
    assert _run(src, dst).prepared == 3
    assert (dst / JOURNAL_NAME).is_file()
    summary = _run(src, dst)
    assert (summary.already_done, summary.prepared) == (3, 0)
    assert sorted(path.name for path in dst.iterdir()) == [JOURNAL_NAME, "d"]


def test_another_source_with_the_same_size_and_mtime_is_redone(
        tmp_path: pathlib.Path, no_attributes) -> None:
    """Only the mtime was compared: the stale output was kept."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src)
    _run(src, dst)
    source = src / "d" / "1.jpg"
    before = source.stat()
    other = bytearray(_jpeg(1))
    replacement = tmp_path / "other.jpg"
    replacement.write_bytes(_jpeg(7)[:len(other)].ljust(len(other), b"\0"))
    os.utime(replacement, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(replacement, source)
    assert (source.stat().st_size, source.stat().st_mtime_ns) == (before.st_size,
                                                                  before.st_mtime_ns)
    summary = _run(src, dst)
    assert summary.already_done == 2 and summary.handled == 1
    clean = tmp_path / "clean"
    _run(src, clean)
    assert (dst / "d" / "1.jpg").read_bytes() == (clean / "d" / "1.jpg").read_bytes()


def test_a_destination_filled_by_cp_a_is_prepared(tmp_path: pathlib.Path, no_attributes) -> None:
    """cp -a gives the copies their sources' mtimes: they were reported done, never prepared."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src)
    shutil.copytree(src, dst, copy_function=shutil.copy2)
    summary = _run(src, dst)
    assert (summary.already_done, summary.prepared) == (0, 3)
    assert (dst / "d" / "0.jpg").read_bytes() != (src / "d" / "0.jpg").read_bytes()


def test_an_output_replaced_after_the_run_is_redone(tmp_path: pathlib.Path,
                                                    no_attributes) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src)
    _run(src, dst)
    output = dst / "d" / "2.jpg"
    times = output.stat()
    shutil.copy2(src / "d" / "2.jpg", output)  # the original put back, times and all
    os.utime(output, ns=(times.st_atime_ns, times.st_mtime_ns))
    summary = _run(src, dst)
    assert (summary.already_done, summary.prepared) == (2, 1)


def test_a_journal_named_file_in_src_is_refused(tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src)
    (src / JOURNAL_NAME).write_text("{}")
    summary = _run(src, dst)
    assert [path for path, _ in summary.errors] == [JOURNAL_NAME]
