"""ModernBERT (Warner et al. 2024): lmshards' own Keras model (lmshards.train.network.modernbert), exported as
transformers ModernBertForMaskedLM.

Pre-norm layers without biases, GeGLU feed-forward, rotary positions: every `global_every`-th layer (from
the first) attends to the whole sequence with RoPE theta `rope_theta_global`, the others to a window of
`local_window` tokens (half on each side) with `rope_theta_local`. No position table: max_sequence_length
is the longest sequence the config allows (transformers' max_position_embeddings).
"""

from lmshards.train.families.base import HfHeadNames, ModelFamily

# ModernBERT-base's numerics and attention pattern (answerdotai/ModernBERT-base config.json).
_RECIPE = (
    ("dropout", 0.0),
    ("max_sequence_length", 8192),
    ("activation", "gelu"),
    ("layer_norm_epsilon", 1e-5),
    ("rope_theta_global", 160_000.0),
    ("rope_theta_local", 10_000.0),
    ("local_window", 128),
    ("global_every", 3),
)

FAMILY = ModelFamily(
    name="modernbert",
    keras_backbone="ModernBertBackbone",
    keras_masked_lm="ModernBertMaskedLM",
    keras_position_embedding="",  # rotary positions: no table
    uses_segment_ids=False,
    match_head_to_encoder=False,
    hf_config_class="ModernBertConfig",
    hf_masked_lm_class="ModernBertForMaskedLM",
    hf_model_type="modernbert",
    hf_base_prefix="model",
    hf_head=HfHeadNames(
        dense="head.dense",
        norm="head.norm",
        bias="decoder.bias",  # the decoder's own bias; only its weight is tied
        decoder="decoder",
    ),
    hf_head_activation="gelu",  # classifier_activation
    hf_positions_after_padding=False,
    hf_token_aliases=(("bos", "cls"), ("eos", "sep"), ("cls", "cls"), ("sep", "sep")),
    keras_packed_backbone="ModernBertBackbone",  # takes the packed inputs itself
    network="modernbert",
    presets=(
        (
            "tiny",
            (
                ("num_layers", 3),
                ("num_heads", 2),
                ("hidden_dim", 64),
                ("intermediate_dim", 96),
                *_RECIPE,
            ),
        ),
        (
            "small",
            (
                ("num_layers", 6),
                ("num_heads", 4),
                ("hidden_dim", 256),
                ("intermediate_dim", 384),
                *_RECIPE,
            ),
        ),
        (
            "base",
            (
                ("num_layers", 22),
                ("num_heads", 12),
                ("hidden_dim", 768),
                ("intermediate_dim", 1152),
                *_RECIPE,
            ),
        ),
    ),
    mlm_probability=0.3,  # the paper's 30%
)
