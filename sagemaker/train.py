#!/usr/bin/env python3
"""Training entry point for SageMaker training jobs, torchrun, or a plain run.

It follows the SageMaker training toolkit's conventions:

* data: the ``train`` channel, an ImageFolder-style tree of JPEG files
  (``<root>/<class name>/<file>.jpg``) in ``SM_CHANNEL_TRAIN``
  (default ``./data/train``), or with ``--data-format webdataset`` tar shards
  there (``*.tar`` holding ``KEY.jpg`` and ``KEY.cls`` per sample, as
  ``make_dataset.py --shards`` writes them);
* the model: written by rank 0 to ``SM_MODEL_DIR`` (default ``./model``) as
  ``model.pth``, a dict with the ``state_dict`` and the ``classes``;
* metrics: ``metrics.json`` in ``SM_OUTPUT_DATA_DIR`` (default ``./output``);
* hyperparameters: ``--name value`` arguments, every value explicit
  (``--max-steps 0``, never a bare ``--flag``), as the toolkit passes them;
* logs: stdout (the toolkit sends it to CloudWatch). custom_op's build
  messages go to stderr.

Started by torchrun (``WORLD_SIZE`` > 1, as SageMaker's ``torch_distributed``
launcher does), it trains with DistributedDataParallel (gloo on CPU, nccl on
GPU) and a DistributedSampler; otherwise as one plain process.

Data goes through custom_op's batch lane (docs/batch_lane.md): DataLoader
workers decode whole batches of RandomResizedCrop(--crop-size) windows in one
native call, from a JpegFolder (a DistributedSampler's batches) or tar shards
(custom_op.lane.shard_loader), uint8 until the device. ``import custom_op``
builds the extension on a cold machine: one rank builds, the others wait.

Examples::

    python sagemaker/train.py --epochs 1 --max-steps 20
    torchrun --standalone --nproc_per_node 2 sagemaker/train.py --epochs 2
    torchrun --standalone --nproc_per_node 2 sagemaker/train.py --data-format webdataset
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
JPEG_SUFFIXES = (".jpg", ".jpeg")


# Arguments. No torch at module level: launch.py imports this module to check the
# hyperparameters it is given, and a bad channel folder must fail fast.

def _env_path(name: str, default: str) -> str:
    return os.environ.get(name) or default


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Train a small CNN on a folder of JPEGs, decoding only random crops "
                    "(custom_op). SageMaker conventions: SM_CHANNEL_TRAIN, SM_MODEL_DIR, "
                    "SM_OUTPUT_DATA_DIR; hyperparameters as --name value.")
    hp = parser.add_argument_group("hyperparameters")
    hp.add_argument("--epochs", type=int, default=2, help="passes over the data (default 2)")
    hp.add_argument("--batch-size", type=int, default=32,
                    help="images per step and per rank (default 32)")
    hp.add_argument("--lr", type=float, default=0.01,
                    help="SGD learning rate, momentum 0.9 (default 0.01)")
    hp.add_argument("--num-workers", type=int, default=2,
                    help="DataLoader worker processes per rank; 0 loads in the training "
                         "process (default 2)")
    hp.add_argument("--max-steps", type=int, default=0,
                    help="stop after this many optimizer steps in all; 0 = no limit (default 0)")
    hp.add_argument("--crop-size", type=int, default=224,
                    help="side of the square random crop decoded from each image (default 224)")
    hp.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    hp.add_argument("--log-interval", type=int, default=10,
                    help="rank 0 logs the loss every this many steps; 0 = only per epoch "
                         "(default 10)")
    hp.add_argument("--log-indices", type=str, default="",
                    help="folder to write indices-rank<N>.json into: the dataset indices each "
                         "rank trained on, per epoch; empty = off (default)")
    hp.add_argument("--on-error", type=str, default="raise", choices=("raise", "substitute"),
                    help="a JPEG that cannot be decoded: raise (stop the job, naming the file; "
                         "default) or substitute the next sample, logging a warning that names "
                         "the file")
    hp.add_argument("--data-format", type=str, default="folder", choices=("folder", "webdataset"),
                    help="folder: an ImageFolder tree (default); webdataset: tar shards (*.tar, "
                         "KEY.jpg + KEY.cls per sample) read with the webdataset package")
    hp.add_argument("--shuffle-buffer", type=int, default=1000,
                    help="with --data-format webdataset: samples each DataLoader worker shuffles "
                         "among (webdataset's shuffle); 0 = shard order only (default 1000)")
    hp.add_argument("--dataset-size", type=int, default=0,
                    help="with --data-format webdataset: samples in all shards; with "
                         "--num-classes, the shards are not scanned at start-up (default 0: "
                         "scan them)")
    hp.add_argument("--num-classes", type=int, default=0,
                    help="with --data-format webdataset: classes (labels 0..N-1); 0 = find them "
                         "by scanning the shards (default)")
    paths = parser.add_argument_group("paths (SageMaker sets the environment variables)")
    paths.add_argument("--train", type=str, default=_env_path("SM_CHANNEL_TRAIN", "data/train"),
                       help="training images: SM_CHANNEL_TRAIN, else ./data/train")
    paths.add_argument("--model-dir", type=str, default=_env_path("SM_MODEL_DIR", "model"),
                       help="where rank 0 saves model.pth: SM_MODEL_DIR, else ./model")
    paths.add_argument("--output-data-dir", type=str,
                       default=_env_path("SM_OUTPUT_DATA_DIR", "output"),
                       help="where rank 0 writes metrics.json: SM_OUTPUT_DATA_DIR, else ./output")
    return parser


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    positive = {"epochs": args.epochs, "batch-size": args.batch_size, "crop-size": args.crop_size}
    for name, value in positive.items():
        if value < 1:
            parser.error(f"--{name} must be at least 1, got {value}")
    for name, value in {"num-workers": args.num_workers, "max-steps": args.max_steps,
                        "log-interval": args.log_interval, "shuffle-buffer": args.shuffle_buffer,
                        "dataset-size": args.dataset_size, "num-classes": args.num_classes}.items():
        if value < 0:
            parser.error(f"--{name} must be 0 or more, got {value}")
    if not args.lr > 0:
        parser.error(f"--lr must be positive, got {args.lr}")


def check_channel_folder(root_text: str) -> Path:
    """The training data folder, or exit with a message that says where it should be."""
    root = Path(root_text).expanduser()
    if not root.exists():
        raise SystemExit(f"train.py: the training data folder {root.resolve()} does not exist. "
                         + _WHERE)
    if not root.is_dir():
        raise SystemExit(f"train.py: the training data path {root.resolve()} is not a folder. "
                         + _WHERE)
    return root


_WHERE = ("Point SM_CHANNEL_TRAIN (set by SageMaker for the 'train' channel; default "
          "./data/train) or --train at a folder of class subfolders holding JPEG files: "
          "<folder>/<class>/<image>.jpg.")


# Data and model (torch is imported inside functions, see above).

#: Per-channel mean and standard deviation the model's input is normalised with, on the device.
NORMALIZE_MEAN = (0.5, 0.5, 0.5)
NORMALIZE_STD = (0.25, 0.25, 0.25)


def train_transform(crop_size: int):
    """ImageNet's training recipe, which the batch lane fuses: each window decoded at its
    reduced DCT scale and resized straight into the batch, the flips on the batch."""
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomResizedCrop(crop_size), v2.RandomHorizontalFlip()])


def open_dataset(args: argparse.Namespace):
    """custom_op.JpegFolder over the channel (torchvision's listing); exits with a clear
    message for a folder without images."""
    import custom_op

    try:
        return custom_op.JpegFolder(args.train, extensions=JPEG_SUFFIXES, on_error=args.on_error)
    except FileNotFoundError as error:  # a class subfolder without JPEG files, say
        raise SystemExit(f"train.py: the training data folder "
                         f"{Path(args.train).expanduser().resolve()} cannot be read: {error}. "
                         + _WHERE)


def check_folder_holds_jpegs(root: Path) -> None:
    """Exits, before torch is imported, when no class subfolder of ``root`` holds a JPEG file (a
    job given the wrong channel fails at once); JpegFolder's listing may still refuse the rest."""
    for child in root.iterdir():
        if child.is_dir() and any(name.lower().endswith(JPEG_SUFFIXES)
                                  for _, _, names in os.walk(child, followlinks=True)
                                  for name in names):
            return
    root = root.expanduser().resolve()
    loose = [p for p in root.iterdir() if p.suffix.lower() in JPEG_SUFFIXES]
    detail = (f" (it holds {len(loose)} JPEG files directly, but they must be in one "
              f"subfolder per class)" if loose else "")
    raise SystemExit(f"train.py: the training data folder {root} is empty: no JPEG files "
                     f"(.jpg, .jpeg) in class subfolders{detail}. " + _WHERE)


def open_shards(args: argparse.Namespace):
    """custom_op.lane.ShardSet over the channel: the shards, their size and classes."""
    import tarfile

    from custom_op.lane import ShardSet

    def warn(message: str) -> None:
        print(f"train.py: warning: {message}: training skips what cannot be read",
              file=sys.stderr, flush=True)

    try:
        return ShardSet(Path(args.train).expanduser(), args.dataset_size, args.num_classes,
                        args.on_error, warn)
    except FileNotFoundError as error:
        raise SystemExit(f"train.py: {error}. " + _WHERE) from None
    except tarfile.ReadError as error:
        raise SystemExit(f"train.py: {error}; --on-error substitute would skip what cannot be "
                         "read") from None


def make_loader(args: argparse.Namespace, ranks: Ranks, dataset, cuda: bool):
    """Returns (sampler, loader): whole batches decoded in the DataLoader's workers by the batch
    lane; each rank gets a disjoint, equal share (DistributedSampler, drop_last)."""
    import torch
    from torch.utils.data import BatchSampler, DistributedSampler

    from custom_op.lane import BatchLane, lane_dataloader

    torch.manual_seed(args.seed + ranks.rank)  # different crops on every rank
    sampler = DistributedSampler(range(len(dataset)), num_replicas=ranks.world_size,
                                 rank=ranks.rank, shuffle=True, seed=args.seed, drop_last=True)
    batches = BatchSampler(sampler, args.batch_size, drop_last=False)
    loader = lane_dataloader(BatchLane(dataset, train_transform(args.crop_size)), batches,
                             num_workers=args.num_workers, pin_memory=cuda, with_indices=True,
                             persistent_workers=args.epochs > 1)
    return sampler, loader


def make_shard_loader(args: argparse.Namespace, ranks: Ranks, shards, cuda: bool):
    """The shards split by rank and worker, reshuffled every epoch, batches decoded by the
    batch lane: custom_op.lane.shard_loader."""
    import torch
    import webdataset as wds

    from custom_op.lane import BatchLane, shard_loader

    torch.manual_seed(args.seed + ranks.rank)  # different crops on every rank
    # raise: stop the job naming the shard (and member); substitute: skip or replace, warning.
    handler = wds.reraise_exception if args.on_error == "raise" else wds.warn_and_continue
    lane = BatchLane(None, train_transform(args.crop_size), on_error=args.on_error)
    try:
        return shard_loader(shards, lane, batch_size=args.batch_size, world_size=ranks.world_size,
                            num_workers=args.num_workers, seed=args.seed + ranks.rank,
                            shuffle_buffer=args.shuffle_buffer, pin_memory=cuda, handler=handler)
    except ValueError as error:
        raise SystemExit(f"train.py: {error}") from None


def build_model(num_classes: int, width: int = 32):
    """A small CNN for normalised float RGB input (see NORMALIZE_MEAN, NORMALIZE_STD)."""
    from torch import nn

    def block(channels_in: int, channels_out: int) -> list:
        return [nn.Conv2d(channels_in, channels_out, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(channels_out), nn.ReLU(inplace=True)]

    return nn.Sequential(*block(3, width), *block(width, 2 * width),
                         *block(2 * width, 4 * width), *block(4 * width, 4 * width),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, num_classes))


# The job.

class Ranks:
    """Where this process sits: torchrun's environment, or a plain run."""

    def __init__(self) -> None:
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.distributed = self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def log(self, message: str) -> None:
        print(f"[rank {self.rank}/{self.world_size}] {message}", flush=True)

    def log_main(self, message: str) -> None:
        if self.is_main:
            self.log(message)


def _add_custom_op_to_path() -> None:
    # In a SageMaker job, source_dir (/opt/ml/code) holds train.py next to the
    # custom_op package; in this repository custom_op is one folder up.
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    if (HERE.parent / "custom_op" / "__init__.py").is_file() and str(HERE.parent) not in sys.path:
        sys.path.append(str(HERE.parent))


def _log_start(args: argparse.Namespace, ranks: Ranks, dataset) -> None:
    ranks.log_main(f"hyperparameters: epochs={args.epochs} batch_size={args.batch_size} "
                   f"lr={args.lr} num_workers={args.num_workers} max_steps={args.max_steps} "
                   f"crop_size={args.crop_size} seed={args.seed}")
    hosts = " ".join(f"{name}={os.environ.get(name, '-')}"
                     for name in ("SM_CURRENT_HOST", "SM_HOSTS", "SM_NUM_GPUS"))
    ranks.log_main(f"SageMaker: {hosts}; world size {ranks.world_size}")
    where = f"{len(dataset.urls)} shards in " if args.data_format == "webdataset" else ""
    counted = ("" if args.data_format != "webdataset" else " (scanned)" if dataset.scanned
               else " (from --dataset-size and --num-classes)")
    ranks.log_main(f"data: {len(dataset)} JPEG files in {len(dataset.classes)} classes in "
                   f"{where}{Path(args.train).resolve()}{counted}")


def import_custom_op(ranks: Ranks):
    """Loads custom_op's extension, which builds it on a cold machine: every rank at once."""
    started = time.monotonic()
    import custom_op
    custom_op.libjpeg_version()  # the first call that needs the extension loads (or builds) it
    seconds = time.monotonic() - started
    ranks.log(f"custom_op ready after {seconds:.1f} s (libjpeg-turbo "
              f"{custom_op.libjpeg_version()}, from {Path(custom_op.__file__).parent})")
    return custom_op, seconds


def setup_device(ranks: Ranks):
    """One GPU per rank, or none at all, and the process group when distributed.

    The same choice on every rank, so the backend matches (more ranks than
    GPUs falls back to the CPU and gloo). Returns (device, cuda).
    """
    import torch
    import torch.distributed as dist

    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= local_world_size
    if torch.cuda.is_available() and not cuda:
        ranks.log_main(f"{torch.cuda.device_count()} GPU(s) for {local_world_size} ranks per "
                       f"machine: training on the CPU")
    if cuda:
        torch.cuda.set_device(ranks.local_rank)
        device = torch.device("cuda", ranks.local_rank)
    else:
        device = torch.device("cpu")
    if ranks.distributed:
        backend = "nccl" if cuda else "gloo"
        dist.init_process_group(backend=backend, init_method="env://")
        ranks.log_main(f"DistributedDataParallel: backend {backend}, {ranks.world_size} ranks")
    else:
        ranks.log_main(f"one process on {device} (not started by torchrun with WORLD_SIZE > 1)")
    return device, cuda


class Trainer:
    """The model, its optimiser, and one epoch at a time."""

    def __init__(self, args: argparse.Namespace, ranks: Ranks, num_classes: int, device, cuda: bool):
        import torch
        from torch.nn.parallel import DistributedDataParallel

        from custom_op.transforms import NormalizeBatch

        self.args, self.ranks, self.device, self.cuda = args, ranks, device, cuda
        torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP also broadcasts)
        self.model = build_model(num_classes).to(device)
        self.normalize = NormalizeBatch(NORMALIZE_MEAN, NORMALIZE_STD)
        self.trained = DistributedDataParallel(self.model, device_ids=[ranks.local_rank] if cuda else None) \
            if ranks.distributed else self.model
        self.optimizer = torch.optim.SGD(self.trained.parameters(), lr=args.lr, momentum=0.9)
        self.criterion = torch.nn.CrossEntropyLoss()
        self.global_step = 0

    def reached_max_steps(self) -> bool:
        return bool(self.args.max_steps) and self.global_step >= self.args.max_steps

    def run_epoch(self, epoch: int, loader, steps_per_epoch: int) -> tuple[dict, list[int]]:
        """Trains one epoch; returns its metrics over all ranks and this rank's sample indices."""
        import torch

        args, ranks = self.args, self.ranks
        self.trained.train()
        seen: list[int] = []
        steps = images = 0
        data_wait = 0.0
        loss_sum = torch.zeros((), device=self.device)
        epoch_start = fetch_start = time.perf_counter()
        for batch, targets, indices in loader:
            data_wait += time.perf_counter() - fetch_start
            # uint8 through the DataLoader and the copy; normalised once per batch, here.
            images_on_device = self.normalize(batch.to(self.device, non_blocking=True))
            loss = self.criterion(self.trained(images_on_device),
                                  targets.to(self.device, non_blocking=True))
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            loss_sum += loss.detach()
            steps += 1
            self.global_step += 1
            images += len(indices)
            seen.extend(int(i) for i in indices)
            if ranks.is_main and args.log_interval and self.global_step % args.log_interval == 0:
                ranks.log(f"epoch {epoch + 1} step {steps}/{steps_per_epoch} "
                          f"(global {self.global_step}): loss {loss.item():.4f}")
            fetch_start = time.perf_counter()
            if self.reached_max_steps():
                break
        if self.cuda:
            torch.cuda.synchronize()
        return self._epoch_record(epoch, time.perf_counter() - epoch_start, images, steps,
                                  data_wait, float(loss_sum)), seen

    def _epoch_record(self, epoch: int, elapsed: float, images: int, steps: int, data_wait: float,
                      loss_sum: float) -> dict:
        """Sums over ranks (the slowest rank's time) into the epoch's metrics."""
        import torch
        import torch.distributed as dist

        ranks = self.ranks
        totals = torch.tensor([images, steps, data_wait, loss_sum], dtype=torch.float64,
                              device=self.device)
        longest = torch.tensor([elapsed], dtype=torch.float64, device=self.device)
        if ranks.distributed:
            dist.all_reduce(totals, op=dist.ReduceOp.SUM)
            dist.all_reduce(longest, op=dist.ReduceOp.MAX)
        all_images, all_steps, all_wait, all_loss = totals.tolist()
        seconds, rank_steps = longest.item(), all_steps / ranks.world_size

        def ratio(numerator: float, denominator: float, digits: int):
            return round(numerator / denominator, digits) if denominator > 0 else None

        return {"epoch": epoch + 1, "steps": int(rank_steps), "images": int(all_images),
                "seconds": round(seconds, 4), "images_per_second": ratio(all_images, seconds, 2),
                "step_time_seconds": ratio(seconds, rank_steps, 4),
                "data_wait_seconds": ratio(all_wait, all_steps, 4),
                "loss": ratio(all_loss, all_steps, 4)}


def save_outputs(args: argparse.Namespace, ranks: Ranks, trainer: Trainer, classes: list[str],
                 metrics: list[dict], import_seconds: float) -> None:
    """Rank 0 saves the model and the metrics (with every rank's custom_op import time)."""
    import torch
    import torch.distributed as dist

    import_times = [import_seconds]
    if ranks.distributed:
        import_times = [0.0] * ranks.world_size
        dist.all_gather_object(import_times, import_seconds)
    if not ranks.is_main:
        return
    (model_dir := Path(args.model_dir)).mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": trainer.model.state_dict(), "classes": classes,
                "crop_size": args.crop_size, "arch": "build_model(len(classes), width=32) "
                "in sagemaker/train.py", "input": "float RGB, N x 3 x H x W: uint8 scaled to [0, 1], then normalised",
                "normalize_mean": NORMALIZE_MEAN, "normalize_std": NORMALIZE_STD},
               model_dir / "model.pth")
    ranks.log(f"saved the model ({len(classes)} classes) to {model_dir.resolve() / 'model.pth'}")
    (output_dir := Path(args.output_data_dir)).mkdir(parents=True, exist_ok=True)
    (output_dir / "metrics.json").write_text(json.dumps({
        "world_size": ranks.world_size, "steps": trainer.global_step, "epochs": metrics,
        "custom_op_import_seconds": [round(t, 2) for t in import_times]}, indent=2))
    ranks.log("custom_op import time per rank: " + ", ".join(f"{t:.1f} s" for t in import_times))


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    root = check_channel_folder(args.train)  # before the build and the process group start
    if args.data_format != "webdataset":
        check_folder_holds_jpegs(root)
    _add_custom_op_to_path()
    dataset = open_shards(args) if args.data_format == "webdataset" else open_dataset(args)
    classes, ranks = dataset.classes, Ranks()
    _log_start(args, ranks, dataset)
    _, import_seconds = import_custom_op(ranks)
    device, cuda = setup_device(ranks)
    sampler, loader = (make_shard_loader(args, ranks, dataset, cuda),) * 2 \
        if args.data_format == "webdataset" else make_loader(args, ranks, dataset, cuda)
    trainer = Trainer(args, ranks, len(classes), device, cuda)
    per_rank = loader.samples_per_rank if args.data_format == "webdataset" else len(sampler)
    ranks.log_main(f"{per_rank} samples per rank and epoch, batch size {args.batch_size} per "
                   f"rank, {len(loader)} steps per epoch"
                   + (f", stopping after {args.max_steps} steps" if args.max_steps else ""))

    epochs_seen, metrics = [], []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        record, seen = trainer.run_epoch(epoch, loader, len(loader))
        epochs_seen.append({"epoch": epoch, "indices": seen})
        metrics.append(record)
        ranks.log_main(
            f"epoch {epoch + 1}/{args.epochs}: {record['steps']} steps, {record['images']} images "
            f"in {record['seconds']:.2f} s: {record['images_per_second']} images/s over "
            f"{ranks.world_size} rank(s), step time {record['step_time_seconds']} s "
            f"(data wait {record['data_wait_seconds']} s), loss {record['loss']}")
        if trainer.reached_max_steps():
            ranks.log_main(f"reached --max-steps {args.max_steps}")
            break

    if args.log_indices:
        folder = Path(args.log_indices)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"indices-rank{ranks.rank}.json").write_text(json.dumps({
            "rank": ranks.rank, "world_size": ranks.world_size, "dataset_size": len(dataset),
            "epochs": epochs_seen}))
    save_outputs(args, ranks, trainer, classes, metrics, import_seconds)
    if ranks.distributed:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()

if __name__ == "__main__":
    main()
