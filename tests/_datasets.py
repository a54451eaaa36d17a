"""Datasets for tests/test_dataloader.py, in a module of their own so that
DataLoader workers started with "spawn" can import them by name."""

from __future__ import annotations

import os
import pathlib
from typing import Callable, Sequence

import torch
from torch.utils.data import Dataset


class EncodedJpegFolder(Dataset):
    """Reads each file's bytes and applies `transform` to them in the worker.

    An item is ``(image, index, rng_state)``: rng_state is the worker's torch
    generator state just before the transform ran, so the main process can
    replay the transform's random draws and check which window it chose.
    """

    def __init__(self, paths: Sequence[str | os.PathLike[str]],
                 transform: Callable[[bytes], torch.Tensor]) -> None:
        self.paths = [str(path) for path in paths]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, torch.Tensor]:
        data = pathlib.Path(self.paths[index]).read_bytes()
        state = torch.get_rng_state()
        return self.transform(data), index, state
