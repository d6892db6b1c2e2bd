"""keras-hub masked LM weights -> Hugging Face transformers state dict and config (pure numpy).

Nothing here imports Keras, TensorFlow or torch: the mapping works on plain arrays, named as
`keras_weight_names()` lists them, so it can be read and tested on its own.

What differs between families (prefixes, head names, position numbering, segments) is read from
the family's declaration in train/families/; the encoder layers map the same way for all.

Shapes on the Keras side (H hidden, I intermediate, N heads, D = H / N, V vocabulary, L positions):
  token embedding [V, H], position embedding [L, H], segment embedding [S, H] (families with segments),
  attention q/k/v kernels [H, N, D] and biases [N, D], attention output kernel [N, D, H],
  Dense kernels [in, out]. torch Linear weights are [out, in].
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from train.families import ModelFamily, family_names, get_family

# keras-hub activation name -> transformers ACT2FN name computing the same function.
# keras-hub's RoBERTa uses exact (erf) GELU; its BERT encoder uses the tanh approximation.
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_pytorch_tanh"}


@dataclasses.dataclass(frozen=True)
class MaskedLMSpec:
    """What the export needs to know about a keras-hub masked LM besides its weights."""

    family: str  # a registered family name (train/families)
    vocabulary_size: int
    num_layers: int
    num_heads: int
    hidden_dim: int
    intermediate_dim: int
    dropout: float
    max_sequence_length: int
    num_segments: int  # token types of a family that uses segment ids; 0 otherwise
    activation: str  # encoder feed-forward activation, a key of HF_ACTIVATIONS
    layer_norm_epsilon: float  # embeddings and encoder layer norms
    head_activation: str  # MLM head dense activation, a key of HF_ACTIVATIONS
    head_layer_norm_epsilon: float

    def __post_init__(self) -> None:
        if self.family not in family_names():
            raise ValueError(f"family {self.family!r} is not one of {family_names()}")
        for activation in (self.activation, self.head_activation):
            if activation not in HF_ACTIVATIONS:
                raise ValueError(
                    f"activation {activation!r} has no transformers equivalent; known: {sorted(HF_ACTIVATIONS)}"
                )

    @property
    def model_family(self) -> ModelFamily:
        return get_family(self.family)


def keras_weight_names(spec: MaskedLMSpec) -> list[str]:
    """The names `hf_state_dict` expects, one per Keras variable of the masked LM (pooler excluded)."""
    names = [
        "token_embedding",
        "position_embedding",
        "embeddings_norm.gamma",
        "embeddings_norm.beta",
    ]
    if spec.model_family.uses_segment_ids:
        names.append("segment_embedding")
    for i in range(spec.num_layers):
        for part in ("query", "key", "value", "attention_output", "intermediate", "output"):
            names += [f"layer.{i}.{part}.kernel", f"layer.{i}.{part}.bias"]
        for norm in ("attention_norm", "output_norm"):
            names += [f"layer.{i}.{norm}.gamma", f"layer.{i}.{norm}.beta"]
    names += [
        "head.dense.kernel",
        "head.dense.bias",
        "head.norm.gamma",
        "head.norm.beta",
        "head.bias",
    ]
    return names


def hf_state_dict(
    weights: dict[str, np.ndarray], spec: MaskedLMSpec, *, pad_token_id: int
) -> dict[str, np.ndarray]:
    """Maps Keras weights (named as keras_weight_names) to the full state dict of the HF MaskedLM model.

    Tied parameters (decoder weight = word embeddings, decoder bias = head bias) appear under both
    names, as in `model.state_dict()`.

    Raises:
      ValueError: a weight is missing, unexpected, or of the wrong shape.
    """
    expected = set(keras_weight_names(spec))
    if set(weights) != expected:
        raise ValueError(
            f"Keras weights do not match the {spec.family} layout: missing {sorted(expected - set(weights))}, "
            f"unexpected {sorted(set(weights) - expected)}"
        )
    H, I, V, L = (  # noqa: E741  (the paper's names: hidden, intermediate, vocabulary, layers)
        spec.hidden_dim,
        spec.intermediate_dim,
        spec.vocabulary_size,
        spec.max_sequence_length,
    )
    w = {name: np.asarray(value, dtype=np.float32) for name, value in weights.items()}
    _check_shape(w, "token_embedding", (V, H))
    _check_shape(w, "position_embedding", (L, H))

    family = spec.model_family
    base = family.hf_base_prefix
    out: dict[str, np.ndarray] = {f"{base}.embeddings.word_embeddings.weight": w["token_embedding"]}
    offset = family.hf_position_offset(pad_token_id)
    positions = np.zeros((offset + L, H), dtype=np.float32)
    positions[offset:] = w["position_embedding"]
    out[f"{base}.embeddings.position_embeddings.weight"] = positions
    if family.uses_segment_ids:
        _check_shape(w, "segment_embedding", (spec.num_segments, H))
        out[f"{base}.embeddings.token_type_embeddings.weight"] = w["segment_embedding"]
    else:
        # The Keras model adds no token-type embedding: HF's single row must add nothing.
        out[f"{base}.embeddings.token_type_embeddings.weight"] = np.zeros((1, H), dtype=np.float32)
    out[f"{base}.embeddings.LayerNorm.weight"] = w["embeddings_norm.gamma"]
    out[f"{base}.embeddings.LayerNorm.bias"] = w["embeddings_norm.beta"]

    for i in range(spec.num_layers):
        k, hf = f"layer.{i}", f"{base}.encoder.layer.{i}"
        for part in ("query", "key", "value"):
            _check_shape(w, f"{k}.{part}.kernel", (H, spec.num_heads, H // spec.num_heads))
            # [H, N, D] -> [H, N*D] -> torch [N*D, H]; N-major like HF's view(..., N, D).
            out[f"{hf}.attention.self.{part}.weight"] = w[f"{k}.{part}.kernel"].reshape(H, H).T
            out[f"{hf}.attention.self.{part}.bias"] = w[f"{k}.{part}.bias"].reshape(H)
        _check_shape(w, f"{k}.attention_output.kernel", (spec.num_heads, H // spec.num_heads, H))
        out[f"{hf}.attention.output.dense.weight"] = (
            w[f"{k}.attention_output.kernel"].reshape(H, H).T
        )
        out[f"{hf}.attention.output.dense.bias"] = w[f"{k}.attention_output.bias"]
        out[f"{hf}.attention.output.LayerNorm.weight"] = w[f"{k}.attention_norm.gamma"]
        out[f"{hf}.attention.output.LayerNorm.bias"] = w[f"{k}.attention_norm.beta"]
        _check_shape(w, f"{k}.intermediate.kernel", (H, I))
        out[f"{hf}.intermediate.dense.weight"] = w[f"{k}.intermediate.kernel"].T
        out[f"{hf}.intermediate.dense.bias"] = w[f"{k}.intermediate.bias"]
        _check_shape(w, f"{k}.output.kernel", (I, H))
        out[f"{hf}.output.dense.weight"] = w[f"{k}.output.kernel"].T
        out[f"{hf}.output.dense.bias"] = w[f"{k}.output.bias"]
        out[f"{hf}.output.LayerNorm.weight"] = w[f"{k}.output_norm.gamma"]
        out[f"{hf}.output.LayerNorm.bias"] = w[f"{k}.output_norm.beta"]

    _check_shape(w, "head.dense.kernel", (H, H))
    _check_shape(w, "head.bias", (V,))
    head = family.hf_head
    out[f"{head.dense}.weight"] = w["head.dense.kernel"].T
    out[f"{head.dense}.bias"] = w["head.dense.bias"]
    out[f"{head.norm}.weight"] = w["head.norm.gamma"]
    out[f"{head.norm}.bias"] = w["head.norm.beta"]
    out[head.bias] = w["head.bias"]
    # keras-hub's head projects with the (reversed) token embedding: the decoder is tied to it.
    out[f"{head.decoder}.weight"] = w["token_embedding"]
    out[f"{head.decoder}.bias"] = w["head.bias"]
    return {name: np.ascontiguousarray(value) for name, value in out.items()}


def _check_shape(weights: dict[str, np.ndarray], name: str, shape: tuple[int, ...]) -> None:
    if weights[name].shape != shape:
        raise ValueError(f"Keras weight {name!r} has shape {weights[name].shape}, expected {shape}")


def hf_config(spec: MaskedLMSpec, special_token_ids: dict[str, int]) -> dict[str, Any]:
    """The transformers config (keyword arguments of the family's config class) for the model.

    Raises:
      KeyError: special_token_ids has no 'pad' (a family's position numbering may depend on it).
    """
    family = spec.model_family
    pad = special_token_ids["pad"]
    return {
        "architectures": [family.hf_masked_lm_class],
        "vocab_size": spec.vocabulary_size,
        "hidden_size": spec.hidden_dim,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "intermediate_size": spec.intermediate_dim,
        "hidden_act": HF_ACTIVATIONS[spec.activation],
        "hidden_dropout_prob": spec.dropout,
        # keras MultiHeadAttention applies the same dropout rate to the attention probabilities.
        "attention_probs_dropout_prob": spec.dropout,
        "layer_norm_eps": spec.layer_norm_epsilon,
        "initializer_range": 0.02,
        "pad_token_id": pad,
        "tie_word_embeddings": True,
        "max_position_embeddings": family.hf_position_offset(pad) + spec.max_sequence_length,
        "type_vocab_size": spec.num_segments if family.uses_segment_ids else 1,
        **family.hf_token_ids(special_token_ids),
    }


def head_differences(spec: MaskedLMSpec) -> list[str]:
    """How the HF MLM head computes differently from the Keras one (empty when the export is exact).

    HF uses one layer_norm_eps everywhere, and some heads (BertForMaskedLM's) use hidden_act, while
    keras-hub's BertMaskedLM head uses exact GELU and epsilon 1e-5 beside an encoder using
    tanh-GELU and 1e-12. The encoder is matched; the head then differs by a small amount.
    """
    hf_head_activation = spec.model_family.hf_head_activation or HF_ACTIVATIONS[spec.activation]
    differences = []
    if HF_ACTIVATIONS[spec.head_activation] != hf_head_activation:
        differences.append(
            f"head activation {spec.head_activation} exported as {hf_head_activation}"
        )
    if spec.head_layer_norm_epsilon != spec.layer_norm_epsilon:
        differences.append(
            f"head layer norm epsilon {spec.head_layer_norm_epsilon:g} exported as {spec.layer_norm_epsilon:g}"
        )
    return differences
