"""Pure logic of the pack stage: group sizing, block packing, hash order, a group's totals."""

from __future__ import annotations

import numpy as np
import pytest

from preprocess.encode import TokenizedChunk
from preprocess.pack import num_groups, order_by_hash, pack_blocks, pack_group, sum_totals
from schemas.manifest import SplitTotals


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
        order_by_hash(_chunk([7, 3, 9, 5])).tolist()
        == order_by_hash(_chunk([5, 9, 3, 7])).tolist()
        == order_by_hash(_chunk([3, 5, 7, 9])).tolist()
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
