"""A DataLoader worker's batch is made in shared memory from the start: no copy into it.

The batch call decodes into a tensor over fresh shared storage (as default_collate
allocates a worker's batch), which crosses to the training process as a handle; a
batch the tail makes per sample is stacked straight into shared storage too."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader
from torchvision.transforms import v2

import custom_op
import custom_op.lane._batch_lane as lane_module
from custom_op.lane import BatchLane
from custom_op.lane._loaders import LaneBatches
from synthetic import write_jpeg_folder

SIZE = 32


class Probe(LaneBatches):
    """The lane's batch, made in a worker, with what happened there: whether the batch call's
    target was shared memory, whether it is the storage returned, how many copies into shared
    memory (``share_memory_`` calls) were made."""

    def __getitem__(self, indices):
        targets, copies = [], []
        batch_call = lane_module.decode_and_crop_jpeg_batch
        share_tensor, share_storage = torch.Tensor.share_memory_, torch.UntypedStorage.share_memory_

        def recording_call(datas, boxes, **options):
            targets.append(options["out"])
            return batch_call(datas, boxes, **options)

        lane_module.decode_and_crop_jpeg_batch = recording_call
        torch.Tensor.share_memory_ = lambda tensor: copies.append(1) or share_tensor(tensor)
        torch.UntypedStorage.share_memory_ = lambda storage: (copies.append(1)
                                                              or share_storage(storage))
        try:
            images, labels, _ = super().__getitem__(indices)  # and the index counts
        finally:
            lane_module.decode_and_crop_jpeg_batch = batch_call
            torch.Tensor.share_memory_, torch.UntypedStorage.share_memory_ = (share_tensor,
                                                                              share_storage)
        target = targets[0] if targets else None
        facts = [images.is_shared(), len(copies),
                 target is not None and target.is_shared(),
                 target is not None and (target.untyped_storage().data_ptr()
                                         == images.untyped_storage().data_ptr())]
        return images, labels, facts


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("lane-shared") / "train"
    write_jpeg_folder(root, 8, 64, 80, classes=("a", "b"), seed=4)
    return root


@pytest.mark.parametrize("tail", [(), (v2.ToDtype(torch.float32),)],
                         ids=["batch-call", "stacked-tail"])
def test_worker_batches_are_shared_memory_from_the_start(folder, tail) -> None:
    lane = BatchLane(custom_op.JpegFolder(folder),
                     v2.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip(), *tail]))
    loader = DataLoader(Probe(lane), batch_size=None, sampler=[[0, 1, 2, 3], [4, 5, 6, 7]],
                        num_workers=1, multiprocessing_context="fork")
    for images, labels, (shared, copies, target_shared, target_returned) in loader:
        assert images.shape == (4, 3, SIZE, SIZE) and images.is_shared()
        assert shared and copies == 0
        if not tail:  # the batch call decoded into the returned storage itself
            assert target_shared and target_returned
