"""Pure logic of the shard stage: shard counts, the seeded permutation, layouts, writing one shard."""

from __future__ import annotations

import numpy as np
import pytest

from lmshards.preprocess.stages.pack import PackedGroup, pack_blocks
from lmshards.preprocess.stages.shard import (
    GroupSize,
    ShardBatch,
    group_to_shards,
    layout_splits,
    num_shards_for,
    permute,
    shard_of,
    spill_group,
    write_shard,
)
from lmshards.schemas.layouts import TEMP_DIR_NAME
from lmshards.schemas.records import decode_examples, encode_examples, frame_record, read_records

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


def test_layout_numbers_groups_in_order_and_sizes_shards():
    sizes = [GroupSize("train", 2, 30), GroupSize("train", 0, 10), GroupSize("validation", 0, 3)]
    layouts = layout_splits(
        sizes, record_bytes=100, target_shard_bytes=1000, multiple=4, num_shards=None
    )
    assert layouts["train"].group_offsets == {0: 0, 2: 10}
    assert (layouts["train"].num_records, layouts["train"].num_shards) == (40, 4)
    assert (layouts["validation"].num_records, layouts["validation"].num_shards) == (3, 4)
    empty = layout_splits(
        [GroupSize("train", 0, 5)],
        record_bytes=1,
        target_shard_bytes=10,
        multiple=8,
        num_shards=None,
    )
    assert (empty["validation"].num_records, empty["validation"].num_shards) == (0, 0)


def test_assigned_groups_cover_every_position_once(tmp_path):
    groups = [
        PackedGroup(
            split="train",
            group=g,
            documents=1,
            blocks=pack_blocks(np.arange(8 * (g + 2), dtype=np.int32), seq_len=8, remainder="drop"),
        )
        for g in range(3)
    ]  # 2, 3 and 4 blocks
    layout = layout_splits(
        [GroupSize.of(g) for g in groups],
        record_bytes=1,
        target_shard_bytes=1,
        multiple=1,
        num_shards=3,
    )["train"]
    dtype = np.dtype("<u2")
    spilled = [spill_group(g, dtype=dtype, directory=str(tmp_path / TEMP_DIR_NAME)) for g in groups]
    assert [s.size for s in spilled] == [GroupSize.of(g) for g in groups]
    batches = [item for s in spilled for item in group_to_shards(s, layout, seed=1)]
    positions = np.concatenate([batch.positions for _, batch in batches])
    assert sorted(positions.tolist()) == list(range(9))
    for (split, shard), batch in batches:
        assert split == "train" and batch.rows.shape == (batch.positions.size, 2, 8)
        assert batch.names == ("attention_mask", "input_ids") and batch.rows.dtype == dtype
        assert (shard_of(batch.positions, 9, 3) == shard).all()
    # The rows waited in files under the output's temporary directory, one a group.
    assert sorted(p.name.split("-")[2] for p in (tmp_path / TEMP_DIR_NAME).iterdir()) == [
        "00000",
        "00001",
        "00002",
    ]
    # Every block's ids once, whatever shard it went to.
    ids = np.concatenate([batch.rows[:, 1] for _, batch in batches])
    assert sorted(ids[:, 0].tolist()) == sorted(8 * b for g in range(3) for b in range(g + 2))


def test_write_shard_orders_records_by_position_whatever_the_batches(tmp_path):
    names = ("attention_mask", "input_ids")
    rows = np.stack([np.ones((5, 3)), np.arange(15).reshape(5, 3)], axis=1).astype("<u2")
    records = encode_examples({name: rows[:, i] for i, name in enumerate(names)})
    frames = [frame_record(r) for r in records]
    batches = [
        ShardBatch(positions=np.array([13, 10]), rows=rows[[3, 0]], names=names),
        ShardBatch.empty(),
        ShardBatch(positions=np.array([12, 11, 14]), rows=rows[[2, 1, 4]], names=names),
    ]
    info = write_shard(str(tmp_path / "a"), ("train", 1), batches, num_shards=4)
    again = write_shard(str(tmp_path / "b"), ("train", 1), list(reversed(batches)), num_shards=4)
    assert (
        info == again and info.path == "train/train-00001-of-00004-5.tfrecord" and info.records == 5
    )
    data = (tmp_path / "a" / info.path).read_bytes()
    assert data == b"".join(frames) and info.bytes == len(data)
    with open(tmp_path / "a" / info.path, "rb") as f:
        read = decode_examples(list(read_records(f)), names)
    assert read["input_ids"].tolist() == np.arange(15).reshape(5, 3).tolist()
    empty = write_shard(str(tmp_path / "a"), ("validation", 0), [ShardBatch.empty()], num_shards=1)
    assert (empty.records, empty.bytes) == (0, 0)
