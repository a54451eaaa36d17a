"""Real camera photos fitted to the benchmark sizes: where they come from and how they are cut.

Generated photo-like images (synthetic) are denser than camera
photos (more bits per pixel, so more entropy decoding per pixel), and the
ratios between decoders differ on them; every part of the benchmark therefore
runs on real photos as well. Two public sources, both fetched with the
ordinary package clients:

- Debian's ``lomiri-wallpapers-16.04`` package: thirteen camera photos of
  1365 x 1074 to 5312 x 2988 pixels under /usr/share/backgrounds
  (``apt-get install lomiri-wallpapers-16.04``; ``make bench`` installs it
  when run as root).
- scikit-learn's two sample images, china.jpg and flower.jpg (640 x 427),
  read straight out of the scikit-learn wheel: ``pip download --no-deps``
  fetches the wheel into the cache without installing scikit-learn or scipy.

A benchmark file of height x width is cut from one source photo: a window of
the file's aspect ratio, the largest one for the first file cut from a
photo and a random smaller one (down to 40% of the side, never smaller than
the file) for the next, resized with Pillow's Lanczos filter and saved by
Pillow at the benchmark's quality and subsampling, baseline or progressive.
Files cycle over the photos; a photo whose largest window would have to be
enlarged more than 1.25x is not used for that size (so 2560 x 1600 files
come only from the large wallpapers). The files are cached under
bench/data/ like the generated ones and reused.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile
from typing import Sequence

import numpy as np
from PIL import Image

import synthetic

WALLPAPER_FOLDER = pathlib.Path("/usr/share/backgrounds")
WALLPAPER_PACKAGE = "lomiri-wallpapers-16.04"
#: The package's photos by name (other packages put other wallpapers in the same folder).
#: Two of its fifteen files are left out because they are renderings, not photos:
#: greentock_by_Peter_Nerlich.jpg (a 3-D clock) and umang_by_Abhishek_Mudgal.jpg (a colour gradient).
WALLPAPERS = (
    "Bridge_by_Sander_Klootwijk.jpg",
    "Dragonfly_by_Bolly.jpg",
    "Picture_0B_by_freespace.jpg",
    "Picture_1A_by_freespace.jpg",
    "Wine_by_Jakkub_Mede.jpg",
    "aitzgorri_by_Aitzol_Berasategi.jpg",
    "analogpattern_by_Peter_Nerlich.jpg",
    "free_by_Peter_Nerlich.jpg",
    "friends_by_Aitzol_Berasategi.jpg",
    "life_by_Aitzol_Berasategi.jpg",
    "picosdeeuropa_by_Aitzol_Berasategi.jpg",
    "seeding_by_Clements_Engelhardt.jpg",
    "sunset_by_Aitzol_Berasategi.jpg",
)
#: The wheel whose sample images we read; pinned so that every run reads the same files.
SKLEARN_REQUIREMENT = "scikit-learn==1.9.1"
SKLEARN_IMAGES = ("sklearn/datasets/images/china.jpg", "sklearn/datasets/images/flower.jpg")
#: The most a source photo may be enlarged to make a file: scikit-learn's 640 x 427
#: images make 800 x 533 files at exactly 1.25x, and no larger ones.
MAX_UPSCALE = 1.25
#: Later windows cut from the same photo keep at least this fraction of the largest side.
MIN_WINDOW_FRACTION = 0.4


class PhotosUnavailable(RuntimeError):
    """The source photos are missing and could not be fetched; the message says how to get them."""


def _wallpapers() -> list[pathlib.Path]:
    return [WALLPAPER_FOLDER / name for name in WALLPAPERS if (WALLPAPER_FOLDER / name).is_file()]


def _sklearn_images(cache: pathlib.Path) -> list[pathlib.Path]:
    """china.jpg and flower.jpg, extracted once from the scikit-learn wheel into ``cache``."""
    folder = cache / "sources" / "sklearn"
    targets = [folder / pathlib.PurePosixPath(name).name for name in SKLEARN_IMAGES]
    if all(path.is_file() for path in targets):
        return targets
    wheels = folder / "wheel"
    if not list(wheels.glob("scikit_learn-*.whl")):
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                               "--only-binary=:all:", "--dest", str(wheels), SKLEARN_REQUIREMENT],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise PhotosUnavailable(f"pip download {SKLEARN_REQUIREMENT} failed: {done.stderr.strip()[-500:]}")
    wheel = sorted(wheels.glob("scikit_learn-*.whl"))[-1]
    with zipfile.ZipFile(wheel) as archive:
        for name, target in zip(SKLEARN_IMAGES, targets):
            target.write_bytes(archive.read(name))
    return targets


def source_photos(cache: pathlib.Path) -> list[pathlib.Path]:
    """Every source photo, wallpapers first, in a fixed order.

    Raises:
        PhotosUnavailable: the wallpapers are not installed (the message gives the
            apt-get command), or the scikit-learn wheel could not be downloaded.
    """
    wallpapers = _wallpapers()
    if not wallpapers:
        raise PhotosUnavailable(f"no photos under {WALLPAPER_FOLDER}: install them with "
                                f"'apt-get install {WALLPAPER_PACKAGE}' (make bench does it when run as root)")
    return wallpapers + _sklearn_images(cache)


def _largest_window(source_width: int, source_height: int, width: int, height: int) -> tuple[float, float]:
    """The largest (width, height) of aspect ``width / height`` that fits in the source."""
    scale = min(source_width / width, source_height / height)
    return width * scale, height * scale


def _window(rng: np.random.Generator, source_size: tuple[int, int], width: int, height: int,
            first: bool) -> tuple[float, float, float, float]:
    """A (left, top, right, bottom) box of the file's aspect ratio inside the source."""
    source_width, source_height = source_size
    largest_width, largest_height = _largest_window(source_width, source_height, width, height)
    # Never cut a window smaller than the file: that would enlarge it.
    smallest = max(MIN_WINDOW_FRACTION, min(1.0, width / largest_width))
    fraction = 1.0 if first else float(rng.uniform(smallest, 1.0))
    window_width, window_height = largest_width * fraction, largest_height * fraction
    left = float(rng.uniform(0, source_width - window_width))
    top = float(rng.uniform(0, source_height - window_height))
    return left, top, left + window_width, top + window_height


def usable_photos(photos: Sequence[pathlib.Path], height: int, width: int) -> list[pathlib.Path]:
    """The photos whose largest window of this aspect needs at most MAX_UPSCALE enlargement."""
    usable = []
    for path in photos:
        with Image.open(path) as image:
            largest_width, _ = _largest_window(*image.size, width, height)
        if width <= largest_width * MAX_UPSCALE + 1e-6:
            usable.append(path)
    return usable


def write_photo_folder(root: pathlib.Path, photos: Sequence[pathlib.Path], num_images: int, height: int,
                       width: int, *, classes: Sequence[str], quality: int, subsampling: str, seed: int,
                       progressive: bool) -> list[pathlib.Path]:
    """Writes root/<class>/<index>.jpg cut from ``photos`` (see the module's docstring); the paths sorted.

    File i comes from photo i % len(photos) and goes to class i % len(classes).
    Existing files of the right size are kept. Each file is written under a
    temporary name and renamed, so an interrupted run leaves no half file.
    """
    usable = usable_photos(photos, height, width)
    if not usable:
        raise PhotosUnavailable(f"no source photo is large enough for {width}x{height} files")
    paths = [root / classes[index % len(classes)] / f"{index:05d}.jpg" for index in range(num_images)]
    missing = [index for index, path in enumerate(paths) if not synthetic.has_size(path, height, width)]
    # One source photo open at a time: the wallpapers are up to 16 megapixels each.
    for photo_number, photo in enumerate(usable):
        mine = [index for index in missing if index % len(usable) == photo_number]
        if not mine:
            continue
        with Image.open(photo) as opened:
            source = opened.convert("RGB")
        for index in mine:
            rng = np.random.default_rng([seed, index])
            box = _window(rng, source.size, width, height, first=index < len(usable))
            fitted = source.resize((width, height), Image.Resampling.LANCZOS, box=box)
            path = paths[index]
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            fitted.save(temporary, format="JPEG", quality=quality, subsampling=subsampling,
                        progressive=progressive)
            os.replace(temporary, path)
    return sorted(paths)


def trees_as_they_are(folder: pathlib.Path, cache: pathlib.Path, part: str) -> dict[str, pathlib.Path]:
    """The JPEGs under ``folder``, unchanged, as ImageFolder trees of links, one per size found
    (keyed ``"HxW"``): a sub-folder of ``folder`` is a class, files at its top the class
    ``photos``. What ``--photos DIR`` measures in the parts that take a user's files as they are."""
    suffixes = (".jpg", ".jpeg")
    jpegs = sorted(path for path in folder.rglob("*") if path.suffix.lower() in suffixes and path.is_file())
    if not jpegs:
        raise PhotosUnavailable(f"--photos {folder}: no JPEG files under it")
    # Made afresh on every run: links kept from an earlier run would measure the folder as
    # it was then (a file added, removed or replaced since would shift or stale them).
    prefix = f"{part}-as-is-{folder.resolve().as_posix().strip('/').replace('/', '_')}-"
    for old in cache.glob(f"{prefix}*"):
        shutil.rmtree(old)
    trees: dict[str, pathlib.Path] = {}
    for number, path in enumerate(jpegs):
        with Image.open(path) as image:
            size = f"{image.height}x{image.width}"
        relative = path.relative_to(folder)
        label = relative.parts[0] if len(relative.parts) > 1 else "photos"
        root = cache / f"{prefix}{size}"
        link = root / label / f"{number:06d}{path.suffix.lower()}"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(path.resolve())
        trees[size] = root
    return trees
