"""RoBERTa: keras-hub RobertaMaskedLM, exported as transformers RobertaForMaskedLM."""

from lmshards.train.families.base import HfHeadNames, ModelFamily

FAMILY = ModelFamily(
    name="roberta",
    keras_backbone="RobertaBackbone",
    keras_masked_lm="RobertaMaskedLM",
    keras_position_embedding="embeddings.position_embedding",  # inside its TokenAndPositionEmbedding
    uses_segment_ids=False,
    # Its head already uses exact GELU and epsilon 1e-5, like the encoder and RobertaLMHead.
    match_head_to_encoder=False,
    hf_config_class="RobertaConfig",
    hf_masked_lm_class="RobertaForMaskedLM",
    hf_model_type="roberta",
    hf_base_prefix="roberta",
    hf_head=HfHeadNames(
        dense="lm_head.dense",
        norm="lm_head.layer_norm",
        bias="lm_head.bias",
        decoder="lm_head.decoder",
    ),
    hf_head_activation="gelu",  # RobertaLMHead applies exact GELU whatever hidden_act says
    hf_positions_after_padding=True,
    hf_token_aliases=(("bos", "cls"), ("eos", "sep")),  # <s> ... </s> are also bos/eos
    keras_packed_backbone="PackedRobertaBackbone",
)
