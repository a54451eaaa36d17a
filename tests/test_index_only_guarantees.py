"""python -m custom_op.prepare --index-only SRC holds what prepare SRC DST holds: names a
sidecar cannot record are reported, never a traceback; --max-memory bounds every read; a
second run on the same SRC stops at the lock; only stale temporaries are removed; FIFOs are
never waited on; temporaries are created exclusively, never through a planted link; every
option is honoured or refused; the summary is printed whatever happens and the exit status
says whether anything failed."""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import sys
import tarfile

import pytest

from custom_op._index._sidecar import FOLDER_SIDECAR, decode_sidecar, sidecar_of_source
from custom_op.prepare import index_only
from custom_op.prepare.cli import BUSY, main
from custom_op.prepare.workspace import Workspace
from synthetic import photo_jpeg

SIZE = (160, 120)


@pytest.fixture(scope="module")
def jpegs() -> list[bytes]:
    return [photo_jpeg(*SIZE, seed=44, index=i) for i in range(3)]


@pytest.fixture
def folder(tmp_path: pathlib.Path, jpegs: list[bytes]) -> pathlib.Path:
    root = tmp_path / "src"
    (root / "photos").mkdir(parents=True)
    for i, data in enumerate(jpegs):
        (root / "photos" / f"{i}.jpg").write_bytes(data)
    return root


def _shard(path: pathlib.Path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _run(capsys, *arguments: str) -> tuple[int, str, str]:
    status = main([*arguments, "--index-only", "--quiet"])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _folder_entries(folder: pathlib.Path) -> dict:
    return decode_sidecar((folder / FOLDER_SIDECAR).read_bytes())[1]


def test_a_member_name_too_long_for_a_sidecar_is_reported_not_a_traceback(
        tmp_path, jpegs, capsys) -> None:
    shard = tmp_path / "shard.tar"
    long_name = "k" * 70000 + ".jpg"
    _shard(shard, [("a.jpg", jpegs[0]), (long_name, jpegs[1]), ("b.jpg", jpegs[2])])
    status, out, _ = _run(capsys, str(tmp_path))
    assert status == 1
    assert "1 failed" in out and "longer than an index sidecar can record" in out
    assert len(out) < 2000  # the name is shortened in the summary, not printed whole
    _, entries = decode_sidecar(pathlib.Path(sidecar_of_source(str(shard))).read_bytes())
    assert sorted(entries) == ["a.jpg", "b.jpg"]


def test_max_memory_bounds_every_file_and_member(folder, jpegs, capsys) -> None:
    limit = max(len(data) for data in jpegs) + 1
    # Larger than the limit: a sparse file that starts like a JPEG, and a shard's member.
    big = folder / "photos" / "big.jpg"
    with open(big, "wb") as file:
        file.write(b"\xff\xd8\xff")
        file.truncate(8 * limit)
    _shard(folder / "shard.tar", [("a.jpg", jpegs[0]), ("b.jpg", jpegs[0] + bytes(limit))])
    status, out, _ = _run(capsys, str(folder), "--max-memory", str(limit))
    assert status == 1
    assert out.count("larger than max_memory") == 2
    assert f"{big}: " in out and "shard.tar:b.jpg: " in out
    assert sorted(_folder_entries(folder / "photos")) == ["0.jpg", "1.jpg", "2.jpg"]
    _, members = decode_sidecar((folder / "shard.tar.cjmi").read_bytes())
    assert sorted(members) == ["a.jpg"]
    # A larger limit indexes the folder's file that failed: the rerun tries it again.
    status, out, _ = _run(capsys, str(folder), "--max-memory", str(16 * limit))
    assert status == 0 and "big.jpg" in _folder_entries(folder / "photos")


def test_a_parquet_row_group_beyond_max_memory_fails_unread(tmp_path, jpegs, capsys) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    images = pa.array([{"bytes": data, "path": None} for data in jpegs],
                      pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    pq.write_table(pa.table({"image": images}), tmp_path / "rows.parquet")
    status, out, _ = _run(capsys, str(tmp_path), "--max-memory", str(len(jpegs[0])))
    assert status == 1 and "row group 0's column 'image'" in out and "raise --max-memory" in out
    assert not (tmp_path / "rows.parquet.cjmi").exists()
    assert _run(capsys, str(tmp_path))[0] == 0
    assert len(decode_sidecar((tmp_path / "rows.parquet.cjmi").read_bytes())[1]) == len(jpegs)


def test_a_second_run_on_the_same_src_stops_at_the_lock(folder, capsys) -> None:
    with Workspace(str(folder)):  # what a run holds while it works
        status, out, err = _run(capsys, str(folder))
    assert status == BUSY
    assert "another run of python -m custom_op.prepare" in err and str(folder) in err
    assert not (folder / "photos" / FOLDER_SIDECAR).exists()
    assert _run(capsys, str(folder))[0] == 0
    assert not (folder / ".custom_op-prepare").exists()  # the lock's folder goes at the end


def _machine() -> str:
    """This machine as the temporaries' names record it."""
    return getattr(index_only, "_MACHINE", "f" * 8)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_provably_stale_temporaries_are_removed(folder, capsys) -> None:
    photos = folder / "photos"
    machine = _machine()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        kept = [photos / f".{FOLDER_SIDECAR}.{machine}-{live.pid}-{'1' * 16}.tmp",
                photos / f".{FOLDER_SIDECAR}.{'0' * 8}-{_dead_pid()}-{'2' * 16}.tmp",
                photos / f".{FOLDER_SIDECAR}.{live.pid}.tmp"]  # no machine: not provable
        stale = photos / f".{FOLDER_SIDECAR}.{machine}-{_dead_pid()}-{'3' * 16}.tmp"
        for path in kept + [stale]:
            path.write_bytes(b"partial")
        status, out, _ = _run(capsys, str(folder))
        assert status == 0 and "1 temporaries of killed runs removed" in out
        assert all(path.exists() for path in kept) and not stale.exists()
    finally:
        live.kill()
        live.wait()


@pytest.mark.parametrize("name", ["x.jpg", "x.tar", "x.parquet"])
def test_a_fifo_is_a_failure_never_waited_on(folder, name) -> None:
    os.mkfifo(folder / "photos" / name)
    run = subprocess.run([sys.executable, "-m", "custom_op.prepare", "--index-only", str(folder)],
                         capture_output=True, text=True, timeout=120,
                         cwd=pathlib.Path(__file__).parents[1])
    assert run.returncode == 1, run.stderr
    assert f"{name}: " in run.stdout and "a FIFO" in run.stdout
    assert "Traceback" not in run.stderr
    assert len(_folder_entries(folder / "photos")) == 3


def test_a_link_planted_at_a_temporary_name_is_not_written_through(
        folder, tmp_path, capsys, monkeypatch) -> None:
    """The links are planted while the run reads the JPEGs, after it looked for stale
    temporaries and before it writes: at the next random name, and at a predictable one."""
    photos = folder / "photos"
    outside = tmp_path / "outside"
    outside.write_bytes(b"not yours")
    planted = "5" * 16
    names = iter([planted, "6" * 16])
    monkeypatch.setattr("secrets.token_hex", lambda _: next(names))
    index_of = index_only._index_of

    def planting(data: bytes):
        for name in (f".{FOLDER_SIDECAR}.{_machine()}-{os.getpid()}-{planted}.tmp",
                     f".{FOLDER_SIDECAR}.{os.getpid()}.tmp"):
            if not (photos / name).is_symlink():
                (photos / name).symlink_to(outside)
        return index_of(data)

    monkeypatch.setattr(index_only, "_index_of", planting)
    assert _run(capsys, str(folder))[0] == 0
    assert outside.read_bytes() == b"not yours"
    assert len(_folder_entries(photos)) == 3


def test_a_link_planted_at_the_sidecar_name_is_replaced_not_followed(
        folder, tmp_path, capsys) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"not yours")
    sidecar = folder / "photos" / FOLDER_SIDECAR
    sidecar.symlink_to(outside)
    assert _run(capsys, str(folder))[0] == 0
    assert outside.read_bytes() == b"not yours"
    assert not sidecar.is_symlink() and len(_folder_entries(folder / "photos")) == 3


@pytest.mark.parametrize("arguments, option", [
    (["--verify"], "--verify"), (["--workers", "2"], "--workers"),
    (["--engine", "ray"], "--engine"), (["--ray-address", "auto"], "--ray-address"),
    (["--accept-refused"], "--accept-refused"),
])
def test_an_option_it_cannot_honour_is_refused(folder, capsys, arguments, option) -> None:
    status, out, err = _run(capsys, str(folder), *arguments)
    assert status == 2 and f"--index-only does not take {option}" in err and out == ""
    assert not (folder / "photos" / FOLDER_SIDECAR).exists()


def test_force_rewrites_current_sidecars_and_one_worker_is_accepted(folder, capsys) -> None:
    assert _run(capsys, str(folder), "--workers", "1")[0] == 0
    status, out, _ = _run(capsys, str(folder))
    assert status == 0 and "0 written, 1 already current" in out
    status, out, _ = _run(capsys, str(folder), "--force")
    assert status == 0 and "1 written, 0 already current" in out


def test_the_summary_is_printed_whatever_happens(folder, capsys, monkeypatch) -> None:
    def broken(data: bytes):
        raise RuntimeError("the indexer broke")

    monkeypatch.setattr(index_only, "_index_of", broken)
    status, out, err = _run(capsys, str(folder))
    assert status == 1 and "1 failed" in out and "the indexer broke" in out
    assert "Traceback" not in err
    monkeypatch.undo()

    def interrupted(source, destination):
        raise KeyboardInterrupt

    monkeypatch.setattr(index_only.os, "replace", interrupted)
    status, out, err = _run(capsys, str(folder))
    assert status == 130 and "index sidecars: 0 written" in out and "interrupted" in err
