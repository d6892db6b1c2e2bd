"""The wire contract: Example encoding and decoding, TFRecord framing and reading, the parse spec from features."""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf

from lmshards.schemas.constants import FEATURE_NAMES
from lmshards.schemas.records import (
    CorruptRecordError,
    MalformedExampleError,
    decode_examples,
    encode_examples,
    feature_spec,
    frame_examples,
    frame_record,
    parse_spec,
    read_records,
    record_bytes_upper_bound,
)


def _tf_example(features: dict[str, list[int]]) -> bytes:
    feature = {
        name: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
        for name, v in features.items()
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(
        deterministic=True
    )


@pytest.mark.parametrize(
    "rows,seq_len,top",
    [(0, 8, 10), (1, 1, 1), (5, 3, 2**32 - 1), (300, 128, 25_000), (64, 16, 127), (9, 7, 2**14)],
)
def test_frame_examples_writes_the_record_at_a_time_bytes(rows, seq_len, top):
    """The batch writer's frames are the encode_examples + frame_record bytes (which the test above
    holds to protobuf and TensorFlow), with one to four features, varints of one to five bytes, and a
    row count on either side of a varint length's boundary."""
    rng = np.random.default_rng(rows + seq_len)
    features = {
        "input_ids": rng.integers(0, top, size=(rows, seq_len), endpoint=True, dtype=np.int64),
        "attention_mask": rng.integers(0, 1, size=(rows, seq_len), endpoint=True),
        "segment_ids": np.sort(rng.integers(0, 5, size=(rows, seq_len)), axis=1),
        "positions": np.tile(np.arange(seq_len), (rows, 1)),
    }
    for names in (["input_ids"], ["input_ids", "attention_mask"], sorted(features)):
        chosen = {name: features[name] for name in names}
        expected = b"".join(map(frame_record, encode_examples(chosen))) if rows else b""
        assert frame_examples(chosen) == expected


@pytest.mark.parametrize("seq_len,vocab", [(8, 100), (8, 2000), (128, 50265), (64, 2**31 - 1)])
def test_encode_examples_matches_protobuf_and_parses_with_the_run_mlm_spec(seq_len, vocab):
    rng = np.random.default_rng(seq_len)
    ids = rng.integers(0, vocab, size=(20, seq_len)).astype(np.int64)
    ids[0], ids[1] = 0, vocab - 1
    masks = np.ones_like(ids)
    masks[-1, seq_len // 2 :] = 0
    records = encode_examples({"input_ids": ids, "attention_mask": masks})
    assert records == [
        _tf_example({"input_ids": i, "attention_mask": m})
        for i, m in zip(ids.tolist(), masks.tolist())
    ]
    parsed = tf.io.parse_example(records, parse_spec(feature_spec(seq_len)))
    assert np.array_equal(parsed["input_ids"].numpy(), ids)
    assert np.array_equal(parsed["attention_mask"].numpy(), masks)


def test_record_bytes_upper_bound_is_exact_for_the_largest_record():
    for seq_len, vocab in [(8, 2000), (128, 50265), (512, 120)]:
        largest = encode_examples(
            {"input_ids": np.full((1, seq_len), vocab - 1), "attention_mask": np.ones((1, seq_len))}
        )
        assert record_bytes_upper_bound(seq_len, vocab, ("input_ids", "attention_mask")) == len(
            frame_record(largest[0])
        )


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


@pytest.mark.parametrize("seq_len,vocab", [(8, 100), (128, 50265), (64, 2**31 - 1)])
def test_decode_examples_equals_tf_parse_example_on_random_records(seq_len, vocab):
    rng = np.random.default_rng(vocab)
    ids = rng.integers(0, vocab, size=(300, seq_len))
    masks = (rng.random((300, seq_len)) < 0.9).astype(np.int64)
    ours = encode_examples({"input_ids": ids, "attention_mask": masks})
    # TensorFlow's own serialization (map order not promised) with a feature the decoder must skip.
    theirs = [
        tf.train.Example(
            features=tf.train.Features(
                feature={
                    "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=i)),
                    "attention_mask": tf.train.Feature(int64_list=tf.train.Int64List(value=m)),
                    "text": tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[b"x" * int(i[0] % 300)])
                    ),
                }
            )
        ).SerializeToString()
        for i, m in zip(ids.tolist(), masks.tolist())
    ]
    for records in (ours, theirs):
        expected = tf.io.parse_example(records, parse_spec(feature_spec(seq_len)))
        decoded = decode_examples(records, FEATURE_NAMES)
        for name in FEATURE_NAMES:
            assert decoded[name].dtype == np.int64
            assert np.array_equal(decoded[name], expected[name].numpy())
    assert list(decode_examples(ours, ("input_ids",))) == ["input_ids"]
    assert decode_examples([], ("input_ids",))["input_ids"].shape == (0, 0)


def test_decode_examples_takes_int64_extremes_like_tensorflow():
    values = [0, 1, 127, 128, 2**63 - 1, -1, -(2**63)]
    record = _tf_example({"input_ids": values})
    spec = {"input_ids": tf.io.FixedLenFeature([len(values)], tf.int64)}
    assert decode_examples([record], ("input_ids",))["input_ids"].tolist() == [values]
    assert tf.io.parse_example([record], spec)["input_ids"].numpy().tolist() == [values]


def test_decode_examples_names_what_is_wrong():
    good = _tf_example({"input_ids": [1, 2, 3], "attention_mask": [1, 1, 0]})
    floats = tf.train.Example(
        features=tf.train.Features(
            feature={"input_ids": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0]))}
        )
    ).SerializeToString()
    with pytest.raises(MalformedExampleError, match="record 0 has no int64 feature 'segment_ids'"):
        decode_examples([good], ("segment_ids",))
    with pytest.raises(MalformedExampleError, match="'input_ids' is not an int64 list"):
        decode_examples([floats], ("input_ids",))
    with pytest.raises(MalformedExampleError, match="past the end"):
        decode_examples([good[:-2]], ("input_ids",))
    with pytest.raises(MalformedExampleError, match="3-4 values per record"):
        decode_examples([good, _tf_example({"input_ids": [1, 2, 3, 4]})], ("input_ids",))
    # Example{features{feature{key: "input_ids", value{int64_list{value: 5}}}}}, the value as a lone varint field.
    unpacked = bytes.fromhex("0a130a110a09") + b"input_ids" + bytes.fromhex("12041a020805")
    spec = {"input_ids": tf.io.FixedLenFeature([1], tf.int64)}
    assert tf.io.parse_example([unpacked], spec)["input_ids"].numpy().tolist() == [
        [5]
    ]  # valid for TensorFlow
    with pytest.raises(MalformedExampleError, match="unpacked"):
        decode_examples([unpacked], ("input_ids",))
