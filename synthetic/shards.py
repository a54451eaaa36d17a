"""WebDataset-style tar shards for the tests, the benchmarks and the demo job.

A shard holds samples in order, each as ``KEY.jpg`` (the encoded bytes, never
re-encoded) and ``KEY.cls`` (the class index as text), ``samples_per_shard``
samples per shard, named ``PREFIX-000000.tar``, ``PREFIX-000001.tar``, ...
so that WebDataset's brace notation (``PREFIX-{000000..000009}.tar``) lists
them. Keys are the sample's number (``000000042``), which has no dot, so
WebDataset groups each sample's members correctly.
"""

from __future__ import annotations

import io
import os
import pathlib
import random
import tarfile
from collections.abc import Iterable, Iterator, Sequence

from .images import photo_jpeg

#: What ImageFolder-style trees hold, by suffix (as torchvision's IMG_EXTENSIONS for JPEG).
JPEG_SUFFIXES = (".jpg", ".jpeg")
#: Members' modification time: fixed, so the same samples always give the same shard bytes.
MEMBER_MTIME = 1_700_000_000

Sample = tuple[bytes, int]  # (encoded JPEG, class index)


def folder_samples(root: str | os.PathLike[str], *,
                   seed: int | None = None) -> tuple[list[str], Iterator[Sample]]:
    """The classes of an ImageFolder-style tree root/<class>/<file>.jpg, and its samples.

    Classes are the sorted subfolder names (as ImageFolder sorts them), files
    are taken in sorted order within each class; only .jpg/.jpeg files count.
    With a ``seed``, the files come in an order shuffled by it instead, as
    WebDataset advises for writing shards: a shard then holds a mix of
    classes, not a run of one.
    """
    root = pathlib.Path(root)
    classes = sorted(entry.name for entry in root.iterdir() if entry.is_dir())
    if not classes:
        raise ValueError(f"{root} has no class folders (expected root/<class>/<file>.jpg)")
    files = [(path, number) for number, name in enumerate(classes)
             for path in sorted((root / name).rglob("*"))
             if path.suffix.lower() in JPEG_SUFFIXES and path.is_file()]
    if seed is not None:
        random.Random(seed).shuffle(files)
    return classes, ((path.read_bytes(), number) for path, number in files)


def generated_samples(num_images: int, height: int, width: int, num_classes: int, *,
                      seed: int = 0, quality: int = 90, subsampling: str = "4:2:0",
                      progressive: bool = False) -> Iterator[Sample]:
    """The images write_jpeg_folder would write, as samples: image i has class i % num_classes."""
    for index in range(num_images):
        yield (photo_jpeg(height, width, seed, index, quality=quality, subsampling=subsampling,
                          progressive=progressive), index % num_classes)


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, MEMBER_MTIME
    tar.addfile(info, io.BytesIO(data))


def _write_shard(path: pathlib.Path, first_key: int, samples: Sequence[Sample]) -> None:
    """One shard, written under a temporary name and renamed."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tarfile.open(temporary, "w", format=tarfile.USTAR_FORMAT) as tar:
        for offset, (data, label) in enumerate(samples):
            key = f"{first_key + offset:09d}"
            _add(tar, f"{key}.jpg", data)
            _add(tar, f"{key}.cls", f"{label}\n".encode())
    os.replace(temporary, path)


def _batches(samples: Iterable[Sample], size: int) -> Iterator[list[Sample]]:
    batch: list[Sample] = []
    for sample in samples:
        batch.append(sample)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def write_shards(samples: Iterable[Sample], root: str | os.PathLike[str],
                 samples_per_shard: int, *, prefix: str = "train") -> list[pathlib.Path]:
    """Writes ``samples`` into root/PREFIX-NNNNNN.tar shards; returns their paths in order.

    Samples are read one shard at a time, so a dataset of any size needs
    memory for one shard's encoded bytes.

    Example:
        >>> classes, samples = folder_samples("imagenet/train")
        >>> write_shards(samples, "imagenet-shards/train", 1000)
    """
    if samples_per_shard < 1:
        raise ValueError(f"samples_per_shard must be at least 1, got {samples_per_shard}")
    root = pathlib.Path(root)
    root.mkdir(parents=True, exist_ok=True)
    paths, first_key = [], 0
    for number, batch in enumerate(_batches(samples, samples_per_shard)):
        paths.append(root / f"{prefix}-{number:06d}.tar")
        _write_shard(paths[-1], first_key, batch)
        first_key += len(batch)
    return paths
