"""Stage 2-3: tokenize batches of documents and route each one to its split and packing group."""

from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindows

from preprocess.packing import doc_hash, gather_documents, split_name, split_of, validation_threshold
from schemas.constants import SPLITS

METRICS_NAMESPACE = "lmshards"
# Tokens a tokenize worker buffers before emitting its chunks (int32: 4 bytes each).
FLUSH_TOKENS = 4 << 20

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
    num_train = groups[split_name(False)]
    group = np.where(is_validation, hashes % np.uint64(groups[split_name(True)]),
                     hashes % np.uint64(num_train)).astype(np.int64)
    key = group + is_validation * num_train  # one number per (split, group): validation after train
    order = np.argsort(key, kind="stable")
    ordered_tokens = gather_documents(lengths, tokens, order)
    ordered_lengths = lengths[order]
    token_ends = np.cumsum(ordered_lengths, dtype=np.int64)
    keys, firsts = np.unique(key[order], return_index=True)
    doc_bounds = [*firsts.tolist(), len(order)]
    for k, lo, hi in zip(keys.tolist(), doc_bounds[:-1], doc_bounds[1:]):
        token_lo = int(token_ends[lo - 1]) if lo else 0
        split = split_name(k >= num_train)
        yield (split, k - num_train if k >= num_train else k), (
            hashes[order[lo:hi]], ordered_lengths[lo:hi], ordered_tokens[token_lo:int(token_ends[hi - 1])])


def concat_chunks(chunks: list[Chunk]) -> Chunk:
    """One chunk holding the documents of all `chunks`."""
    hashes, lengths, tokens = (np.concatenate(parts) for parts in zip(*chunks))
    return hashes, lengths, tokens


class _TokenizeFn(beam.DoFn):
    """list[str] -> ((split, group), Chunk), a few large chunks per group and bundle.

    Documents arrive non-empty (the reader skips and counts empty ones). Chunks are buffered per
    group across the bundle (up to FLUSH_TOKENS tokens) because Beam's cost is per element: one
    element per group and batch would be tens of thousands of tiny elements on a large corpus.
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

    def start_bundle(self) -> None:
        self._buffer: dict[GroupKey, list[Chunk]] = {}
        self._buffered_tokens = 0

    def process(self, texts: list[str]) -> Iterable[tuple[GroupKey, Chunk]]:
        if not texts:
            return
        lengths, tokens = encode_documents(self._tokenizer, texts)
        hashes = np.fromiter(map(doc_hash, texts), dtype=np.uint64, count=len(texts))
        self._documents.inc(len(texts))
        self._tokens.inc(int(tokens.size))
        for key, chunk in route_documents(hashes, lengths, tokens, threshold=self._threshold,
                                          groups=self._settings.groups):
            self._buffer.setdefault(key, []).append(chunk)
        self._buffered_tokens += int(tokens.size)
        if self._buffered_tokens >= FLUSH_TOKENS:
            yield from self._flush()

    def finish_bundle(self):
        for element in self._flush():
            yield GlobalWindows.windowed_value(element)

    def _flush(self) -> Iterator[tuple[GroupKey, Chunk]]:
        buffer, self._buffer, self._buffered_tokens = self._buffer, {}, 0
        for key in sorted(buffer):
            yield key, concat_chunks(buffer[key])


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
