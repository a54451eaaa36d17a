"""LaneBatchSampler: an order that (seed, epoch) alone determine, shared out among ranks."""

from __future__ import annotations

import re

import pytest
import torch

from custom_op.lane import LaneBatchSampler


def test_the_order_is_a_function_of_seed_and_epoch() -> None:
    sampler = LaneBatchSampler(10, 3, seed=4)
    first = list(sampler)
    torch.rand(5)  # the global generator is not the sampler's
    assert list(LaneBatchSampler(10, 3, seed=4)) == first == list(sampler)
    assert sorted(i for batch in first for i in batch) == list(range(10))
    assert [len(batch) for batch in first] == [3, 3, 3, 1] and len(sampler) == 4
    sampler.set_epoch(1)
    assert list(sampler) != first
    assert list(LaneBatchSampler(10, 3, seed=5)) != first
    assert list(LaneBatchSampler(10, 3, shuffle=False)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_the_default_seed_is_read_from_the_global_generator_not_drawn() -> None:
    torch.manual_seed(77)
    state = torch.get_rng_state()
    sampler = LaneBatchSampler(10, 3)
    assert sampler.seed == 77 and torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_take_disjoint_equal_shares(drop_last) -> None:
    shares = [list(LaneBatchSampler(11, 2, seed=1, drop_last=drop_last, rank=rank,
                                    world_size=3)) for rank in range(3)]
    lengths = {len(share) for share in shares}
    assert lengths == ({1} if drop_last else {2})  # 3 indices each (drop) or 4 (padded)
    indices = [i for share in shares for batch in share for i in batch]
    if drop_last:
        assert len(set(indices)) == len(indices) == 6
    else:
        assert set(indices) == set(range(11)) and len(indices) == 12


def test_state_dict_resumes_after_the_batches_yielded() -> None:
    sampler = LaneBatchSampler(10, 3, seed=4)
    sampler.set_epoch(2)
    everything = list(sampler)
    iterator = iter(sampler)
    next(iterator)
    state = sampler.state_dict()
    assert state == {"epoch": 2, "batches": 1}
    resumed = LaneBatchSampler(10, 3, seed=4)
    resumed.load_state_dict(state)
    assert list(resumed) == everything[1:]
    assert list(resumed) == everything  # the skip is for one iteration only


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        LaneBatchSampler(10, 0)
    with pytest.raises(TypeError, match="length must be an int, got 2.5"):
        LaneBatchSampler(2.5, 1)
    with pytest.raises(ValueError, match="rank must be below world_size=2, got 2"):
        LaneBatchSampler(10, 1, rank=2, world_size=2)
    with pytest.raises(ValueError, match="epoch must be an int >= 0, got -1"):
        LaneBatchSampler(10, 1).set_epoch(-1)


@pytest.mark.parametrize("name, value", [("batches", -1), ("batches", 1.5), ("batches", True),
                                         ("batches", "2"), ("epoch", -1), ("epoch", 0.5)])
def test_a_state_with_a_bad_count_is_refused_by_the_loaders_rule(name, value) -> None:
    sampler = LaneBatchSampler(10, 3, seed=4)
    state = {"epoch": 1, "batches": 1, name: value}
    with pytest.raises(ValueError, match=rf"^LaneBatchSampler.load_state_dict: {name} must be "
                                         rf"an int >= 0, got {re.escape(repr(value))}$"):
        sampler.load_state_dict(state)
    assert sampler.state_dict() == {"epoch": 0, "batches": 0}  # nothing taken from it
    assert len(list(sampler)) == 4
