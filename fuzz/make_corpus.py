"""Writes the fuzzer's seed corpus: small valid JPEGs of every kind the decoder handles.

Usage (from the repository root; `make fuzz` and `make sanitize` run it):

    .venv/bin/python fuzz/make_corpus.py fuzz/out/seeds

Each file's name is its recipe, e.g. ``prog-420-q75-48x64.jpg``. The files are
photo-like (synthetic/images.py) so that every block has texture, and small
(under MAX_BYTES) so that the fuzzer runs fast. One file declares two
components, which only the core itself refuses. A few copies carry six extra
bytes after EOI, which fuzz/decode_fuzzer.cc reads as the window, mode and
strict flag; libjpeg never reads past EOI.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAX_BYTES = 20_000


def _load(name: str, path: pathlib.Path):
    """Imports one file as a module, without putting the repository on sys.path."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


jpegenc = _load("jpegenc", ROOT / "tests" / "jpegenc.py")
synthetic = _load("_synthetic", ROOT / "synthetic" / "images.py")

_SHORT = {"4:4:4": "444", "4:2:2": "422", "4:2:0": "420", "4:4:0": "440", "4:1:1": "411",
          "gray": "gray"}
_ODD_SIZES = [(1, 1), (1, 17), (17, 1), (2, 3), (7, 9), (9, 7), (15, 17), (16, 16), (17, 15),
              (31, 33), (33, 31), (63, 65), (65, 63), (257, 256), (256, 257)]
# (y, x, height, width) as fractions of 256, then mode (0 rgb, 1 gray,
# 2 unchanged) | 0x04 strict | 0x08 whole image (| 0x20 a grid crop, | 0x80
# antialiased; fuzz/decode_fuzzer.cc); byte 4 = 0x00 keeps max_scans (0x10: HWC;
# 0x01 decodes with an MCU-row index, 0x03 with a damaged one).
_TRAILERS = {
    "rgb-strict-middle": bytes([64, 64, 128, 128, 0x00, 0x04]),
    "unchanged-lenient-corner": bytes([250, 250, 255, 255, 0x00, 0x02]),
    "gray-strict-whole": bytes([0, 0, 0, 0, 0x00, 0x0D]),
    "rgb-scans2-whole": bytes([0, 0, 0, 0, 0x81, 0x0C]),
    "rgb-grid-antialias-middle": bytes([64, 64, 200, 160, 0x00, 0xA0]),
    "gray-grid-hwc-whole": bytes([48, 144, 80, 16, 0x10, 0x29]),
    "rgb-index-deep": bytes([160, 40, 80, 128, 0x01, 0x04]),
    "gray-damaged-index-resized": bytes([128, 16, 96, 200, 0x03, 0x15]),
}


# (h, v) of the luma, with chroma 1x1, whose MCU holds at most 10 blocks.
SAMPLING_FACTOR_PAIRS = [(h, v) for h in range(1, 5) for v in range(1, 5) if h * v + 2 <= 10]


def _pixels(height: int, width: int, channels: int, seed: int) -> np.ndarray:
    """Photo-like pixels: RGB, its first channel as gray, or RGB plus a K plane."""
    photo = synthetic.make_photo(height, width, seed)
    if channels == 1:
        return np.ascontiguousarray(photo[:, :, 0])
    if channels == 4:
        k = synthetic.make_photo(height, width, seed + 1)[:, :, :1]
        return np.ascontiguousarray(np.concatenate([photo, k], axis=2))
    return photo


def _recipes() -> list[tuple[str, int, int, int, dict]]:
    """(name, height, width, channels, encode() options) for every seed file."""
    recipes = []

    def add(name: str, height: int, width: int, channels: int = 3, **options) -> None:
        recipes.append((f"{name}-{height}x{width}", height, width, channels, options))

    for sampling, short in _SHORT.items():
        add(f"base-{short}-q90", 48, 64, sampling=sampling)
        add(f"prog-{short}-q75", 48, 64, sampling=sampling, progressive=True, quality=75)
        add(f"arith-{short}-q75", 40, 56, sampling=sampling, arithmetic=True, quality=75)
        add(f"arithprog-{short}-q75", 40, 56, sampling=sampling, arithmetic=True,
            progressive=True, quality=75)
        add(f"rst1-{short}-q50", 33, 47, sampling=sampling, restart_interval=1, quality=50)
        add(f"rstrow-{short}-q50", 40, 40, sampling=sampling, restart_rows=1, quality=50)
        add(f"odd-{short}-q60", 23, 37, sampling=sampling, quality=60)
    for quality in (1, 10, 50, 95, 100):
        add(f"base-420-q{quality}", 32, 32, quality=quality)
    add("opt-420-q80", 48, 64, optimize=True, quality=80)
    add("optprog-444-q80", 48, 64, sampling="4:4:4", optimize=True, progressive=True, quality=80)
    add("rst3prog-420-q70", 48, 64, progressive=True, restart_interval=3, quality=70)
    add("rst2arith-422-q70", 48, 64, sampling="4:2:2", arithmetic=True, restart_interval=2,
        quality=70)
    add("gray1ch-q85", 48, 64, channels=1)
    add("gray1ch-prog-q85", 48, 64, channels=1, progressive=True)
    add("gray1ch-arith-rst1-q85", 33, 35, channels=1, arithmetic=True, restart_interval=1)
    add("rgb-444-q85", 40, 48, sampling="4:4:4", colorspace="rgb")
    add("rgb-prog-444-q85", 40, 48, sampling="4:4:4", colorspace="rgb", progressive=True)
    for sampling in ("4:4:4", "4:2:0", "4:2:2"):
        short = _SHORT[sampling]
        add(f"cmyk-{short}-q80", 32, 40, channels=4, sampling=sampling, colorspace="cmyk",
            quality=80)
        add(f"ycck-{short}-q80", 32, 40, channels=4, sampling=sampling, colorspace="ycck",
            quality=80)
    add("ycck-prog-420-q70", 33, 41, channels=4, colorspace="ycck", progressive=True, quality=70)
    add("cmyk-arith-444-q70", 33, 41, channels=4, colorspace="cmyk", arithmetic=True, quality=70)
    for height, width in _ODD_SIZES:
        small = height * width < 64 * 64
        add(f"size-420-q{90 if small else 40}", height, width, quality=90 if small else 40)
        add(f"size-prog-422-q{90 if small else 40}", height, width, sampling="4:2:2",
            progressive=True, quality=90 if small else 40)
    add("size-411-q40", 257, 256, sampling="4:1:1", quality=40)
    add("size-440-q40", 256, 257, sampling="4:4:0", quality=40)
    # Every luma sampling factor pair libjpeg accepts with 1x1 chroma (at most
    # 10 blocks per MCU), baseline, and 4x2 and 2x4 (where libjpeg-turbo
    # < 3.0.0 crops wrongly at reduced scales) also progressive. `make
    # valgrind` runs the core test over these (samp-*).
    for h, v in SAMPLING_FACTOR_PAIRS:
        add(f"samp-{h}x{v}-q85", 40, 160, factors=(h, v), quality=85)
    for h, v in ((4, 2), (2, 4)):
        add(f"samp-{h}x{v}-prog-q85", 40, 160, factors=(h, v), progressive=True, quality=85)
    return recipes


def _encode_small(name: str, pixels: np.ndarray, options: dict) -> bytes:
    """Encodes; a file over MAX_BYTES is an error, since its recipe would slow the fuzzer."""
    options = dict(options)
    factors = options.pop("factors", None)
    if factors is None:
        data = jpegenc.encode(pixels, **options)
    else:  # encode() names only the common samplings; its core takes any factors.
        h, v = factors
        data = jpegenc._call_encoder(pixels, "rgb", "ycbcr", [h, 1, 1], [v, 1, 1], **options)
    if len(data) > MAX_BYTES:
        raise SystemExit(f"make_corpus: {name} is {len(data)} bytes, more than {MAX_BYTES}; "
                         "lower its quality or size")
    return data


def _two_components(data: bytes) -> bytes:
    """A baseline three-component file re-declared with two components in its
    SOF and SOS. libjpeg reads such a header (colour space "unknown"), so this
    seed reaches the core's own refusal, which no valid file does."""
    sof = data.index(b"\xff\xc0")
    sos = data.index(b"\xff\xda")
    assert data[sof + 9] == 3 and data[sos + 4] == 3, "expected one 3-component SOF0 and SOS"
    frame = bytearray(data[sof:sof + 19])
    frame[2:4] = (17 - 3).to_bytes(2, "big")
    frame[9] = 2
    scan = bytearray(data[sos:sos + 14])
    scan[2:4] = (12 - 2).to_bytes(2, "big")
    scan[4] = 2
    return (data[:sof] + bytes(frame[:16]) + data[sof + 19:sos] + bytes(scan[:9]) + scan[11:]
            + data[sos + 14:])


def write_corpus(folder: pathlib.Path) -> list[pathlib.Path]:
    """Writes every recipe (and the trailer copies) into `folder`; returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for seed, (name, height, width, channels, options) in enumerate(_recipes()):
        data = _encode_small(name, _pixels(height, width, channels, seed), options)
        path = folder / f"{name}.jpg"
        path.write_bytes(data)
        written.append(path)
    base444 = (folder / "base-444-q90-48x64.jpg").read_bytes()
    path = folder / "twocomp-444-q90-48x64.jpg"
    path.write_bytes(_two_components(base444))
    written.append(path)
    trailer_sources = [p for p in written if p.stem.startswith(("prog-420", "base-411", "ycck-420",
                                                                "gray1ch-q85"))]
    for source in trailer_sources:
        for label, trailer in _TRAILERS.items():
            path = folder / f"{source.stem}+{label}.jpg"
            path.write_bytes(source.read_bytes() + trailer)
            written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=pathlib.Path, help="where to write the seed files")
    folder = parser.parse_args().folder
    written = write_corpus(folder)
    sizes = [path.stat().st_size for path in written]
    print(f"make_corpus: wrote {len(written)} files to {folder} "
          f"({sum(sizes)} bytes, largest {max(sizes)})")


if __name__ == "__main__":
    main()
