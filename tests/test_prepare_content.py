"""python -m custom_op.prepare and the content of users' files: what it keeps, what it streams.

- A JPEG with bytes after its end-of-image marker (a second image, a gain
  map, a motion photo) is copied unchanged and listed with the reason, as a
  file and as a shard member, also under --verify; and --verify fails a copy
  that drops those bytes or a metadata segment.
- A JPEG too large to prepare within --max-memory is streamed as a copy, as a
  file and as a shard member: the process's peak memory during the run stays
  far below the file's size. The inputs are sparse on disk (a JPEG's first
  bytes, then a hole), so they cost no disk to make (the outputs do: 192 MiB).
"""

from __future__ import annotations

import filecmp
import io
import os
import pathlib
import subprocess
import sys
import tarfile

import pytest

import custom_op
from custom_op._decode._prepared import PreparedJpeg
from custom_op.prepare import files as prepare_files
from custom_op.prepare import main
from custom_op.prepare.items import VERIFY_FAILED
from jpegenc import encode
from synthetic import make_photo

REPO = pathlib.Path(__file__).resolve().parent.parent
_TRAILING = "prepare_jpeg(): data follows the end-of-image marker"
#: The large files' size, and the limit they run under: reading one whole raises the peak by
#: at least its size; streaming it, by the copy's buffers (a few MiB).
_LARGE_SIZE = 96 << 20
_LIMIT = "16M"
_PEAK_ALLOWANCE = 32 << 20


def _multi_picture() -> bytes:
    first, second = encode(make_photo(48, 64, 1)), encode(make_photo(32, 40, 2))
    return first + second + b"MotionPhoto_Data" + bytes(range(256)) * 16


def _tar(path: pathlib.Path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_data_after_the_end_of_image_is_kept_in_files_and_shards(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, plain = _multi_picture(), encode(make_photo(40, 48, 3))
    src = tmp_path / "src"
    src.mkdir()
    (src / "motion.jpg").write_bytes(data)
    _tar(src / "shard.tar", [("a.jpg", plain), ("b.jpg", data), ("b.cls", b"1")])
    assert main([str(src), str(tmp_path / "dst"), "--workers", "1", "--quiet", "--verify"]) == 4
    report = capsys.readouterr().out
    assert (tmp_path / "dst" / "motion.jpg").read_bytes() == data
    with tarfile.open(tmp_path / "dst" / "shard.tar") as tar:
        members = {info.name: tar.extractfile(info).read() for info in tar}
    assert members["b.jpg"] == data and members["b.cls"] == b"1"
    assert members["a.jpg"] != plain and custom_op.seekable(members["a.jpg"])
    assert _TRAILING in report and ": 2\n    motion.jpg\n    shard.tar:b.jpg" in report
    assert "prepared             1" in report and "failed verification  0" in report


@pytest.mark.parametrize("dropped", ["trailer", "comment"])
def test_verify_fails_a_copy_that_drops_bytes(monkeypatch: pytest.MonkeyPatch,
                                              dropped: str) -> None:
    """--verify compared pixels only: a copy without the bytes after the end-of-image marker, or
    without a metadata segment, passed. Now it fails, and the original is kept."""
    first = encode(make_photo(48, 64, 1))
    if dropped == "trailer":
        data, kept = first + encode(make_photo(32, 40, 2)) + b"MotionPhoto_Data", first
    else:
        data = first[:2] + b"\xff\xfe\x00\x07hello" + first[2:]  # a COM segment after SOI
        kept = first
    copy = custom_op.prepare_jpeg(kept)
    monkeypatch.setattr(prepare_files, "prepare_jpeg_with_info",
                        lambda *args, **kwargs: PreparedJpeg(copy, 1, False))
    rewrite = prepare_files.rewrite_jpeg(data, verify=True)
    assert rewrite.kind == VERIFY_FAILED and rewrite.data == data
    assert ("end-of-image marker" if dropped == "trailer" else "metadata segments") in rewrite.reason


#: Runs the command line in this process and prints how far its resident memory rose above what
#: it was at the start (torch and the extension loaded): the kernel's high-water mark (VmHWM),
#: reset just before the run by writing 5 to /proc/self/clear_refs. ru_maxrss cannot be reset,
#: and the import of torch alone peaks higher than the steady state the work adds to.
_MEASURE = """
import sys
from custom_op._decode._prepared import PreparedJpeg
from custom_op.prepare import files as prepare_files
from custom_op.prepare import main
from custom_op.prepare.items import VERIFY_FAILED

def status(field):
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) * 1024 for line in lines if line.startswith(field))

with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")
start = status("VmRSS:")
code = main(sys.argv[1:])
print("rise", status("VmHWM:") - start)
sys.exit(code)
"""


def _memory_rise(arguments: list[str]) -> int:
    """Runs the command line in a child process; how many bytes its peak memory rose."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]))
    done = subprocess.run([sys.executable, "-c", _MEASURE, *arguments], env=env, cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "copied unchanged     2" in done.stdout and "larger than 8323072 bytes" in done.stdout
    return int(done.stdout.rsplit("rise", 1)[1])


def _large_jpeg_file(path: pathlib.Path) -> None:
    """A JPEG's first bytes, then a hole to _LARGE_SIZE: sparse on disk."""
    with open(path, "wb") as file:
        file.write(encode(make_photo(32, 32, 4)))
        file.truncate(_LARGE_SIZE)


def _large_jpeg_shard(path: pathlib.Path) -> None:
    """A shard of one small member and one _LARGE_SIZE JPEG member that is mostly a hole."""
    head = encode(make_photo(32, 32, 5))
    info = tarfile.TarInfo("big.jpg")
    info.size = _LARGE_SIZE
    with open(path, "wb") as file:
        small = tarfile.TarInfo("small.cls")
        small.size = 1
        file.write(small.tobuf(tarfile.PAX_FORMAT) + b"1".ljust(tarfile.BLOCKSIZE, b"\0"))
        file.write(info.tobuf(tarfile.PAX_FORMAT) + head)
        file.truncate(file.tell() - len(head) + _LARGE_SIZE + 2 * tarfile.BLOCKSIZE)


def test_a_jpeg_over_the_memory_limit_is_streamed(tmp_path: pathlib.Path) -> None:
    """It was read whole (a 1.5 GB file peaked at 3.8 GB under --max-memory 64M); a file and a
    shard member, in one run (the child's start, importing torch, is most of the time)."""
    large = tmp_path / "large"
    large.mkdir()
    _large_jpeg_file(large / "a.jpg")
    _large_jpeg_shard(large / "a.tar")
    out = tmp_path / "out"
    rise = _memory_rise([str(large), str(out), "--workers", "1", "--quiet", "--max-memory", _LIMIT])
    assert rise < _PEAK_ALLOWANCE, f"memory rose {rise >> 20} MiB for {_LARGE_SIZE >> 20} MiB files"
    assert filecmp.cmp(large / "a.jpg", out / "a.jpg", shallow=False)
    with tarfile.open(out / "a.tar") as copy, tarfile.open(large / "a.tar") as source:
        assert [(i.name, i.size) for i in copy] == [(i.name, i.size) for i in source]
        assert _same_member(source, copy, "big.jpg")


def _same_member(first: tarfile.TarFile, second: tarfile.TarFile, name: str) -> bool:
    """Whether the member ``name`` has the same bytes in both archives (read in pieces)."""
    a, b = first.extractfile(name), second.extractfile(name)
    while True:
        piece = a.read(1 << 20)
        if piece != b.read(1 << 20):
            return False
        if not piece:
            return True
