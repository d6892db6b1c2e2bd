"""Pure functions of the pack stage: hashes, split assignment, groups, block packing."""

from __future__ import annotations

import numpy as np
import pytest

from preprocess.packing import (
    doc_hash,
    num_groups,
    order_by_hash,
    pack_blocks,
    split_of,
    validation_threshold,
)


def test_doc_hash_is_stable_and_text_only():
    assert doc_hash("hello") == doc_hash("hello")
    assert doc_hash("hello") != doc_hash("hello ")
    # Pinned value: the split of a document must never change between versions or machines.
    assert doc_hash("hello") == int.from_bytes(__import__("hashlib").blake2b(b"hello", digest_size=8).digest(), "little")


def test_split_fraction_is_respected_on_100k_hashes():
    hashes = np.fromiter((doc_hash(f"document {i}") for i in range(100_000)), dtype=np.uint64)
    for fraction in (0.005, 0.1, 0.5):
        share = split_of(hashes, validation_threshold(fraction)).mean()
        assert abs(share - fraction) < 4 * np.sqrt(fraction * (1 - fraction) / hashes.size) + 1e-4
    assert not split_of(hashes, validation_threshold(0.0)).any()
    # Deterministic: the same hashes split the same way.
    threshold = validation_threshold(0.1)
    assert np.array_equal(split_of(hashes, threshold), split_of(hashes.copy(), threshold))


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
    assert (packed.tokens_in, packed.tokens_written, packed.tokens_dropped, packed.padding_tokens) == (23, 16, 7, 0)
    assert packed.attention_masks().tolist() == [[1] * 8] * 2


def test_pack_pad_fills_last_block_with_pad_and_mask_zero():
    packed = pack_blocks(np.arange(1, 20, dtype=np.int32), seq_len=8, remainder="pad", pad_id=0)
    assert packed.num_blocks == 3
    assert packed.ids[2].tolist() == [17, 18, 19, 0, 0, 0, 0, 0]
    assert packed.attention_masks().tolist() == [[1] * 8, [1] * 8, [1, 1, 1, 0, 0, 0, 0, 0]]
    assert (packed.tokens_in, packed.tokens_written, packed.tokens_dropped, packed.padding_tokens) == (19, 19, 0, 5)


@pytest.mark.parametrize("total", [0, 1, 7, 8, 9, 64, 1001])
@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_pack_accounting_balances(total, remainder):
    tokens = np.random.default_rng(total).integers(5, 100, size=total).astype(np.int32)
    packed = pack_blocks(tokens, seq_len=8, remainder=remainder, pad_id=1)
    assert packed.tokens_in == total == packed.tokens_written + packed.tokens_dropped
    assert packed.tokens_written + packed.padding_tokens == packed.num_blocks * 8
    assert packed.ids.shape == (packed.num_blocks, 8)
    assert packed.ids.reshape(-1)[: packed.tokens_written].tolist() == tokens[: packed.tokens_written].tolist()
    assert packed.tokens_dropped < 8 and packed.padding_tokens < 8


def test_pack_pad_needs_pad_id():
    with pytest.raises(ValueError, match="pad_id"):
        pack_blocks(np.arange(9), seq_len=8, remainder="pad")


def test_order_by_hash_is_independent_of_arrival_order():
    docs = {7: [70, 71], 3: [30], 9: [90, 91, 92], 5: [50, 51]}

    def concat(order):
        hashes = np.array(order, dtype=np.uint64)
        lengths = np.array([len(docs[h]) for h in order], dtype=np.int32)
        tokens = np.array([t for h in order for t in docs[h]], dtype=np.int32)
        return order_by_hash(hashes, lengths, tokens).tolist()

    expected = [30, 50, 51, 70, 71, 90, 91, 92]
    assert concat([7, 3, 9, 5]) == concat([5, 9, 3, 7]) == concat([3, 5, 7, 9]) == expected
