"""No source file in custom_op/ or sagemaker/ is over 500 lines (issue 27): a file a reader can
hold in mind, split where it does two things. Build output (_build/, _prebuilt/) is not source."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
LIMIT = 500
SOURCE_SUFFIXES = {".py", ".cpp", ".h"}
NOT_SOURCE = {"_build", "_prebuilt", "__pycache__"}


def _source_files() -> list[pathlib.Path]:
    return sorted(path for folder in ("custom_op", "sagemaker") for path in (ROOT / folder).rglob("*")
                  if path.suffix in SOURCE_SUFFIXES and path.is_file()
                  and not NOT_SOURCE & set(path.relative_to(ROOT).parts))


def _line_count(path: pathlib.Path) -> int:
    return len(path.read_bytes().splitlines())


def test_every_kind_of_source_is_counted() -> None:
    found = {path.relative_to(ROOT).as_posix() for path in _source_files()}
    assert {"custom_op/decode_and_crop_jpeg.cpp", "custom_op/csrc/jpeg_decoder.h",
            "custom_op/_decode/_single.py", "sagemaker/train.py"} <= found


def test_no_source_file_is_over_500_lines() -> None:
    too_long = {path.relative_to(ROOT).as_posix(): lines for path in _source_files()
                if (lines := _line_count(path)) > LIMIT}
    assert too_long == {}


def test_the_count_is_of_lines(tmp_path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_bytes(b"a\n" * 501)
    assert _line_count(sample) == 501
    sample.write_bytes(b"a\n" * 500 + b"no newline at the end")
    assert _line_count(sample) == 501
