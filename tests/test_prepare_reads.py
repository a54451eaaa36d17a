"""Reads of paths that came from data: regular files only, never blocking, never unbounded.

prepare lists SRC, then reads each file: one replaced by a FIFO in between
made the run wait for a writer for ever. ``hf_image`` read a row's ``path``
with an unbounded ``read()``: ``/dev/zero`` exhausted memory, a FIFO hung.
Both now go through custom_op/_core/_regular_files.py. Each test runs its reads
in a thread with a generous hang guard; a hung read is released by opening
the FIFO's other end, so a failure never hangs the suite.
"""

from __future__ import annotations

import io
import os
import pathlib
import tarfile
import threading
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import custom_op
from custom_op._torchvision._encoded_jpeg import DecodeOptions
from custom_op._core._regular_files import NotRegularFile, read_regular
from custom_op.datasets import hf_image
from custom_op.prepare import prepare_tree
from custom_op.prepare import walk
from jpegenc import encode
from synthetic import make_photo

HANG_GUARD_SECONDS = 60
JPEG = encode(make_photo(24, 40, 3), sampling="4:2:0")


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _parquet() -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"image": pa.array([{"bytes": JPEG, "path": "a.jpg"}])}), sink)
    return sink.getvalue()


def _release(fifos: list[pathlib.Path]) -> None:
    """Opens each FIFO's writing end and closes it: a reader blocked on it sees end of file."""
    for fifo in fifos:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # no reader waits on it


def _finishes(call: Callable[[], object], fifos: list[pathlib.Path]):
    """call()'s result; fails (after releasing the FIFOs) if it does not return in time."""
    result: dict = {}

    def run() -> None:
        try:
            result["value"] = call()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            result["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_SECONDS)
    hung = thread.is_alive()
    if hung:
        _release(fifos)
        thread.join(HANG_GUARD_SECONDS)
    assert not hung, "the read blocked on a FIFO"
    if "error" in result:
        raise result["error"]
    return result["value"]


@pytest.mark.parametrize("name,data", [("a.jpg", JPEG), ("s.tar", _tar([("k.jpg", JPEG)])),
                                       ("d.parquet", _parquet()), ("notes.txt", b"text")],
                         ids=["jpeg", "shard", "parquet", "copy"])
def test_a_source_replaced_by_a_fifo_after_the_listing_is_an_error(
        tmp_path: pathlib.Path, monkeypatch, name: str, data: bytes) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / name).write_bytes(data)
    (src / "other.jpg").write_bytes(JPEG)
    real_plan = walk.plan

    def plan_then_swap(*args, **kwargs):
        tasks = real_plan(*args, **kwargs)
        (src / name).unlink()
        os.mkfifo(src / name)
        return tasks

    monkeypatch.setattr(walk, "plan", plan_then_swap)
    summary = _finishes(lambda: prepare_tree(src, dst, workers=1, progress=False), [src / name])
    assert [path for path, _ in summary.errors] == [name]
    assert "not a regular file (a FIFO)" in summary.errors[0][1]
    assert summary.prepared == 1 and (dst / "other.jpg").exists()
    assert not (dst / name).exists()


def test_read_regular_refuses_devices_fifos_and_large_files(tmp_path: pathlib.Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile, match="a FIFO"):
        _finishes(lambda: read_regular(str(fifo), 1 << 20), [fifo])
    with pytest.raises(NotRegularFile, match="a character device"):
        read_regular("/dev/zero", 1 << 20)
    (tmp_path / "big").write_bytes(b"x" * 1001)
    with pytest.raises(ValueError, match="larger than the limit of 1000 bytes"):
        read_regular(str(tmp_path / "big"), 1000)
    assert read_regular(str(tmp_path / "big"), 1001) == b"x" * 1001


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "too-large"])
def test_hf_image_reads_a_rows_path_bounded_and_gives_the_rows_error(
        tmp_path: pathlib.Path, kind: str) -> None:
    """A row pointing at /dev/zero exhausted memory, a FIFO hung: now the row's bad data."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "big.jpg").write_bytes(JPEG + b"\0" * 4096)
    path = {"dev-zero": "/dev/zero", "fifo": str(fifo), "too-large": str(tmp_path / "big.jpg")}
    options = DecodeOptions(max_memory=len(JPEG) + 100)
    with pytest.raises(custom_op.JpegDecodeError, match="row 7"):
        _finishes(lambda: hf_image({"bytes": None, "path": path[kind]}, options, source="row 7"),
                  [fifo])


def test_hf_image_still_reads_a_regular_file_and_names_a_missing_one(
        tmp_path: pathlib.Path) -> None:
    (tmp_path / "a.jpg").write_bytes(JPEG)
    image = hf_image({"bytes": None, "path": str(tmp_path / "a.jpg")})
    assert image.decode().shape[-2:] == (24, 40)
    with pytest.raises(FileNotFoundError):
        hf_image({"bytes": None, "path": str(tmp_path / "missing.jpg")})
