"""Pure logic of the shard stage: shard counts, the seeded permutation, layouts, writing one shard."""

from __future__ import annotations

import re
import tempfile

import numpy as np
import pytest

from lmshards.plumbing.fs import READ_PIECES
from lmshards.preprocess.stages import shard as shard_module
from lmshards.preprocess.stages.pack import PackedGroup, pack_blocks
from lmshards.preprocess.stages.shard import (
    ASSIGNED_ROWS_PREFIX,
    SHARD_WINDOWS_PREFIX,
    GroupSize,
    ShardBatch,
    ShardPiece,
    ShardRecordsError,
    SplitLayout,
    append_rows,
    assign_to_file,
    group_to_shards,
    layout_splits,
    num_shards_for,
    permute,
    read_rows_in_order,
    rows_in_files,
    shard_batches,
    shard_of,
    shard_range,
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


def _packed_groups(blocks: list[int]) -> list[PackedGroup]:
    """Train groups 0, 1, ... of blocks[g] blocks of 8 tokens each, block b of a group starting at 8 b."""
    return [
        PackedGroup(
            split="train",
            group=g,
            documents=1,
            blocks=pack_blocks(np.arange(8 * n, dtype=np.int32), seq_len=8, remainder="drop"),
        )
        for g, n in enumerate(blocks)
    ]


def test_assigned_groups_cover_every_position_once(tmp_path):
    groups = _packed_groups([2, 3, 4])
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


def test_the_staged_assign_step_hands_on_where_the_rows_lie_and_its_writer_reads_them_back(
    tmp_path,
):
    """assign_to_file writes a group's blocks into one file, shard after shard, and hands on only a
    ShardPiece per shard (positions, file, offset); shard_batches gives back group_to_shards' batches."""
    groups = _packed_groups([40, 41, 42])
    num_shards = READ_PIECES  # more pieces in all than one window of shard_batches
    layout = layout_splits(
        [GroupSize.of(g) for g in groups],
        record_bytes=1,
        target_shard_bytes=1,
        multiple=1,
        num_shards=num_shards,
    )["train"]
    temp = tmp_path / TEMP_DIR_NAME
    spilled = [spill_group(g, dtype=np.dtype("<u2"), directory=str(temp)) for g in groups]
    expected = [item for s in spilled for item in group_to_shards(s, layout, seed=5)]
    pieces = [
        item for s in spilled for item in assign_to_file(s, layout, seed=5, directory=str(temp))
    ]
    assert [key for key, _ in pieces] == [key for key, _ in expected]
    assigned = sorted(p for p in temp.iterdir() if p.name.startswith(ASSIGNED_ROWS_PREFIX))
    assert len(assigned) == 3  # one file a group, its blocks' rows and nothing else
    assert sum(p.stat().st_size for p in assigned) == sum(b.rows.nbytes for _, b in expected)
    assert all(isinstance(piece, ShardPiece) and not hasattr(piece, "rows") for _, piece in pieces)
    # The writer takes pieces and batches alike (an empty batch stands for a shard no group feeds).
    read = list(shard_batches([ShardBatch.empty(), *(piece for _, piece in pieces)]))
    assert len(read) == len(expected) + 1 > READ_PIECES
    for batch, (_, want) in zip(read[1:], expected):
        assert np.array_equal(batch.positions, want.positions)
        assert np.array_equal(batch.rows, want.rows) and batch.rows.dtype == want.rows.dtype
        assert batch.names == want.names


def test_rows_wait_in_files_for_a_local_output_and_cross_the_shuffle_for_an_object_store(tmp_path):
    assert rows_in_files(str(tmp_path)) and rows_in_files("relative/out")
    assert not rows_in_files("gs://bucket/out")


# Shard 2 of 4 over 20 records: positions [10, 15).
LAYOUT = SplitLayout(num_records=20, num_shards=4, group_offsets={})
NAMES = ("attention_mask", "input_ids")


def _five_records() -> tuple[np.ndarray, bytes]:
    """Five records' rows (in position order) and their framed bytes."""
    rows = np.stack([np.ones((5, 3)), np.arange(15).reshape(5, 3)], axis=1).astype("<u2")
    records = encode_examples({name: rows[:, i] for i, name in enumerate(NAMES)})
    return rows, b"".join(frame_record(r) for r in records)


def _batches(rows: np.ndarray) -> list[ShardBatch]:
    return [
        ShardBatch(positions=np.array([13, 10]), rows=rows[[3, 0]], names=NAMES),
        ShardBatch.empty(),
        ShardBatch(positions=np.array([12, 11, 14]), rows=rows[[2, 1, 4]], names=NAMES),
    ]


def test_shard_range_holds_exactly_the_positions_shard_of_sends_to_the_shard():
    for n in (1, 7, 20, 1001):
        for s in (1, 3, 8, 64):
            owners = shard_of(np.arange(n), n, s)
            for shard in range(s):
                lo, hi = shard_range(
                    shard, SplitLayout(num_records=n, num_shards=s, group_offsets={})
                )
                assert np.flatnonzero(owners == shard).tolist() == list(range(lo, hi))


def test_write_shard_orders_records_by_position_whatever_the_batches(tmp_path):
    rows, frames = _five_records()
    batches = _batches(rows)
    info = write_shard(str(tmp_path / "a"), ("train", 2), batches, layout=LAYOUT)
    again = write_shard(str(tmp_path / "b"), ("train", 2), reversed(batches), layout=LAYOUT)
    assert (
        info == again and info.path == "train/train-00002-of-00004-5.tfrecord" and info.records == 5
    )
    data = (tmp_path / "a" / info.path).read_bytes()
    assert data == frames and info.bytes == len(data)
    with open(tmp_path / "a" / info.path, "rb") as f:
        read = decode_examples(list(read_records(f)), NAMES)
    assert read["input_ids"].tolist() == np.arange(15).reshape(5, 3).tolist()
    empty = write_shard(
        str(tmp_path / "a"),
        ("validation", 0),
        [ShardBatch.empty()],
        layout=SplitLayout(num_records=0, num_shards=1, group_offsets={}),
    )
    assert (empty.records, empty.bytes) == (0, 0)


def test_a_batch_already_in_position_order_is_written_from_its_own_rows(tmp_path, monkeypatch):
    """The in-process path sorts each shard's rows as it reads them: the writer must not hold them a
    second time, and any other batch (out of order, or one of several) is still put in order."""
    rows, frames = _five_records()
    placed = []
    real = shard_module._placed
    monkeypatch.setattr(
        shard_module, "_placed", lambda *args: placed.append(result := real(*args)) or result
    )
    in_order = ShardBatch(positions=np.arange(10, 15), rows=rows, names=NAMES)
    shuffled = ShardBatch(
        positions=np.array([14, 10, 12, 11, 13]), rows=rows[[4, 0, 2, 1, 3]], names=NAMES
    )
    split_up = _batches(rows)
    for name, batches in (("a", [in_order]), ("b", [shuffled]), ("c", split_up)):
        info = write_shard(str(tmp_path / name), ("train", 2), batches, layout=LAYOUT)
        assert (tmp_path / name / info.path).read_bytes() == frames
    assert placed[0] is rows  # the in-order batch's own array
    assert placed[1] is not shuffled.rows and placed[2] is not split_up[0].rows


def test_rows_read_in_order_are_the_rows_written_sorted_by_position(tmp_path):
    rng = np.random.default_rng(5)
    positions = rng.permutation(1000)
    rows = rng.integers(0, 60_000, (1000, 2, 7)).astype("<u2")
    path = str(tmp_path / "rows")
    for piece in np.split(np.arange(1000), [1, 300, 301, 750]):  # pieces of 1, 299, 1, 449, 250
        append_rows(path, positions[piece], rows[piece])
    in_order_positions, in_order = read_rows_in_order(path, np.dtype("<u2"), (2, 7))
    assert in_order_positions.tolist() == list(range(1000))
    assert np.array_equal(in_order, rows[np.argsort(positions)])
    assert np.array_equal(in_order[positions], rows)
    empty = read_rows_in_order(str(tmp_path / "none"), np.dtype("<u2"), (2, 7))
    assert empty[0].size == 0 and empty[1].shape == (0, 2, 7)


@pytest.mark.parametrize("window_records", [1, 2, 4])
def test_a_shard_past_the_window_is_ordered_through_local_files_into_the_same_bytes(
    tmp_path, monkeypatch, window_records
):
    rows, frames = _five_records()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read again
    window_bytes = window_records * rows[0].nbytes
    info = write_shard(
        str(tmp_path / "a"), ("train", 2), _batches(rows), layout=LAYOUT, window_bytes=window_bytes
    )
    assert (tmp_path / "a" / info.path).read_bytes() == frames and info.records == 5
    assert not [p for p in (tmp_path / "tmp").iterdir() if p.name.startswith(SHARD_WINDOWS_PREFIX)]


@pytest.mark.parametrize("window_bytes", [None, 6])
@pytest.mark.parametrize(
    "positions, what",
    [
        ([10, 11, 12, 13], "4 records for 5 positions"),
        ([10, 11, 12, 13, 13], "5 records for 5 positions"),
        ([10, 11, 12, 13, 14, 14], "6 records for 5 positions"),
        ([9, 10, 11, 12, 13], "a position outside [10, 15)"),
        ([10, 11, 12, 13, 15], "a position outside [10, 15)"),
    ],
)
def test_a_shard_missing_or_repeating_a_record_is_refused_before_it_is_written(
    tmp_path, positions, what, window_bytes
):
    rows = np.zeros((len(positions), 2, 3), "<u2")
    batch = ShardBatch(positions=np.array(positions), rows=rows, names=NAMES)
    with pytest.raises(
        ShardRecordsError,
        match=rf"shard 2 of the train split got {re.escape(what)}.*Run the job again",
    ):
        write_shard(str(tmp_path), ("train", 2), [batch], layout=LAYOUT, window_bytes=window_bytes)
    assert not (tmp_path / "train").exists() or not list((tmp_path / "train").iterdir())
