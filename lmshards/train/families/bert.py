"""BERT: keras-hub BertMaskedLM, exported as transformers BertForMaskedLM."""

from lmshards.train.families.base import HfHeadNames, ModelFamily

FAMILY = ModelFamily(
    name="bert",
    keras_backbone="BertBackbone",
    keras_masked_lm="BertMaskedLM",
    keras_position_embedding="position_embedding",
    uses_segment_ids=True,
    # keras-hub's encoder uses tanh-approximate GELU and epsilon 1e-12 but builds its MLM head with
    # exact GELU and 1e-5; BertForMaskedLM (like the original BERT) uses the encoder's for both.
    match_head_to_encoder=True,
    hf_config_class="BertConfig",
    hf_masked_lm_class="BertForMaskedLM",
    hf_model_type="bert",
    hf_base_prefix="bert",
    hf_head=HfHeadNames(
        dense="cls.predictions.transform.dense",
        norm="cls.predictions.transform.LayerNorm",
        bias="cls.predictions.bias",
        decoder="cls.predictions.decoder",
    ),
    hf_head_activation=None,  # BertLMPredictionHead uses hidden_act
    hf_positions_after_padding=False,
    keras_packed_backbone="PackedBertBackbone",
)
