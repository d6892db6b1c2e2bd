"""Where words start, per token id, read from a tokenizer's own markers (for whole-word and span masking).

Computed once from tokenizer.json into two tables indexed by token id, so masking needs no token
strings at run time and the shards carry nothing extra:

- `starts[id]`: a word starts at this token;
- `next_starts[id]`: a word starts right after this token.

A word starts at a token that carries the family's word marker: Metaspace `▁` (SentencePiece,
Unigram), byte-level `Ġ` (GPT-2/RoBERTa BPE), or, for WordPiece (BERT), any piece without the `##`
continuation prefix (also a BPE with a continuing_subword_prefix). A WordLevel tokenizer's tokens
are all words; other tokenizers raise TokenizerError. On top of the markers, for every family:

- each CJK ideograph is a word (BERT's ranges): a token beginning with one starts a word and a
  token ending with one ends it. A character cut into byte pieces (byte-level BPE, byte fallback)
  starts a word at the piece holding its first byte; its other pieces continue that word;
- punctuation-only tokens (BERT's definition: ASCII symbols and Unicode P*) are their own words, as
  BERT's pre-tokenizer splits them, so `U.S.` is four words and `(word` two;
- whitespace-only tokens (byte-level newlines, runs of spaces) are their own words, except a bare
  marker (`▁`, `Ġ`), which begins the word its next piece spells;
- added tokens (special or not) are their own words: the tokenizer matches them before splitting words.

The masking adds what only the sequence knows: a word also starts at the first position and at and
after every special or padding token.
"""

from __future__ import annotations

import dataclasses
import json
import re
import unicodedata
from collections.abc import Callable
from typing import Any

import numpy as np

from lmshards.plumbing.errors import TokenizerError

METASPACE_MARKER = "▁"  # tokenizers' Metaspace default replacement
WORDPIECE_PREFIX = "##"  # tokenizers' WordPiece default continuing_subword_prefix
# BERT's _is_chinese_char: the CJK Unified Ideographs blocks, extensions A-E and the compatibility blocks.
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # byte_fallback pieces of BPE/Unigram models
_CONTINUATION_BYTE = (
    0x80  # lowest UTF-8 continuation byte, to complete a character cut inside a token
)


@dataclasses.dataclass(frozen=True)
class WordStartTables:
    """bool [vocab_size] tables: a word starts at the token (`starts`), or right after it (`next_starts`)."""

    starts: np.ndarray
    next_starts: np.ndarray


@dataclasses.dataclass(frozen=True)
class _Piece:
    """A vocabulary token as the family spells it: whether it carries the word marker, and its text bytes."""

    marked: bool
    content: bytes


def word_start_tables(tokenizer_json_text: str) -> WordStartTables:
    """Word-start tables for every id of the tokenizer (vocabulary and added tokens).

    Ids the file does not define (holes) are treated like added tokens, as words of their own.

    Raises:
      TokenizerError: not tokenizer.json text, or a tokenizer whose pieces carry no word marker the
        project knows (e.g. a BPE without byte-level or Metaspace pre-tokenization).
    """
    try:
        parsed = json.loads(tokenizer_json_text)
    except json.JSONDecodeError as e:
        raise TokenizerError(
            f"Cannot read word starts: the tokenizer is not valid JSON ({e})."
        ) from e
    vocab = _vocab(parsed)
    added = {int(t["id"]) for t in parsed.get("added_tokens") or []}
    size = max([*vocab.values(), *added], default=-1) + 1
    starts = np.ones(size, bool)
    next_starts = np.ones(size, bool)
    spell = _speller(parsed)
    if spell is None:
        return WordStartTables(
            starts=starts, next_starts=next_starts
        )  # WordLevel: every token is a word
    for token, i in vocab.items():
        if i not in added:
            starts[i], next_starts[i] = _boundaries(spell(token))
    return WordStartTables(starts=starts, next_starts=next_starts)


def _vocab(parsed: dict[str, Any]) -> dict[str, int]:
    vocab = (parsed.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        return {token: int(i) for token, i in vocab.items()}
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...], the id is the position
        return {piece[0]: i for i, piece in enumerate(vocab)}
    raise TokenizerError("Cannot read word starts: tokenizer.json has no model vocabulary.")


def _speller(parsed: dict[str, Any]) -> Callable[[str], _Piece] | None:
    """The function token -> _Piece for the tokenizer's family; None when every token is a word.

    Raises:
      TokenizerError: no known word marker.
    """
    model = parsed.get("model") or {}
    kind = model.get("type")
    components = [*_components(parsed.get("pre_tokenizer")), *_components(parsed.get("decoder"))]
    byte_fallback = bool(model.get("byte_fallback"))
    if kind == "WordLevel":
        return None
    prefix = model.get("continuing_subword_prefix")
    if kind == "WordPiece" or prefix:
        prefix = prefix or WORDPIECE_PREFIX
        return lambda token: _Piece(
            marked=not token.startswith(prefix), content=token.removeprefix(prefix).encode()
        )
    if any(c["type"] == "ByteLevel" for c in components):
        decode = _byte_decoder()
        return lambda token: _byte_level_piece(token, decode)
    marker = _metaspace_marker(components)
    if marker is not None:
        return lambda token: _metaspace_piece(token, marker, byte_fallback=byte_fallback)
    raise TokenizerError(
        f"Cannot tell where words start for a {kind} tokenizer with pre-tokenizer/decoder "
        f"{sorted({c['type'] for c in components}) or 'none'}: whole-word and span masking need Metaspace (▁), "
        "byte-level (Ġ) or WordPiece (##) pieces. Use --masking token."
    )


def _components(component: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The component and, for a Sequence, its members, flattened."""
    if not component:
        return []
    members = component.get("pretokenizers") or component.get("decoders")
    if component.get("type") == "Sequence" and members:
        return [c for m in members for c in _components(m)]
    return [component]


def _metaspace_marker(components: list[dict[str, Any]]) -> str | None:
    """Metaspace's replacement character, or `▁` for a decoder that turns `▁` back into spaces (Llama style)."""
    for c in components:
        if c["type"] == "Metaspace":
            return c.get("replacement") or METASPACE_MARKER
        if c["type"] == "Replace" and (c.get("pattern") or {}).get("String") == METASPACE_MARKER:
            return METASPACE_MARKER
    return None


def _byte_level_piece(token: str, decode: dict[str, int]) -> _Piece:
    if not all(ch in decode for ch in token):  # not a byte-level spelling: take the text as it is
        raw = token.encode()
    else:
        raw = bytes(decode[ch] for ch in token)
    marked = raw.startswith(b" ")
    return _Piece(marked=marked, content=raw[1:] if marked else raw)


def _metaspace_piece(token: str, marker: str, *, byte_fallback: bool) -> _Piece:
    byte = _BYTE_PIECE.fullmatch(token) if byte_fallback else None
    if byte:
        return _Piece(marked=False, content=bytes([int(byte.group(1), 16)]))
    return _Piece(marked=token.startswith(marker), content=token.removeprefix(marker).encode())


def _boundaries(piece: _Piece) -> tuple[bool, bool]:
    """(starts, next_starts) of one vocabulary piece."""
    text = piece.content.decode("utf-8", errors="replace")
    whole = bool(text) and "\ufffd" not in text
    own_word = whole and (all(_is_punctuation(c) for c in text) or text.isspace())
    starts = piece.marked or own_word or _is_cjk(_first_char(piece.content))
    next_starts = own_word or (bool(text) and text[-1] != "\ufffd" and _is_cjk(text[-1]))
    return bool(starts), bool(next_starts)


def _first_char(raw: bytes) -> str:
    """The character the bytes begin with, completed with the lowest continuation bytes if cut; '' if none."""
    if not raw or _CONTINUATION_BYTE <= raw[0] < 0xC0:
        return ""
    length = 1 if raw[0] < 0x80 else 2 if raw[0] < 0xE0 else 3 if raw[0] < 0xF0 else 4
    head = raw[:length].ljust(length, bytes([_CONTINUATION_BYTE]))
    text = head.decode("utf-8", errors="replace")
    return "" if text.startswith("\ufffd") else text[0]


def _is_cjk(char: str) -> bool:
    return bool(char) and any(lo <= ord(char) <= hi for lo, hi in CJK_RANGES)


def _is_punctuation(char: str) -> bool:
    """BERT's rule: every non-alphanumeric printable ASCII character, and Unicode punctuation (P*)."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte: printable bytes stand for themselves, the rest are
    shifted to 256 + n (so the space byte is `Ġ`, newline `Ċ`)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = {b: chr(b) for b in printable}
    shifted = (b for b in range(256) if b not in chars)
    chars.update({b: chr(256 + n) for n, b in enumerate(shifted)})
    return {c: b for b, c in chars.items()}
