"""Shared fixtures: a corpus of JPEG files covering what the crop decoder must handle.

Every case carries the recipe it was encoded from, so a failing test id such as
``420-prog-q75-57x91`` can be reproduced with ``jpegenc.encode`` alone. The
corpus is a covering set, not a cartesian product: every sampling meets every
entropy coding once, every odd size meets 4:2:0, 4:2:2 and 4:1:1, and a few
files add CMYK, YCCK, the RGB colour space and content with known colours.

Tests select corpus files with ``corpus_case`` (one test per file) and may
narrow the selection with ``@pytest.mark.corpus(predicate)``, where the
predicate receives a recipe dict.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

# torch.compile's code cache of this run, not the machine's: Inductor keeps compiled graphs
# in one folder per user across processes, and a graph compiled for an operator of another
# checkout (another schema of the same name) is found there and called with its arguments.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="custom_op-tests-inductor-"))
# One process compiles: the default pool of compile workers (one per core) starts a Python with
# torch in each, seconds of start-up for the few kernels a test compiles.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
# No test writes to the user's index store (~/.cache/custom_op/index-store), nor shares one
# with the tests before it: the store is off unless a test names its own (test_index_store.py).
os.environ["CUSTOM_OP_INDEX_STORE"] = ""

import numpy as np
import pytest
from PIL import Image

from synthetic import make_checkerboard, make_photo, make_smooth_noise
from jpegenc import encode
import _sdk_venvs
import _longest_first
import _speeds

Recipe = dict[str, Any]

# Short names used in test ids.
SAMPLING_IDS = {"4:4:4": "444", "4:2:2": "422", "4:2:0": "420", "4:4:0": "440", "4:1:1": "411",
                "gray": "gray"}
CODINGS: dict[str, dict[str, Any]] = {
    "base": {},
    "opt": {"optimize": True},
    "prog": {"progressive": True},
    "rst": {"restart_interval": 3},  # a restart marker every 3 MCUs
    "rstrow": {"restart_rows": 1},  # a restart marker every MCU row
    "progrst": {"progressive": True, "restart_interval": 2},
    "arith": {"arithmetic": True},
    "arithprog": {"arithmetic": True, "progressive": True},
}
ODD_SIZES = [(1, 1), (2, 3), (7, 13), (17, 33), (57, 91), (257, 256), (120, 200)]
TINY_SIZES = [(1, 1), (2, 3), (7, 13)]
QUALITIES = [50, 75, 90, 95, 100, 60, 85]
# Mid-sized images for the sampling x coding grid: odd, spanning several MCUs.
GRID_SIZES = [(57, 91), (120, 200), (17, 33), (41, 75), (33, 47)]
CHECKER_COLORS = ((255, 0, 0), (0, 0, 255), (0, 255, 0), (255, 255, 255), (0, 0, 0))

# 4:2:0-like sampling for 4-channel files: component 0 (and K) at 2x2.
FOUR_CHANNEL_SAMPLINGS = ("4:4:4", "4:2:0")


def _recipe(height: int, width: int, *, sampling: str, coding: str = "base", quality: int = 90,
            content: str = "photo", seed: int = 0, colorspace: str | None = None) -> Recipe:
    return {"height": height, "width": width, "sampling": sampling, "coding": coding,
            "quality": quality, "content": content, "seed": seed, "colorspace": colorspace}


def recipe_id(recipe: Recipe) -> str:
    """A short, unique, path-free id: [colorspace-]sampling-coding-qN-HxW[-content]."""
    parts = []
    if recipe["colorspace"] is not None:
        parts.append(recipe["colorspace"])
    parts += [SAMPLING_IDS[recipe["sampling"]], recipe["coding"], f"q{recipe['quality']}",
              f"{recipe['height']}x{recipe['width']}"]
    if recipe["content"] != "photo":
        parts.append(recipe["content"])
    return "-".join(parts)


def _build_recipes() -> dict[str, Recipe]:
    recipes: list[Recipe] = []
    quality = itertools.cycle(QUALITIES)

    # Every sampling x every coding, sizes and qualities rotating.
    for index, (sampling, coding) in enumerate(itertools.product(SAMPLING_IDS, CODINGS)):
        height, width = GRID_SIZES[index % len(GRID_SIZES)]
        recipes.append(_recipe(height, width, sampling=sampling, coding=coding,
                               quality=next(quality), seed=index))

    # Every odd size with the samplings whose MCUs are wider than 8 pixels.
    odd_codings = itertools.cycle(["base", "prog", "rst", "arith"])
    for sampling in ("4:2:0", "4:2:2", "4:1:1"):
        for height, width in ODD_SIZES:
            recipes.append(_recipe(height, width, sampling=sampling, coding=next(odd_codings),
                                   quality=next(quality), seed=height * 1000 + width))
    # Tiny images with the other samplings too: all their windows get tested.
    for sampling in ("4:4:4", "4:4:0", "gray"):
        for height, width in TINY_SIZES:
            recipes.append(_recipe(height, width, sampling=sampling, quality=next(quality),
                                   seed=height + width))

    # CMYK and YCCK (Adobe-inverted samples as stored), 4:4:4 and 4:2:0-like.
    four_channel = itertools.cycle([((57, 91), "base"), ((17, 33), "prog"), ((120, 200), "arith"),
                                    ((41, 75), "rst")])
    for colorspace in ("cmyk", "ycck"):
        for sampling in FOUR_CHANNEL_SAMPLINGS:
            (height, width), coding = next(four_channel)
            recipes.append(_recipe(height, width, sampling=sampling, coding=coding,
                                   quality=next(quality), seed=7, colorspace=colorspace))

    # RGB colour space (Adobe transform 0): no colour transform, optionally subsampled.
    recipes.append(_recipe(57, 91, sampling="4:4:4", coding="base", quality=95, seed=11,
                           colorspace="rgb"))
    recipes.append(_recipe(41, 75, sampling="4:4:4", coding="prog", quality=75, seed=12,
                           colorspace="rgb"))
    recipes.append(_recipe(33, 47, sampling="4:2:2", coding="arith", quality=90, seed=13,
                           colorspace="rgb"))

    # Known colours with sharp edges on and off the MCU grid.
    recipes.append(_recipe(40, 56, sampling="4:2:0", coding="base", quality=90, content="checker8"))
    recipes.append(_recipe(33, 47, sampling="4:4:4", coding="prog", quality=100,
                           content="checker5"))
    recipes.append(_recipe(23, 61, sampling="4:2:2", coding="base", quality=75, content="checker3"))
    # Low-frequency noise (what the encoder compresses best).
    recipes.append(_recipe(120, 200, sampling="4:2:0", coding="prog", quality=85, content="noise",
                           seed=21))
    recipes.append(_recipe(57, 91, sampling="4:1:1", coding="base", quality=50, content="noise",
                           seed=22))
    recipes.append(_recipe(41, 75, sampling="4:4:0", coding="arith", quality=95, content="noise",
                           seed=23))

    table: dict[str, Recipe] = {}
    for recipe in recipes:
        key = recipe_id(recipe)
        assert key not in table, f"duplicate corpus id {key}"
        table[key] = recipe
    return table


#: Every corpus recipe by id; building it encodes nothing.
RECIPES: dict[str, Recipe] = _build_recipes()


def _pixels(recipe: Recipe) -> np.ndarray:
    height, width, seed = recipe["height"], recipe["width"], recipe["seed"]
    content = recipe["content"]
    if content == "photo":
        rgb = make_photo(height, width, seed)
    elif content == "noise":
        rgb = make_smooth_noise(height, width, seed)
    elif content.startswith("checker"):
        rgb = make_checkerboard(height, width, int(content[len("checker"):]), CHECKER_COLORS)
    else:
        raise ValueError(f"unknown content {content!r}")
    if recipe["colorspace"] in ("cmyk", "ycck"):
        # A fourth channel unrelated to the first three, so K matters everywhere.
        ink = make_smooth_noise(height, width, seed + 1, cells=5)[:, :, 1]
        return np.dstack([rgb, ink])
    return rgb


def encode_recipe(recipe: Recipe) -> bytes:
    """The JPEG bytes of a recipe (deterministic)."""
    colorspace = recipe["colorspace"]
    sampling = recipe["sampling"]
    options = dict(CODINGS[recipe["coding"]])
    return encode(_pixels(recipe), sampling=sampling, quality=recipe["quality"],
                  colorspace=colorspace, **options)


@dataclasses.dataclass(frozen=True)
class JpegCase:
    """One corpus file: its id, the encoded bytes and the recipe they came from."""

    id: str
    data: bytes
    recipe: Recipe

    @property
    def height(self) -> int:
        return self.recipe["height"]

    @property
    def width(self) -> int:
        return self.recipe["width"]

    @property
    def channels(self) -> int:
        """What mode="unchanged" yields: 1 gray, 3 colour, 4 CMYK/YCCK."""
        if self.recipe["sampling"] == "gray":
            return 1
        return 4 if self.recipe["colorspace"] in ("cmyk", "ycck") else 3


@pytest.fixture(scope="session")
def corpus() -> list[JpegCase]:
    """Every corpus file, encoded once per session (a few seconds)."""
    return [JpegCase(key, encode_recipe(recipe), recipe) for key, recipe in RECIPES.items()]


@pytest.fixture(scope="session")
def corpus_by_id(corpus: list[JpegCase]) -> dict[str, JpegCase]:
    return {case.id: case for case in corpus}


@pytest.fixture
def corpus_case(request: pytest.FixtureRequest, corpus_by_id: dict[str, JpegCase]) -> JpegCase:
    """One corpus file; tests using it are parametrized by pytest_generate_tests."""
    return corpus_by_id[request.param]


@pytest.fixture(scope="session")
def native_extension() -> None:
    """Loads (building it, on a cold cache) the native extension, so that the tests' hang
    guards time decodes, not the one-time build of a fresh checkout."""
    import custom_op
    custom_op.libjpeg_version()


@pytest.fixture(scope="session")
def pillow_photo() -> bytes:
    """A 533x800 photo-like image written by Pillow at quality 90, 4:2:0."""
    buffer = io.BytesIO()
    Image.fromarray(make_photo(533, 800, seed=2024)).save(buffer, format="JPEG", quality=90,
                                                          subsampling="4:2:0")
    return buffer.getvalue()


#: The background build of the SDK venvs, started by the session (see _sdk_venvs.py).
_sdk_build: subprocess.Popen | None = None


def _runs_the_sdk_tests(config: pytest.Config) -> bool:
    """Whether the run's paths include tests/test_sagemaker*.py (the whole folder included)."""
    tests = Path(__file__).resolve().parent
    paths = [Path(arg.split("::")[0]).resolve() for arg in config.args] or [tests]
    return any(path in (tests, *tests.parents) or path.name.startswith("test_sagemaker")
               for path in paths)


def pytest_sessionstart(session: pytest.Session) -> None:
    """With parallel workers (make test), builds the missing SDK venvs in the background from
    the start, so that their minutes of pip overlap the other tests instead of holding up the
    worker that first needs one. A run in one process builds them when a test asks."""
    global _sdk_build
    config = session.config
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return  # an xdist worker (its controller starts the build), or no xdist
    if not _runs_the_sdk_tests(config) or _speeds.quick(config) or not _sdk_venvs.missing():
        return
    _sdk_venvs.VENVS.mkdir(exist_ok=True)
    with open(_sdk_venvs.VENVS / "sdk-venvs-build.log", "w") as log:
        _sdk_build = subprocess.Popen([sys.executable, _sdk_venvs.__file__], stdout=log,
                                      stderr=subprocess.STDOUT)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _sdk_build is not None:
        _sdk_build.wait()  # the tests needing it have waited for it already, under its lock


def pytest_addoption(parser: pytest.Parser) -> None:
    _speeds.add_option(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "corpus(predicate): run a corpus_case test only on files whose recipe matches")
    config.addinivalue_line(
        "markers", "corpus_pairs(**factors): each corpus file once, with factor values chosen so "
                   "that every pair of values meets (tests/_speeds.py)")
    config.addinivalue_line(
        "markers", "slow: infrastructure (builds, venvs, wheels, jobs, clusters): not in make "
                   "test-quick (tests/_speeds.py decides)")
    _longest_first.keep_the_order_in_xdist(config)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow tests marked (before -m deselects them: _speeds.py), the long files first, so
    that the parallel workers finish together (_longest_first.py)."""
    _speeds.mark_slow_tests(items)
    _speeds.keep_the_quick_ones(config, items)
    _longest_first.sort_longest_files_first(items)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "corpus_case" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("corpus")
    keep: Callable[[Recipe], bool] = marker.args[0] if marker else (lambda recipe: True)
    ids = [key for key, recipe in RECIPES.items() if keep(recipe)]
    assert ids, f"no corpus file matches the selection of {metafunc.function.__name__}"
    pairs = metafunc.definition.get_closest_marker("corpus_pairs")
    if pairs is None:
        metafunc.parametrize("corpus_case", ids, ids=ids, indirect=True)
        return
    # Each file once, its other factors chosen so that every pair of values meets (_speeds.py).
    factors = pairs.kwargs
    subjects = {key: _corpus_attributes(RECIPES[key]) for key in ids}
    cases = _speeds.covering_cases(subjects, factors)
    metafunc.parametrize(["corpus_case", *factors], [(key, *chosen.values()) for key, chosen in cases],
                         ids=["-".join([key, *map(_factor_id, chosen.values())]) for key, chosen in cases],
                         indirect=["corpus_case"])


def _corpus_attributes(recipe: Recipe) -> dict[str, Any]:
    """What a pairwise choice pairs the other factors with: how the file is coded and made."""
    tiny = recipe["height"] <= 20 and recipe["width"] <= 20  # every window tested (_windows.py)
    return {key: recipe[key] for key in ("sampling", "coding", "colorspace", "content")} | {
        "tiny": tiny}


def _factor_id(value: Any) -> str:
    return {False: "hwc", True: "chw"}.get(value, str(value)) if isinstance(value, bool) else str(value)
