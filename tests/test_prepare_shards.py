"""python -m custom_op.prepare over tar shards: the same members in the same order, JPEGs prepared.

Each test writes its own shards with tarfile: WebDataset-style samples
(key.jpg, key.cls, key.json) of photo-like JPEGs of several kinds, plus what a
real shard may hold by mistake (a PNG named .jpg, a damaged JPEG, an empty
member, a folder entry, a long non-ASCII name that needs a pax header).
Damaged shards (cut inside a member, inside a header, at a member boundary;
not a tar; a repeated name or key) must be refused with the reason and leave
nothing under the final name.
"""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

import custom_op
from custom_op.prepare import PRIVATE_FOLDER, NOT_A_JPEG, main, prepare_tree
from custom_op.prepare import files as prepare_files
from custom_op.prepare import shards as prepare_shards
from custom_op._decode._prepared import PreparedJpeg
from _interrupt import interrupt_prepare
from _sparse_tars import (SPARSE_FORMATS, SPARSE_NAME, stored_member, write_sparse_file,
                          write_sparse_shard)
from jpegenc import encode
from synthetic import make_photo, make_smooth_noise

LONG_NAME = "sub/" + "long-ünïcode-name-" * 8 + ".jpg"


def _png(height: int, width: int, seed: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(make_smooth_noise(height, width, seed)).save(buffer, format="PNG")
    return buffer.getvalue()


def _jpeg(seed: int, **options) -> bytes:
    options.setdefault("sampling", "4:2:0")
    return encode(make_photo(40 + seed % 7, 64 + seed % 5, seed), **options)


def _sample_members(index: int, **options) -> list[tuple[str, bytes]]:
    key = f"sample{index:04d}"
    return [(f"{key}.jpg", _jpeg(index, **options)), (f"{key}.cls", f"{index % 3}\n".encode()),
            (f"{key}.json", b'{"index": %d}' % index)]


def _write_tar(path: pathlib.Path, members: list[tuple[str, bytes]],
               tar_format: int = tarfile.GNU_FORMAT, folder: str | None = None) -> bytes:
    """Writes ``members`` (name, bytes) as a tar with distinct header metadata; its bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tar_format) as tar:
        if folder is not None:
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 1_600_000_000
            tar.addfile(info)
        for number, (name, data) in enumerate(members):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o640 + number % 2
            info.mtime, info.uid, info.gid = 1_700_000_000 + number, 1000 + number, 2000
            info.uname, info.gname = "alice", "staff"
            tar.addfile(info, io.BytesIO(data))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


def _read_tar(path: pathlib.Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(path) as tar:
        return [(info, tar.extractfile(info).read() if info.isfile() else None)
                for info in tar.getmembers()]


def _full_decode(data: bytes) -> torch.Tensor:
    height, width, _ = custom_op.jpeg_size(data)
    return custom_op.decode_and_crop_jpeg(data, 0, 0, height, width, mode="unchanged", seek=False)


def _temporaries(root: pathlib.Path) -> list[pathlib.Path]:
    """The temporary files in DST's private folder (the lock is not one)."""
    folder = root / PRIVATE_FOLDER
    return [path for path in folder.iterdir() if path.name != "lock"] if folder.is_dir() else []


MIXED_MEMBERS = [
    *_sample_members(0),
    *_sample_members(1, progressive=True),
    *_sample_members(2, sampling="4:4:4", restart_interval=2),
    ("sample0003.jpg", _png(30, 40, 3)),  # a PNG under a JPEG name
    ("sample0003.cls", b"1\n"),
    ("sample0004.jpg", _jpeg(4)[:300]),  # a damaged JPEG: prepare_jpeg refuses it
    ("sample0005.jpg", b""),
    ("sample0006.gray.jpg", _jpeg(6, sampling="gray")),
    (LONG_NAME, _jpeg(7)),
    ("sample0008.bin", np.random.default_rng(8).bytes(300_000)),  # larger than tar's copy buffer
]
JPEG_NAMES = ["sample0000.jpg", "sample0001.jpg", "sample0002.jpg", "sample0006.gray.jpg",
              LONG_NAME]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory):
    """A folder with one mixed shard (pax format) and a loose file, prepared inline."""
    src = tmp_path_factory.mktemp("src")
    _write_tar(src / "shards" / "mixed-000000.tar", MIXED_MEMBERS, tarfile.PAX_FORMAT,
               folder="sub")
    (src / "notes.txt").write_text("not a shard\n")
    dst = tmp_path_factory.mktemp("dst") / "out"
    summary = prepare_tree(src, dst, workers=1, progress=False)
    return src, dst, summary


def test_shard_keeps_names_order_and_header_metadata(mixed) -> None:
    src, dst, _ = mixed
    before = _read_tar(src / "shards" / "mixed-000000.tar")
    after = _read_tar(dst / "shards" / "mixed-000000.tar")
    assert [info.name for info, _ in after] == [info.name for info, _ in before]
    for (old, _), (new, _) in zip(before, after):
        assert (new.type, new.mode, new.mtime, new.uid, new.gid, new.uname, new.gname) == (
            old.type, old.mode, old.mtime, old.uid, old.gid, old.uname, old.gname), old.name


@pytest.mark.parametrize("name", JPEG_NAMES, ids=lambda name: name[:20])
def test_jpeg_members_are_prepared_with_the_same_pixels(mixed, name: str) -> None:
    _, dst, _ = mixed
    members = dict(MIXED_MEMBERS)
    output = {info.name: data for info, data in _read_tar(dst / "shards" / "mixed-000000.tar")}
    assert output[name] != members[name], "the JPEG member was copied, not prepared"
    assert torch.equal(_full_decode(output[name]), _full_decode(members[name]))
    assert custom_op.seekable(output[name])


def test_other_members_are_copied_byte_for_byte(mixed) -> None:
    _, dst, _ = mixed
    output = {info.name: data for info, data in _read_tar(dst / "shards" / "mixed-000000.tar")}
    for name, data in MIXED_MEMBERS:
        if name not in JPEG_NAMES:
            assert output[name] == data, name


def test_summary_counts_members_and_names_the_odd_ones(mixed) -> None:
    _, dst, summary = mixed
    shard = "shards/mixed-000000.tar"
    assert (summary.files_seen, summary.shards_seen, summary.shards_written) == (2, 1, 1)
    assert summary.prepared == len(JPEG_NAMES) and summary.progressive == 1
    assert summary.copied[NOT_A_JPEG] == ["notes.txt", f"{shard}:sample0003.jpg"]
    assert summary.copied["empty file"] == [f"{shard}:sample0005.jpg"]
    (damaged,) = [reason for reason, paths in summary.copied.items()
                  if paths == [f"{shard}:sample0004.jpg"]]
    assert damaged.startswith("prepare_jpeg(): ")
    assert summary.other_members == 8  # 4 .cls, 3 .json, 1 .bin
    assert summary.shards_refused == [] and summary.errors == [] and summary.exit_code == 4
    assert summary.bytes_read == sum(path.stat().st_size for path in mixed[0].rglob("*")
                                     if path.is_file())
    assert summary.handled == 2
    text = summary.report()
    assert "files seen           2 (1 of them tar shards)" in text
    assert "shards written       1" in text and "shards refused       0" in text
    assert f"    {shard}:sample0003.jpg" in text
    assert "other shard members  8" in text
    assert (dst / shard).stat().st_mtime_ns == (mixed[0] / shard).stat().st_mtime_ns
    assert _temporaries(dst) == []


def _shard_tree(root: pathlib.Path, shards: int = 3, samples: int = 4) -> None:
    for shard in range(shards):
        members = [member for index in range(samples)
                   for member in _sample_members(shard * samples + index)]
        _write_tar(root / f"train-{shard:06d}.tar", members)


def test_two_workers_write_the_bytes_one_worker_writes(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    _shard_tree(src)
    one = prepare_tree(src, tmp_path / "one", workers=1, progress=False)
    two = prepare_tree(src, tmp_path / "two", workers=2, progress=False)
    names = sorted(path.name for path in src.iterdir())
    for name in names:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert (one.prepared, one.other_members, one.shards_written) == (12, 24, 3)
    assert (two.prepared, two.other_members, two.shards_written) == (12, 24, 3)


def test_shards_resume_per_shard(tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _shard_tree(src)
    prepare_tree(src, dst, workers=1, progress=False)
    inodes = {path.name: path.stat().st_ino for path in dst.iterdir()}
    touched = src / "train-000001.tar"
    newer = touched.stat().st_mtime_ns + 5 * 10**9
    os.utime(touched, ns=(newer, newer))
    stale = dst / PRIVATE_FOLDER / "99999-0"
    stale.parent.mkdir()
    stale.write_bytes(b"half a shard")

    summary = prepare_tree(src, dst, workers=1, progress=False)

    assert (summary.already_done, summary.shards_written, summary.stale_removed) == (2, 1, 1)
    assert summary.prepared == 4
    assert not stale.exists()
    assert (dst / "train-000000.tar").stat().st_ino == inodes["train-000000.tar"]
    assert (dst / "train-000001.tar").stat().st_mtime_ns == newer


def _cut_in_member(data: bytes) -> bytes:
    return data[:512 + 100]  # the first header and part of its content


def _cut_in_header(data: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        second = tar.getmembers()[1].offset
    return data[:second + 200]


def _cut_at_member_boundary(data: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        third = tar.getmembers()[2].offset
    return data[:third]


def _not_a_tar(data: bytes) -> bytes:
    return b"this is not a tar archive, just text " * 40


def _gzipped(data: bytes) -> bytes:
    import gzip
    return gzip.compress(data)  # a .tar.gz named .tar: the stream reader does not guess


@pytest.mark.parametrize("damage, reason", [
    (_cut_in_member, "truncated or not a tar in member 'sample0000.jpg': unexpected end of data"),
    (_cut_in_header, "truncated or damaged tar: unreadable header at byte"),
    (_cut_at_member_boundary, "truncated tar: it ends at byte"),
    (_not_a_tar, "truncated or not a tar: "),
    (_gzipped, "truncated or not a tar: "),
], ids=["in-member", "in-header", "at-boundary", "not-a-tar", "gzipped"])
def test_damaged_shard_is_refused_and_nothing_is_written(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], damage, reason: str) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    whole = _write_tar(src / "bad.tar", [*_sample_members(0), *_sample_members(1)])
    (src / "bad.tar").write_bytes(damage(whole))
    _shard_tree(src / "good", shards=1, samples=1)

    assert main([str(src), str(dst), "--quiet", "--workers", "1"]) == 1

    out = capsys.readouterr().out
    assert "shards refused       1 (nothing written)\n  bad.tar: " + reason in out
    assert not (dst / "bad.tar").exists()
    assert _temporaries(dst) == []
    assert (dst / "good" / "train-000000.tar").is_file()
    assert "shards written       1" in out


@pytest.mark.parametrize("members, reason", [
    (["a.jpg", "a.cls", "a.jpg"], "duplicate member 'a.jpg'"),
    (["a.jpg", "a.cls", "b.jpg", "a.json"],
     "duplicate key 'a': member 'a.json' comes after another sample's members"),
], ids=["same-name", "key-comes-back"])
def test_repeated_key_is_refused(tmp_path: pathlib.Path, members: list[str], reason: str) -> None:
    src = tmp_path / "src"
    _write_tar(src / "dup.tar", [(name, _jpeg(number)) for number, name in enumerate(members)])
    summary = prepare_tree(src, tmp_path / "dst", workers=1, progress=False)
    assert summary.shards_refused == [("dup.tar", reason)]
    assert summary.exit_code == 1
    assert not (tmp_path / "dst" / "dup.tar").exists()


def test_same_key_in_other_folders_is_not_a_repeat(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    _write_tar(src / "ok.tar", [("x/a.jpg", _jpeg(1)), ("y/a.jpg", _jpeg(2)),
                                ("noextension", b"data"), ("noextension2", b"data")])
    summary = prepare_tree(src, tmp_path / "dst", workers=1, progress=False)
    assert summary.shards_refused == [] and summary.prepared == 2


def test_verify_on_shards(mixed, tmp_path: pathlib.Path) -> None:
    src, dst, _ = mixed
    summary = prepare_tree(src, tmp_path / "verified", workers=1, verify=True, progress=False)
    assert summary.verify_failed == [] and summary.exit_code == 4
    assert 0 < summary.verify_seconds < summary.work_seconds
    shard = "shards/mixed-000000.tar"
    assert (tmp_path / "verified" / shard).read_bytes() == (dst / shard).read_bytes()


def test_verify_failure_in_a_shard_keeps_the_original_member(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    members = _sample_members(0)
    _write_tar(src / "s.tar", members)
    monkeypatch.setattr(prepare_files, "prepare_jpeg_with_info",
                        lambda data, **limits: PreparedJpeg(bytes(data), 0, False))  # not seekable
    summary = prepare_tree(src, tmp_path / "dst", workers=1, verify=True, progress=False)
    assert [path for path, _ in summary.verify_failed] == ["s.tar:sample0000.jpg"]
    assert summary.exit_code == 1 and summary.shards_written == 1
    output = {info.name: data for info, data in _read_tar(tmp_path / "dst" / "s.tar")}
    assert output == dict(members)


def test_progress_counts_shards_as_files(mixed, tmp_path: pathlib.Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    src, _, _ = mixed
    prepare_tree(src, tmp_path / "shown", workers=1, progress=True)
    last = capsys.readouterr().err.rstrip("\n").split("\r")[-1]
    assert "2/2 files" in last


def test_ctrl_c_inside_a_shard_leaves_no_partial_shard(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Interrupted at the third JPEG member of the second shard: exit 130, then resume."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    _shard_tree(src, shards=2, samples=4)
    real_rewrite = prepare_shards.rewrite_jpeg
    calls = []

    def rewrite_then_interrupt(data: bytes, *options):
        calls.append(1)
        if len(calls) == 7:
            raise KeyboardInterrupt
        return real_rewrite(data, *options)

    monkeypatch.setattr(prepare_shards, "rewrite_jpeg", rewrite_then_interrupt)
    assert main([str(src), str(dst), "--workers", "1", "--quiet"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert sorted(path.name for path in dst.iterdir()) == ["train-000000.tar"]

    monkeypatch.setattr(prepare_shards, "rewrite_jpeg", real_rewrite)
    summary = prepare_tree(src, dst, workers=1, progress=False)
    assert (summary.already_done, summary.shards_written, summary.prepared) == (1, 1, 4)
    assert sorted(path.name for path in dst.iterdir()) == ["train-000000.tar", "train-000001.tar"]


def test_sigint_stops_the_pool_between_members(tmp_path: pathlib.Path) -> None:
    """A real Ctrl-C while two workers each write a shard: no shard is left half-written."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = encode(make_photo(256, 384, 40), sampling="4:2:0")
    for shard in range(6):
        _write_tar(src / f"s{shard}.tar", [(f"{index:04d}.jpg", data) for index in range(60)])
    status, stderr = interrupt_prepare([str(src), str(dst), "--workers", "2", "--verify",
                                        "--quiet"], started=lambda: bool(_temporaries(dst)))
    assert status == 130, stderr.decode()
    assert b"Traceback" not in stderr
    assert _temporaries(dst) == []
    # Each worker waits after the first member of its shard until the interrupt
    # (tests/_interrupt.py), so the Ctrl-C lands inside both shards, whatever the load: the
    # pool stops between members and neither shard appears, complete or not.
    assert sorted(dst.glob("*.tar")) == []
    assert [data for _, data in _read_tar(src / "s0.tar")] == [data] * 60  # sources untouched


@pytest.mark.parametrize("layout", sorted(SPARSE_FORMATS))
def test_sparse_member_is_copied_as_stored(tmp_path: pathlib.Path, layout: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A member tar stored as sparse keeps its headers and data blocks byte for byte.

    tarfile hands such a member over expanded; written back under its sparse
    headers it came out empty or unreadable (GNU tar: "numeric overflow in
    sparse archive member"), with exit status 0. The JPEG members around it
    are still prepared.
    """
    folder = tmp_path / "files"
    folder.mkdir()
    jpegs = {"sample0000.jpg": _jpeg(0), "sample0002.jpg": _jpeg(2)}
    for name, data in jpegs.items():
        (folder / name).write_bytes(data)
    sparse = write_sparse_file(folder / SPARSE_NAME, _jpeg(1))  # a JPEG head, then holes
    src = tmp_path / "src"
    src.mkdir()
    write_sparse_shard(src / "shard.tar", folder, ["sample0000.jpg", SPARSE_NAME, "sample0002.jpg"],
                       layout)
    stored = stored_member((src / "shard.tar").read_bytes(), SPARSE_NAME)
    assert len(stored) < len(sparse) // 2, "GNU tar did not store the member as sparse"

    assert main([str(src), str(tmp_path / "dst"), "--workers", "1", "--quiet", "--verify"]) == 4
    report = capsys.readouterr().out
    out = (tmp_path / "dst" / "shard.tar").read_bytes()
    assert stored_member(out, SPARSE_NAME) == stored
    assert f"{prepare_shards.SPARSE_MEMBER}: 1" in report and f"shard.tar:{SPARSE_NAME}" in report
    extracted = tmp_path / "extracted"
    extracted.mkdir()
    subprocess.run(["tar", "-xf", str(tmp_path / "dst" / "shard.tar"), "-C", str(extracted)],
                   check=True, capture_output=True)
    assert (extracted / SPARSE_NAME).read_bytes() == sparse
    for name, data in jpegs.items():
        prepared = (extracted / name).read_bytes()
        assert prepared != data and custom_op.seekable(prepared), name
        assert torch.equal(_full_decode(prepared), _full_decode(data)), name
