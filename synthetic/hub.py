"""Parquet datasets laid out as the Hugging Face Hub stores them, written by ``datasets`` itself.

``write_hub_dataset`` writes ``ROOT/data/train-00000-of-0000N.parquet`` ...
with an ``image`` column of the ``datasets.Image`` feature (a struct
{bytes, path}, the JPEG bytes embedded) and a ``label`` ClassLabel column, in
row groups of a chosen size: the format ``load_dataset("parquet", ...)`` and
the Hub's parquet conversion produce. Imports ``datasets`` on first use.
"""

from __future__ import annotations

import os
import pathlib
from typing import Sequence

#: (encoded image bytes, its file name, class index)
HubSample = tuple[bytes, str, int]


def hub_dataset(samples: Sequence[HubSample], class_names: Sequence[str]):
    """An in-memory ``datasets.Dataset`` of ``samples``: image (Image feature) and label."""
    from datasets import ClassLabel, Dataset, Features, Image

    features = Features({"image": Image(), "label": ClassLabel(names=list(class_names))})
    return Dataset.from_dict({"image": [{"bytes": data, "path": name} for data, name, _ in samples],
                              "label": [label for _, _, label in samples]}, features=features)


def write_hub_dataset(root: str | os.PathLike[str], samples: Sequence[HubSample], *,
                      class_names: Sequence[str] = ("class_a", "class_b"), files: int = 2,
                      rows_per_group: int = 100, split: str = "train") -> list[pathlib.Path]:
    """Writes ``samples`` as ``files`` parquet files under ``root/data``; their paths, in order.

    Rows keep the order of ``samples``, split into consecutive files, each in
    row groups of ``rows_per_group`` rows (datasets writes image datasets in
    groups of 100 by default).
    """
    dataset = hub_dataset(samples, class_names)
    folder = pathlib.Path(root) / "data"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(files):
        path = folder / f"{split}-{index:05d}-of-{files:05d}.parquet"
        dataset.shard(files, index, contiguous=True).to_parquet(str(path),
                                                                batch_size=rows_per_group)
        paths.append(path)
    return paths
