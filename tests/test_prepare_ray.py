"""prepare on Ray (custom_op/prepare/ray_engine.py): the bytes and the exit status of the
one-machine run, a worker killed mid-run retried by Ray to the same outputs, a chunk that dies in
every attempt reported as an error of its files, and no Ray process left behind."""

from __future__ import annotations

import functools
import io
import os
import sys
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray

import custom_op
from custom_op.prepare import PRIVATE_FOLDER, main, prepare_tree
from custom_op.prepare import tree as prepare_tree_module
from custom_op.prepare.items import ERROR
from custom_op.prepare import ray_engine
from _ray_processes import ray_descendants, wait_until_gone
from synthetic import photo_jpeg, write_jpeg_folder

MARKED = "a/00002.jpg"  # the file whose first sight kills its worker

#: Ray's deprecation warnings, raised by a call of custom_op's or of this module's, fail the test.
pytestmark = pytest.mark.filterwarnings(
    r"error::ray.util.annotations.RayDeprecationWarning:(custom_op|test_)")


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One Ray of two CPUs on this machine for the module; none of its processes outlive it."""
    # Workers import custom_op as this process does (a checkout on PYTHONPATH, or installed).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [
        str(Path(custom_op.__file__).parents[1]), os.environ.get("PYTHONPATH")]))
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # A Ray of this module's own (address="local"): without it, ray.init joins whatever cluster it
    # finds running on the machine (tests/test_ray_data.py's, in the other xdist worker).
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    before = ray_descendants(os.getpid())
    assert before, "no Ray process found below this one: the check would check nothing"
    ray.shutdown()
    assert not wait_until_gone(os.getpid(), before), "Ray left processes behind"


def _shard(path: Path) -> None:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for key in range(2):
            for name, data in ((f"{key:03d}.jpg", photo_jpeg(40, 56, 7, key)),
                               (f"{key:03d}.cls", str(key).encode())):
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(data), 1_700_000_000
                tar.addfile(info, io.BytesIO(data))


def _parquet(path: Path) -> None:
    images = [{"bytes": photo_jpeg(48, 40, 9, index), "path": f"{index}.jpg"} for index in range(3)]
    pq.write_table(pa.table({"image": images, "label": [0, 1, 0]}), path, row_group_size=2)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """Plain JPEGs in two folders, a text file, a tar shard and a parquet file."""
    root = tmp_path_factory.mktemp("prepare-ray") / "src"
    write_jpeg_folder(root, 6, 40, 64, classes=("a", "b"), seed=3)
    (root / "notes.txt").write_text("not an image\n")
    _shard(root / "train-000000.tar")
    _parquet(root / "data.parquet")
    return root


def _contents(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.fixture(scope="module")
def one_machine(source, tmp_path_factory):
    """The one-machine run's summary and outputs (worker processes, the default engine)."""
    destination = tmp_path_factory.mktemp("one-machine") / "dst"
    summary = prepare_tree(source, destination, workers=2, progress=False, fsync=False)
    return summary, _contents(destination)


def _counts(summary) -> tuple:
    return (summary.files_seen, summary.prepared, summary.shards_written, summary.copied,
            summary.errors)


def test_outputs_are_the_one_machine_runs_byte_for_byte(source, one_machine, tmp_path):
    summary, expected = one_machine
    ray_summary = prepare_tree(source, tmp_path / "dst", engine="ray", progress=False, fsync=False)
    assert _contents(tmp_path / "dst") == expected
    assert {"train-000000.tar", "data.parquet", "notes.txt", MARKED} <= set(expected)
    assert _counts(ray_summary) == _counts(summary)
    assert ray_summary.exit_code == summary.exit_code == 0


def _dies_once(task, verify, *, marker: str, **options):
    """The per-task function, except that the first worker to see MARKED kills its own process
    (as the out-of-memory killer or a node's loss would)."""
    if task.relative == MARKED and not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        os._exit(9)
    return _ORIGINAL(task, verify, **options)


def _always_dies(task, verify, **options):
    """The per-task function, except that MARKED kills its worker in every attempt."""
    if task.relative == MARKED:
        os._exit(9)
    return _ORIGINAL(task, verify, **options)


_ORIGINAL = prepare_tree_module.handle_task


def test_a_killed_worker_is_retried_by_ray_to_the_same_outputs(source, one_machine, tmp_path,
                                                               monkeypatch):
    summary, expected = one_machine
    marker = tmp_path / "died"
    monkeypatch.setattr(prepare_tree_module, "handle_task",
                        functools.partial(_dies_once, marker=str(marker)))
    retried = prepare_tree(source, tmp_path / "dst", engine="ray", progress=False, fsync=False)
    assert marker.exists(), "no worker died: the test tested nothing"
    assert int(marker.read_text()) != os.getpid()
    assert _contents(tmp_path / "dst") == expected
    assert not (tmp_path / "dst" / PRIVATE_FOLDER).exists()
    assert (retried.exit_code, retried.prepared, retried.errors) == (0, summary.prepared, [])


def test_a_chunk_that_dies_in_every_attempt_fails_its_files_and_the_run_goes_on(
        source, one_machine, tmp_path, monkeypatch):
    _, expected = one_machine
    monkeypatch.setattr(prepare_tree_module, "handle_task", _always_dies)
    monkeypatch.setattr(ray_engine, "ATTEMPTS", 2)  # each attempt starts a worker: seconds
    failed = prepare_tree(source, tmp_path / "dst", engine="ray", progress=False, fsync=False)
    assert (MARKED, ray_engine.died_reason()) in failed.errors
    assert "died in each of 2 attempts" in ray_engine.died_reason()
    assert failed.exit_code == 1
    written = _contents(tmp_path / "dst")
    assert MARKED not in written and not (tmp_path / "dst" / PRIVATE_FOLDER).exists()
    # Everything outside the dead chunk is written as the one-machine run writes it.
    lost = {relative for relative, _ in failed.errors}
    assert {name: data for name, data in expected.items() if name not in lost} == written


def test_the_exit_status_is_the_one_machine_runs_for_a_bad_jpeg(tmp_path, capsys):
    source = tmp_path / "src"
    write_jpeg_folder(source, 2, 32, 32, classes=("a",), seed=5)
    (source / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not the rest of a jpeg")
    one_machine = main([str(source), str(tmp_path / "one"), "--quiet", "--no-fsync"])
    on_ray = main([str(source), str(tmp_path / "ray"), "--quiet", "--no-fsync", "--engine", "ray"])
    assert one_machine == on_ray == 4
    assert _contents(tmp_path / "ray") == _contents(tmp_path / "one")
    assert "broken.jpg" in capsys.readouterr().out
