"""Pure functions of the shard stage: shard counts and the seeded permutation."""

from __future__ import annotations

import numpy as np
import pytest

from preprocess.sharding import num_shards_for, permute, shard_of

MB = 1 << 20


def test_num_shards_rounds_up_to_the_multiple():
    assert num_shards_for(1, target_shard_bytes=128 * MB, multiple=8) == 8
    assert num_shards_for(128 * MB * 8, target_shard_bytes=128 * MB, multiple=8) == 8
    assert num_shards_for(128 * MB * 8 + 1, target_shard_bytes=128 * MB, multiple=8) == 16
    assert num_shards_for(100, target_shard_bytes=10, multiple=1) == 10
    assert num_shards_for(100, target_shard_bytes=10, multiple=8, num_shards=3) == 8
    assert num_shards_for(100, target_shard_bytes=10, multiple=4, num_shards=12) == 12
    assert num_shards_for(0, target_shard_bytes=10, multiple=8) == 0


@pytest.mark.parametrize("n,s", [(1, 8), (7, 8), (8, 8), (100, 8), (1001, 16), (12345, 24)])
def test_shards_are_balanced_within_one(n, s):
    counts = np.bincount(shard_of(np.arange(n), n, s), minlength=s)
    assert counts.sum() == n and len(counts) == s
    assert counts.max() - counts.min() <= 1


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 13, 16, 17, 97, 256, 1000, 4099, 65537])
def test_permutation_is_a_bijection(n):
    out = permute(np.arange(n), n, seed=3)
    assert sorted(out.tolist()) == list(range(n))


def test_permutation_is_pure_and_seeded():
    n = 10_000
    full = permute(np.arange(n), n, seed=11)
    # Any subset, on any worker, maps the same way.
    assert np.array_equal(permute(np.arange(5000, 7000), n, seed=11), full[5000:7000])
    assert np.array_equal(permute(np.arange(n), n, seed=11), full)
    other = permute(np.arange(n), n, seed=12)
    assert not np.array_equal(full, other)
    assert (full != np.arange(n)).mean() > 0.99  # it actually shuffles
