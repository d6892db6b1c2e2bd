"""ModernBERT in Keras (any Keras backend): the backbone, its masked LM and their weights' names.

Built from Keras layers and keras-hub's ReversibleEmbedding and RotaryEmbedding, computing what transformers'
ModernBertForMaskedLM computes (lmshards.train.network.modernbert_mapping maps the weights):

  token embedding -> LayerNorm -> dropout
  each layer: x + Wo(attention(RoPE(q), RoPE(k), v))   over LayerNorm(x) (none in layer 0)
              x + Wo(dropout(GELU(a) * g)), a|g = Wi(LayerNorm(x))
  final LayerNorm; head: dense -> GELU -> LayerNorm -> token embedding^T + bias.

No layer norm or linear layer has a bias except the head's output. The first layer and every `global_every`-th
after it attend to the whole sequence with RoPE theta `rope_theta_global`; the others only to tokens at most
`local_window // 2` positions away, with `rope_theta_local`.

Attention is keras.ops.dot_product_attention with a boolean mask [batch, 1, seq, seq] (AttentionMasks): token i
may attend to token j when both are in the same segment (and, in a local layer, within the window of
positions). A plain batch's segments are its padding_mask, its positions 0, 1, ...; a packed batch's are its
records' `segment_ids` and `positions`, so each document of a block is computed as it would be alone.
"""

from __future__ import annotations

import math
from typing import Any

import keras
import keras_hub
from keras import ops

from lmshards.train.config import ModelConfig
from lmshards.train.families.base import PACKED_POSITIONS_INPUT, PACKED_SEGMENTS_INPUT
from lmshards.train.network.hf_mapping import MaskedLMSpec

INITIALIZER_RANGE = (
    0.02  # ModernBERT's truncated-normal std (cut at 2 std, like Keras' TruncatedNormal)
)


def _initializer(std: float) -> keras.initializers.Initializer:
    return keras.initializers.TruncatedNormal(stddev=std)


def _norm(epsilon: float, name: str, dtype: Any) -> keras.layers.LayerNormalization:
    return keras.layers.LayerNormalization(epsilon=epsilon, center=False, name=name, dtype=dtype)


def _dense(units: int, std: float, name: str, dtype: Any) -> keras.layers.Dense:
    return keras.layers.Dense(
        units, use_bias=False, kernel_initializer=_initializer(std), name=name, dtype=dtype
    )


class AttentionMasks(keras.layers.Layer):
    """(segments, positions) int [batch, seq] -> (global, local) bool masks [batch, 1, seq, seq].

    global: same segment; local: same segment and |position_i - position_j| <= window // 2 (transformers'
    inclusive half window). Padding (segment 0) attends to padding only, so no query row is empty.
    """

    def __init__(self, window: int, **kwargs):
        super().__init__(**kwargs)
        self.window = window

    def call(self, segments, positions):
        same = ops.equal(ops.expand_dims(segments, 2), ops.expand_dims(segments, 1))
        distance = ops.abs(ops.expand_dims(positions, 2) - ops.expand_dims(positions, 1))
        near = ops.logical_and(same, ops.less_equal(distance, self.window // 2))
        return ops.expand_dims(same, 1), ops.expand_dims(near, 1)

    def compute_output_shape(self, segments_shape, positions_shape=None):
        shape = (segments_shape[0], 1, segments_shape[1], segments_shape[1])
        return shape, shape

    def get_config(self):
        return {**super().get_config(), "window": self.window}


class SequencePositions(keras.layers.Layer):
    """int [batch, seq] -> its positions 0, 1, ... [batch, seq] (a plain batch's)."""

    def call(self, token_ids):
        return ops.broadcast_to(
            ops.arange(ops.shape(token_ids)[1], dtype="int32")[None], ops.shape(token_ids)
        )


class ModernBertEncoderLayer(keras.layers.Layer):
    """One pre-norm ModernBERT layer: rotary self-attention under `attention_mask`, then the GeGLU feed-forward."""

    def __init__(
        self,
        *,
        num_heads: int,
        intermediate_dim: int,
        rope_theta: float,
        is_global: bool,
        first: bool,
        dropout: float,
        layer_norm_epsilon: float,
        output_std: float,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.rope_theta = rope_theta
        self.is_global = is_global
        self.first = first
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.output_std = output_std

    def build(self, input_shape):
        hidden = input_shape[-1]
        dtype = self.dtype_policy
        # transformers' layer 0 takes the embeddings' norm as its attention norm (nn.Identity).
        self.attention_norm = (
            None if self.first else _norm(self.layer_norm_epsilon, "attention_norm", dtype)
        )
        self.qkv = _dense(3 * hidden, INITIALIZER_RANGE, "qkv", dtype)
        self.rotary = keras_hub.layers.RotaryEmbedding(
            max_wavelength=self.rope_theta, name="rotary", dtype=dtype
        )
        self.attention_output = _dense(hidden, self.output_std, "attention_output", dtype)
        self.mlp_norm = _norm(self.layer_norm_epsilon, "mlp_norm", dtype)
        self.mlp_in = _dense(2 * self.intermediate_dim, INITIALIZER_RANGE, "mlp_in", dtype)
        self.mlp_dropout = keras.layers.Dropout(self.dropout, name="mlp_dropout", dtype=dtype)
        self.mlp_out = _dense(hidden, self.output_std, "mlp_out", dtype)
        if self.attention_norm is not None:
            self.attention_norm.build(input_shape)
        self.qkv.build(input_shape)
        self.attention_output.build(input_shape)
        self.mlp_norm.build(input_shape)
        self.mlp_in.build(input_shape)
        self.mlp_out.build((*input_shape[:-1], self.intermediate_dim))
        self.built = True

    def call(self, x, attention_mask, positions, training=None):
        hidden = ops.shape(x)[-1]
        head_dim = x.shape[-1] // self.num_heads
        h = x if self.attention_norm is None else self.attention_norm(x)
        batch, seq = ops.shape(x)[0], ops.shape(x)[1]
        qkv = ops.reshape(self.qkv(h), (batch, seq, 3, self.num_heads, head_dim))
        query = self.rotary(qkv[:, :, 0], positions=positions)
        key = self.rotary(qkv[:, :, 1], positions=positions)
        attended = ops.dot_product_attention(
            query, key, qkv[:, :, 2], mask=attention_mask, scale=1.0 / math.sqrt(head_dim)
        )
        x = x + self.attention_output(ops.reshape(attended, (batch, seq, hidden)))
        gelu_input, gate = ops.split(self.mlp_in(self.mlp_norm(x)), 2, axis=-1)
        h = keras.activations.gelu(gelu_input, approximate=False) * gate
        return x + self.mlp_out(self.mlp_dropout(h, training=training))

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "rope_theta": self.rope_theta,
            "is_global": self.is_global,
            "first": self.first,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "output_std": self.output_std,
        }


class ModernBertBackbone(keras_hub.models.Backbone):
    """The ModernBERT encoder: `token_ids` and `padding_mask` (or, packed, `attention_segment_ids` and
    `position_ids`) int [batch, seq] -> the final norm's output [batch, seq, hidden_dim]."""

    def __init__(
        self,
        *,
        vocabulary_size: int,
        num_layers: int,
        num_heads: int,
        hidden_dim: int,
        intermediate_dim: int,
        dropout: float = 0.0,
        max_sequence_length: int = 8192,
        layer_norm_epsilon: float = 1e-5,
        rope_theta_global: float = 160_000.0,
        rope_theta_local: float = 10_000.0,
        local_window: int = 128,
        global_every: int = 3,
        packed: bool = False,
        dtype=None,
        **kwargs,
    ):
        output_std = INITIALIZER_RANGE / math.sqrt(2.0 * num_layers)
        self.token_embedding = keras_hub.layers.ReversibleEmbedding(
            vocabulary_size,
            hidden_dim,
            embeddings_initializer=_initializer(INITIALIZER_RANGE),
            dtype=dtype,
            name="token_embedding",
        )
        self.embeddings_layer_norm = _norm(layer_norm_epsilon, "embeddings_layer_norm", dtype)
        self.embeddings_dropout = keras.layers.Dropout(
            dropout, dtype=dtype, name="embeddings_dropout"
        )
        self.transformer_layers = [
            ModernBertEncoderLayer(
                num_heads=num_heads,
                intermediate_dim=intermediate_dim,
                rope_theta=rope_theta_global if i % global_every == 0 else rope_theta_local,
                is_global=i % global_every == 0,
                first=i == 0,
                dropout=dropout,
                layer_norm_epsilon=layer_norm_epsilon,
                output_std=output_std,
                dtype=dtype,
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]
        self.final_norm = _norm(layer_norm_epsilon, "final_norm", dtype)
        self.attention_masks = AttentionMasks(local_window, dtype=dtype, name="attention_masks")

        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        if packed:
            segments = keras.Input(shape=(None,), dtype="int32", name=PACKED_SEGMENTS_INPUT)
            positions = keras.Input(shape=(None,), dtype="int32", name=PACKED_POSITIONS_INPUT)
            inputs = {
                "token_ids": token_ids,
                PACKED_SEGMENTS_INPUT: segments,
                PACKED_POSITIONS_INPUT: positions,
            }
        else:
            segments = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
            positions = SequencePositions(dtype=dtype, name="sequence_positions")(token_ids)
            inputs = {"token_ids": token_ids, "padding_mask": segments}
        x = self.embeddings_dropout(self.embeddings_layer_norm(self.token_embedding(token_ids)))
        global_mask, local_mask = self.attention_masks(segments, positions)
        for layer in self.transformer_layers:
            x = layer(
                x,
                attention_mask=global_mask if layer.is_global else local_mask,
                positions=positions,
            )
        x = self.final_norm(x)
        super().__init__(inputs=inputs, outputs=x, dtype=dtype, **kwargs)

        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length
        self.layer_norm_epsilon = layer_norm_epsilon
        self.rope_theta_global = rope_theta_global
        self.rope_theta_local = rope_theta_local
        self.local_window = local_window
        self.global_every = global_every
        self.packed = packed

    def get_config(self):
        return {
            **super().get_config(),
            **{name: getattr(self, name) for name in _BACKBONE_ARGUMENTS},
        }


_BACKBONE_ARGUMENTS = (
    "vocabulary_size",
    "num_layers",
    "num_heads",
    "hidden_dim",
    "intermediate_dim",
    "dropout",
    "max_sequence_length",
    "layer_norm_epsilon",
    "rope_theta_global",
    "rope_theta_local",
    "local_window",
    "global_every",
    "packed",
)


class ModernBertMaskedLMHead(keras.layers.Layer):
    """(encoded [batch, seq, hidden], mask_positions int [batch, n]) -> logits [batch, n, vocabulary]:
    the gathered tokens through dense -> GELU -> LayerNorm, projected by the tied token embedding, plus a bias."""

    def __init__(self, *, token_embedding, layer_norm_epsilon: float, output_std: float, **kwargs):
        super().__init__(**kwargs, autocast=False)
        self.token_embedding = token_embedding
        self.layer_norm_epsilon = layer_norm_epsilon
        self.output_std = output_std

    def build(self, inputs_shape, mask_positions_shape=None):
        hidden = self.token_embedding.output_dim
        self._intermediate_dense = _dense(
            hidden, self.output_std, "intermediate_dense", self.dtype_policy
        )
        self._intermediate_layer_norm = _norm(
            self.layer_norm_epsilon, "intermediate_layer_norm", self.dtype_policy
        )
        self._intermediate_dense.build((None, None, hidden))
        self._intermediate_layer_norm.build((None, None, hidden))
        self._bias = self.add_weight(
            name="bias",
            shape=[self.token_embedding.input_dim],
            initializer="zeros",
            dtype=self.dtype,
        )
        self.built = True

    def call(self, inputs, mask_positions):
        x = ops.take_along_axis(inputs, ops.expand_dims(mask_positions, -1), axis=1)
        x = keras.activations.gelu(self._intermediate_dense(x), approximate=False)
        x = self._intermediate_layer_norm(x)
        outputs = ops.cast(self.token_embedding(x, reverse=True), self.compute_dtype)
        return outputs + self._bias

    def compute_output_shape(self, inputs_shape, mask_positions_shape):
        return (*mask_positions_shape, self.token_embedding.input_dim)


class ModernBertMaskedLM(keras_hub.models.MaskedLM):
    """The backbone and its masked-LM head: the backbone's inputs and `mask_positions` -> logits."""

    def __init__(self, backbone: ModernBertBackbone, preprocessor=None, **kwargs):
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.masked_lm_head = ModernBertMaskedLMHead(
            token_embedding=backbone.token_embedding,
            layer_norm_epsilon=backbone.layer_norm_epsilon,
            output_std=INITIALIZER_RANGE / math.sqrt(2.0 * backbone.num_layers),
            dtype=backbone.dtype_policy,
            name="mlm_head",
        )
        inputs = {
            **backbone.input,
            "mask_positions": keras.Input(shape=(None,), dtype="int32", name="mask_positions"),
        }
        outputs = self.masked_lm_head(backbone(backbone.input), inputs["mask_positions"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)


def build_masked_lm(model_config: ModelConfig, *, packed: bool) -> ModernBertMaskedLM:
    """A freshly initialised ModernBERT masked LM of the config (lmshards.train.network.model.build_masked_lm)."""
    backbone = ModernBertBackbone(
        vocabulary_size=model_config.vocabulary_size,
        num_layers=model_config.num_layers,
        num_heads=model_config.num_heads,
        hidden_dim=model_config.hidden_dim,
        intermediate_dim=model_config.intermediate_dim,
        dropout=model_config.dropout,
        max_sequence_length=model_config.max_sequence_length,
        packed=packed,
        **{
            name: value for name, value in _recipe_fields(model_config).items() if value is not None
        },
    )
    return ModernBertMaskedLM(backbone=backbone)


def _recipe_fields(model_config: ModelConfig) -> dict[str, Any]:
    """The config's ModernBERT fields; those left at None take the backbone's defaults (ModernBERT-base's)."""
    names = (
        "layer_norm_epsilon",
        "rope_theta_global",
        "rope_theta_local",
        "local_window",
        "global_every",
    )
    return {name: getattr(model_config, name) for name in names}


def masked_lm_spec(masked_lm: ModernBertMaskedLM, *, family: str) -> MaskedLMSpec:
    """The export's view of the model (lmshards.train.network.keras_weights.masked_lm_spec)."""
    backbone = masked_lm.backbone
    return MaskedLMSpec(
        family=family,
        vocabulary_size=backbone.vocabulary_size,
        num_layers=backbone.num_layers,
        num_heads=backbone.num_heads,
        hidden_dim=backbone.hidden_dim,
        intermediate_dim=backbone.intermediate_dim,
        dropout=float(backbone.dropout),
        max_sequence_length=backbone.max_sequence_length,
        num_segments=0,
        activation="gelu",
        layer_norm_epsilon=float(backbone.layer_norm_epsilon),
        head_activation="gelu",
        head_layer_norm_epsilon=float(backbone.layer_norm_epsilon),
        rope_theta_global=float(backbone.rope_theta_global),
        rope_theta_local=float(backbone.rope_theta_local),
        local_window=int(backbone.local_window),
        global_every=int(backbone.global_every),
    )


def keras_variables(masked_lm: ModernBertMaskedLM) -> dict[str, Any]:
    """The model's variables named as lmshards.train.network.modernbert_mapping.keras_weight_names lists them."""
    backbone = masked_lm.backbone
    variables = {
        "token_embedding": backbone.token_embedding.embeddings,
        "embeddings_norm.gamma": backbone.embeddings_layer_norm.gamma,
    }
    for i, layer in enumerate(backbone.transformer_layers):
        if layer.attention_norm is not None:
            variables[f"layer.{i}.attention_norm.gamma"] = layer.attention_norm.gamma
        variables[f"layer.{i}.qkv.kernel"] = layer.qkv.kernel
        variables[f"layer.{i}.attention_output.kernel"] = layer.attention_output.kernel
        variables[f"layer.{i}.mlp_norm.gamma"] = layer.mlp_norm.gamma
        variables[f"layer.{i}.mlp_in.kernel"] = layer.mlp_in.kernel
        variables[f"layer.{i}.mlp_out.kernel"] = layer.mlp_out.kernel
    head = masked_lm.masked_lm_head
    variables["final_norm.gamma"] = backbone.final_norm.gamma
    variables["head.dense.kernel"] = head._intermediate_dense.kernel
    variables["head.norm.gamma"] = head._intermediate_layer_norm.gamma
    variables["head.bias"] = head._bias
    return variables
