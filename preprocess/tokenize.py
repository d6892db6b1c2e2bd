"""Stage 2-3: tokenize batches of documents and route each one to its split and packing group."""

from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np

from preprocess.packing import doc_hash, split_name, split_of, validation_threshold
from schemas.constants import SPLITS

METRICS_NAMESPACE = "lmshards"

# A chunk of tokenized documents bound for one packing group:
# (uint64 hashes [docs], int32 lengths [docs], int32 tokens [sum(lengths)]).
Chunk = tuple[np.ndarray, np.ndarray, np.ndarray]
GroupKey = tuple[str, int]  # (split, packing group)


@dataclasses.dataclass(frozen=True)
class TokenizeSettings:
    """What the tokenize step needs; small and picklable (the tokenizer itself is built per worker)."""

    tokenizer_json: str
    threads: int
    validation_fraction: float
    groups: dict[str, int]  # split -> number of packing groups


def limit_tokenizer_threads(threads: int) -> None:
    """Caps the Rust tokenizer's thread pool; must run before the process's first encode_batch.

    N worker processes x M rayon threads on N cores only adds contention, so the default is one.
    """
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["RAYON_RS_NUM_CPUS"] = str(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"


def encode_documents(tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(int32 lengths [docs], int32 tokens concatenated), special tokens added by the post-processor."""
    ids = [encoding.ids for encoding in tokenizer.encode_batch_fast(texts, add_special_tokens=True)]
    lengths = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
    tokens = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum()))
    return lengths, tokens


def route_documents(hashes: np.ndarray, lengths: np.ndarray, tokens: np.ndarray, *,
                    threshold: int, groups: dict[str, int]) -> Iterator[tuple[GroupKey, Chunk]]:
    """Splits one tokenized batch into per-(split, group) chunks, in key order."""
    is_validation = split_of(hashes, threshold)
    group = np.where(is_validation, hashes % np.uint64(groups[split_name(True)]),
                     hashes % np.uint64(groups[split_name(False)])).astype(np.int64)
    # One sort key per document: validation groups after train groups.
    key = group + is_validation.astype(np.int64) * groups[split_name(False)]
    order = np.argsort(key, kind="stable")
    starts = np.cumsum(lengths, dtype=np.int64) - lengths
    keys, first = np.unique(key[order], return_index=True)
    bounds = list(first) + [len(order)]
    for k, lo, hi in zip(keys, bounds[:-1], bounds[1:]):
        docs = order[lo:hi]
        pieces = [tokens[starts[d]:starts[d] + lengths[d]] for d in docs]
        is_val = bool(is_validation[docs[0]])
        yield (split_name(is_val), int(group[docs[0]])), (hashes[docs], lengths[docs], np.concatenate(pieces))


class _TokenizeFn(beam.DoFn):
    """list[str] -> ((split, group), Chunk) for each group the batch touches.

    Documents arrive non-empty (the reader skips and counts empty ones).
    """

    def __init__(self, settings: TokenizeSettings):
        self._settings = settings
        self._documents = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "documents_tokenized")
        self._tokens = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "tokens")

    def setup(self) -> None:
        limit_tokenizer_threads(self._settings.threads)
        from tokenizers import Tokenizer  # after the thread limit, so the pool starts with it

        self._tokenizer = Tokenizer.from_str(self._settings.tokenizer_json)
        self._threshold = validation_threshold(self._settings.validation_fraction)

    def process(self, texts: list[str]) -> Iterable[tuple[GroupKey, Chunk]]:
        if not texts:
            return
        lengths, tokens = encode_documents(self._tokenizer, texts)
        hashes = np.fromiter(map(doc_hash, texts), dtype=np.uint64, count=len(texts))
        self._documents.inc(len(texts))
        self._tokens.inc(int(tokens.size))
        yield from route_documents(hashes, lengths, tokens, threshold=self._threshold, groups=self._settings.groups)


class TokenizeDocuments(beam.PTransform):
    """PCollection[list[str]] -> PCollection[((split, group), Chunk)]."""

    def __init__(self, settings: TokenizeSettings):
        super().__init__()
        missing = set(SPLITS) - set(settings.groups)
        if missing:
            raise ValueError(f"no packing group count for splits {sorted(missing)}")
        self._settings = settings

    def expand(self, batches):
        return batches | "EncodeAndRoute" >> beam.ParDo(_TokenizeFn(self._settings))
