"""Parquet rewrites keep what is stored: INT96 timestamps, NaN, every field; --verify reads back.

Each test writes its own small parquet file with pyarrow: a datasets-style
image column (struct {bytes, path}) of JPEGs beside the columns under test.
The rewrite is checked on what the file stores (the parquet schema's physical
and logical types, INT96 values read in both units), and ``--verify`` is
checked against writers made to tamper with what they write (two images
swapped, one byte flipped, a ``path`` changed): each must refuse the file.
"""

from __future__ import annotations

import datetime
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from custom_op.prepare import main, prepare_tree
from jpegenc import encode
from synthetic import make_photo

IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
NO_END = datetime.datetime(9999, 12, 31)  # outside timestamp[ns]: 1816-03-29 when read so


def _jpeg(seed: int) -> bytes:
    return encode(make_photo(24 + seed % 5, 40 + seed % 3, seed), sampling="4:2:0")


def _images(rows: int) -> pa.Array:
    return pa.array([{"bytes": _jpeg(seed), "path": f"img{seed}.jpg"} for seed in range(rows)],
                    IMAGE)


def _write(path: pathlib.Path, columns: dict, **options) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path, row_group_size=2, **options)


def _run(src: pathlib.Path, dst: pathlib.Path, *extra: str) -> int:
    return main([str(src), str(dst), "--workers", "1", "--quiet", "--verify", *extra])


def _read(path: pathlib.Path, column: str, unit: str) -> list:
    return pq.ParquetFile(path, coerce_int96_timestamp_unit=unit).read().column(column).to_pylist()


def _physical_types(reader: pq.ParquetFile) -> dict[str, str]:
    return {reader.schema.column(index).path: reader.schema.column(index).physical_type
            for index in range(len(reader.schema))}


# --- INT96 -----------------------------------------------------------------------------------

def _spark_file(path: pathlib.Path, values: list, unit: str) -> None:
    """INT96 timestamps as Spark and Hive write them (no Arrow schema in the file)."""
    _write(path, {"image": _images(len(values)), "until": pa.array(values, pa.timestamp(unit))},
           use_deprecated_int96_timestamps=True, store_schema=False)


def test_int96_far_dates_keep_their_type_and_value(tmp_path: pathlib.Path) -> None:
    """9999-12-31 came back as 1816-03-29, stored as INT64, and --verify passed (exit 0)."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    values = [NO_END, datetime.datetime(2020, 1, 1, 0, 0, 0, 1), None, datetime.datetime(1, 1, 1)]
    _spark_file(src / "t.parquet", values, "us")
    assert _run(src, dst) == 0
    written = pq.ParquetFile(dst / "t.parquet")
    assert _physical_types(written)["until"] == "INT96"
    assert written.schema.equals(pq.ParquetFile(src / "t.parquet").schema)
    assert _read(dst / "t.parquet", "until", "us") == values
    for unit in ("ns", "us", "ms"):  # the stored 12 bytes, seen through every reading
        assert _read(dst / "t.parquet", "until", unit) == _read(src / "t.parquet", "until", unit)
    assert b"ARROW:schema" not in (written.metadata.metadata or {})


def test_int96_nanoseconds_are_kept(tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    values = [1_577_836_800_000_000_001, 5, None]  # 2020-01-01 plus 1 ns, 1970 plus 5 ns
    _spark_file(src / "t.parquet", values, "ns")
    assert _run(src, dst) == 0
    before = pq.read_table(src / "t.parquet").column("until").cast(pa.int64()).to_pylist()
    after = pq.read_table(dst / "t.parquet").column("until").cast(pa.int64()).to_pylist()
    assert after == before == values


# --- NaN and other values that must come back bit for bit -------------------------------------

def test_nan_in_other_columns_is_kept_and_verifies(tmp_path: pathlib.Path) -> None:
    """--verify refused any file with a NaN (NaN != NaN): 'row group 0 differs', exit 1."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    negative_nan = np.frombuffer(np.uint64(0xFFF8_0000_0000_0001).tobytes(), np.float64)[0]
    columns = {
        "image": _images(4),
        "score": pa.array([float("nan"), 1.5, None, negative_nan], pa.float64()),
        "half": pa.array(np.array([np.nan, 1, -0.0, np.inf], np.float16)),
        "single": pa.array([np.nan, 0.0, -0.0, 2.0], pa.float32()),
        "nested": pa.array([{"x": float("nan"), "y": [1.0, float("nan")]}, None,
                            {"x": -0.0, "y": []}, {"x": 3.0, "y": None}]),
    }
    _write(src / "n.parquet", columns)
    assert _run(src, dst) == 0
    before, after = pq.read_table(src / "n.parquet"), pq.read_table(dst / "n.parquet")
    for name in ("score", "half", "single"):
        width = {"score": np.uint64, "half": np.uint16, "single": np.uint32}[name]
        old = before.column(name).to_numpy(zero_copy_only=False)
        new = after.column(name).to_numpy(zero_copy_only=False)
        assert np.array_equal(np.asarray(old).view(width), np.asarray(new).view(width))
    assert str(after.column("nested").to_pylist()) == str(before.column("nested").to_pylist())


def test_a_changed_nan_payload_or_zero_sign_is_seen() -> None:
    from custom_op.prepare.parquet_check import same_values
    plain = pa.array([float("nan"), 0.0])
    assert same_values(plain, pa.array([float("nan"), 0.0]))
    assert not same_values(plain, pa.array([float("nan"), -0.0]))
    other_nan = np.frombuffer(np.uint64(0x7FF8_0000_0000_0002).tobytes(), np.float64)[0]
    assert not same_values(plain, pa.array([other_nan, 0.0]))
    assert not same_values(pa.array([{"x": 1.0}]), pa.array([{"x": 2.0}]))


# --- --verify reads the written file back ------------------------------------------------------

def _swap_first_two(images: list) -> None:
    images[0]["bytes"], images[1]["bytes"] = images[1]["bytes"], images[0]["bytes"]


def _flip_a_byte(images: list) -> None:
    data = bytearray(images[1]["bytes"])
    data[len(data) // 2] ^= 0x01
    images[1]["bytes"] = bytes(data)


def _rename(images: list) -> None:
    images[0]["path"] = "other.jpg"


@pytest.mark.parametrize("tamper", [_swap_first_two, _flip_a_byte, _rename],
                         ids=["swapped", "flipped-byte", "changed-path"])
def test_verify_reads_back_every_image_and_field(tmp_path: pathlib.Path, monkeypatch,
                                                tamper) -> None:
    """A writer that changes what it was given: --verify passed all three with exit 0."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    _write(src / "t.parquet", {"image": _images(4), "label": pa.array([0, 1, 2, 3])})
    real_write = pq.ParquetWriter.write_table

    def tampering_write(self, table, row_group_size=None):
        index = table.schema.get_field_index("image")
        images = table.column(index).to_pylist()
        tamper(images)
        table = table.set_column(index, table.schema.field(index), pa.array(images, IMAGE))
        return real_write(self, table, row_group_size)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", tampering_write)
    summary = prepare_tree(src, dst, workers=1, verify=True, progress=False)
    assert [path for path, _ in summary.shards_refused] == ["t.parquet"]
    assert "verification" in summary.shards_refused[0][1]
    assert summary.exit_code != 0
    assert not (dst / "t.parquet").exists()
    assert _run(src, tmp_path / "dst2") != 0


# --- memory ----------------------------------------------------------------------------------

def test_a_row_group_larger_than_max_memory_allows_is_refused_naming_what_to_raise(
        tmp_path: pathlib.Path) -> None:
    """A row group was held about six times whatever --max-memory said (150 MB: +1.1 GB)."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    noise = np.random.default_rng(0).integers(0, 256, (256, 256, 3), dtype=np.uint8)
    big = encode(noise, sampling="4:4:4", quality=100)  # about 150 kB of entropy data
    rows = pa.array([{"bytes": big, "path": f"{row}.jpg"} for row in range(8)], IMAGE)
    _write(src / "big.parquet", {"image": rows}, compression="NONE")
    summary = prepare_tree(src, dst, workers=1, progress=False, max_memory=2 << 20)
    assert [path for path, _ in summary.shards_refused] == ["big.parquet"]
    reason = summary.shards_refused[0][1]
    assert "row group 0" in reason and "raise --max-memory to at least" in reason
    assert not (dst / "big.parquet").exists()
    assert prepare_tree(src, tmp_path / "ok", workers=1, progress=False,
                        max_memory=64 << 20).shards_written == 1
