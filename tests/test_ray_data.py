"""The Ray Data decode step (custom_op/ray/) on a real Ray cluster of two nodes on this machine:
the pixels are the per-sample pipeline's for each sample's stream, whatever the source
(read_binary_files with folder labels, Hugging Face parquet, webdataset); each execution decodes
the next epoch and the same seed replays them; every sample arrives once per epoch across two
consumers; an actor killed mid-epoch is replaced without a lost or repeated sample; a pool that
would starve the reads is refused; the old names warn and still work; shutting the cluster down
leaves no process behind. Ray's deprecation warnings raised by our calls fail the tests."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray
import torch
from torchvision.transforms import v2

import custom_op
import custom_op.datasets
from custom_op.lane import BatchLane
from custom_op.ray import JpegDecoder, decode_batches, decode_epochs
from synthetic import photo_jpeg, write_jpeg_folder
from _ray_processes import two_node_cluster

SEED, EPOCH = 11, 3
TRANSFORM = v2.Compose([v2.RandomResizedCrop(48), v2.RandomHorizontalFlip()])

#: Ray's deprecation warnings, raised by a call of custom_op's or of this module's, fail the test.
pytestmark = pytest.mark.filterwarnings(
    r"error::ray.util.annotations.RayDeprecationWarning:(custom_op|test_)")


@pytest.fixture(scope="module")
def cluster():
    yield from two_node_cluster(__name__)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ray") / "train"
    write_jpeg_folder(root, 12, 96, 128, classes=("a", "b"), seed=4)
    return root


def _expected(files: Path, epoch: int = EPOCH) -> dict[str, torch.Tensor]:
    """Each file through the per-sample v2 pipeline, its generator seeded from its stream."""
    return _expected_of({str(path): path.read_bytes() for path in sorted(files.rglob("*.jpg"))},
                        epoch)


def _expected_of(encoded: dict[str, bytes], epoch: int) -> dict[str, torch.Tensor]:
    """Each key's bytes through the per-sample v2 pipeline, seeded from the key's stream."""
    lane = BatchLane(None, TRANSFORM, seed=SEED)
    expected = {}
    for key, data in encoded.items():
        with torch.random.fork_rng():
            torch.manual_seed(lane.sample_seed(key, epoch))
            expected[key] = TRANSFORM(custom_op.EncodedJpeg(data))
    return expected


def _rows(dataset) -> dict[str, torch.Tensor]:
    rows: dict[str, torch.Tensor] = {}
    for batch in dataset.iter_batches(batch_size=5, batch_format="numpy"):
        for path, image, label in zip(batch["path"], batch["image"], batch["label"]):
            assert path not in rows, f"{path} arrived twice"
            assert int(label) == ("/b/" in path)
            rows[str(path)] = torch.from_numpy(image)
    return rows


def _files(files: Path, **read_options):
    """The folder as Ray reads it: paths and bytes, the class folder's name as "cls"."""
    return ray.data.read_binary_files(str(files), include_paths=True,
                                      partitioning=ray.data.datasource.Partitioning(
                                          "dir", field_names=["cls"], base_dir=str(files)),
                                      **read_options)


def _decoded(files: Path, **options):
    return decode_batches(_files(files), TRANSFORM, seed=SEED, batch_size=4,
                          compute=ray.data.ActorPoolStrategy(size=2), label_column="cls",
                          classes=["a", "b"], keep_key=True, **{"epoch": EPOCH, **options})


def test_one_execution_of_several_epochs_gives_each_epoch_its_own_pixels(cluster, files):
    dataset = _files(files)
    decoded = decode_epochs({epoch: dataset for epoch in (4, 2)}, TRANSFORM, seed=SEED,
                            batch_size=5, compute=ray.data.ActorPoolStrategy(size=2),
                            label_column="cls", classes=["a", "b"], keep_key=True)
    arrived: list[tuple[int, str, torch.Tensor]] = []
    for batch in decoded.iter_batches(batch_size=7, batch_format="numpy"):
        arrived += [(int(epoch), str(path), torch.from_numpy(image)) for epoch, path, image
                    in zip(batch["epoch"], batch["path"], batch["image"])]
    assert len(arrived) == len({(epoch, path) for epoch, path, _ in arrived}) == 24
    by_epoch = {epoch: {path: image for seen, path, image in arrived if seen == epoch}
                for epoch in (2, 4)}
    for epoch, rows in by_epoch.items():
        expected = _expected(files, epoch)
        assert sorted(rows) == sorted(expected)
        assert all(torch.equal(rows[path], expected[path]) for path in rows), epoch
    # The same file in two epochs: its own draws in each.
    path = next(iter(by_epoch[2]))
    assert not torch.equal(by_epoch[2][path], by_epoch[4][path])


def test_decode_epochs_refuses_no_epochs_and_a_negative_one(cluster, files):
    dataset = _files(files)
    with pytest.raises(ValueError, match="epochs is empty"):
        decode_epochs({}, TRANSFORM, seed=SEED)
    with pytest.raises(ValueError, match="an epoch must be an int >= 0, got -1"):
        decode_epochs({-1: dataset}, TRANSFORM, seed=SEED)


def test_each_execution_decodes_the_next_epoch_and_the_seed_replays_them(cluster, files):
    """Three executions of one dataset (its file order reshuffled by Ray per execution) are
    epochs 0, 1, 2, each sample's pixels its stream's in that epoch; a dataset built again
    from the same seed gives the same epochs again; epoch= pins one for every execution."""
    shuffle = ray.data.FileShuffleConfig(seed=SEED)
    decoded = decode_batches(_files(files, shuffle=shuffle), TRANSFORM, seed=SEED, batch_size=4,
                             label_column="cls", classes=["a", "b"], keep_key=True)
    epochs = [_rows(decoded) for _ in range(3)]
    for epoch, rows in enumerate(epochs):
        expected = _expected(files, epoch)
        assert sorted(rows) == sorted(expected)
        assert all(torch.equal(rows[path], expected[path]) for path in rows), epoch
    path = sorted(epochs[0])[0]
    assert not torch.equal(epochs[0][path], epochs[1][path])
    again = decode_batches(_files(files, shuffle=shuffle), TRANSFORM, seed=SEED, batch_size=4,
                           label_column="cls", classes=["a", "b"], keep_key=True)
    for epoch in range(2):
        rows = _rows(again)
        assert all(torch.equal(rows[path], epochs[epoch][path]) for path in rows), epoch
    pinned = _decoded(files, epoch=5)
    expected = _expected(files, 5)
    for _ in range(2):
        rows = _rows(pinned)
        assert all(torch.equal(rows[path], expected[path]) for path in rows)


def test_two_consumers_get_every_sample_once_with_its_streams_pixels(cluster, files):
    """One execution (its actors start in seconds) checks both: every sample arrives once
    across the two consumers of a streaming split, and its pixels are the per-sample
    pipeline's for its stream."""
    splits = _decoded(files).streaming_split(2, equal=False)
    seen: list[dict[str, torch.Tensor]] = [{}, {}]

    def consume(index: int) -> None:
        seen[index] = _rows(splits[index])

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not set(seen[0]) & set(seen[1]), "a sample arrived at both consumers"
    rows = {**seen[0], **seen[1]}
    expected = _expected(files)
    assert len(rows) == 12 and sorted(rows) == sorted(expected)
    for path, image in rows.items():
        assert image.dtype == torch.uint8 and image.shape == (3, 48, 48)
        assert torch.equal(image, expected[path]), path


class _DiesOnce(JpegDecoder):
    """A decoder whose first actor kills its own process at its second batch, mid-epoch (Ray
    Data's actor pools restart actors and retry their tasks by default, as decode_batches
    relies on)."""

    def __call__(self, batch):
        marker = Path(os.environ["CUSTOM_OP_TEST_MARKER"])
        if getattr(self, "_calls", 0) == 1 and not marker.exists():
            marker.write_text(str(os.getpid()))
            os._exit(9)
        self._calls = getattr(self, "_calls", 0) + 1
        return super().__call__(batch)


def test_an_actor_killed_mid_epoch_is_replaced_without_a_lost_or_repeated_sample(cluster, files,
                                                                                 tmp_path):
    marker = tmp_path / "died"
    dataset = _files(files)
    decoded = dataset.map_batches(
        _DiesOnce, fn_constructor_kwargs={"transform": TRANSFORM, "seed": SEED, "epoch": EPOCH,
                                          "label_column": "cls", "classes": ["a", "b"],
                                          "keep_key": True},
        batch_size=4, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=1), num_cpus=1,
        runtime_env={"env_vars": {"CUSTOM_OP_TEST_MARKER": str(marker)}})
    rows = _rows(decoded)
    assert marker.exists(), "the actor never died: the test tested nothing"
    expected = _expected(files)
    assert sorted(rows) == sorted(expected)
    assert all(torch.equal(rows[path], expected[path]) for path in rows)


@pytest.mark.parametrize("label_column", ["cls", None])
def test_iter_torch_batches_gives_the_training_loop_tensors(cluster, files, label_column):
    """Through an autoscaling pool whose largest size is more than the cluster holds: Ray
    scales it within what the reads leave."""
    decoded = decode_batches(_files(files), TRANSFORM, seed=SEED, epoch=EPOCH, batch_size=4,
                             compute=ray.data.ActorPoolStrategy(min_size=1, max_size=8),
                             label_column=label_column, classes=["a", "b"])
    batches = list(decoded.iter_torch_batches(batch_size=6))
    columns = ["image", "label"] if label_column else ["image"]
    assert [sorted(batch) for batch in batches] == [columns] * 2
    assert all(batch["image"].dtype == torch.uint8 and batch["image"].shape == (6, 3, 48, 48)
               for batch in batches)
    assert all(batch["label"].dtype == torch.int64 for batch in batches if label_column)


def test_bad_arguments_are_refused_in_the_driver(cluster, files):
    dataset = _files(files)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1, got 0"):
        decode_batches(dataset, TRANSFORM, seed=SEED, batch_size=0)
    with pytest.raises(TypeError, match="seed must be an int, got None"):
        decode_batches(dataset, TRANSFORM, seed=None)
    with pytest.raises(ValueError, match="epoch must be an int >= 0, got -1"):
        decode_batches(dataset, TRANSFORM, seed=SEED, epoch=-1)
    with pytest.raises(TypeError, match="concurrency= is the decode step's own"):
        decode_batches(dataset, TRANSFORM, seed=SEED, concurrency=2)
    with pytest.raises(TypeError, match="compute must be a ray.data.ActorPoolStrategy"):
        decode_batches(dataset, TRANSFORM, seed=SEED, compute=ray.data.TaskPoolStrategy())


def test_a_pool_that_would_hold_every_cpu_is_refused_saying_what_to_change(cluster, files):
    """The cluster has 4 CPUs: 4 actors of one CPU leave none for the reads (the recipe that
    waited for ever), as does a 4-CPU actor; the default pool stops one CPU short."""
    dataset = _files(files)
    with pytest.raises(ValueError, match=r"starts 4 actors of num_cpus=1, 4 of the cluster's 4 "
                                         r"CPUs.*start at most 3 actors"):
        decode_batches(dataset, TRANSFORM, seed=SEED, compute=ray.data.ActorPoolStrategy(size=4))
    with pytest.raises(ValueError, match="num_cpus=4 leaves less than 1 of the cluster's 4 CPUs"):
        decode_batches(dataset, TRANSFORM, seed=SEED, num_cpus=4)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="starts 4 actors"):
        custom_op.datasets.lane_map_batches(dataset, TRANSFORM, seed=SEED, concurrency=4,
                                            num_cpus=1)
    default = _recorded(dataset.context)
    assert (default["compute"].min_size, default["compute"].max_size) == (1, 3)


def _recorded(context, **options) -> dict:
    """The keywords decode_batches gives map_batches, from a stand-in dataset of ``context``."""
    recorded = {}

    def map_batches(fn, **keywords):
        recorded.update(keywords, fn=fn)
        return "decoded"

    assert decode_batches(SimpleNamespace(context=context, map_batches=map_batches), TRANSFORM,
                          seed=SEED, **options) == "decoded"
    return recorded


def test_map_batches_arguments_and_the_execution_count_reach_map_batches(cluster):
    """Ray's named remote arguments go to map_batches as given, the decoder's own to its
    constructor, with the executions counted before the step was added."""
    context = ray.data.DataContext.get_current().copy()
    context._execution_idx = 2
    remote = {"memory": 1 << 28, "runtime_env": {"env_vars": {"A": "1"}},
              "resources": {"decode": 0.5}, "label_selector": {"kind": "cpu"}}
    recorded = _recorded(context, label_column="cls", num_cpus=0.5,
                         compute=ray.data.ActorPoolStrategy(min_size=1, max_size=2), **remote)
    assert recorded["fn"] is JpegDecoder
    assert {name: recorded[name] for name in remote} == remote
    assert recorded["num_cpus"] == 0.5 and recorded["batch_format"] == "numpy"
    assert (recorded["compute"].min_size, recorded["compute"].max_size) == (1, 2)
    constructor = recorded["fn_constructor_kwargs"]
    assert (constructor["label_column"], constructor["epoch"], constructor["executions_before"],
            constructor["seed"]) == ("cls", None, 2, SEED)


def test_an_empty_batch_gives_an_empty_result_with_or_without_an_epoch_column():
    """Called directly, as an actor calls it, on a batch of no rows."""
    empty = {"bytes": np.array([], dtype=object), "path": np.array([], dtype=object),
             "cls": np.array([], dtype=object), "epoch": np.array([], dtype=np.int64)}
    for epoch_column in ("epoch", None):
        decoder = JpegDecoder(TRANSFORM, seed=SEED, epoch=0, label_column="cls",
                              classes=["a", "b"], epoch_column=epoch_column)
        result = decoder(empty)
        assert result["image"].shape == (0, 3, 48, 48) and result["image"].dtype == np.uint8
        assert result["label"].shape == (0,)
        assert list(result) == (["image", "epoch", "label"] if epoch_column
                                else ["image", "label"])
        if epoch_column:
            assert result["epoch"].shape == (0,) and result["epoch"].dtype == np.int64


def test_a_bad_file_fails_its_task_naming_it(cluster, tmp_path):
    folder = tmp_path / "bad" / "a"
    folder.mkdir(parents=True)
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    dataset = ray.data.read_binary_files(str(folder), include_paths=True)
    decoded = decode_batches(dataset, TRANSFORM, seed=SEED)
    with pytest.raises(Exception) as raised:
        decoded.take_all()
    assert "broken.jpg" in str(raised.value) and "JpegDecodeError" in str(raised.value)


def test_parquet_image_structs_and_webdataset_shards_decode_to_their_streams_pixels(
        cluster, tmp_path):
    """Hugging Face's {"bytes", "path"} image column read by read_parquet, and a webdataset
    shard read by read_webdataset without Ray's own image decoder, keyed by their ids."""
    encoded = {f"s{index:03d}": photo_jpeg(64, 80, 6, index) for index in range(6)}
    labels = {key: index % 2 for index, key in enumerate(encoded)}
    pq.write_table(pa.table({"image": [{"bytes": data, "path": f"{key}.jpg"}
                                       for key, data in encoded.items()],
                             "id": list(encoded), "label": list(labels.values())}),
                   tmp_path / "train.parquet")
    with tarfile.open(tmp_path / "train-000000.tar", "w") as tar:
        for key, data in encoded.items():
            for name, member in ((f"{key}.jpg", data), (f"{key}.cls", str(labels[key]).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(member)
                tar.addfile(info, io.BytesIO(member))
    sources = {
        "parquet": (ray.data.read_parquet(str(tmp_path / "train.parquet")),
                    {"bytes_column": "image", "key_column": "id", "label_column": "label"}),
        "webdataset": (ray.data.read_webdataset(str(tmp_path / "train-000000.tar"), decoder=None),
                       {"bytes_column": "jpg", "key_column": "__key__", "label_column": "cls"}),
    }
    expected = _expected_of(encoded, EPOCH)
    for name, (dataset, columns) in sources.items():
        decoded = decode_batches(dataset, TRANSFORM, seed=SEED, epoch=EPOCH, batch_size=4,
                                 keep_key=True, **columns)
        rows = {}
        for batch in decoded.iter_batches(batch_size=6, batch_format="numpy"):
            for key, image, label in zip(batch[columns["key_column"]], batch["image"],
                                         batch["label"]):
                rows[str(key)] = torch.from_numpy(image)
                assert int(label) == labels[str(key)], name
        assert sorted(rows) == sorted(expected), name
        assert all(torch.equal(rows[key], expected[key]) for key in rows), name


def test_a_local_files_path_gives_its_samples_an_index_key(files):
    """Called directly, as an actor calls it: a batch keyed by the files' absolute paths asks
    the MCU-row index cache for each sample (its sidecar and cached indexes); one keyed by
    names that are no local file asks nothing."""
    paths = sorted(files.rglob("*.jpg"))[:4]
    batch = {"bytes": np.array([path.read_bytes() for path in paths], dtype=object),
             "path": np.array([str(path) for path in paths], dtype=object)}
    decoder = JpegDecoder(TRANSFORM, seed=SEED, epoch=0)

    def lookups() -> int:
        stats = custom_op.index_cache_stats()
        return stats["hits"] + stats["misses"]

    before = lookups()
    decoder(batch)
    assert lookups() - before == len(paths)
    before = lookups()
    decoder({**batch, "path": np.array([path.name for path in paths], dtype=object)})
    assert lookups() == before


def test_the_old_names_warn_naming_their_replacement_and_still_decode(cluster, files):
    for name, new in (("LaneDecoder", "custom_op.ray.JpegDecoder"),
                      ("lane_map_batches", "custom_op.ray.decode_batches"),
                      ("lane_map_epochs", "custom_op.ray.decode_epochs")):
        assert name not in custom_op.datasets.__all__
        old = getattr(custom_op.datasets, name)
        arguments = ({0: _files(files)},) if name == "lane_map_epochs" else (
            (_files(files),) if name == "lane_map_batches" else ())
        with pytest.warns(DeprecationWarning, match=f"use {new}"):
            made = old(*arguments, TRANSFORM, seed=SEED, label_column="cls", classes=["a", "b"])
        if name == "LaneDecoder":
            assert isinstance(made, JpegDecoder) and made.execution_epoch() == 0
    with pytest.warns(DeprecationWarning):
        decoded = custom_op.datasets.lane_map_batches(_files(files), TRANSFORM, seed=SEED,
                                                      batch_size=4, label_column="cls",
                                                      classes=["a", "b"], keep_key=True)
    rows, expected = _rows(decoded), _expected(files, 0)
    assert sorted(rows) == sorted(expected)
    assert all(torch.equal(rows[path], expected[path]) for path in rows)


def test_importing_custom_op_datasets_imports_no_ray():
    code = ("import sys, custom_op.datasets; "
            "print(sorted(name for name in sys.modules if name.split('.')[0] == 'ray'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=Path(custom_op.__file__).parents[1])
    assert result.stdout.strip() == "[]"
