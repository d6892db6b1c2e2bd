"""Building and training the three tokenizer models; every output is reproducible for a given sample.

Each model gets the normalization and pre-tokenization that suit it:
- unigram: NFKC + Metaspace (SentencePiece style); every character of the sample is in the vocabulary,
  and characters the sample lacks fall back to byte pieces <0x00>..<0xFF> instead of the unknown token.
- bpe: byte-level (GPT-2/RoBERTa style): the 256 byte symbols are always in the vocabulary, so no
  text ever maps to the unknown token.
- wordpiece: BertNormalizer (cased unless lowercase=True) + BertPreTokenizer, which splits CJK text
  into single characters; every character of the sample is in the vocabulary.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from tokenizers import (
    AddedToken,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from lmshards.corpus_tools.tokenizer.config import (
    BPE,
    BYTE_PIECES,
    MODELS,
    UNIGRAM,
    WORDPIECE,
    SpecialTokens,
    TokenizerTrainingError,
)

# Unigram's EM sums probabilities in hash-map order, so the last bits of its scores differ run to
# run; rounding them makes the saved tokenizer (and its fingerprint) reproducible.
UNIGRAM_SCORE_DECIMALS = 8
_REQUIRED_CHAR_STEP = (
    1e-4  # tokenizers' UnigramTrainer: score step between appended required characters
)
_GRID_TOLERANCE = 1e-3  # in steps; scores are rounded to 1e-8


def build_tokenizer(model: str, preset: SpecialTokens, *, lowercase: bool = False) -> Tokenizer:
    """An untrained tokenizer with the model's normalizer, pre-tokenizer, decoder and post-processor."""
    if model == UNIGRAM:
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    elif model == BPE:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
    elif model == WORDPIECE:
        tok = Tokenizer(models.WordPiece(unk_token=preset.unk))
        tok.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
        )
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
    else:
        raise TokenizerTrainingError(
            f"--model {model!r} is not supported; use one of {', '.join(MODELS)}."
        )
    return tok


def token_ids(tok: Tokenizer, tokens: Iterable[str]) -> dict[str, int]:
    """The id of each token, which the tokenizer must hold (special tokens are added before training)."""
    ids = {token: tok.token_to_id(token) for token in tokens}
    missing = [token for token, i in ids.items() if i is None]
    if missing:
        raise RuntimeError(f"trained tokenizer lacks the special tokens {missing}")
    return {token: i for token, i in ids.items() if i is not None}


def post_processor(preset: SpecialTokens, ids: dict[str, int]) -> processors.TemplateProcessing:
    """Wraps one document as `cls ... sep` and a pair as BERT (`cls A sep B sep`) or RoBERTa does."""
    cls, sep = preset.cls, preset.sep
    pair = (
        f"{cls} $A {sep} $B:1 {sep}:1"
        if preset.name == "bert"
        else f"{cls} $A {sep} {sep} $B {sep}"
    )
    return processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=pair, special_tokens=[(cls, ids[cls]), (sep, ids[sep])]
    )


def train_tokenizer(
    docs: Callable[[], Iterable[str]],
    *,
    model: str,
    vocab_size: int,
    preset: SpecialTokens,
    lowercase: bool = False,
) -> Tokenizer:
    """Trains on the documents docs() yields (called once, twice for WordPiece); reproducible.

    Raises:
      TokenizerTrainingError: vocab_size cannot hold the special tokens plus the sample's alphabet.
    """
    specials = list(preset.tokens)
    tok = build_tokenizer(model, preset, lowercase=lowercase)
    trainer: trainers.Trainer
    if model == UNIGRAM:
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size,
            special_tokens=specials + list(BYTE_PIECES),
            unk_token=preset.unk,
            show_progress=False,
        )
        _train(tok, docs(), trainer, model=model, vocab_size=vocab_size)
        tok = _finish_unigram(tok, specials)
    elif model == BPE:
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=specials,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        _train(tok, docs(), trainer, model=model, vocab_size=vocab_size)
    else:
        tok = _train_wordpiece(tok, docs, vocab_size=vocab_size, preset=preset, lowercase=lowercase)
    tok.post_processor = post_processor(preset, token_ids(tok, specials))
    if preset.mask_lstrip:
        tok.add_special_tokens(
            [AddedToken(preset.mask, lstrip=True, special=True, normalized=False)]
        )
    if tok.get_vocab_size() > vocab_size:
        raise _too_small(model, vocab_size, tok.get_vocab_size())
    return tok


def _train(
    tok: Tokenizer, docs: Iterable[str], trainer: Any, *, model: str, vocab_size: int
) -> None:
    try:
        tok.train_from_iterator(docs, trainer=trainer)
    except Exception as e:  # the Rust trainers raise plain Exception
        if "vocab" in str(e).lower():
            raise TokenizerTrainingError(
                f"--vocab_size {vocab_size} is too small for {model} on this sample ({e}). "
                "Raise --vocab_size above the number of distinct characters plus the special tokens."
            ) from e
        raise


def _too_small(model: str, vocab_size: int, minimum: int) -> TokenizerTrainingError:
    return TokenizerTrainingError(
        f"--vocab_size {vocab_size} is too small for {model} on this sample: the special tokens and the "
        f"sample's characters alone need {minimum}. Pass --vocab_size {minimum} or more (leave room for "
        "subwords), or --model bpe, whose byte-level alphabet is 256 symbols whatever the script."
    )


def _train_wordpiece(
    tok: Tokenizer,
    docs: Callable[[], Iterable[str]],
    *,
    vocab_size: int,
    preset: SpecialTokens,
    lowercase: bool,
) -> Tokenizer:
    """WordPiece in two rounds, so that every word can be spelled and ids are the same on every run.

    Round 1 (no merges) finds the sample's alphabet. Round 2 passes a `##c` (continuing) piece for
    every character the pre-tokenizer can leave inside a word, sorted, after the special tokens:
    without `##J`, a word with a J after its first letter would be one unknown token; and the
    trainer would give the `##c` pieces ids in hash-map order as it meets them, breaking ties
    between equally frequent merges differently on every run. They are then removed from the added
    tokens again (they stay in the vocabulary as ordinary pieces).
    """
    specials = list(preset.tokens)
    _train(
        tok,
        docs(),
        trainers.WordPieceTrainer(vocab_size=1, special_tokens=specials, show_progress=False),
        model=WORDPIECE,
        vocab_size=vocab_size,
    )
    chars = {
        t.removeprefix("##")
        for t in tok.get_vocab()
        if t not in specials and len(t.removeprefix("##")) == 1
    }
    continuing = sorted(f"##{c}" for c in chars if _can_continue_a_word(tok, c))
    minimum = len(specials) + len(chars) + len(continuing)
    if minimum > vocab_size:
        raise _too_small(WORDPIECE, vocab_size, minimum)
    tok = build_tokenizer(WORDPIECE, preset, lowercase=lowercase)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=specials + continuing, show_progress=False
    )
    _train(tok, docs(), trainer, model=WORDPIECE, vocab_size=vocab_size)
    data = json.loads(tok.to_str())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] in specials]
    return Tokenizer.from_str(json.dumps(data, ensure_ascii=False))


def _can_continue_a_word(tok: Tokenizer, char: str) -> bool:
    """False for what BERT's normalizer and pre-tokenizer always split off (CJK characters, punctuation)."""
    return len(tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(f"a{char}"))) == 1


def _deal_required_char_scores(pieces: list[list]) -> list[list]:
    """Gives the characters the trainer appended their scores in character order, not hash-set order.

    The trainer appends every character of the sample that the EM dropped with the scores
    min_score + k * step (k = 0, 1, ...) in hash-set order. Single-character pieces whose score lies
    on that grid (a few EM pieces may too, harmlessly) get the same scores back, dealt out in
    character order. Returns the pieces sorted by (score descending, piece).
    """
    lowest = min(score for _, score in pieces)
    steps = {
        i: (score - lowest) / _REQUIRED_CHAR_STEP
        for i, (piece, score) in enumerate(pieces)
        if len(piece) == 1
    }
    on_grid = [i for i, k in steps.items() if abs(k - round(k)) < _GRID_TOLERANCE]
    dealt = sorted(i for i in on_grid if round(steps[i]) < len(on_grid))
    chars = sorted(pieces[i][0] for i in dealt)
    scores = sorted((pieces[i][1] for i in dealt), reverse=True)
    for i, char, score in zip(dealt, chars, scores):
        pieces[i] = [char, score]
    return sorted(pieces, key=lambda p: (-p[1], p[0]))


def _finish_unigram(tok: Tokenizer, specials: list[str]) -> Tokenizer:
    """Turns the byte pieces (trained as special tokens, for fixed ids) into a byte fallback, and
    makes the scores and the order of the pieces reproducible.

    As special tokens the byte pieces would match the literal text "<0x41>"; as ordinary pieces with
    the lowest score they are only chosen for characters the vocabulary lacks. The trainer leaves
    ties and its appended characters in hash-map order; see _deal_required_char_scores.
    """
    data = json.loads(tok.to_str())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] in specials]
    model = data["model"]
    model["byte_fallback"] = True
    fixed = len(specials) + len(BYTE_PIECES)  # ids of the special tokens, then the byte pieces
    head, pieces = model["vocab"][:fixed], model["vocab"][fixed:]
    pieces = _deal_required_char_scores(
        [[piece, round(score, UNIGRAM_SCORE_DECIMALS)] for piece, score in pieces]
    )
    lowest = pieces[-1][1]
    head = [[piece, lowest if piece in BYTE_PIECES else score] for piece, score in head]
    model["vocab"] = head + pieces
    return Tokenizer.from_str(json.dumps(data, ensure_ascii=False))
