"""Packed backbones: a family's keras-hub backbone whose tokens attend only within their own segment.

A packed block (`preprocess --packing best_fit`) holds several documents. Each backbone here is its
family's keras-hub backbone, built by keras-hub with the same layers, names and weights, and wired
again with two more inputs: `attention_segment_ids` (int [batch, seq]: the segment of each token, 0
for padding) becomes the [batch, seq, seq] attention mask keras-hub's TransformerEncoder takes, and
`position_ids` (int [batch, seq]: each token's position within its segment) goes to the position
embedding's explicit positions. So every document of a block is computed exactly as it would be
alone, and a checkpoint of a packed model is a checkpoint of the plain one.

keras-hub numbers a document's positions 0, 1, ... in every family; a family whose transformers form
numbers them after the padding index (RoBERTa) gets that offset when exported (ModelFamily.hf_position_offset).
"""

from __future__ import annotations

import keras
import keras_hub
from keras import ops

from lmshards.train.families.base import PACKED_POSITIONS_INPUT, PACKED_SEGMENTS_INPUT


class SegmentAttentionMask(keras.layers.Layer):
    """int [batch, seq] segment ids -> bool [batch, seq, seq]: token i may attend to token j.

    True exactly where both tokens are in the same segment. Padding (segment 0) attends only to
    padding: its outputs are never predicted, and a query row with no key at all would give
    non-finite attention on some backends, whose gradients would poison the real rows'.
    """

    def call(self, segment_ids):
        return ops.equal(ops.expand_dims(segment_ids, 2), ops.expand_dims(segment_ids, 1))

    def compute_output_shape(self, input_shape):
        return (*input_shape, input_shape[-1])


def _packed_inputs() -> dict[str, keras.KerasTensor]:
    return {
        "token_ids": keras.Input(shape=(None,), dtype="int32", name="token_ids"),
        PACKED_SEGMENTS_INPUT: keras.Input(
            shape=(None,), dtype="int32", name=PACKED_SEGMENTS_INPUT
        ),
        PACKED_POSITIONS_INPUT: keras.Input(
            shape=(None,), dtype="int32", name=PACKED_POSITIONS_INPUT
        ),
    }


def _encode(backbone, x, segment_ids):
    """The transformer layers over x, each token attending within its segment only."""
    mask = SegmentAttentionMask(name="segment_attention_mask")(segment_ids)
    for transformer_layer in backbone.transformer_layers:
        x = transformer_layer(x, attention_mask=mask)
    return x


def _adopt(backbone, plain, names: tuple[str, ...]) -> None:
    """Takes over the plain backbone's layers (and so its variables) and its config attributes."""
    for name in names:
        setattr(backbone, name, getattr(plain, name))


_CONFIG_ATTRIBUTES = (
    "vocabulary_size",
    "num_layers",
    "num_heads",
    "hidden_dim",
    "intermediate_dim",
    "dropout",
    "max_sequence_length",
)


class PackedRobertaBackbone(keras_hub.models.RobertaBackbone):
    """keras-hub's RobertaBackbone taking `attention_segment_ids` and `position_ids` instead of `padding_mask`."""

    def __init__(self, dtype=None, **kwargs):
        config = {k: kwargs.pop(k) for k in list(kwargs) if k in _PLAIN_ARGUMENTS}
        plain = keras_hub.models.RobertaBackbone(dtype=dtype, **config)
        _adopt(
            self,
            plain,
            (
                "embeddings",
                "token_embedding",
                "embeddings_layer_norm",
                "embeddings_dropout",
                "transformer_layers",
            ),
        )
        inputs = _packed_inputs()
        x = self.embeddings(inputs["token_ids"], positions=inputs[PACKED_POSITIONS_INPUT])
        x = self.embeddings_dropout(self.embeddings_layer_norm(x))
        x = _encode(self, x, inputs[PACKED_SEGMENTS_INPUT])
        keras_hub.models.Backbone.__init__(self, inputs=inputs, outputs=x, dtype=dtype, **kwargs)
        _adopt(self, plain, (*_CONFIG_ATTRIBUTES, "start_token_index"))


class PackedBertBackbone(keras_hub.models.BertBackbone):
    """keras-hub's BertBackbone taking `attention_segment_ids` and `position_ids` instead of `padding_mask`.

    BERT's own `segment_ids` (sentence A/B, the token type) stay an input, as in the plain backbone.
    """

    def __init__(self, dtype=None, **kwargs):
        config = {
            k: kwargs.pop(k) for k in list(kwargs) if k in (*_PLAIN_ARGUMENTS, "num_segments")
        }
        plain = keras_hub.models.BertBackbone(dtype=dtype, **config)
        _adopt(
            self,
            plain,
            (
                "token_embedding",
                "position_embedding",
                "segment_embedding",
                "embeddings_add",
                "embeddings_layer_norm",
                "embeddings_dropout",
                "transformer_layers",
                "pooled_dense",
            ),
        )
        inputs = _packed_inputs()
        inputs["segment_ids"] = keras.Input(shape=(None,), dtype="int32", name="segment_ids")
        tokens = self.token_embedding(inputs["token_ids"])
        positions = self.position_embedding(tokens, positions=inputs[PACKED_POSITIONS_INPUT])
        segments = self.segment_embedding(inputs["segment_ids"])
        x = self.embeddings_add((tokens, positions, segments))
        x = self.embeddings_dropout(self.embeddings_layer_norm(x))
        x = _encode(self, x, inputs[PACKED_SEGMENTS_INPUT])
        outputs = {
            "sequence_output": x,
            "pooled_output": self.pooled_dense(x[:, plain.cls_token_index, :]),
        }
        keras_hub.models.Backbone.__init__(
            self, inputs=inputs, outputs=outputs, dtype=dtype, **kwargs
        )
        _adopt(self, plain, (*_CONFIG_ATTRIBUTES, "num_segments", "cls_token_index"))


# The constructor arguments every plain backbone takes (the rest go to keras.Model).
_PLAIN_ARGUMENTS = (*_CONFIG_ATTRIBUTES,)
