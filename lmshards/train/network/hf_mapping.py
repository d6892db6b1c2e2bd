"""keras-hub masked LM weights -> Hugging Face transformers state dict and config (pure numpy).

Nothing here imports Keras, TensorFlow or torch: the mapping works on plain arrays, named as
`keras_weight_names()` lists them, so it can be read and tested on its own.

What differs between families (prefixes, head names, position numbering, segments) is read from
the family's declaration in lmshards/train/families/; the encoder layers map the same way for all.

Shapes on the Keras side (H hidden, I intermediate, N heads, D = H / N, V vocabulary, L positions):
  token embedding [V, H], position embedding [L, H], segment embedding [S, H] (families with segments),
  attention q/k/v kernels [H, N, D] and biases [N, D], attention output kernel [N, D, H],
  Dense kernels [in, out]. torch Linear weights are [out, in].
"""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType
from typing import Any

import numpy as np

from lmshards.train.families import ModelFamily, family_names, get_family

# keras-hub activation name -> transformers ACT2FN name computing the same function.
# keras-hub's RoBERTa uses exact (erf) GELU; its BERT encoder uses the tanh approximation.
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_pytorch_tanh"}


@dataclasses.dataclass(frozen=True)
class MaskedLMSpec:
    """What the export needs to know about a keras-hub masked LM besides its weights."""

    family: str  # a registered family name (lmshards/train/families)
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
    # Rotary attention (ModernBERT; lmshards.train.config.ModelConfig's fields of the same names), None elsewhere.
    rope_theta_global: float | None = None
    rope_theta_local: float | None = None
    local_window: int | None = None
    global_every: int | None = None

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


def network_mapping(family: ModelFamily) -> ModuleType | None:
    """The weight mapping of a family that builds its own network (ModelFamily.network), None for keras-hub's."""
    if family.network is None:
        return None
    return importlib.import_module(f"{__name__.rsplit('.', 1)[0]}.{family.network}_mapping")


def own_network(family: ModelFamily) -> ModuleType:
    """The Keras module of a family that builds its own network (imported when called: it imports Keras)."""
    return importlib.import_module(f"{__name__.rsplit('.', 1)[0]}.{family.network}")


def keras_weight_names(spec: MaskedLMSpec) -> list[str]:
    """The names `hf_state_dict` expects, one per Keras variable of the masked LM (pooler excluded)."""
    own = network_mapping(spec.model_family)
    if own is not None:
        return own.keras_weight_names(spec)
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
    own = network_mapping(spec.model_family)
    if own is not None and set(weights) == expected:
        return own.hf_state_dict(weights, spec)
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
    own = network_mapping(family)
    if own is not None:
        return own.hf_config(spec, special_token_ids)
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


# ---------------------------------------------------------------- transformers -> keras-hub (--init_from)

# transformers ACT2FN name -> keras-hub activation computing the same function (the inverse of HF_ACTIVATIONS;
# gelu_new is the same tanh approximation as gelu_pytorch_tanh).
KERAS_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_new": "gelu_approximate",
}
# Token types of keras-hub's BertBackbone as lmshards builds it.
KERAS_BERT_SEGMENTS = 2


class UnsupportedHfModel(ValueError):
    """A transformers config or state dict that no keras-hub family here can take exactly."""


def family_of_hf_config(config: dict[str, Any]) -> ModelFamily:
    """The registered family whose transformers form config.json describes (by its `model_type`).

    Raises:
      UnsupportedHfModel: no family has that model_type (GPT-2, T5, ...).
    """
    model_type = config.get("model_type")
    for name in family_names():
        family = get_family(name)
        if family.hf_model_type == model_type:
            return family
    known = [get_family(n).hf_model_type for n in family_names()]
    architectures = config.get("architectures") or []
    raise UnsupportedHfModel(
        f"model_type {model_type!r}{f' ({architectures[0]})' if architectures else ''} is not a supported family; "
        f"lmshards continues masked LMs of model_type {known}"
    )


def model_fields_from_hf(config: dict[str, Any]) -> dict[str, Any]:
    """The ModelConfig fields (lmshards.train.config) of a transformers config.json of a supported family.

    max_sequence_length is the position table less the family's offset (roberta-base: 514 - 2 = 512).
    Raises:
      UnsupportedHfModel: another family, or a variant the keras-hub model cannot compute exactly
        (relative positions, a decoder, an activation without a keras-hub twin, other token-type counts).
    """
    family = family_of_hf_config(config)
    own = network_mapping(family)
    if own is not None:
        return own.model_fields_from_hf(config)
    problems = []
    if config.get("position_embedding_type", "absolute") != "absolute":
        problems.append(
            f"position_embedding_type {config['position_embedding_type']!r} (only 'absolute')"
        )
    if config.get("is_decoder") or config.get("add_cross_attention"):
        problems.append("a decoder (is_decoder / add_cross_attention)")
    activation = config.get("hidden_act", "gelu")
    if activation not in KERAS_ACTIVATIONS:
        problems.append(f"hidden_act {activation!r} (supported: {sorted(KERAS_ACTIVATIONS)})")
    type_vocab_size = config.get(
        "type_vocab_size", KERAS_BERT_SEGMENTS if family.uses_segment_ids else 1
    )
    if family.uses_segment_ids and type_vocab_size != KERAS_BERT_SEGMENTS:
        problems.append(
            f"type_vocab_size {type_vocab_size} (keras-hub's {family.name} has {KERAS_BERT_SEGMENTS})"
        )
    if not family.uses_segment_ids and type_vocab_size != 1:
        problems.append(
            f"type_vocab_size {type_vocab_size} (keras-hub's {family.name} has no token types)"
        )
    if problems:
        raise UnsupportedHfModel(
            f"a {family.name} model with {'; '.join(problems)} has no exact keras-hub form"
        )
    try:
        pad = int(config.get("pad_token_id") or 0)
        fields: dict[str, Any] = {
            "family": family.name,
            "vocabulary_size": int(config["vocab_size"]),
            "num_layers": int(config["num_hidden_layers"]),
            "num_heads": int(config["num_attention_heads"]),
            "hidden_dim": int(config["hidden_size"]),
            "intermediate_dim": int(config["intermediate_size"]),
            "dropout": float(config.get("hidden_dropout_prob", 0.1)),
            "max_sequence_length": int(config["max_position_embeddings"])
            - family.hf_position_offset(pad),
            "activation": KERAS_ACTIVATIONS[activation],
            "layer_norm_epsilon": float(config.get("layer_norm_eps", 1e-12)),
        }
    except KeyError as e:
        raise UnsupportedHfModel(f"config.json has no {e.args[0]!r}") from e
    if fields["hidden_dim"] % fields["num_heads"]:
        raise UnsupportedHfModel(
            f"hidden_size {fields['hidden_dim']} is not a multiple of num_attention_heads {fields['num_heads']}"
        )
    return fields


def hf_base_prefix_of(state: dict[str, np.ndarray], family: ModelFamily) -> str:
    """'roberta.' for a MaskedLM's state dict, '' for a bare RobertaModel's (transformers drops the prefix)."""
    return (
        f"{family.hf_base_prefix}."
        if f"{family.hf_base_prefix}.embeddings.word_embeddings.weight" in state
        else ""
    )


def has_hf_head(state: dict[str, np.ndarray], family: ModelFamily) -> bool:
    return f"{family.hf_head.dense}.weight" in state


def keras_weights_from_hf(
    state: dict[str, np.ndarray], spec: MaskedLMSpec, *, pad_token_id: int
) -> dict[str, np.ndarray]:
    """Maps a transformers state dict of the family (MaskedLM or bare model) to Keras weights, named as
    keras_weight_names lists them: the inverse of hf_state_dict.

    A bare model has no MLM head: its head.* names are left out (the new model keeps its initial head).
    RoBERTa's single token-type row is added to every position row (both are added to every token).
    Old checkpoints' LayerNorm gamma/beta names are read as weight/bias; a pooler is ignored.
    Raises:
      UnsupportedHfModel: a weight is missing or of another shape, or the decoder is not tied to the embeddings.
    """
    s = {_modern_name(name): np.asarray(value, dtype=np.float32) for name, value in state.items()}
    family = spec.model_family
    own = network_mapping(family)
    if own is not None:
        return own.keras_weights_from_hf(s, spec)
    base = hf_base_prefix_of(s, family)
    H, V, L, N = spec.hidden_dim, spec.vocabulary_size, spec.max_sequence_length, spec.num_heads  # noqa: N806

    def get(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in s:
            raise UnsupportedHfModel(f"the weights have no {name!r}")
        if s[name].shape != shape:
            raise UnsupportedHfModel(
                f"weight {name!r} has shape {list(s[name].shape)}, config.json implies {list(shape)}"
            )
        return s[name]

    emb = f"{base}embeddings"
    offset = family.hf_position_offset(pad_token_id)
    positions = get(f"{emb}.position_embeddings.weight", (offset + L, H))[offset:]
    out = {
        "token_embedding": get(f"{emb}.word_embeddings.weight", (V, H)),
        "embeddings_norm.gamma": get(f"{emb}.LayerNorm.weight", (H,)),
        "embeddings_norm.beta": get(f"{emb}.LayerNorm.bias", (H,)),
    }
    if family.uses_segment_ids:
        out["position_embedding"] = positions
        out["segment_embedding"] = get(
            f"{emb}.token_type_embeddings.weight", (spec.num_segments, H)
        )
    else:
        out["position_embedding"] = (
            positions + get(f"{emb}.token_type_embeddings.weight", (1, H))[0]
        )
    for i in range(spec.num_layers):
        k, hf = f"layer.{i}", f"{base}encoder.layer.{i}"
        for part in ("query", "key", "value"):
            out[f"{k}.{part}.kernel"] = get(f"{hf}.attention.self.{part}.weight", (H, H)).T.reshape(
                H, N, H // N
            )
            out[f"{k}.{part}.bias"] = get(f"{hf}.attention.self.{part}.bias", (H,)).reshape(
                N, H // N
            )
        out[f"{k}.attention_output.kernel"] = get(
            f"{hf}.attention.output.dense.weight", (H, H)
        ).T.reshape(N, H // N, H)
        out[f"{k}.attention_output.bias"] = get(f"{hf}.attention.output.dense.bias", (H,))
        out[f"{k}.attention_norm.gamma"] = get(f"{hf}.attention.output.LayerNorm.weight", (H,))
        out[f"{k}.attention_norm.beta"] = get(f"{hf}.attention.output.LayerNorm.bias", (H,))
        out[f"{k}.intermediate.kernel"] = get(
            f"{hf}.intermediate.dense.weight", (spec.intermediate_dim, H)
        ).T
        out[f"{k}.intermediate.bias"] = get(
            f"{hf}.intermediate.dense.bias", (spec.intermediate_dim,)
        )
        out[f"{k}.output.kernel"] = get(f"{hf}.output.dense.weight", (H, spec.intermediate_dim)).T
        out[f"{k}.output.bias"] = get(f"{hf}.output.dense.bias", (H,))
        out[f"{k}.output_norm.gamma"] = get(f"{hf}.output.LayerNorm.weight", (H,))
        out[f"{k}.output_norm.beta"] = get(f"{hf}.output.LayerNorm.bias", (H,))
    if has_hf_head(s, family):
        head = family.hf_head
        decoder = s.get(f"{head.decoder}.weight")
        if decoder is not None and not np.array_equal(decoder, out["token_embedding"]):
            raise UnsupportedHfModel(
                f"its output projection {head.decoder}.weight is not tied to the word embeddings; "
                "keras-hub's masked LM ties them"
            )
        bias_name = head.bias if head.bias in s else f"{head.decoder}.bias"
        out["head.dense.kernel"] = get(f"{head.dense}.weight", (H, H)).T
        out["head.dense.bias"] = get(f"{head.dense}.bias", (H,))
        out["head.norm.gamma"] = get(f"{head.norm}.weight", (H,))
        out["head.norm.beta"] = get(f"{head.norm}.bias", (H,))
        out["head.bias"] = get(bias_name, (V,))
    return {name: np.ascontiguousarray(value) for name, value in out.items()}


def _modern_name(name: str) -> str:
    """Early BERT checkpoints name LayerNorm parameters gamma/beta; transformers now says weight/bias."""
    if ".LayerNorm." in name or ".layer_norm." in name:
        return name.replace(".gamma", ".weight").replace(".beta", ".bias")
    return name
