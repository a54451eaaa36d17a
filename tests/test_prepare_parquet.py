"""prepare_tree (and python -m custom_op.prepare) over parquet datasets: images prepared, the rest
unchanged.

The source is a Hub-style folder written by ``datasets`` (data/train-*.parquet,
an Image column and a ClassLabel column, row groups of 3) holding JPEGs of
several kinds, a PNG row and a damaged JPEG row, plus a README.md; other tests
write plain pyarrow tables with a binary image column. Outputs are compared
with pyarrow (schema with metadata, row groups, columns) and every image by
its decoded pixels.
"""

from __future__ import annotations

import io
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pyarrow as pa  # requirements-dev.txt installs it, with datasets
import pyarrow.compute  # noqa: F401 - pa.compute
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

import custom_op
from custom_op._decode._prepared import PreparedJpeg
from custom_op.prepare import NOT_A_JPEG, PRIVATE_FOLDER, Summary, main, prepare_tree
from custom_op.prepare import files as prepare_files
from custom_op.prepare import parquet as parquet_module
from custom_op.prepare.parquet import NO_IMAGE_BYTES, NO_IMAGE_COLUMN, NO_PYARROW
from jpegenc import encode
from synthetic import make_photo, make_smooth_noise
from synthetic.hub import write_hub_dataset

REPO = pathlib.Path(__file__).resolve().parent.parent
FILES = ["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"]
PNG_ROW, DAMAGED_ROW = 2, 6  # both in the second file (rows 5..9), damaged in its 2nd group


def _jpeg(seed: int, **options) -> bytes:
    options.setdefault("sampling", "4:2:0")
    return encode(make_photo(40 + seed % 7, 64 + seed % 5, seed), **options)


def _png(seed: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(make_smooth_noise(30, 40, seed)).save(buffer, format="PNG")
    return buffer.getvalue()


def _samples() -> list[tuple[bytes, str, int]]:
    kinds = [{}, {"progressive": True}, {}, {"sampling": "4:4:4", "restart_interval": 2},
             {"sampling": "gray"}, {}, {}, {"quality": 75}, {}, {"sampling": "4:2:2"}]
    samples = [(_jpeg(seed, **kind), f"n{seed:03d}.JPEG", seed % 3)
               for seed, kind in enumerate(kinds)]
    samples[PNG_ROW] = (_png(PNG_ROW), "n002.png", 2)
    samples[DAMAGED_ROW] = (samples[DAMAGED_ROW][0][:300], "n006.JPEG", 0)  # prepare_jpeg refuses
    return samples


SAMPLES = _samples()
JPEG_ROWS = [row for row in range(len(SAMPLES)) if row not in (PNG_ROW, DAMAGED_ROW)]


def _full_decode(data: bytes) -> torch.Tensor:
    height, width, _ = custom_op.jpeg_size(data)
    return custom_op.decode_and_crop_jpeg(data, 0, 0, height, width, mode="unchanged", seek=False)


def _write_source(src: pathlib.Path) -> None:
    write_hub_dataset(src, SAMPLES, class_names=["a", "b", "c"], files=2, rows_per_group=3)
    (src / "README.md").write_text("---\nlicense: mit\n---\n# a dataset card\n")


def _row_groups(path: pathlib.Path) -> list[int]:
    metadata = pq.ParquetFile(path).metadata
    return [metadata.row_group(group).num_rows for group in range(metadata.num_row_groups)]


def _images(root: pathlib.Path) -> list[bytes]:
    return [row["bytes"] for name in FILES
            for row in pq.read_table(root / name).column("image").to_pylist()]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory):
    src = tmp_path_factory.mktemp("src")
    _write_source(src)
    dst = tmp_path_factory.mktemp("dst") / "out"
    status = main([str(src), str(dst), "--workers", "1", "--quiet"])
    return src, dst, status


def test_schema_metadata_row_groups_and_other_columns_are_unchanged(prepared) -> None:
    src, dst, status = prepared
    assert status == 4  # the damaged row was refused
    for name in FILES:
        before, after = pq.read_table(src / name), pq.read_table(dst / name)
        assert after.schema.equals(before.schema, check_metadata=True)
        assert b"huggingface" in after.schema.metadata
        assert _row_groups(dst / name) == _row_groups(src / name)
        assert after.column("label").equals(before.column("label"))
        assert pa.compute.struct_field(after.column("image"), "path").equals(
            pa.compute.struct_field(before.column("image"), "path"))
    assert _row_groups(src / FILES[1]) == [3, 2]  # the layout the test means to cover
    assert (dst / "README.md").read_bytes() == (src / "README.md").read_bytes()


def test_every_jpeg_row_is_prepared_with_the_same_pixels(prepared) -> None:
    src, dst, _ = prepared
    before, after = _images(src), _images(dst)
    for row in JPEG_ROWS:
        assert after[row] != before[row], f"row {row} was not rewritten"
        assert custom_op.seekable(after[row])
        assert torch.equal(_full_decode(after[row]), _full_decode(before[row])), f"row {row}"
    for row in (PNG_ROW, DAMAGED_ROW):
        assert after[row] == before[row]


def test_summary_counts_rows_and_names_the_odd_ones(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    _write_source(src)
    summary = prepare_tree(src, tmp_path / "dst", workers=1, progress=False)
    assert (summary.files_seen, summary.parquet_seen, summary.shards_written) == (3, 2, 2)
    assert summary.prepared == len(JPEG_ROWS) and summary.progressive == 1
    # README.md is copied as prepare_tree copies any file that is not a JPEG.
    assert summary.copied[NOT_A_JPEG] == ["README.md", f"{FILES[0]}:image[{PNG_ROW}]"]
    damaged = [reason for reason, paths in summary.copied.items()
               if paths == [f"{FILES[1]}:image[{DAMAGED_ROW - 5}]"]]
    assert len(damaged) == 1 and damaged[0] != NOT_A_JPEG
    report = summary.report()
    assert "(2 parquet files)" in report and summary.exit_code == 4
    assert "other shard members" not in report  # a tar-only line


def test_the_output_loads_with_datasets(prepared) -> None:
    import datasets

    _, dst, _ = prepared
    loaded = datasets.load_dataset("parquet", data_dir=str(dst), split="train",
                                   cache_dir=str(dst.parent / "cache"))
    assert loaded.features["label"].names == ["a", "b", "c"]
    assert loaded[0]["image"].size == Image.open(io.BytesIO(SAMPLES[0][0])).size


def test_two_workers_write_the_bytes_one_worker_writes(prepared, tmp_path: pathlib.Path) -> None:
    src, dst, _ = prepared
    prepare_tree(src, tmp_path / "two", workers=2, progress=False)
    for name in FILES:
        assert (tmp_path / "two" / name).read_bytes() == (dst / name).read_bytes()


def test_verify_passes_and_costs_time(prepared, tmp_path: pathlib.Path) -> None:
    src, dst, _ = prepared
    summary = prepare_tree(src, tmp_path / "verified", workers=1, verify=True, progress=False)
    assert summary.verify_failed == [] and summary.exit_code == 4
    assert 0 < summary.verify_seconds < summary.work_seconds
    assert (tmp_path / "verified" / FILES[0]).read_bytes() == (dst / FILES[0]).read_bytes()


def test_verify_failure_keeps_the_original_image(
        prepared, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, _, _ = prepared
    monkeypatch.setattr(prepare_files, "prepare_jpeg_with_info",
                        lambda data, **limits: PreparedJpeg(bytes(data), 0, False))  # not seekable
    summary = prepare_tree(src, tmp_path / "dst", workers=1, verify=True, progress=False)
    # The damaged row fails too: its "rewrite" (itself) does not decode for the comparison.
    assert len(summary.verify_failed) == len(JPEG_ROWS) + 1 and summary.exit_code == 1
    assert _images(tmp_path / "dst") == _images(src)


def _kill_after_first_file(src: pathlib.Path, dst: pathlib.Path) -> None:
    """Runs the tool with each image slowed down; SIGKILL once the first file is complete and the
    second one's temporary exists (its images take 5 x 0.3 s: the kill lands inside it)."""
    slow = ("import sys, time\n"
            "import custom_op.prepare.parquet as parquet\n"
            "real = parquet.rewrite_jpeg\n"
            "parquet.rewrite_jpeg = lambda *args: (time.sleep(0.3), real(*args))[1]\n"
            "from custom_op.prepare import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    process = subprocess.Popen([sys.executable, "-c", slow, str(src), str(dst), "--workers", "1",
                                "--quiet"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not ((dst / FILES[0]).exists() and _temporaries(dst)):
            assert process.poll() is None and time.monotonic() < deadline, "no file written"
            time.sleep(0.01)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()


def _temporaries(dst: pathlib.Path) -> list[pathlib.Path]:
    """The temporary files in DST's private folder (the lock is not one)."""
    folder = dst / PRIVATE_FOLDER
    return [path for path in folder.iterdir() if path.name != "lock"] if folder.is_dir() else []


@pytest.mark.timeout(180)
def test_resume_after_a_kill(prepared, tmp_path: pathlib.Path) -> None:
    src, reference, _ = prepared
    dst = tmp_path / "dst"
    _kill_after_first_file(src, dst)
    left = sorted(path.name for path in (dst / "data").iterdir())
    assert left == ["train-00000-of-00002.parquet"]
    assert len(_temporaries(dst)) == 1  # the second's, in DST's private folder

    summary = prepare_tree(src, dst, workers=1, progress=False)
    assert (summary.stale_removed, summary.already_done, summary.shards_written) == (1, 1, 1)
    assert summary.parquet_seen == 2
    for name in FILES:
        assert (dst / name).read_bytes() == (reference / name).read_bytes()
    assert sorted(path.name for path in (dst / "data").iterdir()) == [pathlib.Path(n).name
                                                                      for n in FILES]


def test_a_truncated_file_is_refused_and_nothing_is_written(tmp_path: pathlib.Path,
                                                           capsys) -> None:
    src = tmp_path / "src"
    _write_source(src)
    data = (src / FILES[1]).read_bytes()
    (src / FILES[1]).write_bytes(data[:len(data) // 2])
    assert main([str(src), str(tmp_path / "dst"), "--workers", "1", "--quiet"]) == 1
    assert f"{FILES[1]}: not a parquet file, or truncated" in capsys.readouterr().out
    assert not (tmp_path / "dst" / FILES[1]).exists()
    assert (tmp_path / "dst" / FILES[0]).exists()
    assert not (tmp_path / "dst" / PRIVATE_FOLDER).exists()


def _binary_table() -> pa.Table:
    return pa.table({"key": ["a", "b", "c", "d"],
                     "jpg": pa.array([_jpeg(20), None, _png(21), _jpeg(22, progressive=True)],
                                     type=pa.large_binary()),
                     "score": [0.5, 1.5, 2.5, 3.5]},
                    metadata={b"origin": b"a plain pyarrow table"})


def test_a_binary_column_named_by_option(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    table = _binary_table()
    pq.write_table(table, src / "shard.parquet", row_group_size=3, compression="zstd")
    assert main([str(src), str(tmp_path / "dst"), "--image-column", "jpg", "--workers", "1",
                 "--quiet", "--verify"]) == 0
    output = pq.read_table(tmp_path / "dst" / "shard.parquet")
    assert output.schema.equals(table.schema, check_metadata=True)
    assert output.select(["key", "score"]).equals(table.select(["key", "score"]))
    assert _row_groups(tmp_path / "dst" / "shard.parquet") == [3, 1]
    assert pq.ParquetFile(tmp_path / "dst" / "shard.parquet").metadata.row_group(0).column(
        0).compression == "ZSTD"
    before, after = table.column("jpg").to_pylist(), output.column("jpg").to_pylist()
    assert after[1:3] == before[1:3]  # the null stays null, the PNG keeps its bytes
    for row in (0, 3):
        assert torch.equal(_full_decode(after[row]), _full_decode(before[row]))


def test_without_the_option_a_binary_column_is_not_guessed(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(_binary_table(), src / "shard.parquet")
    summary = prepare_tree(src, tmp_path / "dst", workers=1, progress=False)
    assert summary.copied == {NO_IMAGE_COLUMN: ["shard.parquet"]}
    assert (tmp_path / "dst" / "shard.parquet").read_bytes() == (src / "shard.parquet").read_bytes()


def test_null_images_are_kept_and_counted(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(_binary_table(), src / "shard.parquet")
    summary = prepare_tree(src, tmp_path / "dst", workers=1, progress=False,
                           image_column="jpg")
    assert summary.copied[NO_IMAGE_BYTES] == ["shard.parquet:jpg[1]"]
    assert summary.prepared == 2


@pytest.mark.parametrize("column, reason", [
    ("image", "no column 'image' (the columns are key, jpg, score)"),
    ("score",
     "column 'score' is double, neither binary nor a struct {bytes: binary, path: string}"),
])
def test_an_unusable_image_column_refuses_the_file(tmp_path: pathlib.Path, column: str,
                                                   reason: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(_binary_table(), src / "shard.parquet")
    summary = prepare_tree(src, tmp_path / "dst", workers=1, progress=False,
                           image_column=column)
    assert summary.shards_refused == [("shard.parquet", reason)] and summary.exit_code == 1
    assert not (tmp_path / "dst" / "shard.parquet").exists()


def test_null_rows_and_null_fields_of_the_image_struct_are_kept(tmp_path: pathlib.Path) -> None:
    kind = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    images = pa.array([{"bytes": _jpeg(30), "path": "a.jpg"}, None,
                       {"bytes": None, "path": "/elsewhere/b.jpg"},
                       {"bytes": _jpeg(31), "path": None}], type=kind)
    table = pa.table({"image": images, "id": [1, 2, 3, 4]})
    (tmp_path / "src").mkdir()
    pq.write_table(table, tmp_path / "src" / "x.parquet")
    summary = prepare_tree(tmp_path / "src", tmp_path / "dst", workers=1, verify=True,
                           progress=False)
    assert summary.prepared == 2 and summary.exit_code == 0
    assert summary.copied[NO_IMAGE_BYTES] == ["x.parquet:image[1]", "x.parquet:image[2]"]
    output = pq.read_table(tmp_path / "dst" / "x.parquet")
    assert output.schema.equals(table.schema, check_metadata=True)
    rows = output.column("image").to_pylist()
    assert rows[1:3] == [None, {"bytes": None, "path": "/elsewhere/b.jpg"}]
    assert rows[3]["path"] is None and custom_op.seekable(rows[3]["bytes"])
    assert output.column("id").equals(table.column("id"))


# --- parquet files are prepare_tree's third kind of whole-file task --------------------------

def test_a_private_parquet_file_and_its_folder_keep_their_modes_and_times(
        tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "private").mkdir(parents=True)
    pq.write_table(_binary_table(), src / "private" / "x.parquet")
    (src / "private" / "x.parquet").chmod(0o600)
    (src / "private").chmod(0o700)
    os.utime(src / "private", ns=(10**18, 10**18 + 1))
    previous = os.umask(0o022)
    try:
        summary = prepare_tree(src, dst, workers=1, progress=False, image_column="jpg")
    finally:
        os.umask(previous)
    assert summary.shards_written == 1 and summary.prepared == 2, summary.report()
    for name, mode in (("private", 0o700), ("private/x.parquet", 0o600)):
        before, after = (src / name).stat(), (dst / name).stat()
        assert after.st_mode & 0o7777 == mode, name
        assert after.st_mtime_ns == before.st_mtime_ns, name


def test_no_fsync_holds_for_parquet_files_and_fsync_flushes_them(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    _write_source(src)
    flushed: list[int] = []
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        flushed.append(os.fstat(descriptor).st_ino)
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    assert main([str(src), str(tmp_path / "unflushed"), "--no-fsync", "--quiet",
                 "--workers", "1"]) == 4
    assert flushed == []
    prepare_tree(src, tmp_path / "flushed", workers=1, progress=False)
    for name in FILES:
        assert (tmp_path / "flushed" / name).stat().st_ino in flushed, name


def test_a_finished_file_is_done_and_a_replaced_source_is_redone(tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _write_source(src)
    prepare_tree(src, dst, workers=1, progress=False)
    again = prepare_tree(src, dst, workers=1, progress=False)
    assert (again.already_done, again.parquet_seen, again.shards_written) == (3, 2, 0)
    # The same bytes and mtime under a new inode: not the source the output was made from.
    copy = src / "copy.tmp"
    shutil.copy2(src / FILES[0], copy)
    os.replace(copy, src / FILES[0])
    redone = prepare_tree(src, dst, workers=1, progress=False)
    assert (redone.already_done, redone.shards_written) == (2, 1), redone.report()


def test_without_pyarrow_parquet_files_are_copied_unchanged(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    _write_source(src)
    monkeypatch.setattr(parquet_module, "pa", None)
    monkeypatch.setattr(parquet_module, "pq", None)
    summary = prepare_tree(src, tmp_path / "dst", workers=1, progress=False)
    assert summary.copied[NO_PYARROW] == FILES and summary.exit_code == 4
    assert (summary.parquet_seen, summary.shards_written) == (2, 0)
    for name in FILES:
        assert (tmp_path / "dst" / name).read_bytes() == (src / name).read_bytes()


def test_importing_prepare_does_not_import_pyarrow_or_torchvision() -> None:
    """pyarrow only for parquet files; torchvision never (with torch._dynamo, which it imports,
    it took a second of every prepare process's start)."""
    code = ("import sys, custom_op.prepare; "
            "print(sorted({'pyarrow', 'torchvision', 'torch._dynamo'} & set(sys.modules)))")
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": path},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("column, error", [(3, TypeError), (b"jpg", TypeError), ("", ValueError)])
def test_a_bad_image_column_argument_is_refused(tmp_path: pathlib.Path, column,
                                                error: type) -> None:
    (tmp_path / "src").mkdir()
    with pytest.raises(error, match="image_column"):
        prepare_tree(tmp_path / "src", tmp_path / "dst", image_column=column)
    assert not (tmp_path / "dst").exists()


def test_the_report_names_both_kinds_of_whole_files() -> None:
    mixed = Summary("src", "dst", files_seen=4, shards_seen=3, parquet_seen=2)
    assert "files seen           4 (1 of them tar shards, 2 parquet files)" in mixed.report()
    assert "other shard members" in mixed.report()
    only_parquet = Summary("src", "dst", files_seen=2, shards_seen=2, parquet_seen=2)
    assert "(2 parquet files)" in only_parquet.report()
    assert "other shard members" not in only_parquet.report()
