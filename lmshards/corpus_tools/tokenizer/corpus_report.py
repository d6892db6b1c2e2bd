"""How a tokenizer splits a corpus: token counts, the unknown-token and byte-fallback rates, tokens per word
or CJK character."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence

from tokenizers import Tokenizer

from lmshards.corpus_tools.tokenizer.config import DEFAULT_MAX_BYTES
from lmshards.corpus_tools.tokenizer.sampling import iter_sample, sample_limit
from lmshards.preprocess import sources
from lmshards.schemas.tokenizer_info import locate_tokenizer, special_token_ids

DEFAULT_INSPECT_DOCUMENTS = 1000
# SentencePiece-style byte fallback: one piece per byte, spelled <0x00> ... <0xFF>.
BYTE_FALLBACK_PIECE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


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
    byte_fallback_tokens: int
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
    def byte_fallback_rate(self) -> float:
        """Share of tokens that are byte pieces (<0xE4>): text the vocabulary spells byte by byte."""
        return self.byte_fallback_tokens / self.tokens if self.tokens else 0.0

    @property
    def tokens_per_word(self) -> float | None:
        return self.word_tokens / self.words if self.words else None

    @property
    def tokens_per_cjk_char(self) -> float | None:
        return self.cjk_tokens / self.cjk_chars if self.cjk_chars else None


def byte_fallback_ids(vocab: Mapping[str, int]) -> frozenset[int]:
    """Ids of the byte-fallback pieces (<0x00> ... <0xFF>) of a vocabulary (piece -> id); empty if none."""
    return frozenset(i for piece, i in vocab.items() if BYTE_FALLBACK_PIECE.match(piece))


def is_cjk(char: str) -> bool:
    code = ord(char)
    return (
        0x3400 <= code <= 0x9FFF
        or 0xF900 <= code <= 0xFAFF
        or 0x20000 <= code <= 0x2FA1F  # Han
        or 0x3040 <= code <= 0x30FF
        or 0xAC00 <= code <= 0xD7AF
    )  # kana, Hangul syllables


def corpus_report(
    tok: Tokenizer, docs: Iterable[str], *, unk_id: int | None, batch_size: int = 256
) -> CorpusReport:
    """Encodes docs (in batches, without special tokens) and counts tokens, unknowns, byte-fallback
    pieces, words, CJK chars."""
    counts = {f.name: 0 for f in dataclasses.fields(CorpusReport)}
    fallback = byte_fallback_ids(tok.get_vocab(with_added_tokens=True))
    batch: list[str] = []

    def flush() -> None:
        for text, enc in zip(batch, tok.encode_batch(batch, add_special_tokens=False)):
            n = len(enc.ids)
            counts["documents"] += 1
            counts["tokens"] += n
            if unk_id is not None:
                counts["unknown_tokens"] += enc.ids.count(unk_id)
            if fallback:
                counts["byte_fallback_tokens"] += sum(i in fallback for i in enc.ids)
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


def sample_report(
    tok: Tokenizer,
    paths: Sequence[str],
    options: sources.ReadOptions,
    *,
    seed: int,
    max_documents: int,
    unk_id: int | None,
) -> CorpusReport:
    """corpus_report on a seeded sample of at most max_documents documents of the input paths (read twice)."""
    discovery = sources.discover_inputs(paths)
    limit, _ = sample_limit(
        sources.iter_documents(paths, options, discovery=discovery),
        seed=seed,
        max_documents=max_documents,
        max_bytes=DEFAULT_MAX_BYTES,
    )
    docs = iter_sample(
        sources.iter_documents(paths, options, discovery=discovery), seed=seed, limit=limit
    )
    return corpus_report(tok, docs, unk_id=unk_id)
