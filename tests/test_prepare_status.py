"""What a run tells its caller: documented exit statuses, and a report no file name can forge.

``--verify`` exited 0 with damaged, refused or mismatching files, so a CI gate
could not use it: now 4 when JPEGs were refused and copied unprepared (0
with --accept-refused), 1 when anything failed. File names with control
characters were printed raw: a name with newlines could add its own
"failed verification  0" line to the summary.
"""

from __future__ import annotations

import pathlib

import pytest

import custom_op
from custom_op.prepare import files as prepare_files
from custom_op.prepare import main
from jpegenc import encode
from synthetic import make_photo

GOOD = encode(make_photo(40, 56, 1), sampling="4:2:0")
DAMAGED = GOOD[:200]  # prepare_jpeg refuses it: copied unprepared


def _tree(root: pathlib.Path, files: dict[str, bytes]) -> pathlib.Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def _main(src: pathlib.Path, dst: pathlib.Path, *extra: str) -> int:
    return main([str(src), str(dst), "--workers", "1", "--quiet", "--verify", *extra])


def test_a_tree_prepared_as_asked_exits_zero(tmp_path: pathlib.Path) -> None:
    src = _tree(tmp_path / "src", {"a.jpg": GOOD, "notes.txt": b"not an image", "e.jpg": b""})
    assert _main(src, tmp_path / "dst") == 0


def test_refused_jpegs_exit_4_unless_accepted(tmp_path: pathlib.Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    src = _tree(tmp_path / "src", {"a.jpg": GOOD, "broken.jpg": DAMAGED})
    assert _main(src, tmp_path / "dst") == 4
    assert "refused JPEGs        1" in capsys.readouterr().out
    assert _main(src, tmp_path / "dst2", "--accept-refused") == 0
    assert (tmp_path / "dst" / "broken.jpg").read_bytes() == DAMAGED


def test_a_verification_failure_exits_1_even_with_accept_refused(
        tmp_path: pathlib.Path, monkeypatch) -> None:
    src = _tree(tmp_path / "src", {"a.jpg": GOOD, "broken.jpg": DAMAGED})
    monkeypatch.setattr(prepare_files, "verify_rewrite",
                        lambda *_: "the prepared file decodes to different pixels")
    assert _main(src, tmp_path / "dst", "--accept-refused") == 1
    assert (tmp_path / "dst" / "a.jpg").read_bytes() == GOOD  # the original kept


def test_the_exit_statuses_are_documented(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for documented in ("0 everything prepared as asked", "1 a file failed verification",
                       "4 JPEGs were refused", "--accept-refused"):
        assert documented in text


FORGED = "x\nfailed verification  0\nI/O errors           0\n.jpg"


def test_control_characters_in_names_cannot_forge_summary_lines(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _tree(tmp_path / "src", {FORGED: DAMAGED, "tab\there/\x1b[2Jclear.jpg": DAMAGED})
    assert _main(src, tmp_path / "dst", "--accept-refused") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("failed verification")] == [
        "failed verification  0"]
    assert sum(line.startswith("I/O errors") for line in lines) == 1
    assert "    x\\nfailed verification  0\\nI/O errors           0\\n.jpg" in lines
    assert "    tab\\there/\\x1b[2Jclear.jpg" in lines
    assert not any("\x1b" in line or "\t" in line for line in lines)
    assert (tmp_path / "dst" / FORGED).read_bytes() == DAMAGED  # the name itself is kept
