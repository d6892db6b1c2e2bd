"""The records' TF Metadata schema (`schema.pbtxt`): feature types, shapes and value domains.

Built with tensorflow-transform's schema utilities from a manifest's features, so TFX readers
(tfx-bsl's Example decoder, tensorflow-transform, TFDV) and the trainer's tf.io parse spec agree.
TensorFlow, tensorflow-transform and tensorflow-metadata are imported inside the functions:
Dataflow workers import schemas/ and have none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schemas import fs
from schemas.constants import ATTENTION_MASK, INPUT_IDS, SCHEMA_NAME
from schemas.errors import ManifestError
from schemas.records import parse_spec

if TYPE_CHECKING:
    from tensorflow_metadata.proto.v0 import schema_pb2


def schema_for(features: dict[str, dict[str, Any]], *, vocab_size: int) -> schema_pb2.Schema:
    """The schema of records with these features (a manifest's `features()`).

    input_ids get the categorical domain [0, vocab_size), attention_mask the domain {0, 1}.

    Raises:
      ValueError: vocab_size < 1.
    """
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tensorflow_transform.tf_metadata import schema_utils

    if vocab_size < 1:
        raise ValueError(f"vocab_size must be at least 1, got {vocab_size}")
    domains = {
        INPUT_IDS: schema_pb2.IntDomain(min=0, max=vocab_size - 1, is_categorical=True),
        ATTENTION_MASK: schema_pb2.IntDomain(min=0, max=1),
    }
    return schema_utils.schema_from_feature_spec(
        parse_spec(features), {name: domain for name, domain in domains.items() if name in features}
    )


def parse_spec_from_schema(schema: schema_pb2.Schema) -> dict[str, Any]:
    """The `tf.io.parse_example` spec the schema describes (equal to records.parse_spec of its features)."""
    from tensorflow_transform.tf_metadata import schema_utils

    return dict(schema_utils.schema_as_feature_spec(schema).feature_spec)


def schema_text(schema: schema_pb2.Schema) -> str:
    """Text format of the schema; the same schema always gives the same text."""
    from google.protobuf import text_format

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
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

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
