"""python -m custom_op.prepare: a tree of JPEGs rewritten for seeking, everything else copied.

The source tree mixes what a real dataset folder holds: JPEGs of every
sampling, gray, CMYK, progressive, arithmetic-coded, with restart markers
already, odd sizes down to 1x1, one written by Pillow; a PNG under a .JPEG
name (as in ImageNet), a text file, an empty file and a truncated JPEG. Every
prepared file must decode to its input's pixels and be seekable; every other
file must be copied byte for byte and listed with its reason. Resuming,
interrupted runs (a stale temporary file, Ctrl-C both inline and in the
process pool), --verify, the DST checks, the worker count and the command
line itself are tested on small trees of their own.
"""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

import custom_op
from custom_op.prepare import atomic
from custom_op.prepare import files as prepare_files
from custom_op.prepare.progress import Progress
from custom_op._decode._prepared import PreparedJpeg
from custom_op.prepare import EMPTY_FILE, NOT_A_JPEG, PRIVATE_FOLDER, main, prepare_tree
from synthetic import make_photo, make_smooth_noise
from _interrupt import interrupt_prepare
from jpegenc import encode

REPO = pathlib.Path(custom_op.__file__).resolve().parent.parent


def _photo(height: int, width: int, seed: int) -> np.ndarray:
    return make_photo(height, width, seed)


def _pillow_jpeg(height: int, width: int, seed: int, **options) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(_photo(height, width, seed)).save(buffer, format="JPEG", **options)
    return buffer.getvalue()


def _png(height: int, width: int, seed: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(make_smooth_noise(height, width, seed)).save(buffer, format="PNG")
    return buffer.getvalue()


def _cmyk(height: int, width: int, seed: int) -> np.ndarray:
    ink = make_smooth_noise(height, width, seed + 1, cells=5)[:, :, 1]
    return np.dstack([_photo(height, width, seed), ink])


# Relative path -> (recipe, channels that mode="unchanged" gives).
JPEG_RECIPES = {
    "a/420.jpg": (lambda: encode(_photo(57, 91, 1), sampling="4:2:0", quality=90), 3),
    "a/422.jpg": (lambda: encode(_photo(64, 96, 2), sampling="4:2:2", quality=85), 3),
    "a/444.JPEG": (lambda: encode(_photo(33, 47, 3), sampling="4:4:4", quality=95), 3),
    "b/gray.jpg": (lambda: encode(_photo(41, 75, 4), sampling="gray", quality=90), 1),
    "b/cmyk.jpg": (lambda: encode(_cmyk(57, 91, 5), sampling="4:4:4", colorspace="cmyk"), 4),
    "b/progressive.jpg": (lambda: encode(_photo(57, 91, 6), sampling="4:2:0", progressive=True),
                          3),
    "c/deep/one_pixel.jpg": (lambda: encode(_photo(1, 1, 7), sampling="4:2:0"), 3),
    "c/deep/odd_17x33.jpg": (lambda: encode(_photo(17, 33, 8), sampling="4:2:2",
                                            progressive=True), 3),
    "c/restarts.jpg": (lambda: encode(_photo(57, 91, 9), sampling="4:2:0", restart_interval=3), 3),
    "c/arithmetic.jpg": (lambda: encode(_photo(41, 75, 10), sampling="4:2:0", arithmetic=True), 3),
    "c/pillow.jpg": (lambda: _pillow_jpeg(50, 70, 11, quality=90), 3),
}
PROGRESSIVE = {"b/progressive.jpg", "c/deep/odd_17x33.jpg"}
NOT_JPEG = {
    "b/n02105855_2933.JPEG": lambda: _png(61, 83, 12),  # a PNG under a JPEG name, as in ImageNet
    "notes.txt": lambda: b"not an image\n",
}
EMPTY = "c/empty.jpg"
TRUNCATED = "a/truncated.jpg"
COPIED = sorted([*NOT_JPEG, EMPTY, TRUNCATED])
ALL_FILES = sorted([*JPEG_RECIPES, *COPIED])


def _write_tree(root: pathlib.Path) -> dict[str, bytes]:
    """Writes the mixed tree under ``root``; returns each file's bytes by relative path."""
    files = {name: recipe() for name, (recipe, _) in JPEG_RECIPES.items()}
    files |= {name: recipe() for name, recipe in NOT_JPEG.items()}
    files[EMPTY] = b""
    whole = files["a/420.jpg"]
    files[TRUNCATED] = whole[:len(whole) // 2]
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


def _write_small_tree(root: pathlib.Path, count: int = 4) -> list[str]:
    """``count`` photos in two folders plus a text file, for the resume and interrupt tests."""
    names = []
    for index in range(count):
        name = f"{'xy'[index % 2]}/{index:03d}.jpg"
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(encode(_photo(48, 64, 100 + index), sampling="4:2:0"))
        names.append(name)
    (root / "x/readme.txt").write_text("hello\n")
    return sorted([*names, "x/readme.txt"])


def _full_decode(data: bytes) -> torch.Tensor:
    height, width, _ = custom_op.jpeg_size(data)
    return custom_op.decode_and_crop_jpeg(data, 0, 0, height, width, mode="unchanged", seek=False)


def _files(root: pathlib.Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


def _snapshot(root: pathlib.Path) -> dict[str, tuple[int, int, bytes]]:
    """(inode, mtime in ns, bytes) of every file: a rewrite changes the inode (temp + rename)."""
    return {name: ((root / name).stat().st_ino, (root / name).stat().st_mtime_ns, data)
            for name, data in _files(root).items()}


def _temporaries(root: pathlib.Path) -> list[pathlib.Path]:
    """The temporary files in DST's private folder (the lock is not one)."""
    folder = root / PRIVATE_FOLDER
    return [path for path in folder.iterdir() if path.name != "lock"] if folder.is_dir() else []


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[str, bytes]]:
    root = tmp_path_factory.mktemp("src")
    return root, _write_tree(root)


@pytest.fixture(scope="module")
def prepared(tree, tmp_path_factory: pytest.TempPathFactory):
    """The mixed tree prepared once, inline: (src, dst, summary, source bytes)."""
    src, files = tree
    dst = tmp_path_factory.mktemp("dst") / "out"  # a DST that does not exist yet
    summary = prepare_tree(src, dst, workers=1, progress=False)
    return src, dst, summary, files


# --- The mixed tree ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(JPEG_RECIPES))
def test_prepared_file_has_the_input_pixels(prepared, name: str) -> None:
    _, dst, _, files = prepared
    output = (dst / name).read_bytes()
    assert output != files[name], "the JPEG was copied, not prepared"
    before, after = _full_decode(files[name]), _full_decode(output)
    assert before.shape[0] == JPEG_RECIPES[name][1]
    assert torch.equal(before, after)
    assert custom_op.seekable(output)


@pytest.mark.parametrize("name", COPIED)
def test_other_files_are_copied_byte_for_byte(prepared, name: str) -> None:
    _, dst, _, files = prepared
    assert (dst / name).read_bytes() == files[name]


def test_summary_counts_every_file_once(prepared) -> None:
    _, dst, summary, files = prepared
    assert summary.files_seen == len(ALL_FILES)
    assert summary.prepared == len(JPEG_RECIPES)
    assert summary.progressive == len(PROGRESSIVE)
    assert summary.already_done == 0
    assert summary.verify_failed == [] and summary.errors == []
    assert summary.copied_count == len(COPIED)
    assert summary.exit_code == 4  # its damaged JPEGs were refused
    assert summary.bytes_before == sum(len(files[name]) for name in JPEG_RECIPES)
    assert summary.bytes_after == sum((dst / name).stat().st_size for name in JPEG_RECIPES)
    assert len(summary.size_ratios) == len(JPEG_RECIPES)
    assert summary.bytes_read == sum(len(data) for data in files.values())


def test_summary_gives_the_reason_for_each_copy(prepared) -> None:
    _, _, summary, _ = prepared
    assert summary.copied[NOT_A_JPEG] == sorted(NOT_JPEG)
    assert summary.copied[EMPTY_FILE] == [EMPTY]
    (reason,) = [reason for reason, paths in summary.copied.items() if paths == [TRUNCATED]]
    assert reason.startswith("prepare_jpeg(): Premature end of JPEG file")


def test_summary_lists_the_outputs_that_grew(prepared) -> None:
    _, dst, summary, files = prepared
    grew = sorted(name for name in JPEG_RECIPES if (dst / name).stat().st_size > len(files[name]))
    assert grew, "the tree should hold a file that grows (a progressive input)"
    assert summary.larger == grew


def test_report_puts_grown_files_in_a_note_not_under_prepared(prepared) -> None:
    """Files that grew were prepared all the same: they must not read like failures."""
    _, _, summary, _ = prepared
    lines = summary.report().splitlines()
    prepared_line = next(i for i, line in enumerate(lines) if line.startswith("prepared "))
    assert not lines[prepared_line + 1].startswith("  "), "paths listed under 'prepared'"
    note = next(i for i, line in enumerate(lines) if line.startswith("note: "))
    assert lines[note] == (f"note: {len(summary.larger)} prepared files came out larger than "
                           "their input (written all the same, same pixels; progressive inputs "
                           "usually grow):")
    assert lines[note + 1:] == [f"  {path}" for path in summary.larger]


def test_report_names_reasons_and_paths(prepared) -> None:
    _, _, summary, _ = prepared
    text = summary.report()
    assert f"files seen           {len(ALL_FILES)}" in text
    assert f"prepared             {len(JPEG_RECIPES)} (of which {len(PROGRESSIVE)} were" in text
    assert f"  {NOT_A_JPEG}: 2\n    b/n02105855_2933.JPEG\n    notes.txt\n" in text
    assert f"    {TRUNCATED}" in text
    assert "median per-file ratio" in text and "files/s" in text


def test_outputs_get_the_source_mtime_and_no_temporaries_remain(prepared) -> None:
    src, dst, _, _ = prepared
    assert sorted(_files(dst)) == ALL_FILES
    for name in ALL_FILES:
        assert (dst / name).stat().st_mtime_ns == (src / name).stat().st_mtime_ns, name
    assert not (dst / PRIVATE_FOLDER).exists()


def test_two_workers_write_what_one_writes(prepared, tmp_path: pathlib.Path) -> None:
    src, dst, summary, _ = prepared
    parallel = prepare_tree(src, tmp_path / "out", workers=2, progress=False)
    assert _files(tmp_path / "out") == _files(dst)
    assert parallel.copied == summary.copied
    assert parallel.larger == summary.larger
    assert (parallel.prepared, parallel.progressive, parallel.bytes_after) == (
        summary.prepared, summary.progressive, summary.bytes_after)


def test_report_shows_at_most_ten_paths_per_reason(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for index in range(12):
        (src / f"{index:02d}.txt").write_text("text")
    text = prepare_tree(src, tmp_path / "dst", workers=1, progress=False).report()
    assert "    09.txt\n    ... and 2 more" in text
    assert "10.txt" not in text


def test_links_are_followed_but_not_around_a_cycle(tmp_path: pathlib.Path) -> None:
    outside = tmp_path / "outside"
    _write_small_tree(outside, count=1)
    src, dst = tmp_path / "src", tmp_path / "dst"
    _write_small_tree(src, count=2)
    (src / "linked").symlink_to(outside, target_is_directory=True)
    (src / "y" / "loop").symlink_to(src, target_is_directory=True)  # src/y/loop/y/loop/...
    summary = prepare_tree(src, dst, workers=1, progress=False)
    assert sorted(_files(dst)) == ["linked/x/000.jpg", "linked/x/readme.txt", "x/000.jpg",
                                   "x/readme.txt", "y/001.jpg"]
    assert summary.files_seen == 5 and summary.exit_code == 0


def test_unreadable_file_is_an_error_and_the_rest_is_done(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    names = _write_small_tree(src, count=2)
    (src / "x" / "dangling.jpg").symlink_to(tmp_path / "nowhere.jpg")
    assert main([str(src), str(dst), "--quiet", "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert "I/O errors           1\n  x/dangling.jpg: No such file or directory" in out
    assert sorted(_files(dst)) == names


# --- Resume and interruption ---------------------------------------------------------------------

def test_second_run_leaves_every_output_untouched(tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    names = _write_small_tree(src)
    first = prepare_tree(src, dst, workers=1, progress=False)
    assert first.prepared == len(names) - 1
    before = _snapshot(dst)
    again = prepare_tree(src, dst, workers=1, progress=False)
    assert (again.already_done, again.prepared, again.copied_count) == (len(names), 0, 0)
    assert _snapshot(dst) == before
    assert "already done         5" in again.report()


def test_deleted_output_and_touched_source_are_redone(tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    names = _write_small_tree(src)
    prepare_tree(src, dst, workers=1, progress=False)
    before = _snapshot(dst)
    deleted, touched = names[0], names[3]
    (dst / deleted).unlink()
    newer = (src / touched).stat().st_mtime_ns + 5 * 10**9
    os.utime(src / touched, ns=(newer, newer))

    summary = prepare_tree(src, dst, workers=1, progress=False)

    assert (summary.prepared, summary.already_done) == (2, len(names) - 2)
    after = _snapshot(dst)
    for name in names:
        if name not in (deleted, touched):
            assert after[name] == before[name], f"{name} was rewritten"
    # The deleted output's inode may be reused for its replacement, so only its content counts.
    assert after[deleted][2] == before[deleted][2]
    assert after[touched][0] != before[touched][0]
    assert after[touched][1] == newer


def test_force_rewrites_outputs_that_are_up_to_date(tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    names = _write_small_tree(src)
    prepare_tree(src, dst, workers=1, progress=False)
    before = _snapshot(dst)
    summary = prepare_tree(src, dst, workers=1, force=True, progress=False)
    assert (summary.already_done, summary.prepared + summary.copied_count) == (0, len(names))
    assert all(_snapshot(dst)[name][0] != before[name][0] for name in names)


def test_rerun_removes_stale_temporaries_and_completes(tmp_path: pathlib.Path) -> None:
    """What a killed run leaves: a half-written temporary file and a missing output."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    names = _write_small_tree(src)
    prepare_tree(src, dst, workers=1, progress=False)
    missing = names[1]
    complete = (dst / missing).read_bytes()
    (dst / missing).unlink()
    stale = dst / PRIVATE_FOLDER / "99999-3"
    stale.parent.mkdir()
    stale.write_bytes(complete[:100])

    summary = prepare_tree(src, dst, workers=1, progress=False)

    assert not stale.parent.exists()
    assert summary.stale_removed == 1
    assert (summary.prepared, summary.already_done) == (1, len(names) - 1)
    assert (dst / missing).read_bytes() == complete
    assert "removed 1 temporary files" in summary.report()


def test_ctrl_c_while_writing_leaves_only_complete_files(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Inline run: the third file's write is interrupted halfway; exit 130, then resume."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    names = _write_small_tree(src)
    jpegs = [name for name in names if name.endswith(".jpg")]
    expected = {name: custom_op.prepare_jpeg((src / name).read_bytes()) for name in jpegs}
    real_write_bytes = atomic.write_bytes
    calls = []

    def write_half_then_interrupt(data: bytes):
        calls.append(len(data))
        if len(calls) < 3:
            return real_write_bytes(data)

        def write(path: str) -> None:
            pathlib.Path(path).write_bytes(data[:len(data) // 2])
            raise KeyboardInterrupt
        return write

    monkeypatch.setattr(atomic, "write_bytes", write_half_then_interrupt)
    assert main([str(src), str(dst), "--workers", "1", "--quiet"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert _temporaries(dst) == []
    written = {name: data for name, data in _files(dst).items() if name in expected}
    assert len(written) == 2
    assert all(data == expected[name] for name, data in written.items())

    monkeypatch.setattr(atomic, "write_bytes", real_write_bytes)
    assert main([str(src), str(dst), "--workers", "1", "--quiet"]) == 0
    assert {name: (dst / name).read_bytes() for name in jpegs} == expected


def test_sigint_stops_the_pool_with_complete_files(tmp_path: pathlib.Path) -> None:
    """A real Ctrl-C (SIGINT to the process group) during a two-worker run."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = encode(_photo(256, 384, 40), sampling="4:2:0")
    for index in range(400):
        (src / f"{index % 4}").mkdir(parents=True, exist_ok=True)
        (src / f"{index % 4}" / f"{index:03d}.jpg").write_bytes(data)
    expected = custom_op.prepare_jpeg(data)
    status, stderr = interrupt_prepare([str(src), str(dst), "--workers", "2", "--verify",
                                        "--quiet"], started=lambda: any(dst.rglob("*.jpg")))
    assert status == 130, stderr.decode()
    assert b"Traceback" not in stderr
    outputs = _files(dst)
    # Each worker waits after its first file until the interrupt (tests/_interrupt.py): one
    # or two files are written, whatever the load, and none after the Ctrl-C.
    assert 1 <= len(outputs) <= 2, sorted(outputs)
    assert all(output == expected for output in outputs.values())
    assert _temporaries(dst) == []


# --- Verification --------------------------------------------------------------------------------

def test_verify_on_a_clean_tree_exits_zero(prepared, tmp_path: pathlib.Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    src, dst, _, _ = prepared
    assert main([str(src), str(tmp_path / "out"), "--verify", "--quiet", "--workers", "1",
                 "--accept-refused"]) == 0
    captured = capsys.readouterr()
    assert "failed verification  0" in captured.out
    assert "verification         " in captured.out and " s of " in captured.out
    assert captured.err == ""
    assert _files(tmp_path / "out") == _files(dst)


def _wrong_pixels(real_prepare, data) -> PreparedJpeg:
    """A seekable file with other pixels: another photo of the same size, prepared."""
    height, width, _ = custom_op.jpeg_size(data)
    return real_prepare(encode(_photo(height, width, seed=999), sampling="4:2:0"))


def _not_seekable(real_prepare, data) -> PreparedJpeg:
    """The same pixels without restart markers: the input itself."""
    return PreparedJpeg(bytes(data), 0, False)


@pytest.mark.parametrize("bad_prepare, why", [(_wrong_pixels, "different pixels"),
                                              (_not_seekable, "no restart markers")],
                         ids=["pixels", "seekable"])
def test_verify_failure_keeps_the_original(tmp_path: pathlib.Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str],
                                           bad_prepare, why: str) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    names = _write_small_tree(src, count=2)
    real = prepare_files.prepare_jpeg_with_info
    monkeypatch.setattr(prepare_files, "prepare_jpeg_with_info",
                        lambda data, **limits: bad_prepare(real, data))

    assert main([str(src), str(dst), "--verify", "--quiet", "--workers", "1"]) == 1

    out = capsys.readouterr().out
    assert "failed verification  2" in out and why in out
    assert _files(dst) == _files(src)  # the originals, not the bad outputs
    summary = prepare_tree(src, tmp_path / "again", workers=1, verify=True, progress=False)
    assert [path for path, _ in summary.verify_failed] == [n for n in names if n.endswith(".jpg")]
    assert summary.prepared == 0 and summary.exit_code == 1


def test_verify_time_is_measured(prepared, tmp_path: pathlib.Path) -> None:
    src, _, _, _ = prepared
    summary = prepare_tree(src, tmp_path / "out", workers=1, verify=True, progress=False)
    assert 0 < summary.verify_seconds < summary.work_seconds <= summary.elapsed_seconds
    unverified = prepare_tree(src, tmp_path / "plain", workers=1, progress=False)
    assert unverified.verify_seconds == 0
    assert "\nverification " not in unverified.report()
    assert "\nverification " in summary.report()


# --- Arguments, progress and the command line ----------------------------------------------------

@pytest.mark.parametrize("inside", [".", "out", "a/deeper"], ids=["same", "child", "grandchild"])
def test_dst_inside_src_is_refused(tmp_path: pathlib.Path, inside: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    _write_small_tree(src, count=1)
    before = _files(src)
    with pytest.raises(ValueError, match="is SRC .* or inside it"):
        prepare_tree(src, src / inside, workers=1, progress=False)
    assert main([str(src), str(src / inside)]) == 2
    assert "inside it" in capsys.readouterr().err
    assert _files(src) == before


def test_src_inside_dst_and_missing_src_are_refused(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "data" / "src"
    _write_small_tree(src, count=1)
    with pytest.raises(ValueError, match="is inside DST"):
        prepare_tree(src, tmp_path / "data", workers=1, progress=False)
    assert main([str(tmp_path / "missing"), str(tmp_path / "dst")]) == 2
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize("workers", ["0", "-1", "two"])
def test_bad_worker_count_exits_2(tmp_path: pathlib.Path, workers: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path), str(tmp_path / "dst"), "--workers", workers])
    assert exit_info.value.code == 2
    with pytest.raises(ValueError, match="workers"):
        prepare_tree(tmp_path, tmp_path.parent / "dst", workers=0)


#: A 512 x 512 colour JPEG: its rewrite needs about 2.4 MB of working memory.
_LARGE = (512, 512)


@pytest.mark.parametrize("progressive", [False, True], ids=["baseline", "progressive"])
def test_max_memory_refuses_and_accepts(tmp_path: pathlib.Path, progressive: bool,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    src.mkdir()
    data = _pillow_jpeg(*_LARGE, seed=3, quality=90, progressive=progressive)
    (src / "large.jpg").write_bytes(data)
    # Below what it needs: copied byte for byte, the reason in the summary, not an error.
    assert main([str(src), str(tmp_path / "small"), "--max-memory", "1M", "--quiet",
                 "--workers", "1"]) == 4  # refused: exit 4
    report = capsys.readouterr().out
    assert (tmp_path / "small" / "large.jpg").read_bytes() == data
    assert "copied unchanged     1" in report and "prepared             0" in report
    assert "more than max_memory=1048576" in report and "I/O errors           0" in report
    # Enough: prepared, and verified with the same limit.
    assert main([str(src), str(tmp_path / "large"), "--max-memory", "8M", "--verify", "--quiet",
                 "--workers", "1"]) == 0
    report = capsys.readouterr().out
    assert "prepared             1" in report and "failed verification  0" in report
    assert custom_op.seekable((tmp_path / "large" / "large.jpg").read_bytes())


@pytest.mark.parametrize("text, expected", [("268435456", 256 << 20), ("512M", 512 << 20),
                                            ("2g", 2 << 30), ("64k", 64 << 10)])
def test_max_memory_takes_bytes_and_suffixes(text: str, expected: int) -> None:
    from custom_op.prepare.cli import _parser

    assert _parser().parse_args(["a", "b", "--max-memory", text]).max_memory == expected


@pytest.mark.parametrize("text", ["0", "-1", "1.5G", "12X", "M", ""])
def test_bad_max_memory_exits_2_naming_it(tmp_path: pathlib.Path, text: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path), str(tmp_path.parent / "dst"), "--max-memory", text])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "--max-memory: " in error and repr(text) in error, error
    assert not (tmp_path.parent / "dst").exists()


@pytest.mark.parametrize("value, error", [(0, ValueError), (True, TypeError), ("1M", TypeError)])
def test_prepare_tree_checks_max_memory(tmp_path: pathlib.Path, value, error) -> None:
    with pytest.raises(error, match="max_memory"):
        prepare_tree(tmp_path, tmp_path.parent / "dst", max_memory=value)


def test_progress_goes_to_stderr_only_when_asked(prepared, tmp_path: pathlib.Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    src, _, _, _ = prepared
    prepare_tree(src, tmp_path / "shown", workers=1, progress=True)
    err = capsys.readouterr().err
    assert err.startswith("\r") and err.endswith("\n")
    last = err.rstrip("\n").split("\r")[-1]
    assert last.startswith("custom_op.prepare: 100%")
    assert f"{len(ALL_FILES)}/{len(ALL_FILES)} files" in last and "B/s" in last
    prepare_tree(src, tmp_path / "hidden", workers=1, progress=False)
    prepare_tree(src, tmp_path / "auto", workers=1, progress=None)  # stderr is not a TTY here
    assert capsys.readouterr().err == ""


def test_command_line_verifies_and_prints_the_summary(prepared, tmp_path: pathlib.Path) -> None:
    src, dst, _, _ = prepared
    result = subprocess.run(
        [sys.executable, "-m", "custom_op.prepare", str(src), str(tmp_path / "out"), "--verify",
         "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 4, result.stderr
    assert result.stderr == ""  # no progress line, and no runpy warning about a double import
    assert f"files seen           {len(ALL_FILES)}" in result.stdout
    assert f"prepared             {len(JPEG_RECIPES)} " in result.stdout
    assert "failed verification  0" in result.stdout
    assert _files(tmp_path / "out") == _files(dst)


def test_progress_is_drawn_on_a_terminal_that_reports_no_size(
        prepared, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Some pseudo-terminals report 0 x 0; tqdm, left to probe, would then draw nothing at all."""
    src, _, _, _ = prepared
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    monkeypatch.setattr(os, "get_terminal_size", lambda *args: os.terminal_size((0, 0)))
    bar = Progress(total_files=1, total_bytes=10, enabled=True)
    assert (bar.bar.ncols, bar.bar.nrows) == (80, 24)
    bar.close()
    prepare_tree(src, tmp_path / "shown", workers=1, progress=True)
    last = capsys.readouterr().err.rstrip("\n").split("\r")[-1]
    assert f"{len(ALL_FILES)}/{len(ALL_FILES)} files" in last
