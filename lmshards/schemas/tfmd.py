"""The records' TF Metadata schema (`schema.pbtxt`): feature types, shapes and value domains.

Built from a manifest's features with tensorflow-metadata's protos alone, so the launcher and the
Dataflow image (no TensorFlow) write it for every shard set. It is the proto that
tensorflow-transform's `schema_utils.schema_from_feature_spec` makes from the same features and
domains, to the byte in text format; tests/schemas/test_tfmd.py compares the two, so a change on
tensorflow-transform's side fails there. TFX readers (tfx-bsl's Example decoder,
tensorflow-transform, TFDV) and the trainer's tf.io parse spec thus agree on the records.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from lmshards.plumbing import fs
from lmshards.plumbing.errors import ManifestError
from lmshards.schemas.constants import (
    ATTENTION_MASK,
    FEATURE_DTYPE,
    INPUT_IDS,
    POSITIONS,
    SCHEMA_NAME,
    SEGMENT_IDS,
)


def feature_domains(vocab_size: int, seq_len: int = 1) -> dict[str, schema_pb2.IntDomain]:
    """Feature name -> value domain: input_ids in [0, vocab_size) (categorical), attention_mask in {0, 1};
    in packed sets segment_ids in [0, seq_len] (categorical: a document's number in its block, 0 padding)
    and positions in [0, seq_len).

    Raises:
      ValueError: vocab_size < 1.
    """
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be at least 1, got {vocab_size}")
    return {
        INPUT_IDS: schema_pb2.IntDomain(min=0, max=vocab_size - 1, is_categorical=True),
        ATTENTION_MASK: schema_pb2.IntDomain(min=0, max=1),
        SEGMENT_IDS: schema_pb2.IntDomain(min=0, max=seq_len, is_categorical=True),
        POSITIONS: schema_pb2.IntDomain(min=0, max=max(seq_len - 1, 0)),
    }


def _fixed_shape_feature(
    name: str, spec: dict[str, Any], domain: schema_pb2.IntDomain | None
) -> schema_pb2.Feature:
    """A feature present in every record with exactly `spec["shape"]` int64 values."""
    if spec["dtype"] != FEATURE_DTYPE:
        raise ValueError(
            f"feature {name!r} has dtype {spec['dtype']!r}; records hold only {FEATURE_DTYPE} features"
        )
    feature = schema_pb2.Feature(
        name=name,
        type=schema_pb2.INT,
        presence=schema_pb2.FeaturePresence(min_fraction=1.0),
        shape=schema_pb2.FixedShape(
            dim=[schema_pb2.FixedShape.Dim(size=size) for size in spec["shape"]]
        ),
    )
    if domain is not None:
        feature.int_domain.CopyFrom(domain)
    return feature


def schema_for(features: dict[str, dict[str, Any]], *, vocab_size: int) -> schema_pb2.Schema:
    """The schema of records with these features (a manifest's `features()`), features sorted by name.

    Raises:
      ValueError: vocab_size < 1, or a feature that is not int64.
    """
    seq_len = max((spec["shape"][0] for spec in features.values() if spec["shape"]), default=1)
    domains = feature_domains(vocab_size, seq_len)
    return schema_pb2.Schema(
        feature=[
            _fixed_shape_feature(name, features[name], domains.get(name))
            for name in sorted(features)
        ]
    )


def parse_spec_from_schema(schema: schema_pb2.Schema) -> dict[str, Any]:
    """The `tf.io.parse_example` spec TFX consumers read from the schema (equal to records.parse_spec).

    tensorflow-transform's own reading of the schema, imported here: it needs the `stats` extra.
    """
    from tensorflow_transform.tf_metadata import schema_utils

    return dict(schema_utils.schema_as_feature_spec(schema).feature_spec)


def schema_text(schema: schema_pb2.Schema) -> str:
    """Text format of the schema; the same schema always gives the same text."""
    return text_format.MessageToString(schema)


def schema_path(output_dir: str) -> str:
    return fs.join(output_dir, SCHEMA_NAME)


def write_schema(output_dir: str, schema: schema_pb2.Schema) -> str:
    """Writes `{output_dir}/schema.pbtxt` atomically (local or gs://). Returns its path."""
    path = schema_path(output_dir)
    fs.write_text_atomic(path, schema_text(schema))
    return path


def read_schema(output_dir: str) -> schema_pb2.Schema:
    """Reads `{output_dir}/schema.pbtxt`.

    Raises:
      ManifestError: no schema there (outputs of older lmshards versions have none), or not a schema.
    """
    path = schema_path(output_dir)
    if not fs.exists(path):
        raise ManifestError(
            f"No {SCHEMA_NAME} in {output_dir!r}: not a preprocess output, or one written by an older "
            "lmshards. Re-run `lmshards preprocess` to get one."
        )
    try:
        return text_format.Parse(fs.read_text(path), schema_pb2.Schema())
    except (text_format.ParseError, UnicodeDecodeError) as e:
        raise ManifestError(
            f"{path!r} is not a text-format TF Metadata schema ({e}); re-run `lmshards preprocess`."
        ) from e
