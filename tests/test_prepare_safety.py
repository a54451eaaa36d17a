"""python -m custom_op.prepare under stress: what it resumes, names, keeps, and survives.

One test (or a few) per defect of issue 17 it closes: a source replaced by
an older file is prepared again (identity, not mtime order); temporaries are
the tool's own (a private folder in DST) and a second run into the same DST
stops; 255-byte names are prepared; files and folders keep their mode bits
and times; a worker killed by SIGKILL is an error of its file, not the end
of the run; workers die with their parent; the summary prints any name on
any stdout; outputs are flushed before their rename and folders at the end.

The kill tests run the command line in a subprocess whose workers are
instrumented by a ``sitecustomize`` module of the test's own (first on
PYTHONPATH): it wraps ``custom_op.prepare.tree.handle_task`` to SIGKILL the
worker on a chosen file, or to slow every file down, as the environment says.
"""

from __future__ import annotations

import os
import pathlib
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

import custom_op
from custom_op.prepare import PRIVATE_FOLDER, atomic, folders, main, prepare_tree
from custom_op.prepare.workspace import Workspace
from jpegenc import encode
from synthetic import make_photo

REPO = pathlib.Path(custom_op.__file__).resolve().parent.parent
HANG_GUARD_SECONDS = 120


def _jpeg(seed: int, height: int = 32, width: int = 48) -> bytes:
    return encode(make_photo(height, width, seed), sampling="4:2:0")


def _write(path: pathlib.Path, data: bytes) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _small_tree(root: pathlib.Path, count: int = 4) -> list[str]:
    names = [f"d/{index:02d}.jpg" for index in range(count)]
    for index, name in enumerate(names):
        _write(root / name, _jpeg(index))
    _write(root / "d/notes.txt", b"notes\n")
    return sorted([*names, "d/notes.txt"])


def _files(root: pathlib.Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


def _outputs(root: pathlib.Path) -> list[str]:
    """Relative paths of the files under ``root`` but outside its private folder, unread."""
    found = []
    for folder, dirnames, filenames in os.walk(root):
        if folder == str(root) and PRIVATE_FOLDER in dirnames:
            dirnames.remove(PRIVATE_FOLDER)
        found += [os.path.relpath(os.path.join(folder, name), root) for name in filenames]
    return sorted(found)


def _run(*args: str, env: dict[str, str] | None = None,
         timeout: float = HANG_GUARD_SECONDS) -> subprocess.CompletedProcess:
    """``python -m custom_op.prepare ARGS`` with this checkout first on PYTHONPATH."""
    return subprocess.run([sys.executable, "-m", "custom_op.prepare", *args, "--quiet"],
                          cwd=REPO, capture_output=True, timeout=timeout,
                          env=_env(**(env or {})))


def _env(hooks: str = "", **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [hooks, str(REPO)]))
    env.update(extra)
    return env


# --- 6. Resume redoes an output whose source changed in any way -----------------------------

def test_source_replaced_by_an_older_file_is_prepared_again(tmp_path: pathlib.Path) -> None:
    """`cp -p` from a backup: other bytes, an older mtime; the old rule (output at least as new
    as the source) kept the stale output."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    _small_tree(src)
    prepare_tree(src, dst, workers=1, progress=False)
    backup = _write(tmp_path / "backup.jpg", _jpeg(seed=77))
    old = (src / "d/01.jpg").stat().st_mtime_ns - 10**12
    os.utime(backup, ns=(old, old))
    subprocess.run(["cp", "-p", str(backup), str(src / "d/01.jpg")], check=True)

    summary = prepare_tree(src, dst, workers=1, progress=False)

    assert (summary.prepared, summary.already_done) == (1, 4)
    assert (dst / "d/01.jpg").read_bytes() == custom_op.prepare_jpeg(backup.read_bytes())
    assert (dst / "d/01.jpg").stat().st_mtime_ns == old


def test_source_replaced_with_the_same_size_and_mtime_is_copied_again(
        tmp_path: pathlib.Path) -> None:
    """Only the inode tells: a new file of the same size moved over the source, its mtime set
    to the old one's."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    _small_tree(src)
    prepare_tree(src, dst, workers=1, progress=False)
    source = src / "d/notes.txt"
    before = source.stat()
    replacement = _write(tmp_path / "other.txt", b"NOTES\n")
    os.utime(replacement, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(replacement, source)
    assert (source.stat().st_size, source.stat().st_mtime_ns) == (before.st_size,
                                                                  before.st_mtime_ns)

    summary = prepare_tree(src, dst, workers=1, progress=False)

    assert summary.already_done == 4 and summary.copied_count == 1
    assert (dst / "d/notes.txt").read_bytes() == b"NOTES\n"


def test_without_extended_attributes_the_mtime_must_match(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A DST that keeps no user extended attributes: an older source is redone all the same."""
    monkeypatch.setattr(atomic, "_HAS_ATTRIBUTES", False)
    src, dst = tmp_path / "src", tmp_path / "dst"
    _small_tree(src)
    prepare_tree(src, dst, workers=1, progress=False)
    assert prepare_tree(src, dst, workers=1, progress=False).already_done == 5
    old = (src / "d/00.jpg").stat().st_mtime_ns - 10**12
    _write(src / "d/00.jpg", _jpeg(seed=78))
    os.utime(src / "d/00.jpg", ns=(old, old))

    summary = prepare_tree(src, dst, workers=1, progress=False)

    assert (summary.prepared, summary.already_done) == (1, 4)


# --- 7. Temporaries are the tool's own; one run at a time ------------------------------------

def test_a_source_named_like_an_old_temporary_is_kept(tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _small_tree(src)
    _write(src / "d/.x.custom_op-tmp", b"a user's file\n")
    _write(src / "d/.x.123.custom_op-tmp", b"another\n")
    for _ in range(2):
        summary = prepare_tree(src, dst, workers=2, progress=False)
        assert summary.exit_code == 0
        assert sorted(_files(dst)) == sorted(_files(src))
        assert (dst / "d/.x.custom_op-tmp").read_bytes() == b"a user's file\n"
        assert (dst / "d/.x.123.custom_op-tmp").read_bytes() == b"another\n"
    assert summary.already_done == 7 and summary.stale_removed == 0
    assert not (dst / PRIVATE_FOLDER).exists()


def test_a_second_run_into_the_same_dst_stops_naming_the_first(tmp_path: pathlib.Path) -> None:
    """This test process holds DST's lock as a running prepare would; the command must stop
    with status 3, name this pid, and leave the holder's temporary file alone."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    _small_tree(src)
    with Workspace(str(_write(dst / "kept.txt", b"x").parent)):
        in_progress = _write(dst / PRIVATE_FOLDER / f"{os.getpid()}-0", b"half a file")
        done = _run(str(src), str(dst))
        assert done.returncode == 3, done.stderr
        message = done.stderr.decode()
        assert "another run of python -m custom_op.prepare" in message
        assert f"pid {os.getpid()}" in message and str(dst) in message
        assert in_progress.read_bytes() == b"half a file"
        assert sorted(_files(dst)) == sorted(["kept.txt", f"{PRIVATE_FOLDER}/{os.getpid()}-0",
                                              f"{PRIVATE_FOLDER}/lock"])
    # Released: the next run works, and removes what the "killed" holder left.
    in_progress.parent.mkdir(exist_ok=True)
    in_progress.write_bytes(b"left by a killed run")
    summary = prepare_tree(src, dst, workers=1, progress=False)
    assert summary.exit_code == 0 and summary.stale_removed == 1
    assert not (dst / PRIVATE_FOLDER).exists()


def test_a_source_named_like_the_private_folder_is_an_error(tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    names = _small_tree(src, count=1)
    _write(src / PRIVATE_FOLDER / "a.jpg", _jpeg(1))
    summary = prepare_tree(src, dst, workers=1, progress=False)
    assert [path for path, _ in summary.errors] == [PRIVATE_FOLDER]
    assert summary.errors[0][1].startswith("reserved name") and summary.exit_code == 1
    assert sorted(_files(dst)) == names


# --- 8. Names of 255 bytes -------------------------------------------------------------------

def test_names_of_255_bytes_are_prepared(tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    jpeg, text = "j" * 251 + ".jpg", "t" * 251 + ".txt"
    data = _jpeg(3)
    _write(src / jpeg, data)
    _write(src / text, b"text\n")
    done = _run(str(src), str(dst), "--workers", "2")
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    assert (dst / jpeg).read_bytes() == custom_op.prepare_jpeg(data)
    assert (dst / text).read_bytes() == b"text\n"


# --- 9. Mode bits and times of files and folders ---------------------------------------------

def _private_tree(src: pathlib.Path) -> dict[str, int]:
    """Files and folders of several modes; their relative path -> mode."""
    modes = {"secret": 0o700, "secret/a.jpg": 0o600, "secret/notes.txt": 0o640,
             "shared": 0o755, "shared/b.jpg": 0o644, "shared/run.sh": 0o750,
             "readonly": 0o555, "readonly/c.jpg": 0o444}
    for index, (name, mode) in enumerate(sorted(modes.items())):
        path = src / name
        if "." in name:
            _write(path, _jpeg(index) if name.endswith(".jpg") else b"text\n")
            path.chmod(mode)
    for name, mode in modes.items():
        if "." not in name:
            (src / name).chmod(mode)
            os.utime(src / name, ns=(10**18 + len(name), 10**18 + len(name)))
    src.chmod(0o710)
    return {".": 0o710, **modes}


def test_modes_and_times_of_files_and_folders_are_kept(tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    modes = _private_tree(src)
    previous = os.umask(0o022)
    try:
        for run in range(2):  # the rerun must write into the read-only folder again
            if run:
                os.utime(src / "readonly/c.jpg", ns=(1, 1))
            summary = prepare_tree(src, dst, workers=1, progress=False)
            assert summary.exit_code == 0, summary.report()
            for name, mode in modes.items():
                assert stat.S_IMODE((dst / name).stat().st_mode) == mode, name
                assert (dst / name).stat().st_mtime_ns == (src / name).stat().st_mtime_ns, name
        assert summary.prepared == 1 and summary.already_done == 4
    finally:
        os.umask(previous)
        for folder in (src / "readonly", dst / "readonly"):
            folder.chmod(0o755)


def test_folders_are_never_wider_than_their_source_while_written(tmp_path: pathlib.Path) -> None:
    """What a crash leaves: before the work starts, a 0700 folder of SRC is 0700 in DST."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    _private_tree(src)
    seen = {}
    real_finish = folders.finish

    def look_then_finish(below, also_flush, flush):
        seen.update({folder.path: stat.S_IMODE(os.stat(folder.path).st_mode)
                     for folder in below})
        real_finish(below, also_flush, flush)

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(folders, "finish", look_then_finish)
            prepare_tree(src, dst, workers=1, progress=False)
        assert seen[str(dst / "secret")] == 0o700
        assert seen[str(dst / "readonly")] == 0o755  # 0555 and the owner's write bit
    finally:
        for folder in (src / "readonly", dst / "readonly"):
            folder.chmod(0o755)


# --- 10. A worker killed: its file named, the run goes on, the summary printed ----------------

HOOKS = textwrap.dedent('''\
    """Test instrumentation of custom_op.prepare's workers (tests/test_prepare_safety.py)."""
    import os
    import signal
    import time

    from custom_op.prepare import tree

    _real = tree.handle_task
    _KILL = os.environ.get("PREPARE_TEST_KILL", "")
    _SLEEP = float(os.environ.get("PREPARE_TEST_SLEEP", "0"))


    def handle_task(task, verify, **options):
        if _KILL and task.relative.endswith(_KILL):
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(_SLEEP)
        return _real(task, verify, **options)


    tree.handle_task = handle_task
    ''')


@pytest.fixture()
def hooks(tmp_path: pathlib.Path) -> str:
    folder = tmp_path / "hooks"
    _write(folder / "sitecustomize.py", HOOKS.encode())
    return str(folder)


def test_a_killed_worker_fails_its_file_and_the_run_goes_on(tmp_path: pathlib.Path,
                                                            hooks: str) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    names = _small_tree(src, count=12)
    victim = "d/05.jpg"

    done = _run(str(src), str(dst), "--workers", "2",
                env={"hooks": hooks, "PREPARE_TEST_KILL": victim})

    out = done.stdout.decode()
    assert done.returncode == 1, out + done.stderr.decode()
    assert "I/O errors           1\n" in out
    assert (f"  {victim}: the worker process died while handling it (killed by SIGKILL, as the "
            "kernel's out-of-memory killer does); nothing was written under its name") in out
    assert "prepared             11 " in out
    assert sorted(_files(dst)) == [name for name in names if name != victim]
    assert not (dst / PRIVATE_FOLDER).exists()

    again = _run(str(src), str(dst), "--workers", "2",
                 env={"hooks": hooks, "PREPARE_TEST_KILL": victim})  # it dies again, and ends
    assert again.returncode == 1 and "already done         12" in again.stdout.decode()
    fixed = _run(str(src), str(dst), "--workers", "2")  # the cause is gone: the rerun completes
    assert fixed.returncode == 0, fixed.stdout.decode()
    assert sorted(_files(dst)) == names


# --- 11. Workers die with their parent -------------------------------------------------------

def _children(parent: int) -> set[int]:
    """Process ids whose parent is ``parent`` (from /proc)."""
    found = set()
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent:
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie is dead, waiting for init to reap it


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_killed_parent(tmp_path: pathlib.Path, hooks: str) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    names = _small_tree(src, count=40)
    parent = subprocess.Popen(
        [sys.executable, "-m", "custom_op.prepare", str(src), str(dst), "--workers", "2",
         "--quiet"], cwd=REPO, env=_env(hooks, PREPARE_TEST_SLEEP="0.2"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + HANG_GUARD_SECONDS
        while not (len(_outputs(dst)) >= 2 and len(workers := _children(parent.pid)) >= 2):
            assert time.monotonic() < deadline and parent.poll() is None, "no workers writing"
            time.sleep(0.02)
        parent.kill()  # SIGKILL to the parent alone, as the OOM killer would
        parent.wait(timeout=60)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in workers):
            assert time.monotonic() < deadline, "workers outlived their parent"
            time.sleep(0.05)
    finally:
        for pid in {parent.pid, *workers}:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    written = _outputs(dst)
    assert 0 < len(written) < len(names)
    time.sleep(0.5)
    assert _outputs(dst) == written, "something still writes into DST"
    done = _run(str(src), str(dst), "--workers", "2")  # not locked out: the lock died with them
    assert done.returncode == 0, done.stderr.decode()
    assert sorted(_files(dst)) == names


# --- 12. Any name, any stdout ----------------------------------------------------------------

@pytest.mark.parametrize("encoding, expected", [
    ("ascii", [b"    d/bad\\xff.txt", b"    d/caf\\xe9.txt"]),
    ("utf-8", [b"    d/bad\\xff.txt", "    d/café.txt".encode()]),
])
def test_summary_prints_names_whatever_the_encoding(tmp_path: pathlib.Path, encoding: str,
                                                    expected: list[bytes]) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    folder = os.fsencode(src / "d")
    os.makedirs(folder)
    for name in (b"caf\xc3\xa9.txt", b"bad\xff.txt"):
        with open(os.path.join(folder, name), "wb") as file:
            file.write(b"not an image\n")
    done = _run(str(src), str(dst), "--workers", "1", env={"PYTHONIOENCODING": encoding})
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""
    lines = done.stdout.splitlines()
    assert all(line in lines for line in expected), done.stdout.decode(errors="replace")
    assert sorted(os.listdir(os.fsencode(dst / "d"))) == [b"bad\xff.txt", b"caf\xc3\xa9.txt"]


# --- 13. Flushed to disk: each output before its rename, every folder at the end -------------

def test_outputs_are_flushed_before_their_rename_and_folders_after(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    names = _small_tree(src)
    events: list[tuple[str, int]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor: int) -> None:
        events.append(("fsync", os.fstat(descriptor).st_ino))
        real_fsync(descriptor)

    def replace(source, destination) -> None:
        events.append(("rename", os.stat(source).st_ino))
        real_replace(source, destination)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    prepare_tree(src, dst, workers=1, progress=False)
    monkeypatch.undo()

    renames = [index for index, event in enumerate(events) if event[0] == "rename"]
    assert len(renames) == len(names)
    for index in renames:
        assert ("fsync", events[index][1]) in events[:index], "renamed before it was flushed"
    flushed_after = {inode for kind, inode in events[renames[-1]:] if kind == "fsync"}
    for folder in (dst, dst / "d", dst.parent):
        assert folder.stat().st_ino in flushed_after, folder


def test_no_fsync_skips_every_flush(tmp_path: pathlib.Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _small_tree(src)
    calls = []
    monkeypatch.setattr(os, "fsync", calls.append)
    assert main([str(src), str(dst), "--no-fsync", "--quiet", "--workers", "1"]) == 0
    assert calls == []
    monkeypatch.undo()
    assert prepare_tree(src, dst, workers=1, progress=False).already_done == 5
