"""The benchmark's own machinery: real-photo fitting, interleaved rounds, and one part end to end.

No timing is checked (timings never decide a test); these tests check that
the files the benchmark reads are what its docs say, that the rounds rotate,
and that ``python -m bench`` writes its JSON and charts. No network: the
"real" photos here are made on the spot.
"""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest
from PIL import Image

from bench import __main__ as bench_main
from bench import index_store, loaders, photos, ray_bench, ray_scaling, ship_bench


@pytest.fixture(scope="module")
def source_photo(tmp_path_factory) -> pathlib.Path:
    """A 1000 x 700 "camera photo": smooth colour noise, saved as a JPEG."""
    rng = np.random.default_rng(0)
    small = rng.integers(0, 256, size=(7, 10, 3), dtype=np.uint8)
    image = Image.fromarray(small).resize((1000, 700), Image.Resampling.BICUBIC)
    path = tmp_path_factory.mktemp("sources") / "photo.jpg"
    image.save(path, quality=95)
    return path


@pytest.mark.parametrize("progressive", [False, True], ids=["baseline", "progressive"])
def test_fitted_photos_have_the_size_and_encoding_asked_for(tmp_path, source_photo, progressive):
    paths = photos.write_photo_folder(tmp_path, [source_photo], 3, 375, 500, classes=("a", "b"), quality=90,
                                      subsampling="4:2:0", seed=0, progressive=progressive)
    assert [path.relative_to(tmp_path).as_posix() for path in paths] == ["a/00000.jpg", "a/00002.jpg",
                                                                          "b/00001.jpg"]
    for path in paths:
        with Image.open(path) as image:
            assert image.size == (500, 375)
            assert bool(image.info.get("progressive")) == progressive


def test_fitted_photos_repeat_for_a_seed_and_differ_between_files(tmp_path, source_photo):
    options = dict(classes=("a",), quality=90, subsampling="4:2:0", seed=3, progressive=False)
    first = photos.write_photo_folder(tmp_path / "one", [source_photo], 2, 375, 500, **options)
    second = photos.write_photo_folder(tmp_path / "two", [source_photo], 2, 375, 500, **options)
    assert [path.read_bytes() for path in first] == [path.read_bytes() for path in second]
    assert first[0].read_bytes() != first[1].read_bytes()  # the second file is a smaller window


@pytest.mark.parametrize("size, usable", [((375, 500), True), ((533, 800), True), ((1600, 2560), False)],
                         ids=["500x375", "800x533", "2560x1600"])
def test_photos_are_not_enlarged_more_than_the_limit(source_photo, size, usable):
    height, width = size
    assert photos.usable_photos([source_photo], height, width) == ([source_photo] if usable else [])


def test_interleaved_rounds_rotate_and_report_the_spread():
    calls = []

    def runner(name: str, rate: list[int]):
        def run() -> tuple[int, int]:
            calls.append(name)
            return rate.pop(0), 1_000_000_000  # images in one second
        return run

    timed = loaders.time_interleaved({"a": runner("a", [1, 10, 20, 30]), "b": runner("b", [1, 5, 5, 5])}, 3)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up, then rotating rounds
    assert timed["per_round"] == {"a": [10.0, 20.0, 30.0], "b": [5.0, 5.0, 5.0]}
    row = loaders.summarise("a", timed["per_round"]["a"], timed["warmup"]["a"])
    assert (row["median_images_per_s"], row["spread"]) == (20.0, 1.0)


def test_one_part_writes_its_json_and_chart_and_reprints_its_table(tmp_path, capsys):
    bench_main.main(["operator", "--images", "generated", "--num-images", "2", "--repeats", "1",
                     "--cache", str(tmp_path / "data"), "--results", str(tmp_path / "results"), "--name", "smoke"])
    results = json.loads((tmp_path / "results" / "smoke.json").read_text(encoding="utf-8"))
    methods = {row["method"]: row for row in results["operator"]["generated"]["methods"]}
    assert methods["custom_op crop"]["samples"] == 2
    assert results["operator"]["generated"]["config"]["corpus"]["source"] == "generated"
    assert (tmp_path / "results" / "smoke-crops.png").stat().st_size > 0
    printed = capsys.readouterr().out
    table = printed[printed.index("Per-crop time"):printed.index("Results:")].strip()
    bench_main.main(["tables", str(tmp_path / "results" / "smoke.json")])
    assert table in capsys.readouterr().out


def test_each_part_meets_a_new_empty_index_store_and_leaves_none(tmp_path, monkeypatch):
    """A run writes nothing to the user's store, and no part finds another's (or an earlier
    run's) indexes; a store the user names is used as it is."""
    import custom_op
    from torchvision.transforms.v2 import functional as F
    from custom_op.datasets import JpegFolder
    from synthetic import photo_jpeg

    (tmp_path / "train" / "a").mkdir(parents=True)
    (tmp_path / "train" / "a" / "0.jpg").write_bytes(photo_jpeg(320, 240, seed=1, index=0))
    dataset = JpegFolder(tmp_path / "train", lambda image: F.crop(image, 200, 16, 96, 160))
    custom_op.configure_index_cache(build_on_touch=1)
    dataset[0]  # an index in this process's cache before the run: no part may find it
    monkeypatch.delenv("CUSTOM_OP_INDEX_STORE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the user's store's home
    stores = []
    for part in ("index", "lane"):
        with index_store.fresh_index_store(part):
            stores.append(os.environ["CUSTOM_OP_INDEX_STORE"])
            dataset[0]
            stats = custom_op.index_cache_stats()
            counts = ("hits", "builds", "store_hits", "store_writes")
            assert tuple(stats[name] for name in counts) == (0, 1, 0, 1), stats
            assert list(pathlib.Path(stores[-1]).glob("??/*"))
        assert "CUSTOM_OP_INDEX_STORE" not in os.environ and not os.path.exists(stores[-1])
        assert custom_op.index_cache_stats()["entries"] == 0  # nothing left of the part's store
    assert stores[0] != stores[1] and not (tmp_path / "cache").exists()
    monkeypatch.setenv("CUSTOM_OP_INDEX_STORE", str(tmp_path / "mine"))
    with index_store.fresh_index_store("index"):
        assert os.environ["CUSTOM_OP_INDEX_STORE"] == str(tmp_path / "mine")
    custom_op.configure_index_cache()


def _ship_child(libjpeg: str, torchvision_ns: list[int], custom_ns: list[int]) -> dict:
    """A ship child's output for one size, with the same samples for every task."""
    samples = {f"{task}/{method}": list(values) for task in ship_bench.TASKS
               for method, values in (("torchvision", torchvision_ns), ("custom_op", custom_ns))}
    return {"libjpeg": libjpeg, "load_s": 0.5, "cases": {"500x375": samples}}


def test_ship_ratios_are_per_round_within_a_process_and_paired_across_builds():
    results = {ship_bench.SYSTEM: [_ship_child("2.1.5", [10, 10], [5, 5]), _ship_child("2.1.5", [20, 20], [5, 5])],
               ship_bench.STATIC: [_ship_child("3.1.0", [12, 12], [4, 4]), _ship_child("3.1.0", [12, 12], [4, 4])]}
    rows = ship_bench._rows(results, {"cases": [{"label": "500x375"}]})
    assert [row["task"] for row in rows] == list(ship_bench.TASKS)
    system, static = rows[0][ship_bench.SYSTEM], rows[0][ship_bench.STATIC]
    # Each round's ratio is within one child (2 then 4); the table gives their median and range.
    assert (system["ratio"], system["ratio_low"], system["ratio_high"], system["samples"]) == (3.0, 2.0, 4.0, 4)
    assert (system["torchvision_ms"], system["custom_op_ms"]) == (15e-6, 5e-6)
    # 3.1 over 2.1.5 pairs the rounds' children: median(3/2, 3/4), not 3/3.
    assert static["ratio"] == 3.0 and rows[0]["static_over_system"] == 1.125


def test_ship_table_without_the_static_build_says_why():
    rows = ship_bench._rows({ship_bench.SYSTEM: [_ship_child("2.1.5", [10], [5])]}, {"cases": [{"label": "500x375"}]})
    result = {"config": {"images": "generated", "rounds": 1, "repeats": 1, "files": {"500x375": 1},
                         "static_note": "archive missing: run make libjpeg-static"},
              "libjpeg": {ship_bench.SYSTEM: ["2.1.5"]},
              "rows": rows, "install": {"wheel": None, "wheel_skipped": "no wheel in dist/",
                                        "cold_checkout": None}}
    table = ship_bench.format_table(result)
    assert "Note: archive missing: run make libjpeg-static" in table
    assert "Wheel: skipped: no wheel in dist/" in table
    # The 2.1.5 column has the ratio; the 3.1 column and 3.1/2.1.5 are empty.
    crop_row = next(line for line in table.splitlines() if line.startswith("| 500x375 | crop"))
    cells = [cell.strip() for cell in crop_row.strip("|").split("|")]
    assert cells[3].startswith("2.00x (2.00-2.00)") and cells[4:] == ["-", "-"]


def test_ship_children_name_their_build_and_only_the_static_one_the_archive(monkeypatch):
    monkeypatch.setenv("CUSTOM_OP_JPEG_STATIC", "/elsewhere")
    system, static = ship_bench._build_env(ship_bench.SYSTEM), ship_bench._build_env(ship_bench.STATIC)
    assert "CUSTOM_OP_JPEG_STATIC" not in system
    assert static["CUSTOM_OP_JPEG_STATIC"] == str(ship_bench.STATIC_ARCHIVE)
    assert system["CUSTOM_OP_BUILD_DIR"] != static["CUSTOM_OP_BUILD_DIR"]


def test_ship_table_gives_the_wheels_full_decode_against_torchvisions():
    wheel = {"file": "w.whl", "size_bytes": 650_000, "install_s": 7.0, "import_s": 0.05,
             "torch_import_s": 1.5, "first_decode_s": 0.002, "libjpeg": "3.1.0", "compiled": False,
             "full_decode_ms": 10.0, "torchvision_full_decode_ms": 9.0,
             "full_decode_vs_torchvision": 0.9}
    lines = ship_bench._install_lines({"wheel": wheel, "cold_checkout": None})
    assert "full decode 10.00 ms, 0.90x torchvision's 9.00 ms" in lines[0]


def test_a_folder_as_it_is_is_read_as_it_is_now(tmp_path, source_photo):
    folder, cache = tmp_path / "photos", tmp_path / "cache"
    options = dict(classes=("a",), quality=90, subsampling="4:2:0", seed=0, progressive=False)
    first = photos.write_photo_folder(folder, [source_photo], 3, 375, 500, **options)
    photos.trees_as_they_are(folder, cache, "lane")
    first[0].unlink()  # the folder changes between two runs: a file gone, another resized
    photos.write_photo_folder(tmp_path / "other", [source_photo], 1, 300, 400, **options)[0].rename(
        first[1])
    trees = photos.trees_as_they_are(folder, cache, "lane")
    linked = {size: sorted(link.resolve() for link in tree.rglob("*.jpg"))
              for size, tree in trees.items()}
    assert linked == {"375x500": [first[2].resolve()], "300x400": [first[1].resolve()]}


@pytest.mark.parametrize("part, options", [("timm", ["--timm-length", "64", "--timm-rounds", "1"]),
                                           ("huggingface", ["--hf-length", "64", "--hf-rounds", "1"])])
def test_timm_and_huggingface_read_a_mixed_folder_as_it_is(tmp_path, source_photo, part, options):
    """--photos DIR: gray, CMYK and progressive files in one folder run every row (torchvision's
    decode in RGB, so they stack), and --json gets per_sample and torchvision per size."""
    folder = tmp_path / "photos"
    base = dict(quality=90, subsampling="4:2:0", seed=0)
    photos.write_photo_folder(folder, [source_photo], 4, 150, 200, classes=("a", "b"), progressive=False,
                              **base)
    with Image.open(folder / "a" / "00000.jpg") as image:
        image.convert("L").save(folder / "a" / "gray.jpg", quality=90)
        image.convert("CMYK").save(folder / "b" / "cmyk.jpg", quality=90)
        image.save(folder / "b" / "progressive.jpg", quality=90, progressive=True)
    output = tmp_path / "figures.json"
    bench_main.main([part, "--images", "real", "--photos", str(folder), *options, "--json", str(output),
                     "--cache", str(tmp_path / "data"), "--results", str(tmp_path / "results"),
                     "--name", "smoke"])
    figures = json.loads(output.read_text(encoding="utf-8"))[f"{part}-real"]
    assert list(figures) == ["150x200"]
    assert {"per_sample", "torchvision"} <= set(figures["150x200"])
    assert all(rate > 0 for rate in figures["150x200"].values())
    result = json.loads((tmp_path / "results" / "smoke.json").read_text(encoding="utf-8"))[part]["real"]
    assert result["sizes"]["150x200"]["files"] == 7


def _scaling_row(nodes: int, rate: float, cpu_us: float) -> dict:
    """A cluster's row as bench/ray_scaling.py makes it, with made-up figures."""
    return {"nodes": nodes, "actors": nodes, "images_per_s": rate, "min_images_per_s": rate - 10,
            "max_images_per_s": rate + 10, "cpu_us_per_image": cpu_us, "startup_s": 2.5,
            "ray_cores": 1.2 * nodes, "machine_cores": 1.1 * nodes, "rounds": [],
            "in_process": {"cpu_us_per_image": 2400.0, "images_per_s": 420.0}}


def test_ray_scaling_headline_and_table_from_fixed_rows():
    """The ratio and Ray's overhead from two clusters' rows, and the table the ray part prints
    with --scaling (no Ray cluster: the figures are given)."""
    rows = [_scaling_row(1, 400.0, 2600.0), _scaling_row(2, 700.0, 2900.0)]
    scaling = ray_scaling._scaling(rows, (1.0, 0.9, 0.8))
    assert scaling["ratio"] == 1.75
    assert (scaling["nodes_1_images_per_s"], scaling["nodes_2_images_per_s"]) == (400.0, 700.0)
    assert (scaling["ray_overhead_us_per_image"], scaling["nodes_2_ray_overhead_us_per_image"]) == (200.0, 500.0)
    result = {"config": {"images": "generated", "files": 96, "rows": 2048, "block_rows": 256,
                         "rounds": 2, "size": "375x500", "cpus": "head 0 logical CPUs", "cores": 2},
              "ray_scaling": scaling, "nodes": rows}
    table = ray_bench.format_table(result)  # the ray part hands a --scaling result over
    cells = [[cell.strip() for cell in line.split("|")[1:-1]] for line in table.splitlines()
             if line.startswith("| ")]
    assert cells[0][:3] == ["nodes", "actors", "images/s"]
    assert cells[2] == ["2", "2", "700", "690", "710", "2.5", "2900", "500", "2.40", "2.20", "1.75x"]
    assert "2 nodes / 1 node: 1.75x; Ray's overhead 200 us of CPU per image on 1 node (500 on 2)" in table
    assert "Load average before 1.00, 0.90, 0.80" in table
    args = bench_main._parser().parse_args(["ray", "--scaling", "--scaling-rows", "1536"])
    assert (args.scaling, args.scaling_rows) == (True, 1536)
    assert not bench_main._parser().parse_args(["all"]).scaling  # make bench runs the ray part as before
