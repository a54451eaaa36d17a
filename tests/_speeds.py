"""The suite's two speeds, decided here and nowhere else.

``make test`` runs every test. ``make test-quick`` runs ``pytest --quick``: every test but the
slow ones, which build or start what costs seconds each: a build of the extension, a venv, a
wheel, a local SageMaker job or its entry point under torchrun, a Ray cluster, DataLoader workers
started by "spawn", a new Python that imports torch to watch it exit, be killed or build. What
they check in-process (the decode, the lane, the sources, prepare, the index) the quick tests
check too; every module of custom_op/ is imported and exercised by a quick test.

A test is slow when its file is in SLOW_FILES, its name matches a pattern of SLOW_TESTS (fnmatch,
the parameters' ids included), or it asks for one of SLOW_FIXTURES; conftest.py gives each the
``slow`` mark at collection (so ``-m "not slow"`` selects the same set) and ``--quick`` deselects
them. test_speeds.py checks that every name here still names a test.
"""

from __future__ import annotations

import fnmatch
import itertools
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

#: Files whose every test builds or starts infrastructure.
SLOW_FILES = frozenset({
    "test_ray_data.py",
    "test_ray_train.py",
    "test_sagemaker.py",
    "test_sagemaker_processing.py",
    "test_sagemaker_offline.py",
    "test_sagemaker_wheel.py",
    "test_install.py",
    "test_wheel.py",
    "test_static_libjpeg.py",
    "test_torch213_source.py",
    "test_prepare_ray.py",
})

#: Tests of other files that are slow, by file: fnmatch patterns of their names.
SLOW_TESTS: dict[str, tuple[str, ...]] = {
    # A cold build raced by first calls in new Pythons (the ``built`` fixture: SLOW_FIXTURES),
    # builds from copies of the checkout, and first calls in new Pythons; the build's logic
    # (its key, hints, folders, a failed compile reported by the command) stays quick.
    "test_build.py": ("test_import_in_a_cold_checkout_builds_nothing_and_defines_the_operators",
                      "test_build_command_verify_without_build_fails",
                      "test_compiler_dies_with_a_killed_builder",
                      "test_failed_build_is_remembered_across_processes",
                      "test_build_key_does_not_depend_on_torch",
                      "test_two_checkouts_at_different_paths_build_the_same_module"),
    # The SageMaker entry point (sagemaker/train.py) run as a job runs it, under torchrun.
    "test_train_shards.py": ("test_two_ranks_train_from_shards", "test_ranks_read_disjoint_shards",
                             "test_on_error_policy_for_a_bad_member[[]*",
                             "test_fewer_shards_than_readers_is_refused",
                             "test_sizes_given_skip_the_scan_and_epochs_reshuffle",
                             "test_on_error_policy_for_a_truncated_shard[[]*"),
    # A script that leaves mid-epoch, in a new Python each.
    "test_lane_exit.py": ("test_breaking_out_and_exiting_is_clean[[]*",),
    # DataLoader workers started by "spawn" (each imports torch); "fork" stays quick.
    "test_dataloader.py": ("*[[]spawn*",),
    "test_datasets.py": ("test_data_loader_workers[[]spawn*",),
    "test_huggingface.py": ("test_dataloader_workers[[]spawn*",),
    "test_encoded_jpeg.py": ("test_pickles_into_spawned_data_loader_workers",),
    # Builds of the extension, and first decodes in a new Python over a damaged build.
    "test_module_check.py": ("test_the_build_command_repairs_a_truncated_build",
                             "test_the_first_decode_removes_a_damaged_build_instead_of_crashing*"),
    "test_one_copy.py": ("test_build_into_a_folder_beside_a_loaded_build_checks_it_in_a_new_process",),
    # Inductor compiling C++, and new Pythons watching what an import loads.
    "test_compile.py": ("test_fullgraph_compile_of_decode_convert_normalise_equals_eager",
                        "test_import_and_decode_leave_dynamo_unimported",
                        "test_operators_exist_right_after_import"),
    # Processes killed under prepare's pool, and a resume in a new Python.
    "test_prepare_safety.py": ("test_a_killed_worker_fails_its_file_and_the_run_goes_on",
                               "test_workers_die_with_a_killed_parent"),
    "test_lane_resume.py": ("test_a_new_process_resumes_from_the_state[[]*",),
    "test_index_only_guarantees.py": ("test_a_fifo_is_a_failure_never_waited_on[[]*",),
    # python -m custom_op.check with a DataLoader, as make check runs it (the other runs of the
    # check, without torchvision, stay quick).
    "test_check.py": ("test_check_decodes_a_photo_and_runs_a_dataloader",
                      "test_check_stops_on_a_photo_it_cannot_decode"),
    # The benchmark's timm and Hugging Face parts end to end.
    "test_bench_smoke.py": ("test_timm_and_huggingface_read_a_mixed_folder_as_it_is[[]*",),
}

#: Fixtures that make infrastructure: a test asking for one is slow wherever it is.
SLOW_FIXTURES = frozenset({"built"})  # test_build.py's cold build


def add_option(parser: pytest.Parser) -> None:
    parser.addoption("--quick", action="store_true",
                     help="the inner loop's suite (make test-quick): no slow test "
                          "(tests/_speeds.py says which)")


def quick(config: pytest.Config) -> bool:
    return bool(config.getoption("quick", False))


def is_slow(item: pytest.Item) -> bool:
    name = Path(str(item.path)).name
    if name in SLOW_FILES:
        return True
    if any(fnmatch.fnmatchcase(item.name, pattern) for pattern in SLOW_TESTS.get(name, ())):
        return True
    return bool(SLOW_FIXTURES & set(getattr(item, "fixturenames", ())))


def mark_slow_tests(items: list[pytest.Item]) -> None:
    """Adds the ``slow`` mark to every slow test (before ``-m`` deselects)."""
    for item in items:
        if is_slow(item):
            item.add_marker(pytest.mark.slow)


def keep_the_quick_ones(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --quick, deselects the slow tests (reported as deselected, not skipped)."""
    if not quick(config):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


# ---------------------------------------------------------------------------------------------
# How the cases of a cross-product are chosen (in make test and make test-quick alike), where
# the C++ core test (fuzz/core_test.cc, run under ASan/UBSan and valgrind by .ci/run) already
# proves the exhaustive set: every subject (a file, a window) once, and the other factors (mode,
# layout, strictness, size) chosen for it so that every pair of values meets at least once:
# each value of a factor with each value of every other factor and with each attribute value of
# the subjects (a file's sampling, coding, colour space). Greedy and seeded, so the same cases
# every run; a test id names its case, so a failure reruns alone.
# ---------------------------------------------------------------------------------------------

#: The seed of every choice below.
SEED = 45


def covering_cases(subjects: dict[str, dict[str, Any]], factors: dict[str, Sequence[Any]],
                   seed: int = SEED, allowed: Callable[[str, dict[str, Any]], bool] | None = None,
                   ) -> list[tuple[str, dict[str, Any]]]:
    """(subject id, {factor: value}) cases: each subject at least once, and every pair of
    (attribute or factor value, factor value) covered. ``subjects`` maps an id to its attributes
    (for instance a corpus recipe's sampling and coding), ``factors`` each factor to its values.
    Each subject takes the combination of factor values that covers the most pairs not yet
    covered (ties broken by a generator seeded with ``seed``); then, while a pair is left, the
    (subject, combination) that covers the most is added. ``allowed(subject, combination)``
    leaves out the cases that cannot be made (and the pairs only they would cover)."""
    rng = random.Random(seed)
    names = list(factors)
    combinations = [dict(zip(names, values)) for values in itertools.product(*factors.values())]

    def pairs(attributes: dict[str, Any], combination: dict[str, Any]) -> set[tuple]:
        items = [(f"@{key}", repr(value)) for key, value in attributes.items()]
        items += [(name, repr(combination[name])) for name in names]
        return {(a, b) for a, b in itertools.combinations(items, 2) if b[0] in factors}

    options = {subject: [c for c in combinations if allowed is None or allowed(subject, c)]
               for subject in subjects}
    wanted: set[tuple] = set()
    for subject, attributes in subjects.items():
        assert options[subject], f"no case of {subject} is allowed"
        for combination in options[subject]:
            wanted |= pairs(attributes, combination)
    cases: list[tuple[str, dict[str, Any]]] = []
    order = list(subjects)
    rng.shuffle(order)
    for subject in order:
        scored = [(len(pairs(subjects[subject], c) & wanted), rng.random(), i)
                  for i, c in enumerate(options[subject])]
        best = options[subject][max(scored)[2]]
        wanted -= pairs(subjects[subject], best)
        cases.append((subject, best))
    while wanted:
        scored = [(len(pairs(subjects[s], c) & wanted), rng.random(), s, i)
                  for s in order for i, c in enumerate(options[s])]
        _, _, subject, index = max(scored)
        wanted -= pairs(subjects[subject], options[subject][index])
        cases.append((subject, options[subject][index]))
    order_of = {subject: position for position, subject in enumerate(subjects)}
    return sorted(cases, key=lambda case: order_of[case[0]])


def covering_params(subjects: dict[str, dict[str, Any]], factors: dict[str, Sequence[Any]],
                    ids: dict[str, Callable[[Any], str]] | None = None, seed: int = SEED,
                    allowed: Callable[[str, dict[str, Any]], bool] | None = None) -> list:
    """covering_cases as pytest.param(subject, *values, id="subject-value-..."), the values in
    the order of ``factors``: for ``@pytest.mark.parametrize("subject, a, b", ...)``."""
    ids = ids or {}
    return [pytest.param(subject, *combination.values(),
                         id="-".join([subject, *(ids.get(name, str)(value)
                                                 for name, value in combination.items())]))
            for subject, combination in covering_cases(subjects, factors, seed, allowed)]
