"""The demo's scorer: a seeded masking of real tokens and the most-frequent-token baseline's arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from lmshards.command.demo_scoring import IGNORE_LABEL, baseline_accuracy, mask_records
from lmshards.command.report import most_frequent_token
from lmshards.schemas.constants import ATTENTION_MASK, INPUT_IDS

SPECIAL = (0, 1, 2, 3, 4)  # RoBERTa's <s> <pad> </s> <unk> <mask>
MASK_ID = 4


def _records(rows: int = 64, seq_len: int = 32, seed: int = 5) -> dict[str, np.ndarray]:
    """Random ids 5..99 with a padded tail (id 1, attention 0) and a leading <s> in every row."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 100, size=(rows, seq_len))
    attention = np.ones_like(ids)
    attention[:, -4:] = 0
    ids[:, -4:] = 1
    ids[:, 0] = 0
    return {INPUT_IDS: ids, ATTENTION_MASK: attention}


def test_most_frequent_token_counts_only_real_non_special_tokens():
    ids = np.array([[0, 7, 7, 9, 1, 1, 1, 1], [0, 9, 7, 4, 4, 4, 1, 1]])
    attention = np.array([[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0]])
    assert (
        most_frequent_token(ids, attention, SPECIAL) == 7
    )  # 3x 7 beats 2x 9; pads, <s> and <mask> are skipped
    ids[0, 1:3] = 9
    assert most_frequent_token(ids, attention, SPECIAL) == 9


def test_mask_records_is_seeded_and_masks_only_real_tokens():
    records = _records()
    first = mask_records(records, special_ids=SPECIAL, mask_id=MASK_ID, probability=0.15, seed=0)
    again = mask_records(records, special_ids=SPECIAL, mask_id=MASK_ID, probability=0.15, seed=0)
    other = mask_records(records, special_ids=SPECIAL, mask_id=MASK_ID, probability=0.15, seed=1)
    assert np.array_equal(first.input_ids, again.input_ids) and np.array_equal(
        first.labels, again.labels
    )
    assert not np.array_equal(first.labels, other.labels)

    where = first.masked
    assert np.all(first.input_ids[where] == MASK_ID)
    assert np.array_equal(first.labels[where], records[INPUT_IDS][where])
    assert np.array_equal(first.input_ids[~where], records[INPUT_IDS][~where])
    assert np.all(first.labels[~where] == IGNORE_LABEL)
    assert not where[:, 0].any() and not where[:, -4:].any()  # never <s>, never padding
    maskable = 64 * (32 - 5)
    assert abs(where.sum() / maskable - 0.15) < 0.03


def test_baseline_accuracy_is_the_share_of_masked_labels_equal_to_the_token():
    records = _records()
    masked = mask_records(records, special_ids=SPECIAL, mask_id=MASK_ID, probability=0.5, seed=0)
    labels = masked.labels[masked.masked]
    token = int(np.bincount(labels).argmax())
    assert baseline_accuracy(masked, token) == pytest.approx(
        np.count_nonzero(labels == token) / labels.size
    )
    assert baseline_accuracy(masked, 200) == 0.0
