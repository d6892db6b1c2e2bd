"""ModernBERT's Keras weights <-> transformers ModernBertForMaskedLM's state dict and config.json (numpy only).

The Keras names (lmshards.train.network.modernbert.keras_variables) and their shapes (H hidden, I intermediate,
V vocabulary); torch Linear weights are their kernels transposed:
  token_embedding [V, H]                     model.embeddings.tok_embeddings.weight
  embeddings_norm.gamma [H]                  model.embeddings.norm.weight
  layer.{i}.attention_norm.gamma [H]         model.layers.{i}.attn_norm.weight (none in layer 0)
  layer.{i}.qkv.kernel [H, 3H]               model.layers.{i}.attn.Wqkv.weight (q, k, v; each head-major)
  layer.{i}.attention_output.kernel [H, H]   model.layers.{i}.attn.Wo.weight
  layer.{i}.mlp_norm.gamma [H]               model.layers.{i}.mlp_norm.weight
  layer.{i}.mlp_in.kernel [H, 2I]            model.layers.{i}.mlp.Wi.weight (the GELU input, then the gate)
  layer.{i}.mlp_out.kernel [I, H]            model.layers.{i}.mlp.Wo.weight
  final_norm.gamma [H]                       model.final_norm.weight
  head.dense.kernel [H, H], head.norm.gamma  head.dense.weight, head.norm.weight
  head.bias [V]                              decoder.bias (decoder.weight is tied to the token embedding)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lmshards.train.network.hf_mapping import HF_ACTIVATIONS, MaskedLMSpec, UnsupportedHfModel

FULL = "full_attention"
SLIDING = "sliding_attention"
DEFAULT_ROPE = "default"
# transformers' defaults for a config.json that leaves a field out (ModernBertConfig).
HF_DEFAULTS: dict[str, Any] = {
    "hidden_activation": "gelu",
    "classifier_activation": "gelu",
    "attention_bias": False,
    "mlp_bias": False,
    "norm_bias": False,
    "classifier_bias": False,
    "decoder_bias": True,
    "tie_word_embeddings": True,
}
HF_GLOBAL_EVERY = 3
HF_GLOBAL_THETA = 160_000.0
HF_LOCAL_THETA = 10_000.0
HF_LOCAL_WINDOW = 128
HF_NORM_EPS = 1e-5
_TIED_DECODER = "decoder.weight"


def layer_types(num_layers: int, global_every: int) -> list[str]:
    """transformers' layer_types: the first layer and every `global_every`-th after it attend globally."""
    return [FULL if i % global_every == 0 else SLIDING for i in range(num_layers)]


def keras_weight_names(spec: MaskedLMSpec) -> list[str]:
    """One name per Keras variable of the ModernBERT masked LM, in the module docstring's order."""
    names = ["token_embedding", "embeddings_norm.gamma"]
    for i in range(spec.num_layers):
        if i:
            names.append(f"layer.{i}.attention_norm.gamma")
        names += [
            f"layer.{i}.{part}"
            for part in (
                "qkv.kernel",
                "attention_output.kernel",
                "mlp_norm.gamma",
                "mlp_in.kernel",
                "mlp_out.kernel",
            )
        ]
    return [*names, "final_norm.gamma", "head.dense.kernel", "head.norm.gamma", "head.bias"]


def _shapes(spec: MaskedLMSpec) -> dict[str, tuple[int, ...]]:
    """Each Keras weight's shape."""
    H, I, V = spec.hidden_dim, spec.intermediate_dim, spec.vocabulary_size  # noqa: N806, E741
    shapes: dict[str, tuple[int, ...]] = {}
    for name in keras_weight_names(spec):
        part = name.split(".", 2)[-1] if name.startswith("layer.") else name
        shapes[name] = {
            "token_embedding": (V, H),
            "qkv.kernel": (H, 3 * H),
            "attention_output.kernel": (H, H),
            "mlp_in.kernel": (H, 2 * I),
            "mlp_out.kernel": (I, H),
            "head.dense.kernel": (H, H),
            "head.bias": (V,),
        }.get(part, (H,))
    return shapes


def _is_kernel(name: str) -> bool:
    """A Dense kernel [in, out]: torch keeps it transposed."""
    return name.endswith(".kernel")


def _hf_names(num_layers: int, base: str) -> dict[str, str]:
    """Keras name -> transformers state-dict name (base: 'model.' in a MaskedLM, '' in a bare ModernBertModel)."""
    names = {
        "token_embedding": f"{base}embeddings.tok_embeddings.weight",
        "embeddings_norm.gamma": f"{base}embeddings.norm.weight",
        "final_norm.gamma": f"{base}final_norm.weight",
        "head.dense.kernel": "head.dense.weight",
        "head.norm.gamma": "head.norm.weight",
        "head.bias": "decoder.bias",
    }
    for i in range(num_layers):
        hf = f"{base}layers.{i}"
        if i:
            names[f"layer.{i}.attention_norm.gamma"] = f"{hf}.attn_norm.weight"
        names[f"layer.{i}.qkv.kernel"] = f"{hf}.attn.Wqkv.weight"
        names[f"layer.{i}.attention_output.kernel"] = f"{hf}.attn.Wo.weight"
        names[f"layer.{i}.mlp_norm.gamma"] = f"{hf}.mlp_norm.weight"
        names[f"layer.{i}.mlp_in.kernel"] = f"{hf}.mlp.Wi.weight"
        names[f"layer.{i}.mlp_out.kernel"] = f"{hf}.mlp.Wo.weight"
    return names


def hf_state_dict(weights: dict[str, np.ndarray], spec: MaskedLMSpec) -> dict[str, np.ndarray]:
    """The full state dict of ModernBertForMaskedLM (the tied decoder.weight included, as in state_dict()).

    Raises:
      ValueError: a weight of another shape.
    """
    out: dict[str, np.ndarray] = {}
    for name, shape in _shapes(spec).items():
        value = np.asarray(weights[name], dtype=np.float32)
        if value.shape != shape:
            raise ValueError(f"Keras weight {name!r} has shape {value.shape}, expected {shape}")
        out[_hf_names(spec.num_layers, "model.")[name]] = value.T if _is_kernel(name) else value
    out[_TIED_DECODER] = out["model.embeddings.tok_embeddings.weight"]
    return {name: np.ascontiguousarray(value) for name, value in out.items()}


def hf_config(spec: MaskedLMSpec, special_token_ids: dict[str, int]) -> dict[str, Any]:
    """ModernBertConfig's keyword arguments for the model (transformers 5's layer_types and rope_parameters).

    Keras drops out the embeddings and the feed-forward output at `dropout`, never the attention weights.
    """
    family = spec.model_family
    return {
        "architectures": [family.hf_masked_lm_class],
        "vocab_size": spec.vocabulary_size,
        "hidden_size": spec.hidden_dim,
        "intermediate_size": spec.intermediate_dim,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "hidden_activation": HF_ACTIVATIONS[spec.activation],
        "max_position_embeddings": spec.max_sequence_length,
        "norm_eps": spec.layer_norm_epsilon,
        **HF_DEFAULTS,
        "classifier_activation": HF_ACTIVATIONS[spec.head_activation],
        "embedding_dropout": spec.dropout,
        "mlp_dropout": spec.dropout,
        "attention_dropout": 0.0,
        "layer_types": layer_types(spec.num_layers, int(spec.global_every or HF_GLOBAL_EVERY)),
        "rope_parameters": {
            FULL: {"rope_type": DEFAULT_ROPE, "rope_theta": spec.rope_theta_global},
            SLIDING: {"rope_type": DEFAULT_ROPE, "rope_theta": spec.rope_theta_local},
        },
        "local_attention": spec.local_window,
        "initializer_range": 0.02,
        "pad_token_id": special_token_ids["pad"],
        **family.hf_token_ids(special_token_ids),
    }


def model_fields_from_hf(config: dict[str, Any]) -> dict[str, Any]:
    """The ModelConfig fields of a ModernBertConfig config.json, in either form: transformers 5's layer_types
    and rope_parameters, or the older global_attn_every_n_layers, global_rope_theta and local_rope_theta.

    Raises:
      UnsupportedHfModel: a variant lmshards does not build (another activation, biases, another layer pattern
        or RoPE type, an untied decoder), named by its field.
    """
    problems = [
        f"{field} {config[field]!r} (lmshards builds {want!r})"
        for field, want in HF_DEFAULTS.items()
        if field in config and config[field] != want
    ]
    try:
        num_layers, hidden, heads = (
            int(config["num_hidden_layers"]),
            int(config["hidden_size"]),
            int(config["num_attention_heads"]),
        )
        global_every, pattern_problem = _global_every(config, num_layers)
        problems += pattern_problem
        rope = config.get("rope_parameters") or {}
        thetas = {}
        for kind, old_name, default in (
            (FULL, "global_rope_theta", HF_GLOBAL_THETA),
            (SLIDING, "local_rope_theta", HF_LOCAL_THETA),
        ):
            params = rope.get(kind) or {}
            if params.get("rope_type", DEFAULT_ROPE) != DEFAULT_ROPE:
                problems.append(
                    f"rope_parameters.{kind}.rope_type {params['rope_type']!r} (lmshards builds 'default')"
                )
            thetas[kind] = float(params.get("rope_theta", config.get(old_name, default)))
        if config.get("rope_scaling"):
            problems.append(f"rope_scaling {config['rope_scaling']!r} (lmshards builds none)")
        if config.get("head_dim") not in (None, hidden // max(heads, 1)):
            problems.append(
                f"head_dim {config['head_dim']} (lmshards builds hidden_size / num_attention_heads)"
            )
        if problems:
            raise UnsupportedHfModel(
                f"a modernbert model with {'; '.join(problems)} has no lmshards form"
            )
        fields: dict[str, Any] = {
            "family": "modernbert",
            "vocabulary_size": int(config["vocab_size"]),
            "num_layers": num_layers,
            "num_heads": heads,
            "hidden_dim": hidden,
            "intermediate_dim": int(config["intermediate_size"]),
            "dropout": float(config.get("mlp_dropout", 0.0)),
            "max_sequence_length": int(config.get("max_position_embeddings", 8192)),
            "activation": "gelu",
            "layer_norm_epsilon": float(config.get("norm_eps", HF_NORM_EPS)),
            "rope_theta_global": thetas[FULL],
            "rope_theta_local": thetas[SLIDING],
            "local_window": int(config.get("local_attention", HF_LOCAL_WINDOW)),
            "global_every": global_every,
        }
    except KeyError as e:
        raise UnsupportedHfModel(f"config.json has no {e.args[0]!r}") from e
    if hidden % heads:
        raise UnsupportedHfModel(
            f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
        )
    return fields


def _global_every(config: dict[str, Any], num_layers: int) -> tuple[int, list[str]]:
    """(every how many layers one is global, the problem if layer_types has another pattern)."""
    every = int(config.get("global_attn_every_n_layers", HF_GLOBAL_EVERY))
    types = config.get("layer_types")
    if types is None:
        return every, []
    full = [i for i, kind in enumerate(types) if kind == FULL]
    every = full[1] - full[0] if len(full) > 1 else max(num_layers, 1)
    if list(types) != layer_types(num_layers, every):
        return every, [
            f"layer_types {types!r} (lmshards builds a {FULL} layer first and every n-th layer after it, the "
            f"others {SLIDING})"
        ]
    return every, []


def keras_weights_from_hf(
    state: dict[str, np.ndarray], spec: MaskedLMSpec
) -> dict[str, np.ndarray]:
    """The Keras weights of a ModernBertForMaskedLM (or bare ModernBertModel: no head.* then) state dict.

    Raises:
      UnsupportedHfModel: a weight is missing or of another shape, or the decoder is not tied.
    """
    base = "model." if "model.embeddings.tok_embeddings.weight" in state else ""
    names = _hf_names(spec.num_layers, base)
    with_head = "head.dense.weight" in state
    out = {}
    for name, shape in _shapes(spec).items():
        if name.startswith("head.") and not with_head:
            continue
        hf = names[name]
        hf_shape = shape[::-1] if _is_kernel(name) else shape
        if hf not in state:
            raise UnsupportedHfModel(f"the weights have no {hf!r}")
        if state[hf].shape != hf_shape:
            raise UnsupportedHfModel(
                f"weight {hf!r} has shape {list(state[hf].shape)}, config.json implies {list(hf_shape)}"
            )
        out[name] = state[hf].T if _is_kernel(name) else state[hf]
    decoder = state.get(_TIED_DECODER)
    if decoder is not None and not np.array_equal(decoder, out["token_embedding"]):
        raise UnsupportedHfModel(
            f"its output projection {_TIED_DECODER} is not tied to the word embeddings; lmshards ties them"
        )
    return {name: np.ascontiguousarray(value, dtype=np.float32) for name, value in out.items()}
