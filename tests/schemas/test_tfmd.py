"""The records' TF Metadata schema: built from the manifest's features without TensorFlow, the same as
tensorflow-transform builds it, round-trips, decodes as the trainer parses."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
from tensorflow_transform.tf_metadata import schema_utils
from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

from lmshards.plumbing import fs
from lmshards.plumbing.errors import ManifestError
from lmshards.schemas.constants import ATTENTION_MASK, INPUT_IDS, SCHEMA_NAME
from lmshards.schemas.records import (
    encode_examples,
    feature_spec,
    frame_record,
    parse_spec,
    read_records,
)
from lmshards.schemas.tfmd import (
    feature_domains,
    parse_spec_from_schema,
    read_schema,
    schema_for,
    schema_text,
    write_schema,
)
from tests.conftest import REPO

SEQ_LEN, VOCAB = 16, 500
# A fresh interpreter as the Dataflow image has it (tensorflow-metadata, no TensorFlow stack) writes a schema.
_WRITE_WITHOUT_TENSORFLOW = """
import importlib.abc, sys
class NotInTheImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"tensorflow", "tensorflow_transform", "tfx_bsl"}:
            raise ImportError(name + " is not in the Dataflow image")
sys.meta_path.insert(0, NotInTheImage())
from lmshards.schemas.records import feature_spec
from lmshards.schemas.tfmd import schema_for, write_schema
write_schema(sys.argv[1], schema_for(feature_spec(int(sys.argv[2])), vocab_size=int(sys.argv[3])))
"""


def _records(rows: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """ids over the whole domain [0, VOCAB) and masks with a padded tail in some rows (pad id 1)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, size=(rows, SEQ_LEN), dtype=np.int64)
    ids[0, 0], ids[0, 1] = 0, VOCAB - 1
    mask = np.ones_like(ids)
    for row in range(0, rows, 3):
        mask[row, SEQ_LEN - row % SEQ_LEN :] = 0
    ids[mask == 0] = 1
    return ids, mask


def test_schema_has_the_features_shapes_and_token_id_domain():
    schema = schema_for(feature_spec(SEQ_LEN), vocab_size=VOCAB)
    features = {f.name: f for f in schema.feature}
    assert sorted(features) == sorted([INPUT_IDS, ATTENTION_MASK])
    for feature in features.values():
        assert feature.type == schema_pb2.INT
        assert [d.size for d in feature.shape.dim] == [SEQ_LEN]
        assert feature.presence.min_fraction == 1.0
    ids = features[INPUT_IDS].int_domain
    assert (ids.min, ids.max, ids.is_categorical) == (0, VOCAB - 1, True)
    assert (features[ATTENTION_MASK].int_domain.min, features[ATTENTION_MASK].int_domain.max) == (
        0,
        1,
    )
    with pytest.raises(ValueError, match="vocab_size"):
        schema_for(feature_spec(SEQ_LEN), vocab_size=0)
    with pytest.raises(ValueError, match="'float32'"):
        schema_for({INPUT_IDS: {"dtype": "float32", "shape": [SEQ_LEN]}}, vocab_size=VOCAB)


@pytest.mark.parametrize(
    ("seq_len", "vocab_size"), [(8, 1), (16, VOCAB), (128, 30522), (512, 50265), (4096, 250002)]
)
def test_schema_is_the_one_tensorflow_transform_builds_to_the_byte(seq_len, vocab_size):
    """Launchers without TensorFlow write what tft's schema utilities make; a tft change that alters it fails here."""
    features = feature_spec(seq_len)
    ours = schema_for(features, vocab_size=vocab_size)
    theirs = schema_utils.schema_from_feature_spec(
        parse_spec(features), feature_domains(vocab_size)
    )
    assert ours == theirs
    assert schema_text(ours).encode() == schema_text(theirs).encode()
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(
        deterministic=True
    )


def test_the_schema_is_written_without_tensorflow(tmp_path):
    """The launcher in the lean Dataflow image writes the same schema.pbtxt as one with TensorFlow."""
    subprocess.run(
        [sys.executable, "-c", _WRITE_WITHOUT_TENSORFLOW, str(tmp_path), str(SEQ_LEN), str(VOCAB)],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=120,
    )
    expected = schema_text(schema_for(feature_spec(SEQ_LEN), vocab_size=VOCAB)).encode()
    assert (tmp_path / SCHEMA_NAME).read_bytes() == expected


@pytest.mark.parametrize("seq_len", [8, 128, 512])
def test_parse_spec_from_schema_is_the_trainers_parse_spec(seq_len):
    features = feature_spec(seq_len)
    assert parse_spec_from_schema(schema_for(features, vocab_size=50265)) == parse_spec(features)


def test_schema_pbtxt_round_trips_with_deterministic_bytes(tmp_path):
    schema = schema_for(feature_spec(SEQ_LEN), vocab_size=VOCAB)
    path = write_schema(str(tmp_path / "a"), schema)
    assert path == str(tmp_path / "a" / SCHEMA_NAME)
    assert read_schema(str(tmp_path / "a")) == schema
    write_schema(str(tmp_path / "b"), read_schema(str(tmp_path / "a")))
    first = (tmp_path / "a" / SCHEMA_NAME).read_bytes()
    assert first == (tmp_path / "b" / SCHEMA_NAME).read_bytes() == schema_text(schema).encode()
    assert b'name: "input_ids"' in first and b"max: 499" in first
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        SCHEMA_NAME
    ]  # no temporary left behind


def test_read_schema_names_a_missing_or_corrupt_schema(tmp_path):
    with pytest.raises(ManifestError, match="No schema.pbtxt"):
        read_schema(str(tmp_path))
    (tmp_path / SCHEMA_NAME).write_text("feature { nme: 1 }")
    with pytest.raises(ManifestError, match="not a text-format TF Metadata schema"):
        read_schema(str(tmp_path))


def test_tfx_bsl_example_decoder_gives_the_trainers_arrays(tmp_path):
    ids, mask = _records(40)
    shard = tmp_path / "train-00000-of-00001-40.tfrecord"
    shard.write_bytes(
        b"".join(frame_record(r) for r in encode_examples({INPUT_IDS: ids, ATTENTION_MASK: mask}))
    )
    serialized = list(read_records(io.BytesIO(shard.read_bytes())))
    schema = schema_for(feature_spec(SEQ_LEN), vocab_size=VOCAB)

    decoded = ExamplesToRecordBatchDecoder(schema.SerializeToString()).DecodeBatch(serialized)
    parsed = tf.io.parse_example(serialized, parse_spec(feature_spec(SEQ_LEN)))
    assert decoded.num_rows == 40
    for name, expected in ((INPUT_IDS, ids), (ATTENTION_MASK, mask)):
        column = decoded.column(decoded.schema.get_field_index(name))
        arrays = np.asarray(column.flatten()).reshape(-1, SEQ_LEN)
        assert arrays.dtype == np.int64
        np.testing.assert_array_equal(arrays, parsed[name].numpy())
        np.testing.assert_array_equal(arrays, expected)
        domain = next(f.int_domain for f in schema.feature if f.name == name)
        assert domain.min <= arrays.min() and arrays.max() <= domain.max


@pytest.mark.gcs
def test_schema_round_trips_on_gcs(gcs_emulator):
    schema = schema_for(feature_spec(SEQ_LEN), vocab_size=VOCAB)
    output = f"{gcs_emulator}/shards"
    assert write_schema(output, schema) == f"{output}/{SCHEMA_NAME}"
    assert fs.read_text(f"{output}/{SCHEMA_NAME}") == schema_text(schema)
    assert read_schema(output) == schema
