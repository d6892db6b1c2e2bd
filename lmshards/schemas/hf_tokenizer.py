"""Wrapping a tokenizers Tokenizer as transformers' PreTrainedTokenizerFast, the same way on both sides.

transformers is imported inside the function: Dataflow workers, which import lmshards.schemas/, do not have it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lmshards.schemas.constants import ROLE_SPELLINGS

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

_ROBERTA_CLS = ROLE_SPELLINGS["cls"][1]


def wrap_fast_tokenizer(
    tokenizer: Tokenizer, *, special_token_ids: Mapping[str, int], model_max_length: int
) -> PreTrainedTokenizerFast:
    """A PreTrainedTokenizerFast over `tokenizer` with each role's token (pad_token, mask_token, ...) set.

    special_token_ids: role ('pad', 'mask', 'cls', 'sep', 'unk') -> id in `tokenizer`.
    A RoBERTa-style vocabulary (cls spelled "<s>") also gets bos/eos = cls/sep, as roberta-base has;
    a BERT-style one has neither, as bert-base has.
    """
    from transformers import PreTrainedTokenizerFast

    tokens = {
        f"{role}_token": tokenizer.id_to_token(token_id)
        for role, token_id in special_token_ids.items()
    }
    if tokens.get("cls_token") == _ROBERTA_CLS:
        tokens["bos_token"] = tokens["cls_token"]
        tokens["eos_token"] = tokens.get("sep_token")
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        model_max_length=model_max_length,
        **{name: token for name, token in tokens.items() if token is not None},
    )
