"""The order in which xdist hands test files to its workers: the longest first.

``make test`` runs whole files per worker (``--dist loadfile``), each worker taking the next file
in the queue when it is done with one. Started last, a file of several minutes keeps one worker
busy while the other has nothing left; started first, the many short files that follow fill in
around it and both workers finish together. The list is ranked by the files' durations in a full
run (their tests' junit times summed, after the pairwise cases of tests/_speeds.py) and needs
updating only when a file becomes one of the long ones; files not named keep their collection
order after the named ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: Test files by their duration in a full run, longest first.
LONGEST_FIRST = (
    "test_ray_data.py",
    "test_ray_train.py",
    "test_build.py",
    "test_sagemaker.py",
    "test_wheel.py",
    "test_sagemaker_processing.py",
    "test_train_shards.py",
    "test_static_libjpeg.py",
    "test_compile.py",
    "test_prepare_safety.py",
    "test_install.py",
    "test_module_check.py",
    "test_index_store.py",
    "test_check.py",
    "test_hostile.py",
    "test_dataloader.py",
    "test_lane_exit.py",
    "test_torch213_source.py",
    "test_lane_resume.py",
    "test_prepare_ray.py",
    "test_bench_smoke.py",
    "test_decode.py",
    "test_index_only_guarantees.py",
    "test_huggingface.py",
    "test_transforms.py",
    "test_one_copy.py",
    "test_tar_samples.py",
    "test_docs_examples.py",
    "test_sagemaker_offline.py",
    "test_evaluation.py",
    "test_encoded_jpeg.py",
    "test_opcheck.py",
    "test_one_pixel_resizes.py",
    "test_prepare_cli.py",
    "test_prepare_parquet.py",
    "test_datasets.py",
    "test_seek.py",
    "test_public_api.py",
)
_RANK = {name: rank for rank, name in enumerate(LONGEST_FIRST)}


def file_rank(item: pytest.Item) -> int:
    """Where the item's file stands in LONGEST_FIRST; every unnamed file ranks after them all."""
    return _RANK.get(Path(str(item.path)).name, len(LONGEST_FIRST))


def sort_longest_files_first(items: list[pytest.Item]) -> None:
    """Sorts ``items`` in place by file rank. The sort is stable: the tests of a file keep their
    order, and so do the unnamed files."""
    items.sort(key=file_rank)


def keep_the_order_in_xdist(config: pytest.Config) -> None:
    """Turns off xdist's own reordering of files (by number of tests, on by default with
    --dist loadfile), which would put thousands of quick parametrized cases before the
    long files."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
