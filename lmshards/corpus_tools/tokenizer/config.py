"""What `lmshards tokenizer train` is asked to do: the options, their defaults and the special-token presets."""

from __future__ import annotations

import dataclasses

from tokenizers import pre_tokenizers

from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.flag_types import COUNT, SEED, whole
from lmshards.preprocess import sources
from lmshards.schemas.constants import SPECIAL_ROLES

UNIGRAM, BPE, WORDPIECE = "unigram", "bpe", "wordpiece"
MODELS = (UNIGRAM, BPE, WORDPIECE)
DEFAULT_MODEL = UNIGRAM
DEFAULT_VOCAB_SIZE = 32000
# Ids are int32 everywhere downstream; far beyond any real vocabulary.
VOCAB_SIZE = whole(1, 1 << 24)
# The tokenizers trainers keep per-word and per-pair (BPE/WordPiece) or suffix-array (Unigram) tables
# for the whole sample; their memory grows many times faster than the text (an upstream report
# needed ~150 GB of RAM for ~2 GB of text). 1 GB of text is a large enough sample for a 32k-50k
# vocabulary; raise --max_bytes only on a machine with the memory for it (docs/preprocess.md gives the
# measured peak RSS per sampled MB).
DEFAULT_MAX_BYTES = 1_000_000_000
# Unigram's EM runs on one core (tokenizers 0.23): ~20 s per sampled MB on a 2-core machine, so its
# default sample is smaller; BPE/WordPiece train in parallel and take the general cap.
DEFAULT_MAX_BYTES_BY_MODEL = {
    UNIGRAM: 100_000_000,
    BPE: DEFAULT_MAX_BYTES,
    WORDPIECE: DEFAULT_MAX_BYTES,
}
DEFAULT_SEED = 0
# The positional embedding size of BERT-base/RoBERTa-base; what transformers pads/truncates to.
MODEL_MAX_LENGTH = 512
# Unigram's byte fallback pieces, in the spelling SentencePiece and tokenizers' ByteFallback use.
BYTE_PIECES = tuple(f"<0x{b:02X}>" for b in range(256))


class TokenizerTrainingError(LmshardsError):
    """A bad training option or a corpus that cannot train the requested tokenizer."""


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
    """A preset of special tokens; `tokens` lists them in id order (ids 0..4)."""

    name: str
    cls: str
    sep: str
    pad: str
    unk: str
    mask: str
    tokens: tuple[str, ...]
    # RoBERTa's mask token takes the space before it, so "is <mask>." masks the word " Paris".
    mask_lstrip: bool = False

    def by_role(self) -> dict[str, str]:
        return {role: getattr(self, role) for role in SPECIAL_ROLES}


PRESETS = {
    "bert": SpecialTokens(
        "bert",
        cls="[CLS]",
        sep="[SEP]",
        pad="[PAD]",
        unk="[UNK]",
        mask="[MASK]",
        tokens=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
    ),
    "roberta": SpecialTokens(
        "roberta",
        cls="<s>",
        sep="</s>",
        pad="<pad>",
        unk="<unk>",
        mask="<mask>",
        tokens=("<s>", "<pad>", "</s>", "<unk>", "<mask>"),
        mask_lstrip=True,
    ),
}
DEFAULT_PRESET = {UNIGRAM: "roberta", BPE: "roberta", WORDPIECE: "bert"}


@dataclasses.dataclass(frozen=True)
class TokenizerTrainingConfig:
    """Everything `lmshards tokenizer train` was asked to do; recorded in lmshards_tokenizer.json.

    special_tokens None means DEFAULT_PRESET[model]; max_bytes None means DEFAULT_MAX_BYTES_BY_MODEL[model].
    """

    inputs: tuple[str, ...]
    output: str
    model: str = DEFAULT_MODEL
    vocab_size: int = DEFAULT_VOCAB_SIZE
    special_tokens: str | None = None
    lowercase: bool = False
    max_documents: int | None = None
    max_bytes: int | None = None
    seed: int = DEFAULT_SEED
    doc_separator: str = sources.LINE
    text_field: str = sources.DEFAULT_TEXT_FIELD
    text_column: str = sources.DEFAULT_TEXT_COLUMN
    encoding: str = sources.UTF8
    doc_marker: str | None = None
    doc_marker_regex: str | None = None
    html_field: str | None = None
    url_field: str | None = None
    html_extract: str = sources.HTML_EXTRACT_MAIN
    html_drop_comments: bool = False
    max_html_bytes: int = sources.MAX_HTML_BYTES
    overwrite: bool = False

    def __post_init__(self) -> None:
        if self.special_tokens is None:
            object.__setattr__(self, "special_tokens", DEFAULT_PRESET.get(self.model, ""))
        if self.max_bytes is None:
            object.__setattr__(
                self, "max_bytes", DEFAULT_MAX_BYTES_BY_MODEL.get(self.model, DEFAULT_MAX_BYTES)
            )

    @property
    def preset(self) -> SpecialTokens:
        assert self.special_tokens is not None, "set by __post_init__"
        return PRESETS[self.special_tokens]

    @property
    def byte_cap(self) -> int:
        """max_bytes with its default applied."""
        assert self.max_bytes is not None, "set by __post_init__"
        return self.max_bytes

    def read_options(self) -> sources.ReadOptions:
        return sources.read_options_from(self)


def validate(config: TokenizerTrainingConfig) -> None:
    """Raises TokenizerTrainingError (or sources.InputError) on a bad option, before any reading."""
    if config.model not in MODELS:
        raise TokenizerTrainingError(
            f"--model {config.model!r} is not supported; use one of {', '.join(MODELS)}."
        )
    if config.special_tokens not in PRESETS:
        raise TokenizerTrainingError(
            f"--special_tokens {config.special_tokens!r} is not a preset; use one of {', '.join(PRESETS)}."
        )
    alphabet = {
        BPE: len(pre_tokenizers.ByteLevel.alphabet()),
        UNIGRAM: len(BYTE_PIECES) + 1,
        WORDPIECE: 1,
    }
    minimum = len(config.preset.tokens) + alphabet[config.model]
    if config.vocab_size < minimum:
        raise TokenizerTrainingError(
            f"--vocab_size {config.vocab_size} is too small for {config.model}: it needs at least {minimum} "
            f"({len(config.preset.tokens)} special tokens + the alphabet). Pass --vocab_size {minimum} or more."
        )
    VOCAB_SIZE.check("--vocab_size", config.vocab_size)
    COUNT.check("--max_documents", config.max_documents)
    SEED.check("--seed", config.seed)
    if config.byte_cap < 1:
        raise TokenizerTrainingError(f"--max_bytes must be at least 1, got {config.max_bytes}.")
    if config.lowercase and config.model != WORDPIECE:
        raise TokenizerTrainingError(
            f"--lowercase applies to --model wordpiece only (BERT's normalizer); {config.model} keeps case."
        )
    config.read_options()
