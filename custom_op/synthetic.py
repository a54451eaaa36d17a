"""Photo-like synthetic images for tests, benchmarks and demo datasets.

Flat or gradient images hide the errors a crop decoder makes at its edges
(an MCU off by one, chroma upsampled from the wrong neighbour), so every image
here has texture, sharp edges and strong colour detail everywhere.  Only numpy
and Pillow are used, so the module imports without torch.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

import numpy as np
from PIL import Image

_MIN_RADIUS_PX = 1.5  # below this a leaf is a single pixel, i.e. just noise
_MAX_RADIUS_FRACTION = 0.35  # of the short side: a few leaves dominate, as in photos
_POWER_LAW_EXPONENT = 3.0  # p(r) ~ r^-3 makes the image statistically scale invariant
_COVERAGE = 3.0  # sum of leaf areas / image area, so ~e^-3 of the background shows
_TEXTURED_FRACTION = 0.35  # leaves that carry a grating instead of a smooth shade
_STENCIL_BUDGET = 1 << 17  # stencil elements per batch: stays in cache, amortises Python
_NOISE_AMPLITUDE = 0.35  # low-frequency colour noise, as a fraction of its 0..255 range
_PIXEL_NOISE_SIGMA = 3.0  # mild sensor-like noise, in 8-bit code values


def _upscale_bicubic(small: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize a small uint8 image to (height, width) with Pillow's bicubic filter."""
    resized = Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC)
    return np.asarray(resized)


def _noise_grid(rng: np.random.Generator, height: int, width: int, cells: int) -> np.ndarray:
    """Random RGB grid with `cells` cells along the long side, aspect kept."""
    longest = max(height, width)
    grid_h = max(2, round(cells * height / longest))
    grid_w = max(2, round(cells * width / longest))
    return rng.integers(0, 256, size=(grid_h, grid_w, 3), dtype=np.uint8)


def make_smooth_noise(height: int, width: int, seed: int, cells: int = 8) -> np.ndarray:
    """Low-frequency colour noise: a random `cells`-wide grid upscaled bicubically."""
    rng = np.random.default_rng(seed)
    return _upscale_bicubic(_noise_grid(rng, height, width, cells), height, width)


def make_checkerboard(
    height: int,
    width: int,
    cell: int,
    colors: Sequence[Sequence[int]] = ((255, 0, 0), (0, 0, 255)),
) -> np.ndarray:
    """Checkerboard of `cell`-pixel squares cycling through `colors` (HxWxC uint8).

    Square (i, j) gets colors[(i + j) % len(colors)], so every pixel's value is
    known exactly; C is the length of each colour.
    """
    palette = np.asarray(colors, dtype=np.uint8)
    rows = np.arange(height)[:, None] // cell
    cols = np.arange(width)[None, :] // cell
    return palette[(rows + cols) % len(palette)]


def _sample_radii(rng: np.random.Generator, count: int, r_min: float, r_max: float) -> np.ndarray:
    """Inverse-CDF samples of the truncated power law p(r) ~ r**-exponent."""
    power = 1.0 - _POWER_LAW_EXPONENT
    lo, hi = r_min**power, r_max**power
    return (lo + rng.random(count) * (hi - lo)) ** (1.0 / power)


def _leaf_radii(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Draw leaf radii until their total area reaches the coverage target."""
    r_max = max(_MIN_RADIUS_PX * 2, _MAX_RADIUS_FRACTION * min(height, width))
    target = _COVERAGE * height * width
    batches, area = [], 0.0
    while area < target:  # the mean area is heavy-tailed, so draw until covered
        radii = _sample_radii(rng, 4096, _MIN_RADIUS_PX, r_max)
        batches.append(radii)
        area += float(np.sum(np.pi * radii**2)) * 0.75  # 0.75: mean minor/major ratio
    return np.concatenate(batches)


def _stamp(owner: np.ndarray, ids: np.ndarray, half: int, margin: int, leaves: dict[str, np.ndarray]) -> None:
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
    qa, qb, qc = (leaves[k][ids][:, None] for k in ("qa", "qb", "qc"))
    # Quadratic form of the rotated ellipse: only one product is full (n, side,
    # side) size, the squared terms stay (n, side), which halves the work.
    form = (qb * dy)[:, :, None] * dx[:, None, :]
    form += (qc * dy * dy)[:, :, None]
    form += (qa * dx * dx)[:, None, :]
    inside = form <= 1.0
    centre = (base_y + margin) * stride + base_x + margin
    flat = centre[:, None, None] + (offsets * stride)[None, :, None] + offsets[None, None, :]
    # Boolean masking is much faster than np.nonzero on a 3-D array.
    leaf = np.repeat(ids.astype(owner.dtype), inside.reshape(len(ids), -1).sum(axis=1))
    # Later leaves lie on top; a max makes the result independent of batch order.
    np.maximum.at(owner.reshape(-1), flat[inside], leaf)


def _rasterise(height: int, width: int, leaves: dict[str, np.ndarray]) -> np.ndarray:
    """Index of the topmost leaf at every pixel (0, the background, if none)."""
    # The centre is rounded to a pixel, so pixels within a of it are within a + 0.5.
    half = np.floor(leaves["a"] + 0.5).astype(np.int64)
    margin = int(half.max())
    owner = np.zeros((height + 2 * margin, width + 2 * margin), dtype=np.int32)
    order = np.argsort(half[1:], kind="stable") + 1  # leaf 0, the background, is everywhere
    # Batch leaves by stencil size so each batch is one vectorised stamp.
    for group in np.split(order, np.flatnonzero(np.diff(half[order])) + 1):
        size = int(half[group[0]])
        chunk = max(1, _STENCIL_BUDGET // (2 * size + 1) ** 2)
        for start in range(0, len(group), chunk):
            _stamp(owner, group[start : start + chunk], size, margin, leaves)
    return owner[margin : margin + height, margin : margin + width]


def _random_leaves(rng: np.random.Generator, height: int, width: int) -> dict[str, np.ndarray]:
    """Geometry and colouring of every leaf; index 0 is a full-image background."""
    a = np.concatenate([[0.0], _leaf_radii(rng, height, width)])
    count = len(a)
    angle = rng.uniform(0.0, np.pi, count)
    cy, cx = rng.uniform(0, height, count), rng.uniform(0, width, count)
    textured = rng.random(count) < _TEXTURED_FRACTION
    textured[0] = False
    # Gratings: period 2..16 px (log-uniform) so some sit near Nyquist for chroma.
    period = np.exp(rng.uniform(np.log(2.0), np.log(16.0), count))
    wave = rng.uniform(0.0, 2 * np.pi, count)
    # Smooth leaves get a gentle linear shade of at most +-0.5 across the leaf.
    slope = np.where(textured, 2 * np.pi / period, rng.uniform(0, 0.5, count) / np.maximum(a, 1))
    slope[0] = 0.0  # a flat background: the colour noise added later shades it
    ky, kx = slope * np.sin(wave), slope * np.cos(wave)
    k0 = np.where(textured, rng.uniform(0, 2 * np.pi, count), -(ky * cy + kx * cx))
    b = a * rng.uniform(0.5, 1.0, count)
    c1, c2 = rng.uniform(0, 255, (2, count, 3))  # gratings and shades run from c1 to c2
    # Ellipse as qa*dx^2 + qb*dx*dy + qc*dy^2 <= 1 (axes a, b rotated by angle).
    cos, sin, inv_a2, inv_b2 = np.cos(angle), np.sin(angle), 1 / np.maximum(a, 1) ** 2, 1 / np.maximum(b, 0.5) ** 2
    return {
        "a": a, "cy": cy, "cx": cx, "textured": textured,
        "qa": (cos**2 * inv_a2 + sin**2 * inv_b2).astype(np.float32),
        "qb": (2 * cos * sin * (inv_a2 - inv_b2)).astype(np.float32),
        "qc": (sin**2 * inv_a2 + cos**2 * inv_b2).astype(np.float32),
        "ky": ky.astype(np.float32), "kx": kx.astype(np.float32), "k0": k0.astype(np.float32),
        "c1": c1.astype(np.float32), "dc": (c2 - c1).astype(np.float32),
    }


def _shade(owner: np.ndarray, leaves: dict[str, np.ndarray]) -> np.ndarray:
    """Colour each pixel from its leaf: a grating or a shade from c1 along dc."""
    height, width = owner.shape
    y = np.arange(height, dtype=np.float32)[:, None]
    x = np.arange(width, dtype=np.float32)[None, :]
    phase = leaves["ky"][owner] * y + leaves["kx"][owner] * x + leaves["k0"][owner]
    mix = np.where(leaves["textured"][owner], 0.5 + 0.5 * np.sin(phase), phase)
    image = leaves["dc"][owner]
    image *= mix[..., None]
    image += leaves["c1"][owner]
    return image


def make_photo(height: int, width: int, seed: int) -> np.ndarray:
    """Photo-like HxWx3 uint8 image, deterministic for a seed on a given machine.

    A dead-leaves model (overlapping ellipses with power-law sizes, random
    colours, some with fine gratings) plus low-frequency colour noise and mild
    per-pixel Gaussian noise.
    """
    rng = np.random.default_rng(seed)
    leaves = _random_leaves(rng, height, width)
    owner = _rasterise(height, width, leaves)
    image = _shade(owner, leaves)
    smooth = _upscale_bicubic(_noise_grid(rng, height, width, 6), height, width)
    image += (smooth.astype(np.float32) - 128.0) * (2 * _NOISE_AMPLITUDE)
    image += rng.standard_normal(image.shape, dtype=np.float32) * _PIXEL_NOISE_SIGMA
    np.clip(image, 0.0, 255.0, out=image)
    image += 0.5  # round to nearest, not towards zero
    return image.astype(np.uint8)


def _image_seed(seed: int, index: int) -> int:
    """Independent per-image seed, so (seed, index) pairs never collide."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def _has_size(path: pathlib.Path, height: int, width: int) -> bool:
    """True when `path` is a readable image of the given size (header only)."""
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
) -> list[pathlib.Path]:
    """Write an ImageFolder tree root/<class>/<index>.jpg of photo-like JPEGs.

    Image i goes to class i % len(classes).  Files that already exist with the
    right size are kept, so reruns are cheap (a change of quality or seed is
    not detected).  Files are written to a temporary name and renamed, so
    parallel writers never expose a half-written JPEG.  Returns sorted paths.
    """
    root = pathlib.Path(root)
    paths = []
    for index in range(num_images):
        path = root / classes[index % len(classes)] / f"{index:05d}.jpg"
        paths.append(path)
        if _has_size(path, height, width):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = make_photo(height, width, _image_seed(seed, index))
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        Image.fromarray(pixels).save(temporary, format="JPEG", quality=quality, subsampling=subsampling)
        os.replace(temporary, path)
    return sorted(paths)
