"""The driver's side of custom_op's Ray code, without a cluster: what the Ray Data decode step
(custom_op/ray/) gives map_batches, the pool it chooses for a cluster's CPUs, the epoch an
actor's call decodes from its context's execution count, the old names; and prepare's Ray engine
(custom_op/prepare/ray_engine.py): its chunks, the outcomes it records, a chunk whose every
attempt died reported as an error of each of its files.

The datasets are stand-ins that record the map_batches call, and Ray's task calls run inline
(Ray is imported, never started), so these run in make test-quick. tests/test_ray_data.py runs
the decode step on a real cluster of two nodes, tests/test_ray_train.py under Ray Train, and
tests/test_prepare_ray.py prepare on a real Ray with a worker killed.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest
import ray
import ray.data
import torch
from torchvision.transforms import v2

import custom_op.datasets
from custom_op.lane import BatchLane
from custom_op.prepare import ray_engine
from custom_op.prepare.items import ERROR, PREPARED, Outcome, Task
from custom_op.ray import JpegDecoder, _executions, _pool, decode_batches, decode_epochs
from synthetic import photo_jpeg

SEED = 11
TRANSFORM = v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip()])


class _Dataset:
    """What decode_batches and decode_epochs use of a dataset, the map_batches call recorded."""

    def __init__(self, executions: int = 0, epoch: int | None = None) -> None:
        self.context = ray.data.DataContext.get_current().copy()
        self.context._execution_idx = executions
        self.epoch, self.recorded = epoch, {}

    def map_batches(self, fn, **keywords):
        self.recorded.update(keywords, fn=fn)
        return self

    def with_column(self, name, expression):
        return _Dataset(self.context._execution_idx, epoch=expression.value)

    def union(self, *others):
        union = _Dataset(self.context._execution_idx)
        union.epochs = [self.epoch, *(other.epoch for other in others)]
        return union


@pytest.fixture(autouse=True)
def no_cluster():
    assert not ray.is_initialized(), "these tests are the driver's side alone"
    yield
    assert not ray.is_initialized(), "a test started Ray"


def test_decode_batches_gives_map_batches_the_decoder_and_ray_its_own_arguments():
    dataset = _Dataset(executions=3)
    remote = {"memory": 1 << 28, "runtime_env": {"env_vars": {"A": "1"}}}
    decode_batches(dataset, TRANSFORM, seed=SEED, batch_size=7, label_column="cls",
                   classes=["a", "b"], num_cpus=0.5, **remote)
    recorded = dataset.recorded
    assert recorded["fn"] is JpegDecoder
    assert {name: recorded[name] for name in remote} == remote
    assert (recorded["batch_size"], recorded["batch_format"], recorded["num_cpus"]) == (
        7, "numpy", 0.5)
    constructor = recorded["fn_constructor_kwargs"]
    assert (constructor["seed"], constructor["epoch"], constructor["executions_before"],
            constructor["label_column"], constructor["classes"]) == (SEED, None, 3, "cls",
                                                                     ["a", "b"])
    # Ray not running: the pool autoscales from one actor, its top left to Ray.
    assert isinstance(recorded["compute"], ray.data.ActorPoolStrategy)
    assert recorded["compute"].min_size == 1
    pinned = _Dataset(executions=3)
    decode_batches(pinned, TRANSFORM, seed=SEED, epoch=4)
    assert (pinned.recorded["fn_constructor_kwargs"]["epoch"],
            pinned.recorded["fn_constructor_kwargs"]["executions_before"]) == (4, 0)


@pytest.mark.parametrize("arguments, error, message", [
    ({"batch_size": 0}, ValueError, "batch_size must be an int >= 1, got 0"),
    ({"seed": None}, TypeError, "seed must be an int, got None"),
    ({"epoch": -1}, ValueError, "epoch must be an int >= 0, got -1"),
    ({"concurrency": 2}, TypeError, "concurrency= is the decode step's own"),
    ({"fn_constructor_kwargs": {}}, TypeError, "fn_constructor_kwargs= is the decode step's own"),
    ({"compute": "pool"}, TypeError, "compute must be a ray.data.ActorPoolStrategy"),
    ({"num_cpus": 0}, ValueError, "num_cpus must be > 0, got 0"),
], ids=["batch_size", "seed", "epoch", "concurrency", "constructor", "compute", "num_cpus"])
def test_bad_arguments_are_refused_before_map_batches(arguments, error, message):
    dataset = _Dataset()
    with pytest.raises(error, match=message):
        decode_batches(dataset, TRANSFORM, **{"seed": SEED, **arguments})
    assert dataset.recorded == {}


def test_the_pool_is_sized_to_the_cluster_and_one_that_holds_every_cpu_is_refused(monkeypatch):
    monkeypatch.setattr(_pool, "_cluster_cpus", lambda context: 4.0)
    context = _Dataset().context
    default = _pool.actor_pool(None, 1, context)
    assert (default.min_size, default.max_size) == (1, 3)
    assert _pool.actor_pool(None, 0.5, context).max_size == 6
    fits = ray.data.ActorPoolStrategy(size=3)
    assert _pool.actor_pool(fits, 1, context) is fits
    with pytest.raises(ValueError, match=r"starts 4 actors of num_cpus=1, 4 of the cluster's 4 "
                                         r"CPUs.*start at most 3 actors"):
        _pool.actor_pool(ray.data.ActorPoolStrategy(size=4), 1, context)
    with pytest.raises(ValueError, match="num_cpus=4 leaves less than 1 of the cluster's 4 CPUs"):
        _pool.actor_pool(None, 4, context)


def test_decode_epochs_tags_each_epoch_and_decodes_from_the_first():
    dataset = _Dataset()
    decoded = decode_epochs({4: dataset, 2: dataset}, TRANSFORM, seed=SEED, batch_size=5)
    assert decoded.epochs == [2, 4]
    constructor = decoded.recorded["fn_constructor_kwargs"]
    assert (constructor["epoch"], constructor["epoch_column"]) == (2, "epoch")
    with pytest.raises(ValueError, match="epochs is empty"):
        decode_epochs({}, TRANSFORM, seed=SEED)
    with pytest.raises(ValueError, match="an epoch must be an int >= 0, got -1"):
        decode_epochs({-1: dataset}, TRANSFORM, seed=SEED)
    with pytest.raises(TypeError, match="epoch_column= is decode_epochs' own"):
        decode_epochs({0: dataset}, TRANSFORM, seed=SEED, epoch_column="e")


def test_an_actors_call_decodes_the_epoch_its_context_counts(monkeypatch):
    """Inside an actor's call, the executions counted since the step was added are the epoch:
    the pixels are the per-sample pipeline's in that epoch."""
    encoded = {f"s{index}": photo_jpeg(48, 64, 3, index) for index in range(3)}
    batch = {"bytes": np.array(list(encoded.values()), dtype=object),
             "path": np.array(list(encoded), dtype=object)}
    context = _Dataset(executions=5).context
    monkeypatch.setattr(ray.data.DataContext, "get_current", staticmethod(lambda: context))
    assert _executions.execution_index() == 5
    assert _executions.epoch_of_execution(3) == 2
    with pytest.raises(RuntimeError, match="pass epoch="):
        _executions.epoch_of_execution(6)
    images = JpegDecoder(TRANSFORM, seed=SEED, executions_before=3)(batch)["image"]
    lane = BatchLane(None, TRANSFORM, seed=SEED)
    for image, (key, data) in zip(images, encoded.items()):
        with torch.random.fork_rng():
            torch.manual_seed(lane.sample_seed(key, 2))
            expected = TRANSFORM(custom_op.EncodedJpeg(data))
        assert torch.equal(torch.from_numpy(image), expected), key
    context._execution_idx = None
    with pytest.raises(RuntimeError, match=r"_execution_idx is None.*pass epoch="):
        _executions.execution_index(context)


def test_actors_decoding_local_files_share_the_nodes_index_store(tmp_path):
    """An actor's samples keyed by local paths use the node's store: a second actor (a process
    with an empty cache) hits every index the first built, with the same pixels."""
    paths = []
    for index in range(4):
        paths.append(tmp_path / f"{index}.jpg")
        paths[-1].write_bytes(photo_jpeg(240, 320, 3, index))
    batch = {"bytes": np.array([path.read_bytes() for path in paths], dtype=object),
             "path": np.array([str(path) for path in paths], dtype=object)}
    small_windows = v2.Compose([v2.RandomResizedCrop(32, scale=(0.05, 0.2)),
                                v2.RandomHorizontalFlip()])
    store = tmp_path / "store"
    decoded, counts = [], []
    try:
        for actor in range(2):
            custom_op.configure_index_cache(store=store)  # the actor's new, empty cache
            decoded.append(JpegDecoder(small_windows, seed=SEED, epoch=0)(batch)["image"])
            counts.append(custom_op.index_cache_stats())
    finally:
        custom_op.configure_index_cache()
    assert (counts[0]["builds"], counts[0]["store_writes"]) == (4, 4), counts[0]
    assert (counts[1]["builds"], counts[1]["store_hits"]) == (0, 4), counts[1]
    assert all(np.array_equal(a, b) for a, b in zip(*decoded))


def test_the_old_names_warn_naming_their_replacement_and_do_the_same():
    for name, new in (("LaneDecoder", "custom_op.ray.JpegDecoder"),
                      ("lane_map_batches", "custom_op.ray.decode_batches"),
                      ("lane_map_epochs", "custom_op.ray.decode_epochs")):
        assert name not in custom_op.datasets.__all__
        dataset = _Dataset()
        arguments = {"LaneDecoder": (), "lane_map_batches": (dataset,),
                     "lane_map_epochs": ({0: dataset, 1: dataset},)}[name]
        with pytest.warns(DeprecationWarning, match=f"use {new}"):
            made = getattr(custom_op.datasets, name)(*arguments, TRANSFORM, seed=SEED,
                                                     label_column="cls", classes=["a", "b"])
        if name == "LaneDecoder":
            assert isinstance(made, JpegDecoder) and made.execution_epoch() == 0
        else:
            assert made.recorded["fn"] is JpegDecoder
            assert made.recorded["fn_constructor_kwargs"]["label_column"] == "cls"
    with pytest.warns(DeprecationWarning):
        made = custom_op.datasets.lane_map_batches(_Dataset(), TRANSFORM, seed=SEED,
                                                   concurrency=2)
    assert (made.recorded["compute"].min_size, made.recorded["compute"].max_size) == (2, 2)


class _InlineRay:
    """What ray_engine uses of Ray, the tasks run at once in this process; a chunk holding a
    task named in ``dies`` fails as a task whose worker died in every attempt."""

    exceptions = ray.exceptions
    __spec__ = ray.__spec__  # what require() looks for

    def __init__(self, cpus: int, dies: set[str]) -> None:
        self.cpus, self.dies, self.options, self.shutdowns = cpus, dies, {}, 0

    def is_initialized(self) -> bool:
        return False

    def init(self, **options) -> None:
        self.options = options

    def shutdown(self) -> None:
        self.shutdowns += 1

    def cluster_resources(self) -> dict:
        return {"CPU": self.cpus}

    def put(self, value):
        return value

    def remote(self, **options):
        assert options == {"num_cpus": 1, "max_retries": ray_engine.ATTEMPTS - 1}

        def wrap(function):
            def call(chunk, work, verify):
                if self.dies & {task.relative for task in chunk}:
                    return ray.exceptions.WorkerCrashedError()
                return function(chunk, work, verify)
            return SimpleNamespace(remote=lambda *arguments: _Ref(call(*arguments)))
        return wrap

    def wait(self, refs, num_returns):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref):
        if isinstance(ref.value, Exception):
            raise ref.value
        return ref.value


class _Ref:
    def __init__(self, value) -> None:
        self.value = value


def _task(relative: str) -> Task:
    return Task(relative, f"/src/{relative}", f"/dst/{relative}", 10, (0, 0))


def _work(task: Task, verify: bool) -> list[Outcome]:
    return [Outcome(task.relative, PREPARED, "verified" if verify else "", task.size, 8)]


def test_prepare_on_ray_records_every_chunks_outcomes_and_the_dead_chunks_as_errors(monkeypatch):
    inline = _InlineRay(cpus=2, dies={"f07.jpg"})
    monkeypatch.setitem(sys.modules, "ray", inline)
    whole = [_task("a.tar"), _task("b.parquet")]
    files = [_task(f"f{index:02d}.jpg") for index in range(20)]
    recorded: list[Outcome] = []
    ray_engine.run_ray(whole, files, _work, True, recorded.extend, address="auto")
    assert inline.options == {"address": "auto", "include_dashboard": False,
                              "log_to_driver": False}
    assert inline.shutdowns == 1
    by_name = {outcome.relative: outcome for outcome in recorded}
    assert sorted(by_name) == sorted(task.relative for task in whole + files)
    assert len(recorded) == len(by_name), "a task recorded twice"
    # The dead chunk's files, and only those, are errors naming why; the rest are the work's.
    chunk_of_07 = next(chunk for chunk in ray_engine.chunked(files, 2)
                       if "f07.jpg" in {task.relative for task in chunk})
    dead = {task.relative for task in chunk_of_07}
    assert {name for name, outcome in by_name.items() if outcome.kind == ERROR} == dead
    assert all(by_name[name].reason == ray_engine.died_reason() for name in dead)
    assert all(outcome.reason == "verified" for name, outcome in by_name.items()
               if name not in dead)
    assert "f07.jpg" in dead and len(dead) < len(files)
    nothing = _InlineRay(cpus=2, dies=set())
    monkeypatch.setitem(sys.modules, "ray", nothing)
    ray_engine.run_ray([], [], _work, False, recorded.extend)
    assert nothing.options == {} and nothing.shutdowns == 0
