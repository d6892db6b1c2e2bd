"""Pure functions of the shuffle -> shard stages: shard counts and the seeded permutation.

The global shuffle needs no sort: block i of N (numbered group by group) goes to position
permute(i) of a seeded bijection of [0, N), and position p to shard p * S // N, so shards hold
N // S or N // S + 1 records whatever the runner, worker count or bundle sizes.
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_TARGET_SHARD_MB = 128.0
DEFAULT_SHARD_MULTIPLE = 8
MB = 1 << 20

_FEISTEL_ROUNDS = 4
_U64 = np.uint64


# ---------------------------------------------------------------- shard counts


def num_shards_for(total_bytes: int, *, target_shard_bytes: float, multiple: int, num_shards: int | None = None) -> int:
    """Shards for a split: `num_shards` if given, else ceil(total_bytes / target), rounded up to `multiple`.

    A split with no bytes gets no shards.
    """
    if total_bytes <= 0:
        return 0
    count = num_shards if num_shards else math.ceil(total_bytes / target_shard_bytes)
    return max(multiple, math.ceil(count / multiple) * multiple)


def shard_of(positions: np.ndarray, num_records: int, num_shards: int) -> np.ndarray:
    """Shard of each shuffled position: contiguous ranges whose sizes differ by at most 1."""
    return (positions.astype(np.int64) * num_shards) // num_records



# ---------------------------------------------------------------- the permutation


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer on uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def _feistel(x: np.ndarray, *, half_bits: int, keys: np.ndarray) -> np.ndarray:
    mask = _U64((1 << half_bits) - 1)
    left, right = x >> _U64(half_bits), x & mask
    for key in keys:
        left, right = right, left ^ (_mix64(right ^ key) & mask)
    return (left << _U64(half_bits)) | right


def permute(indices: np.ndarray, n: int, seed: int) -> np.ndarray:
    """A seeded bijection of [0, n) applied to `indices` (a Feistel network with cycle walking).

    Pure and O(1) in memory: any subset of indices can be permuted independently, on any worker.
    """
    indices = np.asarray(indices, dtype=np.uint64)
    if n <= 1:
        return indices.astype(np.int64)
    half_bits = max(1, math.ceil((n - 1).bit_length() / 2))
    with np.errstate(over="ignore"):
        keys = _mix64(np.arange(_FEISTEL_ROUNDS, dtype=np.uint64) + _U64(seed % (1 << 64)) * _U64(_FEISTEL_ROUNDS + 1))
        out = _feistel(indices, half_bits=half_bits, keys=keys)
        # Cycle walking: the network permutes [0, 4^half_bits); re-apply until inside [0, n).
        outside = out >= _U64(n)
        while outside.any():
            out[outside] = _feistel(out[outside], half_bits=half_bits, keys=keys)
            outside = out >= _U64(n)
    return out.astype(np.int64)
