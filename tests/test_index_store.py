"""The node's store of MCU-row indexes (issue 42, item 1; custom_op/_index/_store.py): what one
process builds, another reads; concurrent and killed builders leave each entry once and whole;
a damaged, foreign or planted entry, a changed file, a full or unwritable store are misses with
the pixels of the unindexed decode; epoch 2 of a DataLoader's workers hits every lookup."""

from __future__ import annotations

import errno
import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import custom_op
from custom_op._index import _store
from custom_op._index._cache import IndexKey
from custom_op._index._sidecar import sidecar_of_folder
from custom_op.datasets import JpegFolder
from custom_op.lane import BatchLane, LaneBatchSampler, lane_dataloader
from synthetic import photo_jpeg

ROOT = pathlib.Path(__file__).resolve().parent.parent
COUNT = 6
SIZE = (320, 240)
#: Windows at most a fifth of the image, which build indexes.
LANE = v2.Compose([v2.RandomResizedCrop(48, scale=(0.05, 0.2)), v2.RandomHorizontalFlip()])

#: A process of its own, argv[1] its mode, on the folder argv[2] and the store argv[3]:
#: "decode" crops every file (once ready, after waiting for argv[5] to exist, if given), saves
#: the crops to argv[4] and prints its counts; "die" is killed (SIGKILL) half-way through
#: writing its first entry.
CHILD = textwrap.dedent("""
    import json, os, signal, sys, time
    import torch
    from torchvision.transforms.v2 import functional as F
    import custom_op
    from custom_op._index import _store
    from custom_op.datasets import JpegFolder

    mode, folder, store = sys.argv[1:4]
    if mode == "die":
        def half_then_killed(descriptor, data):
            os.write(descriptor, data[:len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        _store._write_whole = half_then_killed
    custom_op.configure_index_cache(store=store)
    dataset = JpegFolder(folder, lambda image: F.crop(image, 200, 16, 96, 160))
    if len(sys.argv) > 5:  # say it is ready, then start with the other child
        open(f"{sys.argv[5]}.{os.getpid()}.ready", "w").close()
        while not os.path.exists(sys.argv[5]):
            time.sleep(0.0005)
    crops = [dataset[i][0].as_subclass(torch.Tensor) for i in range(len(dataset))]
    torch.save(crops, sys.argv[4])
    print(json.dumps(custom_op.index_cache_stats()))
""")


def _low_window(image):
    """A crop below the top, which an index serves (the rows above it are skipped)."""
    return F.crop(image, 200, 16, 96, 160)


@pytest.fixture(scope="module")
def jpegs() -> list[bytes]:
    return [photo_jpeg(*SIZE, seed=42, index=i) for i in range(COUNT)]


def _write_folder(root: pathlib.Path, images: list[bytes]) -> pathlib.Path:
    for i, data in enumerate(images):
        (root / f"class_{i % 2}").mkdir(parents=True, exist_ok=True)
        (root / f"class_{i % 2}" / f"{i:03d}.jpg").write_bytes(data)
    return root


@pytest.fixture
def folder(tmp_path, jpegs) -> pathlib.Path:
    return _write_folder(tmp_path / "train", jpegs)


@pytest.fixture
def store(tmp_path) -> pathlib.Path:
    """The store's folder; each test starts with an empty cache that uses it, and leaves the
    suite's setting (no store) behind."""
    path = tmp_path / "store"
    custom_op.configure_index_cache(store=path)
    yield path
    custom_op.configure_index_cache()


def _crops(root: pathlib.Path) -> list[torch.Tensor]:
    dataset = JpegFolder(root, _low_window)
    return [dataset[i][0] for i in range(len(dataset))]


def _unindexed(root: pathlib.Path) -> list[torch.Tensor]:
    """The crops with no index anywhere (the cache off, and the store with it)."""
    custom_op.configure_index_cache(max_bytes=0)
    return _crops(root)


def _equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def _entries(store: pathlib.Path) -> list[pathlib.Path]:
    """The files under final names (not the temporaries)."""
    return sorted(path for path in store.glob("??/*"))


def _temporaries(store: pathlib.Path) -> list[pathlib.Path]:
    return sorted((store / _store.TEMPORARIES).glob("*"))


def _key(path: pathlib.Path) -> IndexKey:
    info = path.stat()
    return IndexKey(sidecar_of_folder(str(path.parent)), path.name, info.st_size, info.st_mtime_ns)


def _entry_path(store: pathlib.Path, path: pathlib.Path) -> pathlib.Path:
    head = _store.entry_head(_key(path), _store.file_fingerprint(path.read_bytes()))
    return store / _store.entry_name(head)


def _files(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted(root.rglob("*.jpg"))


def _anew(store: pathlib.Path, **settings) -> None:
    """An empty process cache over the same store: what a new worker starts with."""
    custom_op.configure_index_cache(store=store, **settings)


def _stats() -> dict[str, int]:
    return custom_op.index_cache_stats()


def _child(*arguments: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, *arguments], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finished(child: subprocess.Popen) -> dict[str, int]:
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err[-2000:]
    return json.loads(out.splitlines()[-1])


def test_an_entry_round_trips(store, folder) -> None:
    path = _files(folder)[0]
    index = custom_op.jpeg_index(path.read_bytes())
    writer = _store.IndexStore(store, 1 << 20)
    fingerprint = _store.file_fingerprint(path.read_bytes())
    assert writer.read(_key(path), fingerprint) == (False, None)
    writer.write(_key(path), fingerprint, index)
    assert _store.IndexStore(store, 1 << 20).read(_key(path), fingerprint) == (True, index)
    # A file that cannot be indexed is an entry too: no process tries it again.
    other = _files(folder)[1]
    writer.write(_key(other), _store.file_fingerprint(other.read_bytes()), None)
    assert writer.read(_key(other), _store.file_fingerprint(other.read_bytes())) == (True, None)
    assert writer.stats()["store_writes"] == 2 and not _temporaries(store)
    assert (store.stat().st_mode & 0o777) == 0o700


def test_a_cache_emptied_reads_the_store_with_the_same_pixels(store, folder) -> None:
    expected = _unindexed(folder)
    _anew(store)
    first = _crops(folder)
    stats = _stats()
    # With a store, a sample builds on its first cropped decode (the module's note).
    assert (stats["builds"], stats["store_misses"], stats["store_writes"]) == (COUNT,) * 3
    assert len(_entries(store)) == COUNT
    _anew(store)
    indexed = custom_op.index_stats()["indexed"]
    second = _crops(folder)
    stats = _stats()
    assert (stats["hits"], stats["store_hits"], stats["builds"], stats["misses"]) == (
        COUNT, COUNT, 0, 0)
    assert custom_op.index_stats()["indexed"] - indexed == COUNT
    assert _equal(first, expected) and _equal(second, expected)
    # A store hit joins the process's cache: the next lookups do not read the store.
    _crops(folder)
    assert _stats()["store_hits"] == COUNT and _stats()["hits"] == 2 * COUNT


def test_a_second_process_hits_what_the_first_built(store, folder, tmp_path) -> None:
    expected = _crops(folder)
    assert _stats()["store_writes"] == COUNT
    stats = _finished(_child("decode", str(folder), str(store), str(tmp_path / "crops.pt")))
    assert (stats["store_hits"], stats["builds"], stats["store_writes"]) == (COUNT, 0, 0)
    assert _equal(torch.load(tmp_path / "crops.pt"), expected)


def test_two_processes_building_at_once_write_each_entry_once(store, tmp_path) -> None:
    count = 32
    root = _write_folder(tmp_path / "many", [photo_jpeg(*SIZE, seed=43, index=i)
                                             for i in range(count)])
    go = tmp_path / "go"
    children = [_child("decode", str(root), str(store), str(tmp_path / f"crops{n}.pt"), str(go))
                for n in range(2)]
    deadline = time.monotonic() + 300
    while len(list(tmp_path.glob("go.*.ready"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # both are waiting: they build the same entries at the same time
    stats = [_finished(child) for child in children]
    # Each entry written once, whether one child built it or both did (the second link lost).
    assert sum(s["builds"] for s in stats) >= count
    assert sum(s["store_writes"] for s in stats) == count
    assert all(s["store_refused"] == s["store_write_failures"] == 0 for s in stats)
    assert len(_entries(store)) == count and not _temporaries(store)
    reader = _store.IndexStore(store, 1 << 20)
    for path in _files(root):
        data = path.read_bytes()
        assert reader.read(_key(path), _store.file_fingerprint(data)) == (
            True, custom_op.jpeg_index(data))
    assert _equal(torch.load(tmp_path / "crops0.pt"), torch.load(tmp_path / "crops1.pt"))


def test_a_second_writer_of_an_entry_drops_its_temporary(store, folder) -> None:
    """What two builders racing on one entry come to, one after the other: the first link
    wins, the second finds the name taken and leaves the entry as it was."""
    path = _files(folder)[0]
    key, fingerprint = _key(path), _store.file_fingerprint(path.read_bytes())
    first, second = _store.IndexStore(store, 1 << 20), _store.IndexStore(store, 1 << 20)
    index = custom_op.jpeg_index(path.read_bytes())
    first.write(key, fingerprint, index)
    (entry,) = _entries(store)
    written = entry.stat()
    second.write(key, fingerprint, index)
    assert first.stats()["store_writes"] == 1 and second.stats()["store_writes"] == 0
    assert _entries(store) == [entry] and _temporaries(store) == []
    assert (entry.stat().st_ino, entry.stat().st_mtime_ns) == (written.st_ino,
                                                               written.st_mtime_ns)


def test_a_builder_killed_mid_write_leaves_no_entry_and_the_rerun_builds(store, folder,
                                                                       tmp_path) -> None:
    child = _child("die", str(folder), str(store), str(tmp_path / "crops.pt"))
    child.communicate(timeout=300)
    assert child.returncode == -signal.SIGKILL
    assert _entries(store) == [] and len(_temporaries(store)) == 1
    (temporary,) = _temporaries(store)
    hour_ago = time.time() - _store.STALE_TEMPORARY_SECONDS - 60
    os.utime(temporary, (hour_ago, hour_ago))
    expected = _unindexed(folder)
    _anew(store)
    assert _equal(_crops(folder), expected)
    assert _stats()["store_writes"] == COUNT and len(_entries(store)) == COUNT
    assert _temporaries(store) == []  # the next writer removed the killed one's


def test_a_young_temporary_is_left_to_its_writer(store, folder) -> None:
    (store / _store.TEMPORARIES).mkdir(parents=True)
    in_progress = store / _store.TEMPORARIES / "0123456789abcdef"
    in_progress.write_bytes(b"half an entry")
    _crops(folder)
    assert _temporaries(store) == [in_progress]


def _truncate(entry: pathlib.Path, other: pathlib.Path) -> None:
    entry.write_bytes(entry.read_bytes()[:-7])


def _flip_a_bit(entry: pathlib.Path, other: pathlib.Path) -> None:
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0x10
    entry.write_bytes(bytes(data))


def _forge_the_magic(entry: pathlib.Path, other: pathlib.Path) -> None:
    entry.write_bytes(b"NOTANIDX" + entry.read_bytes()[8:])


def _another_keys_entry(entry: pathlib.Path, other: pathlib.Path) -> None:
    entry.write_bytes(other.read_bytes())  # as a hash collision, or a renamed entry, would


def _symlink_to_a_copy(entry: pathlib.Path, other: pathlib.Path) -> None:
    copy = entry.parent.parent.parent / "elsewhere"
    copy.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(copy)


def _too_large(entry: pathlib.Path, other: pathlib.Path) -> None:
    entry.write_bytes(entry.read_bytes() + bytes(1 << 20))


def _a_fifo(entry: pathlib.Path, other: pathlib.Path) -> None:
    entry.unlink()
    os.mkfifo(entry)


@pytest.mark.parametrize("damage", [_truncate, _flip_a_bit, _forge_the_magic, _another_keys_entry,
                                    _symlink_to_a_copy, _too_large, _a_fifo],
                         ids=lambda damage: damage.__name__.strip("_"))
def test_a_bad_entry_is_a_miss_with_the_unindexed_pixels(store, folder, damage, caplog) -> None:
    expected = _unindexed(folder)
    _anew(store)
    _crops(folder)
    first, second = (_entry_path(store, path) for path in _files(folder)[:2])
    damage(first, second)
    _anew(store)
    with caplog.at_level(logging.WARNING, logger="custom_op"):
        crops = _crops(folder)
    assert _equal(crops, expected)
    stats = _stats()
    assert (stats["store_refused"], stats["store_misses"], stats["store_hits"]) == (
        1, 1, COUNT - 1)
    assert sum("index store entry" in record.getMessage() for record in caplog.records) == 1
    # The bad entry was removed and its index built again: the next process hits it.
    assert stats["store_writes"] == 1
    _anew(store)
    _crops(folder)
    assert _stats()["store_hits"] == COUNT
    if damage is _symlink_to_a_copy:
        assert (store.parent / "elsewhere").is_file()  # the link went, not what it named


def test_an_entry_sealed_around_another_files_index_is_refused_by_the_decode(store,
                                                                            folder) -> None:
    """The store's checksum only says an entry is whole; the index's own checksum of the
    file's bytes is what refuses another file's index (docs/design.md)."""
    expected = _unindexed(folder)
    first, second = _files(folder)[:2]
    writer = _store.IndexStore(store, 1 << 20)
    writer.write(_key(first), _store.file_fingerprint(first.read_bytes()),
                 custom_op.jpeg_index(second.read_bytes()))
    _anew(store)
    refused = custom_op.index_stats()["refused"]
    assert _equal(_crops(folder), expected)
    assert _stats()["store_hits"] == 1
    assert custom_op.index_stats()["refused"] - refused == 1


def _symlinked(store: pathlib.Path) -> pathlib.Path:
    real = store.parent / "real-store"
    real.mkdir(mode=0o700)
    store.symlink_to(real)
    return real


def _open_to_all(store: pathlib.Path) -> pathlib.Path:
    store.mkdir(mode=0o700)
    store.chmod(0o777)
    return store


def _another_users(store: pathlib.Path, monkeypatch) -> pathlib.Path:
    # The store sees this process as another user than the folder's owner: the same check as a
    # folder chowned away, without needing root to make one.
    store.mkdir(mode=0o700)
    monkeypatch.setattr(_store.os, "getuid", lambda: store.stat().st_uid + 1)
    return store


@pytest.mark.parametrize("make", [_symlinked, _open_to_all, _another_users],
                         ids=["a symlink", "writable by all", "another user's"])
def test_a_store_folder_that_is_not_safe_is_refused_once(store, folder, make, caplog,
                                                          monkeypatch) -> None:
    target = make(store, monkeypatch) if make is _another_users else make(store)
    expected = _unindexed(folder)
    _anew(store)
    with caplog.at_level(logging.WARNING, logger="custom_op"):
        crops = _crops(folder) + _crops(folder)
    assert _equal(crops, expected + expected)
    assert sum("index store" in record.getMessage() for record in caplog.records) == 1
    assert list(target.iterdir()) == []
    stats = _stats()
    assert all(stats[name] == 0 for name in _store.STORE_COUNTS)
    # Without a store, the process's own rule: two crops of a sample build nothing.
    assert stats["builds"] == 0


def test_the_budget_stops_writes(store, folder) -> None:
    expected = _unindexed(folder)
    _anew(store, store_max_bytes=2 * _store.BLOCK)
    assert _equal(_crops(folder), expected)
    stats = _stats()
    assert stats["store_writes"] == 2 and stats["store_full"] >= 1
    assert len(_entries(store)) == 2
    # Another process measures the store at its first write: full, it writes nothing.
    _anew(store, store_max_bytes=2 * _store.BLOCK, build_on_touch=1)
    _crops(folder)
    assert _stats()["store_writes"] == 0 and len(_entries(store)) == 2
    _anew(store, store_max_bytes=0)
    _crops(folder)
    assert _stats()["store_hits"] == 2 and _stats()["store_writes"] == 0


def _read_only(monkeypatch, store: pathlib.Path) -> None:
    def refused(*arguments, **options):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(_store.os, "link", refused)


def _disk_full(monkeypatch, store: pathlib.Path) -> None:
    def no_space(*arguments):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_store, "_write_whole", no_space)


def _permission_denied(monkeypatch, store: pathlib.Path) -> None:
    # What a folder of mode 0500 gives a user who is not root (root writes anyway).
    def refused(*arguments, **options):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(_store.os, "link", refused)


@pytest.mark.parametrize("failure", [_read_only, _disk_full, _permission_denied],
                         ids=["read-only filesystem", "disk full", "permission denied"])
def test_a_store_that_cannot_be_written_carries_on(store, folder, failure, monkeypatch,
                                                   caplog) -> None:
    failure(monkeypatch, store)
    expected = _unindexed(folder)
    _anew(store, build_on_touch=1)
    with caplog.at_level(logging.WARNING, logger="custom_op"):
        first = _crops(folder)
        second = _crops(folder)
    assert _equal(first, expected) and _equal(second, expected)
    stats = _stats()
    assert stats["store_write_failures"] == 1 and stats["store_writes"] == 0
    assert stats["builds"] == COUNT and stats["hits"] == COUNT  # the process's cache serves
    assert sum("cannot write" in record.getMessage() for record in caplog.records) == 1
    assert _entries(store) == [] and _temporaries(store) == []
    store.chmod(0o700)


def test_a_changed_file_misses(store, folder) -> None:
    _crops(folder)
    first, second = _files(folder)[:2]
    info = first.stat()
    os.utime(first, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))  # a new mtime
    second.write_bytes(photo_jpeg(*SIZE, seed=44, index=0))  # new bytes, another size
    third = _files(folder)[2]
    # The same size and mtime, other bytes (the JFIF header's density): what the key of a tar
    # member (mtime 0) or of a file rewritten with its mtime kept cannot tell.
    data = bytearray(third.read_bytes())
    assert data[6:11] == b"JFIF\0"
    data[15] ^= 0x01
    info = third.stat()
    third.write_bytes(bytes(data))
    os.utime(third, ns=(info.st_atime_ns, info.st_mtime_ns))
    expected = _unindexed(folder)
    _anew(store)
    assert _equal(_crops(folder), expected)
    stats = _stats()
    assert (stats["store_misses"], stats["store_hits"], stats["store_refused"]) == (
        3, COUNT - 3, 0)
    assert stats["store_writes"] == stats["builds"] == 3


def test_epoch_two_of_two_workers_hits_every_lookup(store, tmp_path) -> None:
    count = 64
    root = _write_folder(tmp_path / "small", [photo_jpeg(96, 128, seed=45, index=i)
                                              for i in range(count)])
    lane = BatchLane(JpegFolder(root), LANE, seed=5)
    loader = lane_dataloader(lane, LaneBatchSampler(count, 8, seed=5), num_workers=2)
    list(loader)
    first = loader.index_stats()
    assert first["builds"] == first["store_writes"] == count and first["store_hits"] == 0
    second_epoch = [images for images, _ in loader]
    second = {name: loader.index_stats()[name] - first[name] for name in first}
    assert (second["hits"], second["misses"], second["store_hits"], second["builds"]) == (
        count, 0, count, 0)
    assert second["indexed"] + second["unneeded"] == count
    custom_op.configure_index_cache(max_bytes=0)
    unindexed = lane_dataloader(lane, LaneBatchSampler(count, 8, seed=5), num_workers=2,
                                initial_epoch=1)
    assert _equal(second_epoch, [images for images, _ in unindexed])


def test_where_the_store_is(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(_store.STORE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _store.store_folder(True) == str(tmp_path / "custom_op" / "index-store")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # ignored, as the XDG rule says
    assert _store.store_folder(True) == os.path.expanduser("~/.cache/custom_op/index-store")
    monkeypatch.setenv(_store.STORE_ENV, str(tmp_path / "named"))
    assert _store.store_folder(True) == str(tmp_path / "named")
    assert _store.store_folder(tmp_path / "given") == str(tmp_path / "given")
    monkeypatch.setenv(_store.STORE_ENV, "")
    assert _store.store_folder(True) is None
    assert _store.store_folder(None) is None and _store.store_folder(False) is None


def test_configure_index_cache_checks_the_store_arguments() -> None:
    with pytest.raises(TypeError, match="store must be a folder's path .* got bytes"):
        custom_op.configure_index_cache(store=b"/tmp/store")
    with pytest.raises(TypeError, match="store must be a folder's path .* got int"):
        custom_op.configure_index_cache(store=3)
    with pytest.raises(ValueError, match="store must name a folder, got ''"):
        custom_op.configure_index_cache(store="")
    with pytest.raises(ValueError, match="store_max_bytes must be at least 0, got -1"):
        custom_op.configure_index_cache(store_max_bytes=-1)
    with pytest.raises(TypeError, match="store_max_bytes must be an int, got float"):
        custom_op.configure_index_cache(store_max_bytes=1.5)
    custom_op.configure_index_cache(store=False)
    custom_op.configure_index_cache()
