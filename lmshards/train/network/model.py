"""The network: the model family's keras-hub masked LM, built from configuration only (no downloads)."""

from __future__ import annotations

import keras_hub

from lmshards.train.config import ModelConfig
from lmshards.train.families import ModelFamily, check_packed_support, get_family
from lmshards.train.network.hf_mapping import own_network


def keras_hub_classes(family: ModelFamily) -> tuple[type, type]:
    """(backbone class, masked LM class) that `family` names in keras_hub.models (or in its own network module)."""
    module = keras_hub.models if family.network is None else own_network(family)
    return getattr(module, family.keras_backbone), getattr(module, family.keras_masked_lm)


def packed_backbone_class(family: ModelFamily) -> type:
    """The family's backbone for packed blocks (lmshards.train.families.packed). Raises LmshardsError if it has none."""
    check_packed_support(family, "the shard set")
    from lmshards.train.families import packed

    module = packed if family.network is None else own_network(family)
    return getattr(module, str(family.keras_packed_backbone))


def build_masked_lm(
    model_config: ModelConfig, *, packed: bool = False
) -> keras_hub.models.MaskedLM:
    """A freshly initialised masked LM (backbone + MLM head, preprocessor=None) of the config's family.

    Inputs: `token_ids`, `padding_mask` (int32 [batch, seq]; int32 because a bool mask fails under
    MirroredStrategy), `segment_ids` when the family uses them, and `mask_positions` (int32
    [batch, max_predictions]). Output: logits [batch, max_predictions, vocabulary_size].
    packed: for packed blocks: `attention_segment_ids` and `position_ids` instead of `padding_mask`
    (lmshards.train.families.packed); the variables are the same as without.
    """
    family = get_family(model_config.family)
    if family.network is not None:
        return own_network(family).build_masked_lm(model_config, packed=packed)
    backbone_cls, masked_lm_cls = keras_hub_classes(family)
    if packed:
        backbone_cls = packed_backbone_class(family)
    backbone = backbone_cls(
        vocabulary_size=model_config.vocabulary_size,
        num_layers=model_config.num_layers,
        num_heads=model_config.num_heads,
        hidden_dim=model_config.hidden_dim,
        intermediate_dim=model_config.intermediate_dim,
        dropout=model_config.dropout,
        max_sequence_length=model_config.max_sequence_length,
    )
    masked_lm = masked_lm_cls(backbone=backbone, preprocessor=None)
    set_numerics(masked_lm, model_config)
    if family.match_head_to_encoder:
        match_head_to_encoder(masked_lm)
    return masked_lm


def set_numerics(masked_lm: keras_hub.models.MaskedLM, model_config: ModelConfig) -> None:
    """Gives the encoder the config's activation and every layer norm its epsilon, where the config sets them.

    A model taken from transformers (--init_from, a config.json as --model_config) computes with its
    hidden_act and layer_norm_eps, which may not be keras-hub's defaults (keras-hub's BERT uses tanh-GELU
    where bert-base uses exact GELU). Like match_head_to_encoder, both are read at call time.
    """
    backbone = masked_lm.backbone
    if model_config.activation is not None:
        activation = _keras_activation(model_config.activation)
        for layer in backbone.transformer_layers:
            layer.activation = layer._feedforward_intermediate_dense.activation = activation
    epsilon = model_config.layer_norm_epsilon
    if epsilon is not None:
        norms = [backbone.embeddings_layer_norm, masked_lm.masked_lm_head._intermediate_layer_norm]
        for layer in backbone.transformer_layers:
            layer.layer_norm_epsilon = epsilon
            norms += [layer._self_attention_layer_norm, layer._feedforward_layer_norm]
        for norm in norms:
            norm.epsilon = epsilon
        masked_lm.masked_lm_head.layer_norm_epsilon = epsilon


def _keras_activation(name: str):
    """keras-hub's function for an activation name of lmshards.train.network.hf_mapping.HF_ACTIVATIONS."""
    if name == "gelu_approximate":
        from keras_hub.src.utils.keras_utils import gelu_approximate

        return gelu_approximate
    import keras

    return keras.activations.get(name)


def match_head_to_encoder(masked_lm: keras_hub.models.MaskedLM) -> None:
    """Makes the MLM head use the encoder's activation and layer-norm epsilon.

    For families whose transformers head computes with the encoder's (ModelFamily.match_head_to_encoder),
    this lets `lmshards export` reproduce the trained model's logits exactly. Both are read at call
    time, so setting them before the first step changes no weight shape.
    """
    encoder = masked_lm.backbone.transformer_layers[0]
    head = masked_lm.masked_lm_head
    head.intermediate_activation = head._intermediate_dense.activation = encoder.activation
    head.layer_norm_epsilon = head._intermediate_layer_norm.epsilon = encoder.layer_norm_epsilon
