"""Wrapping a tokenizers Tokenizer as transformers' PreTrainedTokenizerFast: role tokens, bos/eos, max length."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from lmshards.schemas.hf_tokenizer import wrap_fast_tokenizer

# role -> token, listed in id order
BERT_ROLES = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
ROBERTA_ROLES = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"}


def _word_level(roles: dict[str, str]) -> tuple[Tokenizer, dict[str, int]]:
    """A word-level tokenizer: the role tokens (ids 0..4), then three words; and role -> id."""
    vocab = {token: i for i, token in enumerate([*roles.values(), "hello", "world", "paris"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=roles["unk"]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok, {role: vocab[token] for role, token in roles.items()}


@pytest.mark.parametrize(
    "roles, bos_eos", [(BERT_ROLES, (None, None)), (ROBERTA_ROLES, ("<s>", "</s>"))]
)
def test_roles_bos_eos_and_max_length(roles, bos_eos, tmp_path):
    from transformers import AutoTokenizer

    tok, ids = _word_level(roles)
    hf = wrap_fast_tokenizer(tok, special_token_ids=ids, model_max_length=64)
    assert {role: getattr(hf, f"{role}_token_id") for role in ids} == ids
    assert (hf.bos_token, hf.eos_token) == bos_eos
    assert hf.model_max_length == 64
    assert hf("hello paris", add_special_tokens=False)["input_ids"] == tok.encode("hello paris").ids

    hf.save_pretrained(str(tmp_path))
    loaded = AutoTokenizer.from_pretrained(str(tmp_path))
    assert {role: getattr(loaded, f"{role}_token_id") for role in ids} == ids
    assert (loaded.bos_token, loaded.eos_token, loaded.model_max_length) == (*bos_eos, 64)
