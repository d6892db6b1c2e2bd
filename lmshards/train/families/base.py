"""What a model family must declare: the keras-hub model the trainer builds and its Hugging Face form.

A family is data only (class names, layer paths, flags), so the registry imports no Keras, TensorFlow
or torch; the shared code (lmshards/train/network/model.py, lmshards/train/export/hf_export.py, lmshards/train/network/hf_mapping.py) reads these fields.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# The inputs a packed backbone (lmshards.train.families.packed) takes besides token_ids: each token's segment
# in its block (0 for padding) and its position within the segment, from the records' segment_ids and
# positions. Not `segment_ids`: BERT already takes that name for its token types.
PACKED_SEGMENTS_INPUT = "attention_segment_ids"
PACKED_POSITIONS_INPUT = "position_ids"


@dataclasses.dataclass(frozen=True)
class HfHeadNames:
    """State-dict prefixes of the transformers MLM head's parts."""

    dense: str
    norm: str
    bias: str
    decoder: str  # tied to the word embeddings

    @property
    def tied(self) -> tuple[str, ...]:
        """The decoder's state-dict names: tied to the word embeddings and the head bias, so a saved model
        (transformers' save_pretrained) stores them once, under the names they are tied to. A decoder bias
        that is the head bias itself (ModernBERT's `decoder.bias`) is stored under its own name."""
        return tuple(
            n for n in (f"{self.decoder}.weight", f"{self.decoder}.bias") if n != self.bias
        )


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """One model family: its keras-hub masked LM and the transformers MaskedLM it exports to.

    A family module declares one, e.g. BERT's (lmshards/train/families/bert.py):

    >>> bert = ModelFamily(
    ...     name="bert",
    ...     keras_backbone="BertBackbone",
    ...     keras_masked_lm="BertMaskedLM",
    ...     keras_position_embedding="position_embedding",
    ...     uses_segment_ids=True,
    ...     match_head_to_encoder=True,
    ...     hf_config_class="BertConfig",
    ...     hf_masked_lm_class="BertForMaskedLM",
    ...     hf_model_type="bert",
    ...     hf_base_prefix="bert",
    ...     hf_head=HfHeadNames(
    ...         dense="cls.predictions.transform.dense",
    ...         norm="cls.predictions.transform.LayerNorm",
    ...         bias="cls.predictions.bias",
    ...         decoder="cls.predictions.decoder",
    ...     ),
    ...     hf_head_activation=None,
    ...     hf_positions_after_padding=False,
    ...     keras_packed_backbone="PackedBertBackbone",
    ... )
    >>> bert.hf_position_offset(pad_token_id=0)
    0
    >>> from lmshards.train.families.bert import FAMILY
    >>> bert == FAMILY
    True
    """

    name: str  # the --model_family value, recorded in run_config.json

    # --- keras-hub (the trained model)
    keras_backbone: str  # class name in keras_hub.models
    keras_masked_lm: str  # class name in keras_hub.models; built with preprocessor=None
    keras_position_embedding: str  # attribute path from the backbone to its PositionEmbedding layer
    uses_segment_ids: bool  # the backbone takes `segment_ids` and has a segment embedding
    # Build the MLM head with the encoder's activation and layer-norm epsilon, because the family's
    # transformers head computes with those (so the export reproduces the logits exactly).
    match_head_to_encoder: bool

    # --- transformers (the export)
    hf_config_class: str  # class name in transformers
    hf_masked_lm_class: str  # class name in transformers, also config.json's `architectures`
    hf_model_type: str  # config.json's `model_type`: how `--init_from` and `--model_config` recognise the family
    hf_base_prefix: str  # prefix of the encoder's weights in the MaskedLM's state dict
    hf_head: HfHeadNames
    # The activation transformers' head applies whatever hidden_act says (an ACT2FN name);
    # None when the head uses hidden_act.
    hf_head_activation: str | None
    # transformers numbers real tokens' positions from padding_idx + 1 (RoBERTa), not from 0.
    hf_positions_after_padding: bool
    # Other names transformers gives special-token roles: (alias, role), e.g. ("bos", "cls").
    hf_token_aliases: tuple[tuple[str, str], ...] = ()
    # Class name in lmshards.train.families.packed of the backbone that trains on packed blocks (attention
    # within each segment, positions restarting per segment); None: the family cannot take a
    # [batch, seq, seq] attention mask, and packed sets are refused.
    keras_packed_backbone: str | None = None
    # A module of lmshards.train.network that builds the family's Keras model itself (`<network>`) and maps its
    # weights (`<network>_mapping`, numpy only), for a family keras-hub has no backbone of; None: keras-hub's
    # TransformerEncoder families, built and mapped by the shared code. keras_backbone and keras_masked_lm
    # then name classes of that module.
    network: str | None = None
    # Presets of this family (name -> ModelConfig fields) in place of lmshards.train.config's shared ones.
    presets: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    # The masking rate when --mlm_probability is not given (the family's recipe).
    mlm_probability: float = 0.15

    def hf_position_offset(self, pad_token_id: int) -> int:
        """First row of the transformers position table that a real token uses.

        keras-hub numbers every token's position 0, 1, ...; HF RoBERTa numbers non-pad tokens
        padding_idx + 1, padding_idx + 2, ... So HF rows [offset, offset + L) hold the Keras rows
        [0, L) and the rows below stay zero.
        """
        return pad_token_id + 1 if self.hf_positions_after_padding else 0

    def hf_token_ids(self, special_token_ids: dict[str, int]) -> dict[str, int | None]:
        """`{alias}_token_id` of each alias, from the role ids (None for a role the tokenizer lacks)."""
        return {
            f"{alias}_token_id": special_token_ids.get(role)
            for alias, role in self.hf_token_aliases
        }
