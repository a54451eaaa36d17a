"""WebDataset-style shards from synthetic/shards.py and sagemaker/make_dataset.py --shards.

The shards must hold KEY.jpg + KEY.cls per sample in order, N samples per
shard under zero-padded names, the very bytes of the images (generated ones
equal to what the folder writer writes for the same seed), and go through
python -m custom_op.prepare without a refusal.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tarfile

import pytest

from custom_op.prepare import prepare_tree
from synthetic import folder_samples, generated_samples, write_jpeg_folder, write_shards

REPO = pathlib.Path(__file__).resolve().parent.parent
SIZE = (48, 64)


def _members(path: pathlib.Path) -> list[tuple[str, bytes]]:
    with tarfile.open(path) as tar:
        return [(info.name, tar.extractfile(info).read()) for info in tar.getmembers()]


def test_generated_shards_hold_the_folder_writers_images(tmp_path: pathlib.Path) -> None:
    folder = write_jpeg_folder(tmp_path / "folder", 7, *SIZE, classes=("a", "b", "c"), seed=3)
    by_index = {int(path.stem): path.read_bytes() for path in folder}
    paths = write_shards(generated_samples(7, *SIZE, 3, seed=3), tmp_path / "shards", 3)
    assert [path.name for path in paths] == ["train-000000.tar", "train-000001.tar",
                                             "train-000002.tar"]
    members = [member for path in paths for member in _members(path)]
    assert [name for name, _ in members] == [f"{index:09d}.{suffix}" for index in range(7)
                                             for suffix in ("jpg", "cls")]
    assert [data for name, data in members if name.endswith(".jpg")] == [
        by_index[index] for index in range(7)]
    assert [data for name, data in members if name.endswith(".cls")] == [
        f"{index % 3}\n".encode() for index in range(7)]
    assert [len(_members(path)) for path in paths] == [6, 6, 2]


def test_folder_samples_follow_imagefolder_order(tmp_path: pathlib.Path) -> None:
    write_jpeg_folder(tmp_path / "tree", 4, *SIZE, classes=("dog", "cat"))
    (tmp_path / "tree" / "cat" / "notes.txt").write_text("skipped")
    classes, samples = folder_samples(tmp_path / "tree")
    assert classes == ["cat", "dog"]
    expected = [((tmp_path / "tree" / name).read_bytes(), label) for name, label in
                [("cat/00001.jpg", 0), ("cat/00003.jpg", 0), ("dog/00000.jpg", 1),
                 ("dog/00002.jpg", 1)]]
    assert list(samples) == expected


def test_folder_samples_shuffled_by_a_seed(tmp_path: pathlib.Path) -> None:
    write_jpeg_folder(tmp_path / "tree", 12, *SIZE, classes=("dog", "cat"))
    in_order = list(folder_samples(tmp_path / "tree")[1])
    shuffled = [list(folder_samples(tmp_path / "tree", seed=seed)[1]) for seed in (7, 7, 8)]
    assert shuffled[0] == shuffled[1] != shuffled[2]  # the seed decides the order
    assert shuffled[0] != in_order and sorted(shuffled[0]) == sorted(in_order)


@pytest.mark.parametrize("bad", [0, -1])
def test_samples_per_shard_must_be_positive(tmp_path: pathlib.Path, bad: int) -> None:
    with pytest.raises(ValueError, match=f"samples_per_shard must be at least 1, got {bad}"):
        write_shards([], tmp_path, bad)


def test_folder_without_classes_is_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="has no class folders"):
        folder_samples(tmp_path)


def test_command_line_writes_shards_that_prepare_accepts(tmp_path: pathlib.Path) -> None:
    script = str(REPO / "sagemaker" / "make_dataset.py")
    run = [sys.executable, script, str(tmp_path / "tree"), "--images", "5", "--height", "40",
           "--width", "56"]
    subprocess.run(run, check=True, capture_output=True, timeout=120)
    result = subprocess.run(
        [sys.executable, script, str(tmp_path / "shards"), "--shards", "--from",
         str(tmp_path / "tree"), "--samples-per-shard", "2", "--prefix", "val"],
        check=True, capture_output=True, text=True, timeout=120)
    assert "as 3 shards of up to 2 samples" in result.stdout
    assert sorted(path.name for path in (tmp_path / "shards").iterdir()) == [
        "val-000000.tar", "val-000001.tar", "val-000002.tar"]
    images = [data for shard in sorted((tmp_path / "shards").iterdir())
              for name, data in _members(shard) if name.endswith(".jpg")]
    expected = [data for data, _ in folder_samples(tmp_path / "tree", seed=0)[1]]
    in_order = [data for data, _ in folder_samples(tmp_path / "tree")[1]]
    assert images == expected != in_order  # shuffled by --seed (default 0)
    summary = prepare_tree(tmp_path / "shards", tmp_path / "prepared", workers=1, progress=False)
    assert (summary.shards_written, summary.prepared, summary.other_members) == (3, 5, 5)
    assert summary.exit_code == 0


def test_from_needs_shards(tmp_path: pathlib.Path) -> None:
    result = subprocess.run([sys.executable, str(REPO / "sagemaker" / "make_dataset.py"),
                             str(tmp_path / "x"), "--from", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--from needs --shards" in result.stderr
