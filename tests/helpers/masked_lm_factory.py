"""Tiny keras-hub masked LMs and BERT-style tokenizers for export and fill-mask tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lmshards.train.families import get_family
from lmshards.train.network.model import keras_hub_classes

SEQ_LEN = 16
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tiny_masked_lm(family: str, *, vocabulary_size: int, seed: int = 0):
    """A 2-layer keras-hub masked LM as keras-hub builds it (head not matched), every weight moved by seeded noise."""
    backbone_cls, masked_lm_cls = keras_hub_classes(get_family(family))
    backbone = backbone_cls(
        vocabulary_size=vocabulary_size,
        num_layers=2,
        num_heads=2,
        hidden_dim=32,
        intermediate_dim=64,
        max_sequence_length=SEQ_LEN,
    )
    masked_lm = masked_lm_cls(backbone, preprocessor=None)
    perturb(masked_lm, seed=seed)
    return masked_lm


def perturb(masked_lm, *, seed: int) -> None:
    """Biases and LayerNorm betas stop being 0, gammas stop being 1: a wrong mapping cannot pass."""
    rng = np.random.default_rng(seed)
    for variable in masked_lm.trainable_weights:
        variable.assign(variable.numpy() + rng.normal(0.0, 0.1, variable.shape).astype("float32"))


def train_bert_tokenizer(path: Path, files: list[Path]) -> Path:
    """A BERT-style WordPiece tokenizer.json ([PAD]=0 ... [MASK]=4) trained on part of the sample corpus."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    lines = [line for f in files for line in f.read_text(encoding="utf-8").splitlines()[:2000]]
    tok.train_from_iterator(
        lines, trainer=trainers.WordPieceTrainer(vocab_size=600, special_tokens=BERT_SPECIALS)
    )
    tok.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    tok.save(str(path))
    return path


def transformers_tokenizer_dir(tokenizer_json: Path, directory: Path) -> Path:
    """The tokenizer saved as a transformers directory (tokenizer_config.json beside tokenizer.json)."""
    import transformers

    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_json),
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    tokenizer.save_pretrained(directory)
    return directory
