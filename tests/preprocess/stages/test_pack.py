"""Pure logic of the pack stage: group sizing, block packing, hash order, a group's totals."""

from __future__ import annotations

import numpy as np
import pytest

from lmshards.preprocess.stages.encode import TokenizedChunk
from lmshards.preprocess.stages.pack import (
    best_fit_bins,
    num_groups,
    order_by_hash,
    pack_best_fit,
    pack_blocks,
    pack_group,
    sum_totals,
)
from lmshards.schemas.manifest import SplitTotals


def test_num_groups_targets_group_tokens():
    assert num_groups(0, 1.0) == 1
    assert num_groups(4 * (1 << 20), 1.0) == 1
    assert num_groups(40 * (1 << 20), 1.0) == 10
    assert num_groups(40 * (1 << 20), 0.005) == 1
    assert num_groups(4000, 1.0, group_tokens=100) == 10


def test_pack_drop_continues_documents_and_drops_one_remainder():
    tokens = np.arange(23, dtype=np.int32)  # e.g. documents of 5, 9 and 9 tokens, concatenated
    packed = pack_blocks(tokens, seq_len=8, remainder="drop")
    assert packed.ids.tolist() == [list(range(0, 8)), list(range(8, 16))]
    assert (
        packed.tokens_in,
        packed.tokens_written,
        packed.tokens_dropped,
        packed.padding_tokens,
    ) == (23, 16, 7, 0)
    assert packed.attention_masks().tolist() == [[1] * 8] * 2


def test_pack_pad_fills_last_block_with_pad_and_mask_zero():
    packed = pack_blocks(np.arange(1, 20, dtype=np.int32), seq_len=8, remainder="pad", pad_id=0)
    assert packed.num_blocks == 3
    assert packed.ids[2].tolist() == [17, 18, 19, 0, 0, 0, 0, 0]
    assert packed.attention_masks().tolist() == [[1] * 8, [1] * 8, [1, 1, 1, 0, 0, 0, 0, 0]]
    assert (
        packed.tokens_in,
        packed.tokens_written,
        packed.tokens_dropped,
        packed.padding_tokens,
    ) == (19, 19, 0, 5)


@pytest.mark.parametrize("total", [0, 1, 7, 8, 9, 64, 1001])
@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_pack_accounting_balances(total, remainder):
    tokens = np.random.default_rng(total).integers(5, 100, size=total).astype(np.int32)
    packed = pack_blocks(tokens, seq_len=8, remainder=remainder, pad_id=1)
    assert packed.tokens_in == total == packed.tokens_written + packed.tokens_dropped
    assert packed.tokens_written + packed.padding_tokens == packed.num_blocks * 8
    assert packed.ids.shape == (packed.num_blocks, 8)
    assert (
        packed.ids.reshape(-1)[: packed.tokens_written].tolist()
        == tokens[: packed.tokens_written].tolist()
    )
    assert packed.tokens_dropped < 8 and packed.padding_tokens < 8


def test_pack_pad_needs_pad_id():
    with pytest.raises(ValueError, match="pad_id"):
        pack_blocks(np.arange(9), seq_len=8, remainder="pad")


DOCS = {7: [70, 71], 3: [30], 9: [90, 91, 92], 5: [50, 51]}


def _chunk(order: list[int]) -> TokenizedChunk:
    return TokenizedChunk(
        hashes=np.array(order, dtype=np.uint64),
        lengths=np.array([len(DOCS[h]) for h in order], dtype=np.int32),
        tokens=np.array([t for h in order for t in DOCS[h]], dtype=np.int32),
    )


def test_order_by_hash_is_independent_of_arrival_order():
    expected = [30, 50, 51, 70, 71, 90, 91, 92]
    assert (
        order_by_hash(_chunk([7, 3, 9, 5])).tokens.tolist()
        == order_by_hash(_chunk([5, 9, 3, 7])).tokens.tolist()
        == order_by_hash(_chunk([3, 5, 7, 9])).tokens.tolist()
        == expected
    )


def test_pack_group_carries_its_key_and_totals():
    chunks = [_chunk([9, 5]), _chunk([7]), _chunk([3])]
    packed = pack_group(("validation", 4), chunks, seq_len=3, remainder="pad", pad_id=0)
    assert (packed.split, packed.group, packed.documents) == ("validation", 4, 4)
    assert packed.blocks.ids.tolist() == [[30, 50, 51], [70, 71, 90], [91, 92, 0]]
    assert packed.totals == SplitTotals(
        documents=4, tokens_in=8, tokens_written=8, tokens_dropped=0, padding_tokens=1, records=3
    )


def test_sum_totals_adds_every_field():
    a = SplitTotals(
        documents=1, tokens_in=10, tokens_written=8, tokens_dropped=2, padding_tokens=0, records=1
    )
    b = SplitTotals(
        documents=2, tokens_in=5, tokens_written=5, tokens_dropped=0, padding_tokens=3, records=1
    )
    assert sum_totals([a, b]) == SplitTotals(
        documents=3, tokens_in=15, tokens_written=13, tokens_dropped=2, padding_tokens=3, records=2
    )
    assert sum_totals([sum_totals([a]), sum_totals([b])]) == sum_totals(
        [a, b]
    )  # partial sums combine
    assert sum_totals([]) == SplitTotals()


# ---------------------------------------------------------------- best_fit


def test_best_fit_bins_places_each_item_in_the_fullest_bin_that_fits():
    # Longest first: 6 -> bin 0 (room 2), 5 -> bin 1 (room 3), 4 -> bin 2 (room 4), 3 -> bin 1 (room 3,
    # the least room that fits), 2 -> bin 0, 1 -> bin 2.
    assert best_fit_bins(np.array([5, 3, 4, 2, 6, 1]), 8).tolist() == [1, 1, 2, 0, 0, 2]


@pytest.mark.parametrize("seed", range(5))
def test_best_fit_bins_never_overfill_and_need_few_bins(seed):
    lengths = np.random.default_rng(seed).integers(1, 129, 2000)
    bins = best_fit_bins(lengths, 128)
    loads = np.bincount(bins, weights=lengths)
    assert loads.max() <= 128
    assert set(bins.tolist()) == set(range(int(bins.max()) + 1))  # bins numbered as opened
    # Best-fit decreasing uses at most 11/9 OPT + 6/9 bins; OPT >= total / capacity.
    assert bins.max() + 1 <= 11 / 9 * np.ceil(lengths.sum() / 128) + 1


def _documents_back(blocks) -> list[list[int]]:
    """Each segment's tokens, in (first position == 0 starts a document) order within each block."""
    pieces = []
    for ids, segments, positions in zip(blocks.ids, blocks.segment_ids, blocks.positions):
        for segment in range(1, int(segments.max(initial=0)) + 1):
            where = segments == segment
            assert positions[where].tolist() == list(
                range(positions[where][0], positions[where][0] + where.sum())
            )
            pieces.append((int(positions[where][0]), ids[where].tolist()))
    return pieces


def test_best_fit_keeps_whole_documents_cuts_long_ones_and_accounts_every_token():
    rng = np.random.default_rng(0)
    lengths = np.concatenate(
        [rng.integers(1, 16, 300), [16, 40, 33]]
    )  # three at least a block long
    tokens = rng.integers(5, 1000, int(lengths.sum())).astype(np.int32)
    blocks = pack_best_fit(tokens, lengths, seq_len=16, pad_id=1)
    assert blocks.ids.shape[1] == 16 and blocks.num_blocks * 16 == blocks.ids.size
    assert blocks.tokens_written == blocks.tokens_in == lengths.sum()
    assert blocks.tokens_dropped == 0
    assert blocks.padding_tokens == (blocks.segment_ids == 0).sum()
    assert (blocks.ids[blocks.segment_ids == 0] == 1).all()
    assert (blocks.positions[blocks.segment_ids == 0] == 0).all()
    assert blocks.attention_masks().tolist() == (blocks.segment_ids > 0).astype(int).tolist()
    assert blocks.documents_split == 2  # 40 and 33 (16 fits one block exactly)
    assert blocks.segments == 300 + 1 + 3 + 3
    # Every segment's positions run 0, 1, ...: a short document whole, a long one in pieces.
    starts = np.cumsum(lengths) - lengths
    documents = [tokens[s : s + n].tolist() for s, n in zip(starts, lengths)]
    pieces = _documents_back(blocks)
    assert all(first == 0 for first, _ in pieces)
    # 16 -> 16; 40 -> 16 + 16 + 8; 33 -> 16 + 16 + 1.
    expected = [d for d in documents if len(d) < 16] + [
        d[i : i + 16] for d in documents if len(d) >= 16 for i in range(0, len(d), 16)
    ]
    assert sorted(ids for _, ids in pieces) == sorted(expected)
    # Best fit leaves little room: fewer blocks than concatenating with one document per block.
    assert blocks.padding_tokens / blocks.ids.size < 0.05


def test_best_fit_depends_only_on_the_documents_not_their_arrival_order():
    settings = dict(seq_len=4, remainder="pad", pad_id=0, packing="best_fit")
    a = pack_group(("train", 0), [_chunk([7, 3, 9, 5])], **settings)
    b = pack_group(("train", 0), _chunk([5, 9, 3, 7]).split([0, 1, 4]), **settings)
    for name, values in a.blocks.features().items():
        assert values.tolist() == b.blocks.features()[name].tolist(), name
    assert a.totals == b.totals and a.totals.segments == 4
    assert a.blocks.num_blocks == 2  # 3 + 1 and 2 + 2 tokens


def _segments(blocks) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """(block, segment id, positions, ids) of every segment, in block order."""
    return [
        (block, segment, positions[segments == segment], ids[segments == segment])
        for block, (ids, segments, positions) in enumerate(
            zip(blocks.ids, blocks.segment_ids, blocks.positions)
        )
        for segment in range(1, int(segments.max(initial=0)) + 1)
    ]


@pytest.mark.parametrize("seed", range(3))
def test_best_fit_restarts_positions_in_every_piece_of_documents_of_1_to_40_blocks(seed):
    """A document of k blocks and a bit is k full pieces and a tail, each a segment from position 0;
    every token is written once, in its document's order, and no position reaches seq_len."""
    seq_len = 16
    rng = np.random.default_rng(seed)
    long = np.arange(1, 41) * seq_len + rng.integers(0, seq_len, 40)  # 1 to 40 blocks, some exact
    lengths = rng.permutation(np.concatenate([long, rng.integers(1, seq_len, 60)]))
    tokens = np.arange(int(lengths.sum()), dtype=np.int32) + 5  # each token its own id
    blocks = pack_best_fit(tokens, lengths, seq_len=seq_len, pad_id=1)

    assert blocks.positions.max() == seq_len - 1
    segments = _segments(blocks)
    for block, segment, positions, ids in segments:
        assert positions.tolist() == list(range(ids.size)), (block, segment)
        assert (np.diff(ids) == 1).all()  # a piece is a run of its document, in order
    # Segment ids 1, 2, ... from a block's first token, padding after the last.
    for segment_ids in blocks.segment_ids:
        real = segment_ids[segment_ids > 0]
        assert segment_ids[: real.size].tolist() == real.tolist() and real[0] == 1
        assert set(np.diff(real).tolist()) <= {0, 1}
    # Every token once: the pieces, joined by their first token, are the documents cut every seq_len.
    written = np.sort(blocks.ids[blocks.segment_ids > 0])
    assert written.tolist() == tokens.tolist()
    starts = np.cumsum(lengths) - lengths
    expected = sorted(
        (int(tokens[start + i]), min(seq_len, int(n) - i))
        for start, n in zip(starts, lengths)
        for i in range(0, int(n), seq_len)
    )
    assert sorted((int(ids[0]), ids.size) for *_, ids in segments) == expected
    cut = int((lengths > seq_len).sum())
    assert blocks.documents_split == cut and blocks.segments == len(expected)
    # A long document's full pieces fill consecutive blocks of their own, in order.
    full = [(block, int(ids[0])) for block, _, _, ids in segments if ids.size == seq_len]
    assert [first for _, first in sorted(full)] == sorted(first for _, first in full)


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_narrowed_blocks_hold_the_same_values_in_half_the_bytes(packing):
    tokens = np.arange(1, 301, dtype=np.int32) * 200  # ids up to 60,000: they fit a uint16
    lengths = np.array([100, 150, 50], dtype=np.int32)
    blocks = (
        pack_best_fit(tokens, lengths, seq_len=64, pad_id=0)
        if packing == "best_fit"
        else pack_blocks(tokens, seq_len=64, remainder="pad", pad_id=0)
    )
    narrow = blocks.narrowed()
    assert narrow.ids.dtype == np.uint16
    assert narrow.ids.nbytes * 2 == blocks.ids.nbytes
    for name, values in blocks.features().items():
        np.testing.assert_array_equal(narrow.features()[name], values)
    assert (narrow.tokens_written, narrow.padding_tokens) == (
        blocks.tokens_written,
        blocks.padding_tokens,
    )


def test_blocks_with_an_id_past_uint16_are_not_narrowed():
    blocks = pack_blocks(np.array([1, 70_000, 3, 4], dtype=np.int32), seq_len=2, remainder="drop")
    assert blocks.narrowed() is blocks
