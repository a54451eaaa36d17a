"""Photo-like synthetic images for tests, benchmarks and demo datasets.

Flat or gradient images hide the errors a crop decoder makes at its edges
(an MCU off by one, chroma upsampled from the wrong neighbour), so every image
here has texture, sharp edges and strong colour detail everywhere.  Only numpy
and Pillow are used, so the module imports without torch.
"""

from __future__ import annotations

import io
import os
import pathlib
from collections.abc import Sequence

import numpy as np
from PIL import Image

_MIN_RADIUS_PX = 1.5  # smaller leaves would be single pixels, i.e. just noise
_MAX_RADIUS_FRACTION = 0.35  # of the short side: a few leaves dominate, as in photos
_POWER_LAW_EXPONENT = 3.0  # p(r) ~ r^-3 makes the image statistically scale invariant
_COVERAGE = 3.0  # leaf area / image area, so about e^-3 of the background shows
_TEXTURED_FRACTION = 0.35  # leaves with a grating rather than a smooth shade
_STENCIL_BUDGET = 1 << 17  # stencil pixels per batch: stays in cache, amortises Python
_NOISE_AMPLITUDE = 0.7  # low-frequency colour noise, as a fraction of +-128
_PIXEL_NOISE_SIGMA = 3.0  # mild sensor-like noise, in 8-bit code values

Leaves = dict[str, np.ndarray]


def _upscale_bicubic(small: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize a small uint8 image to (height, width) with Pillow's bicubic filter."""
    resized = Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC)
    return np.asarray(resized)


def _noise_grid(rng: np.random.Generator, height: int, width: int, cells: int) -> np.ndarray:
    """Random RGB grid with `cells` cells along the long side, aspect ratio kept."""
    longest = max(height, width)
    shape = (max(2, round(cells * height / longest)), max(2, round(cells * width / longest)), 3)
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def make_smooth_noise(height: int, width: int, seed: int, cells: int = 8) -> np.ndarray:
    """Low-frequency HxWx3 uint8 colour noise: a random grid upscaled bicubically."""
    rng = np.random.default_rng(seed)
    return _upscale_bicubic(_noise_grid(rng, height, width, cells), height, width)


def make_checkerboard(
    height: int,
    width: int,
    cell: int,
    colors: Sequence[Sequence[int]] = ((255, 0, 0), (0, 0, 255)),
) -> np.ndarray:
    """HxWxC uint8 checkerboard of `cell`-pixel squares cycling through `colors`.

    Square (i, j) gets colors[(i + j) % len(colors)], so every value is known
    exactly; C is the length of each colour.
    """
    palette = np.asarray(colors, dtype=np.uint8)
    rows = np.arange(height)[:, None] // cell
    cols = np.arange(width)[None, :] // cell
    return palette[(rows + cols) % len(palette)]


def _leaf_radii(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Power-law radii (inverse-CDF samples), drawn until the coverage is reached."""
    power = 1.0 - _POWER_LAW_EXPONENT
    lo = _MIN_RADIUS_PX**power
    hi = max(2 * _MIN_RADIUS_PX, _MAX_RADIUS_FRACTION * min(height, width)) ** power
    batches, area = [], 0.0
    while area < _COVERAGE * height * width:  # the mean area is heavy-tailed: draw until covered
        radii = (lo + rng.random(4096) * (hi - lo)) ** (1.0 / power)
        batches.append(radii)
        area += float(np.sum(radii**2)) * np.pi * 0.75  # 0.75: mean minor/major axis ratio
    return np.concatenate(batches)


def _random_leaves(rng: np.random.Generator, height: int, width: int) -> Leaves:
    """Geometry and colouring of every leaf; leaf 0 is a full-image background."""
    a = np.concatenate([[0.0], _leaf_radii(rng, height, width)])
    count = len(a)
    b = a * rng.uniform(0.5, 1.0, count)
    cy, cx = rng.uniform(0, height, count), rng.uniform(0, width, count)
    cos, sin = np.cos(angle := rng.uniform(0.0, np.pi, count)), np.sin(angle)
    textured = rng.random(count) < _TEXTURED_FRACTION
    textured[0] = False
    # Grating periods of 2..16 px (log-uniform) put some detail near the chroma Nyquist limit;
    # smooth leaves get a gentle linear shade of at most +-0.3 across the leaf.
    period = np.exp(rng.uniform(np.log(2.0), np.log(16.0), count))
    slope = np.where(textured, 2 * np.pi / period, rng.uniform(0, 0.3, count) / np.maximum(a, 1))
    slope[0] = 0.0  # a flat background: the colour noise added later shades it
    ky, kx = slope * np.sin(wave := rng.uniform(0, 2 * np.pi, count)), slope * np.cos(wave)
    k0 = np.where(textured, rng.uniform(0, 2 * np.pi, count), -(ky * cy + kx * cx))
    c1, c2 = rng.uniform(0, 255, (2, count, 3))
    # Ellipse as qa*dx^2 + qb*dx*dy + qc*dy^2 <= 1: axes a and b rotated by `angle`.
    inv_a2, inv_b2 = 1 / np.maximum(a, 1) ** 2, 1 / np.maximum(b, 0.5) ** 2
    table = {
        "qa": cos**2 * inv_a2 + sin**2 * inv_b2, "qb": 2 * cos * sin * (inv_a2 - inv_b2),
        "qc": sin**2 * inv_a2 + cos**2 * inv_b2, "ky": ky, "kx": kx, "k0": k0,
        "c1": c1, "dc": c2 - c1,
    }
    return {"a": a, "cy": cy, "cx": cx, "textured": textured} | {
        key: value.astype(np.float32) for key, value in table.items()
    }


def _stamp(owner: np.ndarray, ids: np.ndarray, half: int, margin: int, leaves: Leaves) -> None:
    """Rasterise leaves `ids`, all with stencil half-size `half`, into `owner`.

    `owner` is the image padded by `margin` >= `half` on every side, so every
    stencil lies inside it and needs no bounds checks.
    """
    stride = owner.shape[1]
    offsets = np.arange(-half, half + 1)
    cy, cx = leaves["cy"][ids], leaves["cx"][ids]
    base_y, base_x = np.rint(cy).astype(np.int64), np.rint(cx).astype(np.int64)
    dy = (base_y - cy).astype(np.float32)[:, None] + offsets  # (n, side)
    dx = (base_x - cx).astype(np.float32)[:, None] + offsets
    qa, qb, qc = (leaves[key][ids][:, None] for key in ("qa", "qb", "qc"))
    # Only the cross term needs a full (n, side, side) product; the squares stay small.
    form = (qb * dy)[:, :, None] * dx[:, None, :]
    form += (qc * dy * dy)[:, :, None]
    form += (qa * dx * dx)[:, None, :]
    inside = form <= 1.0
    centre = (base_y + margin) * stride + base_x + margin
    flat = centre[:, None, None] + (offsets * stride)[None, :, None] + offsets[None, None, :]
    # Boolean masks plus repeat are much faster than np.nonzero on a 3-D array.
    leaf = np.repeat(ids.astype(owner.dtype), inside.reshape(len(ids), -1).sum(axis=1))
    # Later leaves lie on top; a max makes the result independent of batch order.
    np.maximum.at(owner.reshape(-1), flat[inside], leaf)


def _rasterise(height: int, width: int, leaves: Leaves) -> np.ndarray:
    """Index of the topmost leaf at every pixel (0, the background, if none)."""
    half = np.floor(leaves["a"] + 0.5).astype(np.int64)  # +0.5: centres round to pixels
    margin = int(half.max())
    owner = np.zeros((height + 2 * margin, width + 2 * margin), dtype=np.int32)
    order = np.argsort(half[1:], kind="stable") + 1  # leaf 0 is already everywhere
    # Batch leaves of one stencil size so each batch is a single vectorised stamp.
    for group in np.split(order, np.flatnonzero(np.diff(half[order])) + 1):
        size = int(half[group[0]])
        chunk = max(1, _STENCIL_BUDGET // (2 * size + 1) ** 2)
        for start in range(0, len(group), chunk):
            _stamp(owner, group[start : start + chunk], size, margin, leaves)
    return owner[margin : margin + height, margin : margin + width]


def _shade(owner: np.ndarray, leaves: Leaves) -> np.ndarray:
    """Colour each pixel from its leaf: c1 + dc * (grating or linear shade)."""
    y = np.arange(owner.shape[0], dtype=np.float32)[:, None]
    x = np.arange(owner.shape[1], dtype=np.float32)[None, :]
    phase = leaves["ky"][owner] * y + leaves["kx"][owner] * x + leaves["k0"][owner]
    mix = np.where(leaves["textured"][owner], 0.5 + 0.5 * np.sin(phase), phase)
    image = leaves["dc"][owner]
    image *= mix[..., None]
    image += leaves["c1"][owner]
    return image


def make_photo(height: int, width: int, seed: int) -> np.ndarray:
    """Photo-like HxWx3 uint8 image, deterministic for a seed (on one machine).

    A dead-leaves model (overlapping ellipses with power-law sizes, random
    colours, some with fine gratings) plus low-frequency colour noise and mild
    per-pixel Gaussian noise.
    """
    rng = np.random.default_rng(seed)
    leaves = _random_leaves(rng, height, width)
    image = _shade(_rasterise(height, width, leaves), leaves)
    smooth = _upscale_bicubic(_noise_grid(rng, height, width, 6), height, width)
    image += (smooth.astype(np.float32) - 128.0) * _NOISE_AMPLITUDE
    image += rng.standard_normal(image.shape, dtype=np.float32) * _PIXEL_NOISE_SIGMA
    np.clip(image, 0.0, 255.0, out=image)
    image += 0.5  # round to nearest rather than towards zero
    return image.astype(np.uint8)


def has_size(path: pathlib.Path, height: int, width: int) -> bool:
    """True when `path` is a readable image of the given size (reads the header only)."""
    try:
        with Image.open(path) as image:
            return image.size == (width, height)
    except (OSError, ValueError):
        return False


def write_jpeg_folder(
    root: str | os.PathLike[str],
    num_images: int,
    height: int,
    width: int,
    *,
    classes: Sequence[str] = ("class_a", "class_b"),
    quality: int = 90,
    subsampling: str = "4:2:0",
    seed: int = 0,
    progressive: bool = False,
) -> list[pathlib.Path]:
    """Write an ImageFolder tree root/<class>/<index>.jpg of photo-like JPEGs.

    Image i goes to class i % len(classes).  Existing files of the right size
    are kept, so reruns are cheap (a changed quality or seed is not noticed).
    Each file is written under a temporary name and renamed, so parallel
    writers never expose a half-written JPEG.  Returns the paths sorted.
    """
    paths = []
    for index in range(num_images):
        path = pathlib.Path(root) / classes[index % len(classes)] / f"{index:05d}.jpg"
        paths.append(path)
        if has_size(path, height, width):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_bytes(photo_jpeg(height, width, seed, index, quality=quality,
                                         subsampling=subsampling, progressive=progressive))
        os.replace(temporary, path)
    return sorted(paths)


def photo_jpeg(height: int, width: int, seed: int, index: int, *, quality: int = 90,
               subsampling: str = "4:2:0", progressive: bool = False) -> bytes:
    """The JPEG (encoded by Pillow) of image ``index`` of a generated set, as write_jpeg_folder
    writes it: the same (seed, index) gives the same bytes, in a folder or in a shard."""
    # SeedSequence mixes (seed, index), so different seeds never share images.
    image_seed = int(np.random.SeedSequence([seed, index]).generate_state(1)[0])
    buffer = io.BytesIO()
    Image.fromarray(make_photo(height, width, image_seed)).save(
        buffer, format="JPEG", quality=quality, subsampling=subsampling, progressive=progressive)
    return buffer.getvalue()


def write_coco_annotations(
    path: str | os.PathLike[str],
    image_folder: str | os.PathLike[str],
    files: Sequence[pathlib.Path],
    height: int,
    width: int,
    *,
    boxes_per_image: tuple[int, int] = (4, 4),
    categories: Sequence[str] = ("leaf", "stone", "shadow"),
    seed: int = 0,
) -> pathlib.Path:
    """Write a COCO-style annotation file of random boxes for ``files`` (all height x width).

    COCO's ``images`` (``file_name`` relative to ``image_folder``, ids from 1),
    ``annotations`` (``bbox`` as [x, y, width, height] in pixels, 5% to 60% of
    the image on each side, ``category_id``, ``area``, ``iscrowd``) and
    ``categories``; each image gets a number of boxes drawn from
    ``boxes_per_image`` (inclusive bounds). Returns ``path``.
    """
    import json

    rng = np.random.default_rng(seed)
    images, annotations = [], []
    for image_id, file in enumerate(files, start=1):
        images.append({"id": image_id, "height": height, "width": width,
                       "file_name": pathlib.Path(file).relative_to(image_folder).as_posix()})
        for _ in range(int(rng.integers(boxes_per_image[0], boxes_per_image[1] + 1))):
            box_width = float(rng.uniform(0.05, 0.6) * width)
            box_height = float(rng.uniform(0.05, 0.6) * height)
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "bbox": [float(rng.uniform(0, width - box_width)),
                                         float(rng.uniform(0, height - box_height)),
                                         box_width, box_height],
                                "area": box_width * box_height, "iscrowd": 0,
                                "category_id": int(rng.integers(1, len(categories) + 1))})
    document = {"images": images, "annotations": annotations,
                "categories": [{"id": index, "name": name}
                               for index, name in enumerate(categories, start=1)]}
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def write_coco_detection(
    root: str | os.PathLike[str],
    num_images: int,
    height: int,
    width: int,
    *,
    boxes_per_image: int = 4,
    categories: Sequence[str] = ("leaf", "stone", "shadow"),
    quality: int = 90,
    seed: int = 0,
) -> pathlib.Path:
    """Write a COCO-style detection set: photo-like JPEGs and one JSON file of boxes.

    The images go to ``root/images`` (as :func:`write_jpeg_folder` writes
    them, in one folder), the annotations to ``root/annotations.json`` (see
    :func:`write_coco_annotations`), ``boxes_per_image`` boxes each. Returns
    the JSON file's path.
    """
    root = pathlib.Path(root)
    paths = write_jpeg_folder(root, num_images, height, width, classes=("images",),
                              quality=quality, seed=seed)
    return write_coco_annotations(root / "annotations.json", root / "images", paths, height, width,
                                  boxes_per_image=(boxes_per_image, boxes_per_image),
                                  categories=categories, seed=seed)
