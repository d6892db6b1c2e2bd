"""Stage 2, encode: batches of document texts -> their token ids and text hashes.

A document's hash (of its text alone) is its identity for the rest of the pipeline: it decides the
document's split and packing group, and its place inside the group, so the output never depends on
the order documents arrive in.

A document the tokenizer raises an error on is skipped and counted (documents_tokenizer_error, in the
manifest's reading), never fatal: see encode_accepted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import os
from collections.abc import Iterable, Sequence

import numpy as np

from lmshards.plumbing import bounded
from lmshards.plumbing.errors import TokenizerError
from lmshards.preprocess.sources import ReadStats

logger = logging.getLogger(__name__)

# Each encoder logs the first few documents the tokenizer rejects; all are counted.
MAX_LOGGED_REJECTED = 3
# The ids' dtype of a TokenizedChunk unless a narrower one is asked for (chunk_dtype).
WIDE_IDS = np.dtype(np.int32)
# How many values a uint16 holds (0 .. 65,535): every stage's test of whether ids or rows fit two bytes.
UINT16_VALUES = 1 << 16

# ---------------------------------------------------------------- logic


@dataclasses.dataclass(frozen=True, eq=False)
class TokenizedChunk:
    """Tokenized documents, concatenated.

    hashes: uint64 [documents], the doc_hash of each text; lengths: int32 [documents];
    tokens: int32 [sum(lengths)], each document's ids (special tokens included) one after another
    (uint16 or uint32 when read from a token store, uint16 from the staged encode step when every id
    fits: packing widens them to int32).
    rejected: documents of the encoded batch that the tokenizer raised on, left out of the chunk
    (set by the encode stage only; the chunks other stages make from it carry 0).
    """

    hashes: np.ndarray
    lengths: np.ndarray
    tokens: np.ndarray
    rejected: int = 0

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
        # For every output position: its source position = source start - destination start + position,
        # as int32 where the chunk allows (half the index bytes to build and read).
        index = np.int32 if self.tokens.size < 1 << 31 else np.int64
        shift = np.repeat((starts[order] - new_starts).astype(index), new_lengths)
        tokens = self.tokens[shift + np.arange(int(new_lengths.sum()), dtype=index)]
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
    return int(doc_hashes([text])[0])


def doc_hashes(texts: Sequence[str]) -> np.ndarray:
    """uint64 [len(texts)]: doc_hash of each text (their digests joined and read at once)."""
    # One expression per text, no function call: the call was an eighth of the hashing's time.
    blake2b = hashlib.blake2b
    digests = [blake2b(t.encode("utf-8", "surrogatepass"), digest_size=8).digest() for t in texts]
    return np.frombuffer(b"".join(digests), "<u8").astype(np.uint64)


def chunk_dtype(vocab_size: int) -> np.dtype:
    """The ids' dtype of the staged encode step's chunks: uint16 when every id fits, else int32.

    Every chunk crosses the packing groups' GroupByKey (on Dataflow, its billed shuffle; locally,
    the runner's data plane): two bytes an id instead of four halve those bytes.
    """
    return np.dtype(np.uint16) if vocab_size <= UINT16_VALUES else WIDE_IDS


def limit_tokenizer_threads(threads: int) -> None:
    """Caps the Rust tokenizer's thread pool; must run before the process's first encode_batch.

    N worker processes x M rayon threads on N cores only adds contention, so the default is one.
    """
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["RAYON_RS_NUM_CPUS"] = str(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"


@dataclasses.dataclass(frozen=True)
class Encoded:
    """What encode_accepted made of a batch: the texts the tokenizer took, in order, and their Encodings;
    rejected: the texts it raised on (left out), with the first one's error."""

    texts: list[str]
    encodings: list
    rejected: int = 0
    error: str = ""


def encode_accepted(tokenizer, texts: list[str]) -> Encoded:
    """The texts encoded with special tokens (a `tokenizers.Tokenizer`), those it raises on left out.

    A batch the tokenizer raises on is encoded again text by text: one bad document costs its batch
    a second pass, never the run. A text's ids are the same alone as in a batch.
    """
    try:
        return Encoded(texts, tokenizer.encode_batch_fast(texts, add_special_tokens=True))
    except BaseException as e:
        if not _rejects(e):
            raise
    kept, encodings, errors = [], [], []
    for text in texts:
        try:
            encodings += tokenizer.encode_batch_fast([text], add_special_tokens=True)
        except BaseException as e:
            if not _rejects(e):
                raise
            errors.append(f"{type(e).__name__}: {e}")
            continue
        kept.append(text)
    return Encoded(kept, encodings, rejected=len(errors), error=errors[0] if errors else "")


def _rejects(error: BaseException) -> bool:
    """Whether the tokenizer raised `error` on its input: any Exception, or a panic of its Rust code
    (pyo3's PanicException, a BaseException); never KeyboardInterrupt or SystemExit."""
    return isinstance(error, Exception) or type(error).__name__ == "PanicException"


def log_rejected(encoded: Encoded, logged: int) -> int:
    """Logs a batch's rejected documents while fewer than MAX_LOGGED_REJECTED were; returns the new count."""
    if encoded.rejected and logged < MAX_LOGGED_REJECTED:
        logger.warning(
            "%d document(s) skipped: the tokenizer raised an error on them (%s)",
            encoded.rejected,
            encoded.error,
        )
        return logged + 1
    return logged


def encode_documents(tokenizer, texts: list[str]) -> TokenizedChunk:
    """The texts hashed and encoded (a `tokenizers.Tokenizer`; special tokens added by its
    post-processor); the texts it raises on are left out and counted in `rejected`."""
    return encoded_chunk(encode_accepted(tokenizer, texts))


def encoded_chunk(encoded: Encoded, dtype: np.dtype = WIDE_IDS) -> TokenizedChunk:
    """The accepted texts of a batch with their Encodings as a TokenizedChunk (ids as dtype), its
    rejected count kept."""
    return dataclasses.replace(
        chunk_of(encoded.texts, encoded.encodings, dtype), rejected=encoded.rejected
    )


def rejected_stats(chunks: Iterable[TokenizedChunk]) -> ReadStats:
    """The documents the tokenizer rejected in `chunks`, as the reading counter that reports them."""
    return ReadStats(documents_tokenizer_error=sum(chunk.rejected for chunk in chunks))


def chunk_of(texts: list[str], encodings: Sequence, dtype: np.dtype = WIDE_IDS) -> TokenizedChunk:
    """The texts with their `tokenizers.Encoding`s (one each, in order) as a TokenizedChunk, its ids
    as dtype (every id must fit: numpy raises OverflowError on one that does not)."""
    lengths = np.fromiter(map(len, encodings), dtype=np.int32, count=len(encodings))
    # Each Encoding's ids list is read once and freed at once: about half the CPU of keeping a list of
    # them and reading it again (2.2M documents of the benchmark corpus: see docs/benchmarks.md).
    ids = itertools.chain.from_iterable(encoding.ids for encoding in encodings)
    tokens = np.fromiter(ids, dtype=dtype, count=int(lengths.sum()))
    hashes = doc_hashes(texts)
    return TokenizedChunk(hashes=hashes, lengths=lengths, tokens=tokens)


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def planned_tokenizer_text(path: str, sha256: str) -> str:
    """The planned tokenizer's JSON text, read again where it is used (a worker, an encode thread).

    Raises:
      TokenizerError: the file changed since the run was planned (its text_sha256 is not `sha256`).
    """
    try:  # as bounded as the planning read; the digest is of the bytes, so any change is caught
        data = bounded.read_bytes(
            path, what="tokenizer file", max_bytes=bounded.MAX_TOKENIZER_JSON_BYTES
        )
    except bounded.ReadLimitError as e:
        raise TokenizerError(str(e)) from e
    if hashlib.sha256(data).hexdigest() != sha256:
        raise TokenizerError(
            f"Tokenizer file {path!r} changed while the run started; run the command again."
        )
    return data.decode("utf-8")
