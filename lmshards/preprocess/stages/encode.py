"""Stage 2, encode: batches of document texts -> their token ids and text hashes.

A document's hash (of its text alone) is its identity for the rest of the pipeline: it decides the
document's split and packing group, and its place inside the group, so the output never depends on
the order documents arrive in.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
from collections.abc import Iterable, Sequence

import apache_beam as beam
import numpy as np

from lmshards.preprocess.stages.metrics import counter

# ---------------------------------------------------------------- logic


@dataclasses.dataclass(frozen=True, eq=False)
class TokenizedChunk:
    """Tokenized documents, concatenated.

    hashes: uint64 [documents], the doc_hash of each text; lengths: int32 [documents];
    tokens: int32 [sum(lengths)], each document's ids (special tokens included) one after another
    (uint16 or uint32 when read from a token store: packing widens them to int32).
    """

    hashes: np.ndarray
    lengths: np.ndarray
    tokens: np.ndarray

    @property
    def num_documents(self) -> int:
        return int(self.hashes.size)

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.size)

    def take(self, order: np.ndarray) -> TokenizedChunk:
        """The documents at indices `order`, in that order."""
        lengths = self.lengths.astype(np.int64)
        starts = np.cumsum(lengths) - lengths
        new_lengths = lengths[order]
        new_starts = np.cumsum(new_lengths) - new_lengths
        # For every output position: its source position = source start - destination start + position.
        shift = np.repeat(starts[order] - new_starts, new_lengths)
        tokens = self.tokens[shift + np.arange(int(new_lengths.sum()), dtype=np.int64)]
        return TokenizedChunk(hashes=self.hashes[order], lengths=self.lengths[order], tokens=tokens)

    def split(self, bounds: Sequence[int]) -> list[TokenizedChunk]:
        """Documents [bounds[i], bounds[i + 1]) for each i, as views (no copies)."""
        token_ends = np.concatenate([[0], np.cumsum(self.lengths, dtype=np.int64)])
        return [
            TokenizedChunk(
                hashes=self.hashes[lo:hi],
                lengths=self.lengths[lo:hi],
                tokens=self.tokens[int(token_ends[lo]) : int(token_ends[hi])],
            )
            for lo, hi in zip(bounds[:-1], bounds[1:])
        ]

    @staticmethod
    def concat(chunks: Sequence[TokenizedChunk]) -> TokenizedChunk:
        """One chunk holding the documents of all `chunks`, in order."""
        return TokenizedChunk(
            hashes=np.concatenate([c.hashes for c in chunks]),
            lengths=np.concatenate([c.lengths for c in chunks]),
            tokens=np.concatenate([c.tokens for c in chunks]),
        )


def doc_hash(text: str) -> int:
    """A stable 64-bit hash of a document's text (BLAKE2b), the same on every machine and Python."""
    return int.from_bytes(_digest(text), "little")


def doc_hashes(texts: Sequence[str]) -> np.ndarray:
    """uint64 [len(texts)]: doc_hash of each text (their digests joined and read at once)."""
    return np.frombuffer(b"".join(map(_digest, texts)), "<u8").astype(np.uint64)


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def limit_tokenizer_threads(threads: int) -> None:
    """Caps the Rust tokenizer's thread pool; must run before the process's first encode_batch.

    N worker processes x M rayon threads on N cores only adds contention, so the default is one.
    """
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["RAYON_RS_NUM_CPUS"] = str(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"


def encode_documents(tokenizer, texts: list[str]) -> TokenizedChunk:
    """The texts hashed and encoded (a `tokenizers.Tokenizer`; special tokens added by its post-processor)."""
    return chunk_of(texts, tokenizer.encode_batch_fast(texts, add_special_tokens=True))


def chunk_of(texts: list[str], encodings: Sequence) -> TokenizedChunk:
    """The texts with their `tokenizers.Encoding`s (one each, in order) as a TokenizedChunk."""
    ids = [encoding.ids for encoding in encodings]
    lengths = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
    tokens = np.fromiter(
        itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum())
    )
    hashes = doc_hashes(texts)
    return TokenizedChunk(hashes=hashes, lengths=lengths, tokens=tokens)


# ---------------------------------------------------------------- Beam


@dataclasses.dataclass(frozen=True)
class EncodeSettings:
    """What the encode step needs; small and picklable (the tokenizer itself is built per worker)."""

    tokenizer_json: str
    threads: int


class _EncodeFn(beam.DoFn):
    """list[str] -> TokenizedChunk. Documents arrive non-empty (the reader skips and counts empty ones)."""

    def __init__(self, settings: EncodeSettings):
        self._settings = settings
        self._documents = counter("documents_tokenized")
        self._tokens = counter("tokens")

    def setup(self) -> None:
        limit_tokenizer_threads(self._settings.threads)
        from tokenizers import Tokenizer  # after the thread limit, so the pool starts with it

        self._tokenizer = Tokenizer.from_str(self._settings.tokenizer_json)

    def process(self, texts: list[str]) -> Iterable[TokenizedChunk]:
        if not texts:
            return
        chunk = encode_documents(self._tokenizer, texts)
        self._documents.inc(chunk.num_documents)
        self._tokens.inc(chunk.num_tokens)
        yield chunk


class EncodeDocuments(beam.PTransform):
    """PCollection[list[str]] -> PCollection[TokenizedChunk], one per batch."""

    def __init__(self, settings: EncodeSettings):
        super().__init__()
        self._settings = settings

    def expand(self, batches):
        return batches | "Encode" >> beam.ParDo(_EncodeFn(self._settings))  # TokenizedChunk
