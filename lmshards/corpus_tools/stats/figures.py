"""The token figures every stats.json gives, a shard set's (stats.py) and a token store's (token_store.py).

Plain functions of token counts (token id -> occurrences); each kind adds its own figures around them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lmshards.corpus_tools.tokenizer.corpus_report import byte_fallback_ids

if TYPE_CHECKING:
    from tokenizers import Tokenizer


def rate(part: int, whole: int) -> float:
    """part / whole, 0.0 for nothing counted."""
    return part / whole if whole else 0.0


def top_tokens(token_counts: Mapping[int, int], k: int) -> list[dict[str, Any]]:
    """The k most frequent ids, ties broken by id: [{id, count, share of all counted tokens}]."""
    total = sum(token_counts.values())
    ranked = sorted(token_counts.items(), key=lambda item: (-item[1], item[0]))[:k]
    return [{"id": i, "count": n, "share": rate(n, total)} for i, n in ranked]


def name_tokens(top: list[dict[str, Any]], tokenizer: Tokenizer) -> list[dict[str, Any]]:
    """Top tokens with their vocabulary piece ('token') and decoded text ('text')."""
    return [
        {
            **entry,
            "token": tokenizer.id_to_token(entry["id"]),
            "text": tokenizer.decode([entry["id"]], skip_special_tokens=False),
        }
        for entry in top
    ]


def rank_frequency(token_counts: Mapping[int, int]) -> list[int]:
    """Counts of the used ids, most frequent first: the curve of the rank-frequency plot."""
    return sorted(token_counts.values(), reverse=True)


def vocabulary_figures(
    token_counts: Mapping[int, int],
    *,
    vocab_size: int,
    unk_id: int | None,
    tokenizer: Tokenizer | None,
) -> dict[str, Any]:
    """Vocabulary use, out-of-vocabulary, unknown and byte-fallback figures, in stats.json's order.

    token_counts: ids outside [0, vocab_size) included, counted as out of vocabulary. tokenizer: finds
    the byte-fallback ids; without one their figures are None. The unk figures are None without an
    unknown token (unk_id None). Rates are shares of all the counted tokens; unused ids are those
    never counted (special tokens such as the mask token among them).
    """
    tokens = sum(token_counts.values())
    used = sum(1 for i in token_counts if 0 <= i < vocab_size)
    unk_tokens = token_counts.get(unk_id, 0) if unk_id is not None else None
    fallback = byte_fallback_ids(tokenizer.get_vocab(with_added_tokens=True)) if tokenizer else None
    fallback_tokens = (
        sum(token_counts.get(i, 0) for i in fallback) if fallback is not None else None
    )
    return {
        "vocab_used": used,
        "vocab_unused_fraction": (vocab_size - used) / vocab_size,
        "out_of_vocab_tokens": sum(n for i, n in token_counts.items() if not 0 <= i < vocab_size),
        "unk_id": unk_id,
        "unk_tokens": unk_tokens,
        "unk_rate": rate(unk_tokens, tokens) if unk_tokens is not None else None,
        "byte_fallback_ids": len(fallback) if fallback is not None else None,
        "byte_fallback_tokens": fallback_tokens,
        "byte_fallback_rate": rate(fallback_tokens, tokens)
        if fallback_tokens is not None
        else None,
    }


def top_token_figures(
    token_counts: Mapping[int, int],
    *,
    top_k: int,
    tokenizer: Tokenizer | None,
    tokenizer_path: str | None,
) -> dict[str, Any]:
    """The tokenizer that named the top tokens (its path, None for ids only) and the top_k tokens."""
    top = top_tokens(token_counts, top_k)
    return {
        "tokenizer": tokenizer_path,
        "top_tokens": name_tokens(top, tokenizer) if tokenizer else top,
    }
