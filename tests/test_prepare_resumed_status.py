"""A resumed or repeated run's exit status describes the tree, as the uninterrupted run's does.

A run leaves up-to-date outputs alone, so a rerun into the same DST (or a run
resumed after Ctrl-C) did not see the JPEG refused and copied unprepared by
the earlier run, and exited 0 where the uninterrupted run exited 4 (1 for a
verification failure). Each output now carries what was found in it (an
extended attribute, or the journal where there are none). Every case runs
with and without extended attributes, for plain files, tar shard members and
an interrupted run.
"""

from __future__ import annotations

import io
import pathlib
import tarfile

import pytest

from custom_op.prepare import atomic, main
from custom_op.prepare import files as prepare_files
from _interrupt import interrupt_prepare
from jpegenc import encode
from synthetic import make_photo

GOOD = encode(make_photo(40, 56, 1), sampling="4:2:0")
DAMAGED = GOOD[:200]  # prepare_jpeg refuses it: copied unprepared, exit status 4


@pytest.fixture(params=["attributes", "journal"])
def attributes(request, monkeypatch) -> str:
    """Outputs carry their findings in an attribute, or (no attributes) in DST's journal."""
    if request.param == "journal":
        monkeypatch.setattr(atomic, "_HAS_ATTRIBUTES", False)
    return request.param


def _tree(root: pathlib.Path, files: dict[str, bytes]) -> pathlib.Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def _main(src: pathlib.Path, dst: pathlib.Path, *extra: str) -> int:
    return main([str(src), str(dst), "--workers", "1", "--quiet", *extra])


def _shard(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


TREES = {
    "files": {"a.jpg": GOOD, "b/broken.jpg": DAMAGED, "notes.txt": b"text"},
    "shard": {"train-0.tar": _shard({"0.jpg": GOOD, "1.jpg": DAMAGED, "1.cls": b"1"}),
              "a.jpg": GOOD},
}


@pytest.mark.parametrize("tree", list(TREES))
def test_a_rerun_exits_as_the_run_that_refused(tmp_path, attributes, tree: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    src = _tree(tmp_path / "src", TREES[tree])
    assert _main(src, tmp_path / "dst") == 4
    capsys.readouterr()
    assert _main(src, tmp_path / "dst") == 4  # nothing redone: the tree still holds the refusal
    out = capsys.readouterr().out
    assert "refused JPEGs        1" in out and "prepared             0" in out
    assert _main(src, tmp_path / "dst", "--accept-refused") == 0
    assert _main(src, tmp_path / "dst", "--force") == 4


def test_a_refusal_goes_when_its_file_is_fixed_or_removed(tmp_path, attributes) -> None:
    src = _tree(tmp_path / "src", TREES["files"])
    assert _main(src, tmp_path / "dst") == 4
    (src / "b" / "broken.jpg").write_bytes(GOOD)  # a new identity: redone, and prepared
    assert _main(src, tmp_path / "dst") == 0
    assert _main(src, tmp_path / "dst") == 0
    (src / "b" / "other.jpg").write_bytes(DAMAGED)
    assert _main(src, tmp_path / "dst") == 4
    (src / "b" / "other.jpg").unlink()
    assert _main(src, tmp_path / "dst") == 0


def test_a_verification_failure_stays_a_failure(tmp_path, attributes, monkeypatch) -> None:
    src = _tree(tmp_path / "src", {"a.jpg": GOOD})
    with monkeypatch.context() as patch:
        patch.setattr(prepare_files, "verify_rewrite",
                      lambda *_: "the prepared file decodes to different pixels")
        assert _main(src, tmp_path / "dst", "--verify") == 1
    assert _main(src, tmp_path / "dst", "--verify", "--accept-refused") == 1
    assert _main(src, tmp_path / "dst", "--verify", "--force") == 0


def test_an_interrupted_run_resumes_to_the_uninterrupted_status(tmp_path) -> None:
    files = {"0-broken.jpg": DAMAGED, **{f"{index}.jpg": GOOD for index in range(1, 6)}}
    src = _tree(tmp_path / "src", files)
    assert _main(src, tmp_path / "whole") == 4
    dst = tmp_path / "dst"
    # One worker, held after its first file (the refused one, first in name order).
    status, stderr = interrupt_prepare([str(src), str(dst), "--workers", "1", "--quiet"],
                                       started=lambda: (dst / "0-broken.jpg").exists())
    assert status == 130, stderr.decode()
    assert not (dst / "5.jpg").exists()
    assert _main(src, dst) == 4
