"""The wire contract: Example encoding, TFRecord framing and reading, the parse spec built from features."""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf

from schemas.constants import FEATURE_NAMES
from schemas.records import (
    CorruptRecordError,
    encode_examples,
    feature_spec,
    frame_record,
    parse_spec,
    read_records,
    record_bytes_upper_bound,
)


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
    parsed = tf.io.parse_example(records, parse_spec(feature_spec(seq_len)))
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


def test_parse_spec_follows_the_features_and_names():
    spec = parse_spec(feature_spec(16))
    assert sorted(spec) == sorted(FEATURE_NAMES)
    assert spec["input_ids"].shape == [16] and spec["input_ids"].dtype == tf.int64
    assert list(parse_spec(feature_spec(16), names=("input_ids",))) == ["input_ids"]
    with pytest.raises(KeyError, match="segment_ids"):
        parse_spec(feature_spec(16), names=("segment_ids",))
