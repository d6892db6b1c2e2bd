"""Training a Unigram, BPE or WordPiece tokenizer on a seeded sample of a text corpus.

The corpus is streamed twice and never held in memory: pass 1 draws the sample (a priority sample:
every document gets a key hash(seed, text), and the documents with the smallest keys that fit in
--max_documents / --max_bytes are kept), pass 2 writes the sampled documents to a local temporary
file the trainer reads. The sample does not depend on the order or the number of input files.

Each model gets the normalization and pre-tokenization that suit it:
- unigram: NFKC + Metaspace (SentencePiece style); every character of the sample is in the vocabulary,
  and characters the sample lacks fall back to byte pieces <0x00>..<0xFF> instead of the unknown token.
- bpe: byte-level (GPT-2/RoBERTa style): the 256 byte symbols are always in the vocabulary, so no
  text ever maps to the unknown token.
- wordpiece: BertNormalizer (cased unless lowercase=True) + BertPreTokenizer, which splits CJK text
  into single characters; every character of the sample is in the vocabulary.

The output directory holds tokenizer.json, a transformers tokenizer directory (tokenizer_config.json
beside the same tokenizer.json) and lmshards_tokenizer.json (written last: the sign of a complete
output) with the fingerprint the preprocess manifest records.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import json
import logging
import os
import resource
import tempfile
import time
from typing import Any, Callable, Iterable, Iterator

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from preprocess import inputs
from schemas import fs
from schemas.constants import SPECIAL_ROLES, TOKENIZER_INFO_JSON, TOKENIZER_JSON
from schemas.errors import LmshardsError
from schemas.tokenizer_info import fingerprint, locate_tokenizer, special_token_ids
from schemas.version import __version__

logger = logging.getLogger(__name__)

UNIGRAM, BPE, WORDPIECE = "unigram", "bpe", "wordpiece"
MODELS = (UNIGRAM, BPE, WORDPIECE)
DEFAULT_MODEL = UNIGRAM
DEFAULT_VOCAB_SIZE = 32000
# The tokenizers trainers keep per-word and per-pair (BPE/WordPiece) or suffix-array (Unigram) tables
# for the whole sample; their memory grows many times faster than the text (an upstream report
# needed ~150 GB of RAM for ~2 GB of text). 1 GB of text is a large enough sample for a 32k-50k
# vocabulary; raise --max_bytes only on a machine with the memory for it (see the README for measured
# peak RSS per sampled MB).
DEFAULT_MAX_BYTES = 1_000_000_000
# Unigram's EM runs on one core (tokenizers 0.23): ~20 s per sampled MB on a 2-core machine, so its
# default sample is smaller; BPE/WordPiece train in parallel and take the general cap.
DEFAULT_MAX_BYTES_BY_MODEL = {UNIGRAM: 100_000_000, BPE: DEFAULT_MAX_BYTES, WORDPIECE: DEFAULT_MAX_BYTES}
DEFAULT_SEED = 0
# The positional embedding size of BERT-base/RoBERTa-base; what transformers pads/truncates to.
MODEL_MAX_LENGTH = 512
# Unigram's EM sums probabilities in hash-map order, so the last bits of its scores differ run to
# run; rounding them makes the saved tokenizer (and its fingerprint) reproducible.
UNIGRAM_SCORE_DECIMALS = 8
TOKENIZER_INFO_FORMAT = "lmshards.tokenizer"
TOKENIZER_INFO_FORMAT_VERSION = 1
# Unigram's byte fallback pieces, in the spelling SentencePiece and tokenizers' ByteFallback use.
BYTE_PIECES = tuple(f"<0x{b:02X}>" for b in range(256))
_SAMPLE_FILE = "sample.jsonl"
_REQUIRED_CHAR_STEP = 1e-4  # tokenizers' UnigramTrainer: score step between appended required characters
_GRID_TOLERANCE = 1e-3  # in steps; scores are rounded to 1e-8
_KEY_BYTES = 8


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
    "bert": SpecialTokens("bert", cls="[CLS]", sep="[SEP]", pad="[PAD]", unk="[UNK]", mask="[MASK]",
                          tokens=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")),
    "roberta": SpecialTokens("roberta", cls="<s>", sep="</s>", pad="<pad>", unk="<unk>", mask="<mask>",
                             tokens=("<s>", "<pad>", "</s>", "<unk>", "<mask>"), mask_lstrip=True),
}
DEFAULT_PRESET = {UNIGRAM: "roberta", BPE: "roberta", WORDPIECE: "bert"}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything `lmshards tokenizer train` was asked to do; recorded in lmshards_tokenizer.json."""

    inputs: tuple[str, ...]
    output: str
    model: str = DEFAULT_MODEL
    vocab_size: int = DEFAULT_VOCAB_SIZE
    special_tokens: str = ""  # preset name; "" means DEFAULT_PRESET[model]
    lowercase: bool = False
    max_documents: int | None = None
    max_bytes: int = DEFAULT_MAX_BYTES
    seed: int = DEFAULT_SEED
    doc_separator: str = inputs.LINE
    text_field: str = "text"
    text_column: str = "text"

    def __post_init__(self) -> None:
        if not self.special_tokens:
            object.__setattr__(self, "special_tokens", DEFAULT_PRESET.get(self.model, ""))

    @property
    def preset(self) -> SpecialTokens:
        return PRESETS[self.special_tokens]

    def read_options(self) -> inputs.ReadOptions:
        return inputs.ReadOptions(
            doc_separator=self.doc_separator, text_field=self.text_field, text_column=self.text_column
        )


def validate(config: TrainConfig) -> None:
    """Raises TokenizerTrainingError (or inputs.InputError) on a bad option, before any reading."""
    if config.model not in MODELS:
        raise TokenizerTrainingError(f"--model {config.model!r} is not supported; use one of {', '.join(MODELS)}.")
    if config.special_tokens not in PRESETS:
        raise TokenizerTrainingError(
            f"--special_tokens {config.special_tokens!r} is not a preset; use one of {', '.join(PRESETS)}."
        )
    alphabet = {BPE: len(pre_tokenizers.ByteLevel.alphabet()), UNIGRAM: len(BYTE_PIECES) + 1, WORDPIECE: 1}
    minimum = len(config.preset.tokens) + alphabet[config.model]
    if config.vocab_size < minimum:
        raise TokenizerTrainingError(
            f"--vocab_size {config.vocab_size} is too small for {config.model}: it needs at least {minimum} "
            f"({len(config.preset.tokens)} special tokens + the alphabet). Pass --vocab_size {minimum} or more."
        )
    if config.max_documents is not None and config.max_documents < 1:
        raise TokenizerTrainingError(f"--max_documents must be at least 1, got {config.max_documents}.")
    if config.max_bytes < 1:
        raise TokenizerTrainingError(f"--max_bytes must be at least 1, got {config.max_bytes}.")
    if config.lowercase and config.model != WORDPIECE:
        raise TokenizerTrainingError(
            f"--lowercase applies to --model wordpiece only (BERT's normalizer); {config.model} keeps case."
        )
    config.read_options()


# --------------------------------------------------------------------------------------------
# Sampling.


@dataclasses.dataclass
class SampleStats:
    """What pass 1 saw and kept; bytes are UTF-8 bytes of document text."""

    documents_seen: int = 0
    bytes_seen: int = 0
    documents_sampled: int = 0
    bytes_sampled: int = 0


def sample_key(data: bytes, seed: int) -> int:
    """A document's sampling priority: 64 bits of a keyed hash of its UTF-8 bytes."""
    digest = hashlib.blake2b(data, digest_size=_KEY_BYTES, key=seed.to_bytes(8, "little", signed=True))
    return int.from_bytes(digest.digest(), "big")


def sample_limit(
    docs: Iterable[str], *, seed: int, max_documents: int | None, max_bytes: int
) -> tuple[int | None, SampleStats]:
    """Pass 1: the sample's key limit (keep keys below it), or None when every document fits; and counts.

    The sample is the longest run of documents in key order that fits both caps, so it is a uniform
    random sample (without replacement) that depends only on the seed and the documents, not on
    their order. Copies of a document share a key, so they are kept or dropped together. Memory: one
    (key, size) pair per sampled document, never the text.
    """
    stats = SampleStats()
    heap: list[tuple[int, int]] = []  # (-key, size): the largest kept key on top
    limit: int | None = None  # the smallest key dropped so far; only keys below it can still be kept
    for text in docs:
        data = text.encode("utf-8")
        stats.documents_seen += 1
        stats.bytes_seen += len(data)
        key = sample_key(data, seed)
        if limit is not None and key >= limit:
            continue
        heapq.heappush(heap, (-key, len(data)))
        stats.bytes_sampled += len(data)
        while heap and (
            stats.bytes_sampled > max_bytes or (max_documents is not None and len(heap) > max_documents)
        ):
            top = heap[0][0]
            while heap and heap[0][0] == top:
                stats.bytes_sampled -= heapq.heappop(heap)[1]
            limit = -top
    stats.documents_sampled = len(heap)
    return limit, stats


def iter_sample(docs: Iterable[str], *, seed: int, limit: int | None) -> Iterator[str]:
    """Pass 2: the documents whose key is below limit (all of them when it is None)."""
    for text in docs:
        if limit is None or sample_key(text.encode("utf-8"), seed) < limit:
            yield text


def write_sample(docs: Iterable[str], path: str) -> None:
    """Writes documents one JSON string per line, so documents holding newlines survive."""
    with open(path, "w", encoding="utf-8") as f:
        for text in docs:
            f.write(json.dumps(text, ensure_ascii=False))
            f.write("\n")


def read_sample(path: str) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


# --------------------------------------------------------------------------------------------
# Building and training.


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
        raise TokenizerTrainingError(f"--model {model!r} is not supported; use one of {', '.join(MODELS)}.")
    return tok


def post_processor(preset: SpecialTokens, ids: dict[str, int]) -> processors.TemplateProcessing:
    """Wraps one document as `cls ... sep` and a pair as BERT (`cls A sep B sep`) or RoBERTa does."""
    cls, sep = preset.cls, preset.sep
    pair = f"{cls} $A {sep} $B:1 {sep}:1" if preset.name == "bert" else f"{cls} $A {sep} {sep} $B {sep}"
    return processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=pair, special_tokens=[(cls, ids[cls]), (sep, ids[sep])]
    )


def train_tokenizer(
    docs: Callable[[], Iterable[str]], *, model: str, vocab_size: int, preset: SpecialTokens,
    lowercase: bool = False,
) -> Tokenizer:
    """Trains on the documents docs() yields (called once, twice for WordPiece); reproducible.

    Raises:
      TokenizerTrainingError: vocab_size cannot hold the special tokens plus the sample's alphabet.
    """
    specials = list(preset.tokens)
    tok = build_tokenizer(model, preset, lowercase=lowercase)
    if model == UNIGRAM:
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=specials + list(BYTE_PIECES), unk_token=preset.unk,
            show_progress=False,
        )
        _train(tok, docs(), trainer, model=model, vocab_size=vocab_size)
        tok = _finish_unigram(tok, specials)
    elif model == BPE:
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=specials, show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        _train(tok, docs(), trainer, model=model, vocab_size=vocab_size)
    else:
        tok = _train_wordpiece(tok, docs, vocab_size=vocab_size, preset=preset, lowercase=lowercase)
    ids = {t: tok.token_to_id(t) for t in specials}
    tok.post_processor = post_processor(preset, ids)
    if preset.mask_lstrip:
        tok.add_special_tokens([AddedToken(preset.mask, lstrip=True, special=True, normalized=False)])
    if tok.get_vocab_size() > vocab_size:
        raise _too_small(model, vocab_size, tok.get_vocab_size())
    return tok


def _train(tok: Tokenizer, docs: Iterable[str], trainer: Any, *, model: str, vocab_size: int) -> None:
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
    tok: Tokenizer, docs: Callable[[], Iterable[str]], *, vocab_size: int, preset: SpecialTokens, lowercase: bool
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
    _train(tok, docs(), trainers.WordPieceTrainer(vocab_size=1, special_tokens=specials, show_progress=False),
           model=WORDPIECE, vocab_size=vocab_size)
    chars = {t.removeprefix("##") for t in tok.get_vocab() if t not in specials and len(t.removeprefix("##")) == 1}
    continuing = sorted(f"##{c}" for c in chars if _can_continue_a_word(tok, c))
    minimum = len(specials) + len(chars) + len(continuing)
    if minimum > vocab_size:
        raise _too_small(WORDPIECE, vocab_size, minimum)
    tok = build_tokenizer(WORDPIECE, preset, lowercase=lowercase)
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials + continuing,
                                        show_progress=False)
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
    steps = {i: (score - lowest) / _REQUIRED_CHAR_STEP for i, (piece, score) in enumerate(pieces) if len(piece) == 1}
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
    pieces = _deal_required_char_scores([[piece, round(score, UNIGRAM_SCORE_DECIMALS)] for piece, score in pieces])
    lowest = pieces[-1][1]
    head = [[piece, lowest if piece in BYTE_PIECES else score] for piece, score in head]
    model["vocab"] = head + pieces
    return Tokenizer.from_str(json.dumps(data, ensure_ascii=False))


# --------------------------------------------------------------------------------------------
# The whole command.


@dataclasses.dataclass(frozen=True)
class TrainResult:
    output: str
    fingerprint: str
    vocab_size: int
    special_token_ids: dict[str, int]
    sample: SampleStats
    seconds: float  # sampling (two reads of the inputs) and training
    sampling_seconds: float
    peak_rss_bytes: int


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def train(config: TrainConfig) -> TrainResult:
    """Samples the corpus, trains, and writes the tokenizer directory to config.output.

    Raises:
      TokenizerTrainingError / inputs.InputError: bad options, unreadable inputs, an empty corpus,
        or a vocab_size too small for the sample.
    """
    validate(config)
    start = time.monotonic()
    files = inputs.expand_inputs(config.inputs)
    options = config.read_options()
    read_stats = inputs.ReadStats()
    limit, sample = sample_limit(
        inputs.iter_documents(config.inputs, options, read_stats),
        seed=config.seed, max_documents=config.max_documents, max_bytes=config.max_bytes,
    )
    if sample.documents_sampled == 0 and sample.documents_seen:
        raise TokenizerTrainingError(
            f"--max_bytes {config.max_bytes} is smaller than every one of the {sample.documents_seen:,} documents; "
            "raise it."
        )
    if sample.documents_sampled == 0:
        raise TokenizerTrainingError(
            f"No documents to train on: the {len(files)} input file(s) of --input {list(config.inputs)} "
            f"hold no non-empty document ({read_stats.documents_empty} empty, "
            f"{read_stats.documents_invalid_json} invalid JSON lines). Check --input and --text_field/--text_column."
        )
    logger.info("Sample: %d of %d documents, %d of %d bytes", sample.documents_sampled, sample.documents_seen,
                sample.bytes_sampled, sample.bytes_seen)
    with tempfile.TemporaryDirectory(prefix="lmshards-tokenizer-") as tmp:
        sample_path = os.path.join(tmp, _SAMPLE_FILE)
        write_sample(iter_sample(inputs.iter_documents(config.inputs, options), seed=config.seed,
                                 limit=limit), sample_path)
        sampled = time.monotonic()
        tok = train_tokenizer(lambda: read_sample(sample_path), model=config.model,
                              vocab_size=config.vocab_size, preset=config.preset, lowercase=config.lowercase)
        seconds = time.monotonic() - start
        rss = peak_rss_bytes()
        saved = save_tokenizer(
            tok, config.output, preset=config.preset, staging=os.path.join(tmp, "out"),
            info={
                "options": dataclasses.asdict(config),
                "inputs": [dataclasses.asdict(f) for f in files],
                "read_stats": read_stats.as_dict(),
                "sample": dataclasses.asdict(sample),
                "seconds": {"sampling": round(sampled - start, 3), "training": round(seconds - (sampled - start), 3)},
                "peak_rss_bytes": rss,
            },
        )
    return TrainResult(output=config.output, fingerprint=saved["fingerprint"], vocab_size=saved["vocab_size"],
                       special_token_ids=saved["special_token_ids"], sample=sample, seconds=seconds,
                       sampling_seconds=sampled - start, peak_rss_bytes=rss)


def save_tokenizer(tok: Tokenizer, output: str, *, preset: SpecialTokens, staging: str,
                   info: dict[str, Any]) -> dict[str, Any]:
    """Writes tokenizer.json, the transformers files and lmshards_tokenizer.json (last) to output.

    Files are first saved to the local `staging` directory, then copied (local or gs://).
    Returns the content of lmshards_tokenizer.json.
    """
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=preset.cls, eos_token=preset.sep, cls_token=preset.cls,
        sep_token=preset.sep, pad_token=preset.pad, unk_token=preset.unk, mask_token=preset.mask,
        model_max_length=MODEL_MAX_LENGTH,
    )
    hf.save_pretrained(staging)
    source = locate_tokenizer(staging)
    roles = special_token_ids(source)
    missing = [role for role in SPECIAL_ROLES if role not in roles]
    if missing:
        raise RuntimeError(f"saved tokenizer lacks special-token roles {missing}; found {roles}")
    content = {
        "format": TOKENIZER_INFO_FORMAT,
        "format_version": TOKENIZER_INFO_FORMAT_VERSION,
        "tool_version": __version__,
        "fingerprint": fingerprint(source.json_text),
        "model": type(tok.model).__name__.lower(),
        "vocab_size": tok.get_vocab_size(),
        "special_tokens": preset.by_role(),
        "special_token_ids": roles,
        "model_max_length": MODEL_MAX_LENGTH,
        **info,
    }
    fs.makedirs(output)
    for name in sorted(os.listdir(staging)):
        with open(os.path.join(staging, name), "rb") as f:
            fs.write_bytes_atomic(fs.join(output, name), f.read())
    fs.write_text_atomic(fs.join(output, TOKENIZER_INFO_JSON), json.dumps(content, indent=2, sort_keys=True) + "\n")
    return content


# --------------------------------------------------------------------------------------------
# Inspecting.


def load_tokenizer(path: str) -> tuple[Tokenizer, dict[str, int]]:
    """The tokenizer at path (a tokenizer.json or a directory, local or gs://) and its role ids."""
    source = locate_tokenizer(path)
    return Tokenizer.from_str(source.json_text), special_token_ids(source)


@dataclasses.dataclass(frozen=True)
class CorpusReport:
    """How a tokenizer splits a sample of documents (special tokens not counted).

    Documents are "CJK" when most of their non-space characters are Han, kana or Hangul: for them
    tokens per character is the measure, for the rest tokens per whitespace-separated word.
    """

    documents: int
    tokens: int
    unknown_tokens: int
    word_documents: int
    words: int
    word_tokens: int
    cjk_documents: int
    cjk_chars: int
    cjk_tokens: int

    @property
    def unknown_rate(self) -> float:
        return self.unknown_tokens / self.tokens if self.tokens else 0.0

    @property
    def tokens_per_word(self) -> float | None:
        return self.word_tokens / self.words if self.words else None

    @property
    def tokens_per_cjk_char(self) -> float | None:
        return self.cjk_tokens / self.cjk_chars if self.cjk_chars else None


def is_cjk(char: str) -> bool:
    code = ord(char)
    return (0x3400 <= code <= 0x9FFF or 0xF900 <= code <= 0xFAFF or 0x20000 <= code <= 0x2FA1F  # Han
            or 0x3040 <= code <= 0x30FF or 0xAC00 <= code <= 0xD7AF)  # kana, Hangul syllables


def corpus_report(tok: Tokenizer, docs: Iterable[str], *, unk_id: int | None, batch_size: int = 256) -> CorpusReport:
    """Encodes docs (in batches, without special tokens) and counts tokens, unknowns, words, CJK chars."""
    counts = {f.name: 0 for f in dataclasses.fields(CorpusReport)}
    batch: list[str] = []

    def flush() -> None:
        for text, enc in zip(batch, tok.encode_batch(batch, add_special_tokens=False)):
            n = len(enc.ids)
            counts["documents"] += 1
            counts["tokens"] += n
            if unk_id is not None:
                counts["unknown_tokens"] += enc.ids.count(unk_id)
            cjk = sum(map(is_cjk, text))
            if cjk * 2 > len(text) - sum(map(str.isspace, text)):
                counts["cjk_documents"] += 1
                counts["cjk_chars"] += cjk
                counts["cjk_tokens"] += n
            else:
                counts["word_documents"] += 1
                counts["words"] += len(text.split())
                counts["word_tokens"] += n
        batch.clear()

    for text in docs:
        batch.append(text)
        if len(batch) >= batch_size:
            flush()
    flush()
    return CorpusReport(**counts)
