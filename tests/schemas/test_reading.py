"""A split read into numpy without TensorFlow: the same records TensorFlow wrote, in manifest order."""

from __future__ import annotations

import os

import numpy as np

from lmshards.schemas.constants import ATTENTION_MASK, INPUT_IDS, TRAIN_SPLIT, VALIDATION_SPLIT
from lmshards.schemas.manifest import TokenizerInfo
from lmshards.schemas.reading import read_split
from tests.helpers.shard_factory import write_shards

TOKENIZER = TokenizerInfo(
    fingerprint="sha256:" + "0" * 64,
    vocab_size=1000,
    special_token_ids={"cls": 0, "pad": 1, "sep": 2, "unk": 3, "mask": 4},
    all_special_ids=(0, 1, 2, 3, 4),
)


def _records(rows: int, seq_len: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random ids and a random 0/1 attention mask, int64 [rows, seq_len] each."""
    rng = np.random.default_rng(seed)
    shape = (rows, seq_len)
    return rng.integers(0, TOKENIZER.vocab_size, size=shape), rng.integers(0, 2, size=shape)


def test_read_split_returns_tensorflow_written_records_in_manifest_order(tmp_path):
    train_ids, train_mask = _records(37, 16, seed=2)
    val_ids, val_mask = _records(9, 16, seed=3)
    splits = {TRAIN_SPLIT: (train_ids, train_mask, 4), VALIDATION_SPLIT: (val_ids, val_mask, 2)}
    manifest = write_shards(tmp_path, splits, seq_len=16, tokenizer=TOKENIZER, inputs=())

    train = read_split(manifest, str(tmp_path), TRAIN_SPLIT)
    assert set(train) == {INPUT_IDS, ATTENTION_MASK}
    assert np.array_equal(train[INPUT_IDS], train_ids)
    assert np.array_equal(train[ATTENTION_MASK], train_mask)
    validation = read_split(manifest, str(tmp_path), VALIDATION_SPLIT, names=(INPUT_IDS,))
    assert list(validation) == [INPUT_IDS] and np.array_equal(validation[INPUT_IDS], val_ids)


def test_max_records_stops_inside_a_shard_and_opens_no_later_one(tmp_path):
    ids, mask = _records(40, 8, seed=4)
    manifest = write_shards(
        tmp_path, {TRAIN_SPLIT: (ids, mask, 4)}, seq_len=8, tokenizer=TOKENIZER, inputs=()
    )
    paths = manifest.shard_paths(str(tmp_path), TRAIN_SPLIT)
    os.remove(paths[-1])  # 10 records a shard: the first 12 need only two shards

    first = read_split(manifest, str(tmp_path), TRAIN_SPLIT, max_records=12)
    assert np.array_equal(first[INPUT_IDS], ids[:12])
    assert np.array_equal(first[ATTENTION_MASK], mask[:12])
    assert read_split(manifest, str(tmp_path), TRAIN_SPLIT, max_records=30)[INPUT_IDS].shape == (
        30,
        8,
    )
