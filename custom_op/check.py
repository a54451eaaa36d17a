"""A quick check that custom_op works here: build, decode a file, feed a DataLoader.

    python -m custom_op.check                    # a JPEG file it writes itself
    python -m custom_op.check --photo cat.jpg    # and a real photo of yours
    make check                                   # from a checkout: deps, then this

It loads the native extension (building it first if this environment has
none, which takes the longest), decodes a window of a JPEG file and compares
it with the same window of a full decode, then runs a DataLoader over a
JpegFolder of a few generated images with torchvision's RandomResizedCrop for
a few seconds. Every step prints what it did and how long it took; the first
failure stops the check with its error and a non-zero exit status. It takes
seconds once the extension is built (the build itself: about half a minute
on two cores).

Without torchvision (the core needs torch alone; torchvision is the
``torchvision`` extra), the check runs what needs torch alone: the extension,
and the window decode of a JPEG written by Pillow when it is installed, else of
a small JPEG it carries, and of ``--photo``. It then names what it skipped and
the command that installs the rest, and exits 0 if what ran passed.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

#: The generated folder: classes x images per class, each image height x width.
CLASSES = ("cats", "dogs")
IMAGES_PER_CLASS = 8
IMAGE_SIZE = (480, 640)
CROP = 224
#: Seconds the DataLoader waits for a batch before the check fails (a stuck worker).
LOADER_TIMEOUT_S = 120


def _step(title: str, action: Callable[[], str]) -> None:
    """Runs one step, printing its title, what it reports and its time."""
    print(f"{title} ...", flush=True)
    start = time.perf_counter()
    report = action()
    print(f"  {report} ({time.perf_counter() - start:.1f} s)", flush=True)


def shadowing_folders() -> list[str]:
    """The folders that make ``custom_op`` a namespace package here, hiding the installed one, or
    ``[]``: a folder named custom_op in the current directory (a clone of this repository, say)
    is found before the installed package, and ``python -m custom_op.check`` would then fail on a
    package with nothing in it."""
    import custom_op

    if getattr(custom_op, "__file__", None) is not None:
        return []
    return [str(path) for path in getattr(custom_op, "__path__", [])]


def _load_extension() -> str:
    import custom_op
    from custom_op._core import _loader

    version = custom_op.libjpeg_version()  # the first native call: loads or builds
    origin = Path(_loader.load_extension().__file__).parent
    return (f"custom_op {custom_op.__version__} on torch {torch.__version__}, libjpeg-turbo "
            f"{version}; extension from {origin}")


def _missing_torchvision() -> str | None:
    """Why the steps that need torchvision cannot run here (the ImportError naming the extra and
    the command that installs it), or None when torchvision is installed."""
    from custom_op._core import _extras

    try:
        _extras.require("torchvision", "The DataLoader over a JpegFolder")
    except ImportError as error:
        return str(error)
    return None


def _photo_like(height: int, width: int, seed: int) -> torch.Tensor:
    """A smooth colour field with a little grain: compresses like a photo, uint8 CHW."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.rand(1, 3, 6, 8, generator=generator)
    smooth = torch.nn.functional.interpolate(coarse, size=(height, width), mode="bicubic",
                                             align_corners=False)[0]
    grain = torch.randn(3, height, width, generator=generator) * 0.03
    return ((smooth + grain).clamp(0, 1) * 255).round().to(torch.uint8)


def _write_jpeg_without_torchvision(path: Path) -> str:
    """Writes a JPEG for the window decode where torchvision is missing; says whose it is.

    Pillow's encoder where Pillow is installed (a photo-like image, as torchvision's would be);
    otherwise the small JPEG that ``python -m custom_op.build --verify`` decodes, which the core
    can decode with nothing but torch.
    """
    if importlib.util.find_spec("PIL") is not None:
        from PIL import Image

        # Through a list, not numpy: Pillow may be installed where numpy is not.
        pixels = bytes(_photo_like(*IMAGE_SIZE, seed=0).permute(1, 2, 0).flatten().tolist())
        Image.frombytes("RGB", (IMAGE_SIZE[1], IMAGE_SIZE[0]), pixels).save(path, quality=90)
        return "written by Pillow's encoder"
    from custom_op.build import _PROBE_JPEG

    path.write_bytes(_PROBE_JPEG)
    return "that custom_op carries (no torchvision or Pillow to write one)"


def _write_jpeg(path: Path, seed: int) -> None:
    import warnings

    import torchvision.io

    # torchvision 0.29 deprecates its encoders (torchcodec's replace them): the warning is
    # about our call, not the user's code, so it does not reach them.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        encoded = torchvision.io.encode_jpeg(_photo_like(*IMAGE_SIZE, seed), quality=90)
    path.write_bytes(encoded.numpy().tobytes())


def _decode_file(path: Path) -> str:
    import custom_op

    data = path.read_bytes()
    height, width, _ = custom_op.jpeg_size(data)
    crop_height, crop_width = min(256, height), min(256, width)
    top, left = (height - crop_height) // 2, (width - crop_width) // 2
    crop = custom_op.decode_and_crop_jpeg(data, top, left, crop_height, crop_width)
    whole = custom_op.decode_and_crop_jpeg(data, 0, 0, height, width)
    window = whole[:, top:top + crop_height, left:left + crop_width]
    if not torch.equal(crop, window):
        differ = int((crop != window).sum())
        raise SystemExit(f"custom_op.check: the window decode of {path} differs from the full "
                         f"decode in {differ} values; this is a bug in custom_op")
    return (f"{path.name}: {width} x {height}, {path.stat().st_size} bytes; the centre "
            f"{crop_width} x {crop_height} window decodes alone to a {tuple(crop.shape)} "
            f"{crop.dtype} tensor, equal to that window of a full decode")


def _make_folder(root: Path) -> str:
    for label in CLASSES:
        (root / label).mkdir(parents=True)
        for index in range(IMAGES_PER_CLASS):
            seed = 1 + 100 * CLASSES.index(label) + index
            _write_jpeg(root / label / f"{index:03d}.jpg", seed)
    count = len(CLASSES) * IMAGES_PER_CLASS
    return (f"{count} JPEG files of {IMAGE_SIZE[1]} x {IMAGE_SIZE[0]} in "
            f"{len(CLASSES)} class folders under {root}")


def _keep_indexes_in_the_process(_worker_id: int = 0) -> None:
    """The check's images are temporary: their indexes would stay in the user's index store
    after the folder is gone, so the check's processes keep theirs in memory."""
    import custom_op

    custom_op.configure_index_cache(store=None)


def _run_loader(root: Path, seconds: float, workers: int) -> str:
    import custom_op
    from torchvision.transforms import v2

    _keep_indexes_in_the_process()
    dataset = custom_op.JpegFolder(str(root), transform=v2.Compose([
        v2.RandomResizedCrop(CROP), v2.RandomHorizontalFlip()]))
    # A timeout: a worker that dies or stalls fails the check instead of hanging it.
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True,
                                         num_workers=workers, persistent_workers=workers > 0,
                                         timeout=LOADER_TIMEOUT_S if workers > 0 else 0,
                                         worker_init_fn=_keep_indexes_in_the_process)
    images = batches = 0
    start = time.perf_counter()
    while True:
        for batch, labels in loader:
            if batch.shape[1:] != (3, CROP, CROP) or batch.dtype != torch.uint8:
                raise SystemExit(f"custom_op.check: the DataLoader gave a {batch.dtype} batch "
                                 f"of shape {tuple(batch.shape)}; this is a bug in custom_op")
            images += batch.shape[0]
            batches += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    return (f"JpegFolder + RandomResizedCrop({CROP}) + RandomHorizontalFlip, {workers} "
            f"worker(s): {batches} batches, {images} uint8 images of 3 x {CROP} x {CROP}, "
            f"{images / elapsed:.0f} images/s (a smoke test on this machine, not a benchmark)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m custom_op.check",
                                     description="Check that custom_op builds, decodes and "
                                                 "feeds a DataLoader here.")
    parser.add_argument("--photo", type=Path, default=None,
                        help="a JPEG file of yours to decode as well (e.g. a camera photo)")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="how long the DataLoader runs (default 3)")
    parser.add_argument("--workers", type=int, default=2,
                        help="DataLoader worker processes (default 2)")
    args = parser.parse_args(argv)
    if args.photo is not None and not args.photo.is_file():
        parser.error(f"--photo {args.photo}: no such file")
    print(f"custom_op.check: Python {sys.version.split()[0]}, {sys.executable}")
    shadows = shadowing_folders()
    if shadows:
        sys.exit(f"custom_op.check: 'custom_op' here is the folder {', '.join(shadows)}, not the "
                 f"installed package (a folder of that name in the current directory hides it). "
                 f"Run the check from another folder, e.g. cd {Path.home()}")
    missing = _missing_torchvision()
    _step("Loading the native extension (built first if this environment has none)",
          _load_extension)
    with tempfile.TemporaryDirectory(prefix="custom_op-check-") as scratch:
        written = Path(scratch) / "written.jpg"
        if missing is None:
            _write_jpeg(written, seed=0)
            whose = "written by torchvision's encoder"
        else:
            whose = _write_jpeg_without_torchvision(written)
        _step(f"Decoding a window of a JPEG file {whose}", lambda: _decode_file(written))
        if args.photo is not None:
            _step(f"Decoding a window of {args.photo}", lambda: _decode_file(args.photo))
        if missing is not None:
            # The core needs torch alone, so what ran is the check of an install without the
            # extra; the rest is named with the command that adds it, and is not a failure.
            print(f"Skipped: writing a small image folder and running a DataLoader over it. "
                  f"{missing}")
            print("custom_op.check: all good for torch alone (the steps above); the torchvision "
                  "steps were skipped")
            return
        folder = Path(scratch) / "train"
        _step("Writing a small image folder (ImageFolder's layout)", lambda: _make_folder(folder))
        _step(f"Running a DataLoader for {args.seconds:g} s",
              lambda: _run_loader(folder, args.seconds, args.workers))
    print("custom_op.check: all good")


if __name__ == "__main__":
    main()
