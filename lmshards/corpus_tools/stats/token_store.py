"""Corpus statistics of a token store (`preprocess --keep_tokens`): its documents before packing.

A store holds each document's token ids, not records, so its figures are per document (tokens per
document, how many would not fit one record of a given seq_len) beside the ones a shard set's stats
also give (token frequencies, vocabulary use, unknown and byte-fallback rates). The store is read
part by part (each part's SHA-256 and counts are checked while it is read), in this process: it is
a few bytes per token, so no Beam job is needed.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from lmshards.corpus_tools.stats.figures import (
    rank_frequency,
    top_token_figures,
    vocabulary_figures,
)
from lmshards.plumbing import fs
from lmshards.preprocess.stages.tokens import check_store_files, read_pieces, read_store_manifest
from lmshards.schemas.constants import TOKENIZER_DIR_NAME
from lmshards.schemas.tokenizer_info import TokenizerSource, checked_tokenizer
from lmshards.schemas.version import __version__

# Record lengths for which the page says how many documents would not fit one record.
RECORD_LENGTHS = (128, 512)
LONGEST_SHOWN = 5  # the longest documents named (part file and row), longest first


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


def longest_in(lengths: np.ndarray, *, file: str, first: int, k: int) -> list[dict[str, Any]]:
    """The k longest of a run of documents whose first is row `first` of part `file`:
    [{"file", "record" (its 0-based row in the part), "tokens"}], longest first, then by row."""
    order = np.argsort(-lengths.astype(np.int64), kind="stable")[:k]
    return [{"file": file, "record": first + int(i), "tokens": int(lengths[i])} for i in order]


def longest_documents(candidates: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The k longest of the candidates: longest first, ties by file and record."""
    return sorted(candidates, key=lambda d: (-d["tokens"], d["file"], d["record"]))[:k]


def document_figures(lengths: np.ndarray, longest: list[dict[str, Any]]) -> dict[str, Any]:
    """Tokens per document: mean, min, max, a histogram, how many exceed each of RECORD_LENGTHS, and
    the longest documents (see longest_in)."""
    histogram = np.bincount(lengths) if lengths.size else np.zeros(0, dtype=np.int64)
    return {
        "mean": float(lengths.mean()) if lengths.size else 0.0,
        "min": int(lengths.min()) if lengths.size else 0,
        "max": int(lengths.max()) if lengths.size else 0,
        "longer_than": {str(n): int((lengths > n).sum()) for n in RECORD_LENGTHS},
        "histogram": [[int(n), int(c)] for n, c in enumerate(histogram) if c],
        "longest": longest,
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

    manifest = read_store_manifest(store)
    check_store_files(store, manifest)
    source = store_tokenizer(store, tokenizer, manifest.tokenizer.fingerprint)
    vocab_size = manifest.tokenizer.vocab_size
    counts = np.zeros(vocab_size, dtype=np.int64)
    out_of_vocab: Counter[int] = Counter()  # id -> occurrences, for ids past the vocabulary
    lengths: list[np.ndarray] = []
    longest: list[dict[str, Any]] = []  # each piece's longest documents, named by part and row
    for info in manifest.files:
        row = 0
        for chunk in read_pieces(store, info):  # a row group at a time, in manifest order
            ids = chunk.tokens.astype(np.int64)
            counts += np.bincount(ids[ids < vocab_size], minlength=vocab_size)
            past, found = np.unique(ids[ids >= vocab_size], return_counts=True)
            out_of_vocab.update(dict(zip(past.tolist(), found.tolist())))
            lengths.append(chunk.lengths.astype(np.int64))
            longest += longest_in(chunk.lengths, file=info.path, first=row, k=LONGEST_SHOWN)
            row += chunk.num_documents
    doc_lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    token_counts = {int(i): int(counts[i]) for i in np.flatnonzero(counts)}  # in the vocabulary
    tokens = sum(token_counts.values()) + out_of_vocab.total()
    loaded = Tokenizer.from_str(source.json_text) if source else None
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
        **vocabulary_figures(
            {**token_counts, **out_of_vocab},
            vocab_size=vocab_size,
            unk_id=manifest.tokenizer.special_token_ids.get("unk"),
            tokenizer=loaded,
        ),
        "tokens_per_document": document_figures(
            doc_lengths, longest_documents(longest, LONGEST_SHOWN)
        ),
        **top_token_figures(
            token_counts,
            top_k=top_k,
            tokenizer=loaded,
            tokenizer_path=source.json_path if source else None,
        ),
        "manifest_mismatches": mismatches,
    }
    return stats, rank_frequency(token_counts)
