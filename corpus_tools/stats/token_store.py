"""Corpus statistics of a token store (`preprocess --keep_tokens`): its documents before packing.

A store holds each document's token ids, not records, so its figures are per document (tokens per
document, how many would not fit one record of a given seq_len) beside the ones a shard set's stats
also give (token frequencies, vocabulary use, unknown and byte-fallback rates). The store is read
part by part (each part's SHA-256 and counts are checked while it is read), in this process: it is
a few bytes per token, so no Beam job is needed.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from corpus_tools.tokenizer.corpus_report import byte_fallback_ids
from plumbing import fs
from preprocess.stages.tokens import check_store_files, iter_store, read_store_manifest
from schemas.constants import MANIFEST_NAME, TOKENIZER_DIR_NAME, TOKENS_FORMAT
from schemas.tokenizer_info import TokenizerSource, checked_tokenizer
from schemas.version import __version__

# Record lengths for which the page says how many documents would not fit one record.
RECORD_LENGTHS = (128, 512)


def is_token_store(path: str) -> bool:
    """Whether `path` holds a token store's manifest (not a shard set, which may hold a store inside)."""
    try:
        data = json.loads(fs.read_text(fs.join(path, MANIFEST_NAME)))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == TOKENS_FORMAT


def store_tokenizer(store: str, given: str | None, expected: str) -> TokenizerSource | None:
    """The tokenizer that names top tokens: `given`, else the store's own copy, else None.

    Raises:
      TokenizerError: the tokenizer is not the one the store's ids come from.
    """
    path = given or fs.join(store, TOKENIZER_DIR_NAME)
    if given is None and not fs.exists(path):
        return None
    return checked_tokenizer(
        path,
        expected=expected,
        named="Tokenizer",
        reference="the token store was made with",
        fix="Pass that tokenizer with --tokenizer, or none for ids only.",
    )


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def document_figures(lengths: np.ndarray) -> dict[str, Any]:
    """Tokens per document: mean, min, max, a histogram, and how many exceed each of RECORD_LENGTHS."""
    histogram = np.bincount(lengths) if lengths.size else np.zeros(0, dtype=np.int64)
    return {
        "mean": float(lengths.mean()) if lengths.size else 0.0,
        "min": int(lengths.min()) if lengths.size else 0,
        "max": int(lengths.max()) if lengths.size else 0,
        "longer_than": {str(n): int((lengths > n).sum()) for n in RECORD_LENGTHS},
        "histogram": [[int(n), int(c)] for n, c in enumerate(histogram) if c],
    }


def token_store_stats(
    store: str, *, top_k: int, tokenizer: str | None = None
) -> tuple[dict[str, Any], list[int]]:
    """Every figure of a token store's stats.json, and its rank-frequency curve.

    Raises:
      TokenStoreError: the store is incomplete or damaged (a part missing, truncated or changed).
      TokenizerError: `tokenizer` is not the store's.
    """
    from tokenizers import Tokenizer

    from corpus_tools.stats.stats import name_tokens, rank_frequency, top_tokens

    manifest = read_store_manifest(store)
    check_store_files(store, manifest)
    source = store_tokenizer(store, tokenizer, manifest.tokenizer.fingerprint)
    vocab_size = manifest.tokenizer.vocab_size
    counts = np.zeros(vocab_size, dtype=np.int64)
    lengths: list[np.ndarray] = []
    out_of_vocab = 0
    for chunk in iter_store(store, manifest):
        ids = chunk.tokens.astype(np.int64)
        out_of_vocab += int((ids >= vocab_size).sum())
        counts += np.bincount(ids[ids < vocab_size], minlength=vocab_size)
        lengths.append(chunk.lengths.astype(np.int64))
    doc_lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    tokens = int(counts.sum()) + out_of_vocab
    token_counts = {int(i): int(counts[i]) for i in np.flatnonzero(counts)}
    unk_id = manifest.tokenizer.special_token_ids.get("unk")
    unk_tokens = int(counts[unk_id]) if unk_id is not None else None
    loaded = Tokenizer.from_str(source.json_text) if source else None
    fallback = byte_fallback_ids(loaded.get_vocab(with_added_tokens=True)) if loaded else None
    fallback_tokens = (
        int(sum(counts[i] for i in fallback if i < vocab_size)) if fallback is not None else None
    )
    top = top_tokens(token_counts, top_k)
    mismatches = [
        f"{name}: counted {counted:,}, the store's manifest says {listed:,}"
        for name, counted, listed in (
            ("documents", int(doc_lengths.size), manifest.documents),
            ("tokens", tokens, manifest.tokens),
        )
        if counted != listed
    ]
    stats = {
        "kind": "token_store",
        "tool_version": __version__,
        "shards_dir": store,
        "vocab_size": vocab_size,
        "documents": int(doc_lengths.size),
        "tokens": tokens,
        "vocab_used": len(token_counts),
        "vocab_unused_fraction": (vocab_size - len(token_counts)) / vocab_size,
        "out_of_vocab_tokens": out_of_vocab,
        "unk_id": unk_id,
        "unk_tokens": unk_tokens,
        "unk_rate": _rate(unk_tokens, tokens) if unk_tokens is not None else None,
        "byte_fallback_ids": len(fallback) if fallback is not None else None,
        "byte_fallback_tokens": fallback_tokens,
        "byte_fallback_rate": _rate(fallback_tokens, tokens)
        if fallback_tokens is not None
        else None,
        "tokens_per_document": document_figures(doc_lengths),
        "tokenizer": source.json_path if source else None,
        "top_tokens": name_tokens(top, loaded) if loaded else top,
        "manifest_mismatches": mismatches,
    }
    return stats, rank_frequency(token_counts)
