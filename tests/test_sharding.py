"""Pure functions of the shard stage: shard counts, the seeded permutation, TFRecord framing."""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf

from preprocess.sharding import (
    CorruptRecordError,
    encode_examples,
    frame_record,
    num_shards_for,
    permute,
    read_records,
    record_bytes_upper_bound,
    shard_of,
)

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


def _tf_example(features: dict[str, list[int]]) -> bytes:
    feature = {name: tf.train.Feature(int64_list=tf.train.Int64List(value=v)) for name, v in features.items()}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)


@pytest.mark.parametrize("seq_len,vocab", [(8, 100), (8, 2000), (128, 50265), (64, 2**31 - 1)])
def test_encode_examples_matches_protobuf_and_parses_with_the_run_mlm_spec(seq_len, vocab):
    rng = np.random.default_rng(seq_len)
    ids = rng.integers(0, vocab, size=(20, seq_len)).astype(np.int64)
    ids[0], ids[1] = 0, vocab - 1
    masks = np.ones_like(ids)
    masks[-1, seq_len // 2:] = 0
    records = encode_examples({"input_ids": ids, "attention_mask": masks})
    assert records == [_tf_example({"input_ids": i, "attention_mask": m}) for i, m in zip(ids.tolist(), masks.tolist())]
    spec = {name: tf.io.FixedLenFeature([seq_len], tf.int64) for name in ("input_ids", "attention_mask")}
    parsed = tf.io.parse_example(records, spec)
    assert np.array_equal(parsed["input_ids"].numpy(), ids)
    assert np.array_equal(parsed["attention_mask"].numpy(), masks)


def test_record_bytes_upper_bound_is_exact_for_the_largest_record():
    for seq_len, vocab in [(8, 2000), (128, 50265), (512, 120)]:
        largest = encode_examples({"input_ids": np.full((1, seq_len), vocab - 1), "attention_mask": np.ones((1, seq_len))})
        assert record_bytes_upper_bound(seq_len, vocab, ("input_ids", "attention_mask")) == len(frame_record(largest[0]))


def test_framing_matches_tensorflow_and_detects_corruption(tmp_path):
    payloads = [b"", b"a", b"hello world" * 100]
    path = tmp_path / "x.tfrecord"
    path.write_bytes(b"".join(frame_record(p) for p in payloads))
    assert list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator()) == payloads
    with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as writer:
        for p in payloads:
            writer.write(p)
    assert (tmp_path / "tf.tfrecord").read_bytes() == path.read_bytes()
    assert list(read_records(io.BytesIO(path.read_bytes()))) == payloads

    data = bytearray(path.read_bytes())
    data[-10] ^= 0x01
    with pytest.raises(CorruptRecordError, match="data checksum"):
        list(read_records(io.BytesIO(bytes(data))))
    with pytest.raises(CorruptRecordError, match="truncated"):
        list(read_records(io.BytesIO(path.read_bytes()[:-3])))
