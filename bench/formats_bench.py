"""MDS and LitData: each library's own decode against custom_op's items and the lane, images/s.

Run from the repository root:

    python -m bench formats                      # generated and real files
    python -m bench formats --images real --formats-rounds 3

The question: JPEG bytes kept in MosaicML Streaming (MDS) shards or a LitData
optimized dataset feed a DataLoader; how much faster with custom_op? The data:
--formats-files 500x375 baseline JPEGs, written once by each library's own
writer (MDSWriter, a ``jpeg`` column of PIL images opened from the files;
litdata.optimize), the original bytes stored. Every row: a DataLoader with 2
workers, batch 64, a random sampler over --formats-length items per epoch,
RandomResizedCrop(224) + RandomHorizontalFlip, uint8 out. The items are read
by index (map-style) in every row, so all rows share one DataLoader setup:

  <format> own decode    the library's StreamingDataset, ``dataset[i]`` as it
                         returns it (MDS: a PIL image, decoded in full by
                         Pillow when the crop asks for pixels; LitData: a
                         tensor from torchvision.io.decode_jpeg), then the v2
                         transforms and ToImage
  <format> custom_op     MdsJpegs / LitJpegs with the same v2 transforms: an
                         EncodedJpeg, only the window decoded
  <format> custom_op lane  the same source through BatchLane in
                         lane_dataloader (whole batches in one native call)

All rows of a format are timed interleaved (bench/loaders.py); ratios are
against that format's own-decode row.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import pathlib
import shutil
import sys
from typing import Any, Callable

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler
from torchvision.transforms import v2

from bench import images, loaders, report
from custom_op.datasets import LitJpegs, MdsJpegs
from custom_op.lane import BatchLane, lane_dataloader

HEIGHT, WIDTH, SIZE = 375, 500, 224
WORKERS, BATCH = 2, 64
FORMATS = ("MDS", "LitData")
OWN, CUSTOM, LANE = "own decode", "custom_op", "custom_op lane"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("MDS and LitData")
    group.add_argument("--formats-files", type=int, default=64,
                       help="500x375 baseline files in each dataset (default 64)")
    group.add_argument("--formats-length", type=int, default=128,
                       help="images per epoch (default 128: 2 batches of 64)")
    group.add_argument("--formats-rounds", type=int, default=2,
                       help="timed epochs of every pipeline, interleaved (default 2)")


def _crop() -> v2.Compose:
    return v2.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip()])


class OwnDecode(torch.utils.data.Dataset):
    """A library's dataset read by index as it decodes, then the v2 transforms and ToImage."""

    def __init__(self, dataset: Any, convert: Callable[[Any], Any]) -> None:
        self.dataset, self.convert = dataset, convert
        self.transform = v2.Compose([_crop(), v2.ToImage()])

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        item = self.dataset[index]
        return self.transform(self.convert(item["image"])), int(item["label"])


def _rgb(image: Any) -> Any:
    return image.convert("RGB")


def _write_mds(folder: pathlib.Path, paths: list[pathlib.Path], classes: list[str]) -> None:
    from PIL import Image
    from streaming import MDSWriter

    with MDSWriter(out=str(folder), columns={"image": "jpeg", "label": "int"}) as writer:
        for path in paths:
            writer.write({"image": Image.open(path), "label": classes.index(path.parent.name)})


class _Item:
    """litdata.optimize's fn: a path to its item (a class, so that workers can take it)."""

    def __init__(self, classes: list[str]) -> None:
        self.classes = classes

    def __call__(self, path: pathlib.Path) -> dict[str, Any]:
        from PIL import Image

        return {"image": Image.open(path), "label": self.classes.index(path.parent.name)}


def _write_litdata(folder: pathlib.Path, paths: list[pathlib.Path], classes: list[str]) -> None:
    import litdata

    with contextlib.redirect_stdout(io.StringIO()):  # its progress lines
        litdata.optimize(fn=_Item(classes), inputs=paths, output_dir=str(folder),
                         chunk_bytes="64MB", num_workers=1, start_method="fork", verbose=False)


def _written(folder: pathlib.Path, paths: list[pathlib.Path], write: Callable) -> pathlib.Path:
    """The dataset written once by its library's writer, then reused."""
    if not (folder / "index.json").exists():
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        write(partial, paths, sorted({path.parent.name for path in paths}))
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)
    return folder


def _own_dataset(fmt: str, folder: pathlib.Path) -> OwnDecode:
    if fmt == "MDS":
        from streaming import StreamingDataset

        return OwnDecode(StreamingDataset(local=str(folder), batch_size=BATCH), _rgb)
    import litdata

    return OwnDecode(litdata.StreamingDataset(str(folder)), lambda tensor: tensor)


def _ours(fmt: str, folder: pathlib.Path, transform: Any = None) -> Any:
    return (MdsJpegs if fmt == "MDS" else LitJpegs)(str(folder), transform=transform)


def _runners(fmt: str, folder: pathlib.Path, length: int) -> dict[str, loaders.Runner]:
    def per_item(dataset: Any) -> DataLoader:
        return DataLoader(dataset, batch_size=BATCH, num_workers=WORKERS, persistent_workers=True,
                          sampler=RandomSampler(dataset, num_samples=length))

    lane_source = _ours(fmt, folder)
    batches = BatchSampler(RandomSampler(lane_source, num_samples=length), BATCH, drop_last=False)
    return {OWN: loaders.epoch_runner(per_item(_own_dataset(fmt, folder))),
            CUSTOM: loaders.epoch_runner(per_item(_ours(fmt, folder, _crop()))),
            LANE: loaders.epoch_runner(lane_dataloader(BatchLane(lane_source, _crop()), batches,
                                                       num_workers=WORKERS,
                                                       persistent_workers=True))}


def run(args: argparse.Namespace, source: images.ImageSource) -> dict[str, Any]:
    """Writes both datasets once, times each format's rows interleaved."""
    import litdata
    import streaming

    files = source.files(HEIGHT, WIDTH, args.formats_files)
    recipe = f"{source.recipe(HEIGHT, WIDTH, False)}-{args.formats_files}"
    folders = {"MDS": _written(args.cache / f"mds-{recipe}", files.paths, _write_mds),
               "LitData": _written(args.cache / f"litdata-{recipe}", files.paths, _write_litdata)}
    torch.manual_seed(args.seed)
    rows = []
    for fmt in FORMATS:
        runners = _runners(fmt, folders[fmt], args.formats_length)
        timed = loaders.time_interleaved(runners, args.formats_rounds)
        del runners  # stops the persistent workers
        summaries = [loaders.summarise(f"{fmt} {name}", timed["per_round"][name],
                                       timed["warmup"][name]) for name in (OWN, CUSTOM, LANE)]
        for row in summaries:
            row["vs_own"] = row["median_images_per_s"] / summaries[0]["median_images_per_s"]
        rows += summaries
    return {"config": {"images": source.kind, "height": HEIGHT, "width": WIDTH, "size": SIZE,
                       "workers": WORKERS, "batch_size": BATCH, "length": args.formats_length,
                       "rounds": args.formats_rounds, "files": args.formats_files,
                       "folders": {fmt: str(folder) for fmt, folder in folders.items()},
                       "set": files.description, "streaming_version": streaming.__version__,
                       "litdata_version": litdata.__version__},
            "configs": rows}


def format_table(result: dict[str, Any]) -> str:
    """The rows as a markdown table."""
    config = result["config"]
    info = config["set"]
    headers = ["pipeline", "images/s", "min", "max", "spread", "vs own decode"]
    rows = [[*loaders.table_cells(row), report.format_ratio(row["vs_own"])]
            for row in result["configs"]]
    return "\n".join([
        f"MDS (streaming {config['streaming_version']}) and LitData ({config['litdata_version']}) "
        f"on {config['images']} {config['width']}x{config['height']} files ({config['files']} "
        f"baseline, {info['mean_encoded_bytes'] / 1024:.0f} KiB):",
        f"DataLoader, {config['workers']} workers, batch {config['batch_size']}, "
        f"{config['length']} images per epoch, RandomResizedCrop({config['size']}) + flip, uint8; "
        f"median of {config['rounds']} interleaved epochs after a warm-up", "",
        report.markdown_table(headers, rows, right=[False] + [True] * 5)])


def main(argv: list[str] | None = None) -> None:
    report.standalone_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
