"""A keras-hub masked LM's weights as numpy arrays named as lmshards.train.network.hf_mapping.keras_weight_names lists
them, and back: what export, --init_from and the backends' weight loading share."""

from __future__ import annotations

from typing import Any

import numpy as np

from lmshards.plumbing.errors import LmshardsError
from lmshards.train.families import get_family
from lmshards.train.network.hf_mapping import MaskedLMSpec, own_network


def masked_lm_spec(masked_lm: Any, *, family: str) -> MaskedLMSpec:
    """Reads architecture, activations and epsilons off a keras-hub masked LM of the family `family`.

    Raises:
      LmshardsError: the family is unknown, or the model is not that family's keras-hub model.
    """
    model_family = get_family(family)
    expected = model_family.keras_backbone
    backbone = masked_lm.backbone
    # A packed backbone (lmshards.train.families.packed) is its family's backbone with other inputs, same weights.
    if expected not in (cls.__name__ for cls in type(backbone).__mro__[:2]):
        raise LmshardsError(
            f"Family {family!r} expects a keras-hub {expected}, got {type(backbone).__name__}."
        )
    if model_family.network is not None:
        return own_network(model_family).masked_lm_spec(masked_lm, family=family)
    encoder = backbone.transformer_layers[0]
    head = masked_lm.masked_lm_head
    return MaskedLMSpec(
        family=family,
        vocabulary_size=backbone.vocabulary_size,
        num_layers=backbone.num_layers,
        num_heads=backbone.num_heads,
        hidden_dim=backbone.hidden_dim,
        intermediate_dim=backbone.intermediate_dim,
        dropout=float(backbone.dropout),
        max_sequence_length=backbone.max_sequence_length,
        num_segments=getattr(backbone, "num_segments", 0),
        activation=_activation_name(encoder.activation),
        layer_norm_epsilon=float(encoder.layer_norm_epsilon),
        head_activation=_activation_name(head.intermediate_activation),
        head_layer_norm_epsilon=float(head.layer_norm_epsilon),
    )


def _activation_name(activation: Any) -> str:
    # keras.activations.gelu (exact) and keras_hub's gelu_approximate are the only ones keras-hub uses here.
    return getattr(activation, "__name__", repr(activation))


def keras_weights(masked_lm: Any, spec: MaskedLMSpec) -> dict[str, np.ndarray]:
    """The masked LM's variables as numpy arrays, named as hf_mapping.keras_weight_names lists them."""
    return {
        name: np.asarray(variable.numpy(), dtype=np.float32)
        for name, variable in keras_variables(masked_lm, spec).items()
    }


def assign_keras_weights(masked_lm: Any, weights: dict[str, np.ndarray], *, family: str) -> None:
    """Writes weights named as keras_weight_names into the masked LM's variables (--init_from).

    A subset is allowed (a bare transformers model has no head: the model keeps its initial one).
    Raises:
      LmshardsError: a name the model does not have, or a weight of another shape.
    """
    variables = keras_variables(masked_lm, masked_lm_spec(masked_lm, family=family))
    unknown = sorted(set(weights) - set(variables))
    if unknown:
        raise LmshardsError(f"The {family} model has no weights named {unknown}.")
    for name, value in weights.items():
        variable = variables[name]
        if tuple(variable.shape) != value.shape:
            raise LmshardsError(
                f"Weight {name!r} has shape {list(value.shape)}; the model's is {list(variable.shape)}."
            )
        variable.assign(value)


def keras_variables(masked_lm: Any, spec: MaskedLMSpec) -> dict[str, Any]:
    """The masked LM's Keras variables, named as hf_mapping.keras_weight_names lists them."""
    if spec.model_family.network is not None:
        return own_network(spec.model_family).keras_variables(masked_lm)
    backbone = masked_lm.backbone
    if getattr(backbone.token_embedding, "tie_weights", True) is False:
        raise LmshardsError(
            "The model's output projection is not tied to its token embedding; export supports tied models only."
        )
    family = spec.model_family
    position = backbone
    for name in family.keras_position_embedding.split("."):
        position = getattr(position, name)
    variables = {
        "token_embedding": backbone.token_embedding.embeddings,
        "position_embedding": position.position_embeddings,
        "embeddings_norm.gamma": backbone.embeddings_layer_norm.gamma,
        "embeddings_norm.beta": backbone.embeddings_layer_norm.beta,
    }
    if family.uses_segment_ids:
        variables["segment_embedding"] = backbone.segment_embedding.embeddings
    for i, layer in enumerate(backbone.transformer_layers):
        attention = layer._self_attention_layer
        dense = {
            "query": attention.query_dense,
            "key": attention.key_dense,
            "value": attention.value_dense,
            "attention_output": attention.output_dense,
            "intermediate": layer._feedforward_intermediate_dense,
            "output": layer._feedforward_output_dense,
        }
        for part, sublayer in dense.items():
            variables[f"layer.{i}.{part}.kernel"] = sublayer.kernel
            variables[f"layer.{i}.{part}.bias"] = sublayer.bias
        for part, norm in (
            ("attention_norm", layer._self_attention_layer_norm),
            ("output_norm", layer._feedforward_layer_norm),
        ):
            variables[f"layer.{i}.{part}.gamma"] = norm.gamma
            variables[f"layer.{i}.{part}.beta"] = norm.beta
    head = masked_lm.masked_lm_head
    variables.update(
        {
            "head.dense.kernel": head._intermediate_dense.kernel,
            "head.dense.bias": head._intermediate_dense.bias,
            "head.norm.gamma": head._intermediate_layer_norm.gamma,
            "head.norm.beta": head._intermediate_layer_norm.beta,
            "head.bias": head._bias,
        }
    )
    return variables
