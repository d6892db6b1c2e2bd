"""Stage 3, split: each document to the train or validation split, and to a packing group of it.

Both follow from the document's text hash alone: a document goes to validation when its hash falls
below validation_fraction x 2^64 (so identical texts always share a split), and to packing group
hash % groups of its split.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from lmshards.plumbing import fs
from lmshards.preprocess.stages.encode import TokenizedChunk
from lmshards.schemas.constants import TRAIN_SPLIT, VALIDATION_SPLIT

# Tokens routed before the packing groups' buffers are handed on (int32: 4 bytes each), on both
# paths: as a few large elements per group (Beam's cost is per element), or appended to the groups'
# files (lmshards.preprocess.in_process: one append per group and flush).
FLUSH_TOKENS = 4 << 20
# Under the output's temporary directory: a staged route bundle's flushed chunks (ChunkPiece), a new name
# each flush.
ROUTED_PREFIX = "routed-"
# Tokens of added chunks routed in one pass (GroupRouter): few enough that the pass' index arrays
# stay a few MB, many enough that its fixed cost is paid once per dozens of tokenizer calls.
ROUTE_TOKENS = 1 << 19
_HASH_DTYPE, _LENGTH_DTYPE = np.dtype("<u8"), np.dtype("<i4")

_HASH_SPACE = 1 << 64

GroupKey = tuple[str, int]  # (split, packing group)


# ---------------------------------------------------------------- logic


def validation_threshold(validation_fraction: float) -> int:
    """Documents whose hash is below this go to validation: about `validation_fraction` of them."""
    return min(int(validation_fraction * _HASH_SPACE), _HASH_SPACE - 1)


def split_of(hashes: np.ndarray, threshold: int) -> np.ndarray:
    """Boolean array: True where the document (by uint64 hash) belongs to the validation split."""
    return hashes < np.uint64(threshold)


def route_documents(
    chunk: TokenizedChunk, *, threshold: int, groups: dict[str, int]
) -> Iterator[tuple[GroupKey, TokenizedChunk]]:
    """Splits one chunk into per-(split, group) chunks, in key order (train groups, then validation's).

    groups: split -> number of packing groups.
    """
    is_validation = split_of(chunk.hashes, threshold)
    num_train = groups[TRAIN_SPLIT]
    group = np.where(
        is_validation,
        chunk.hashes % np.uint64(groups[VALIDATION_SPLIT]),
        chunk.hashes % np.uint64(num_train),
    ).astype(np.int64)
    key = group + is_validation * num_train  # one number per (split, group): validation after train
    order = np.argsort(key, kind="stable")
    keys, firsts = np.unique(key[order], return_index=True)
    pieces = chunk.take(order).split([*firsts.tolist(), chunk.num_documents])
    for k, piece in zip(keys.tolist(), pieces):
        yield ((VALIDATION_SPLIT, k - num_train) if k >= num_train else (TRAIN_SPLIT, k)), piece


class GroupRouter:
    """Routes chunks to their packing groups, buffering them per group up to flush_tokens tokens: the
    router of both preprocess paths (_RouteFn, and lmshards.preprocess.in_process).

    Chunks are routed ROUTE_TOKENS at a time, joined: routing costs a few dozen array operations
    whatever the chunk's size, and a tokenizer call's chunk is small (about 18,000 tokens in 32
    groups). Joined or not, each group's documents come in the order they were added.
    """

    def __init__(
        self,
        *,
        validation_fraction: float,
        groups: dict[str, int],
        flush_tokens: int = FLUSH_TOKENS,
    ):
        self._threshold = validation_threshold(validation_fraction)
        self._groups, self._flush_tokens = groups, flush_tokens
        self._buffer: dict[GroupKey, list[TokenizedChunk]] = {}
        self._buffered_tokens = 0
        self._waiting: list[TokenizedChunk] = []  # added, not yet routed
        self._waiting_tokens = 0

    def add(self, chunk: TokenizedChunk) -> list[tuple[GroupKey, TokenizedChunk]]:
        """Routes `chunk`; returns the buffered (GroupKey, TokenizedChunk) when they reach flush_tokens."""
        self._waiting.append(chunk)
        self._waiting_tokens += chunk.num_tokens
        self._buffered_tokens += chunk.num_tokens
        if self._buffered_tokens >= self._flush_tokens:
            return self.flush()
        if self._waiting_tokens >= ROUTE_TOKENS:
            self._route_waiting()
        return []

    def flush(self) -> list[tuple[GroupKey, TokenizedChunk]]:
        """Every buffered group's documents as one chunk, in key order; the buffer is emptied."""
        self._route_waiting()
        buffer, self._buffer, self._buffered_tokens = self._buffer, {}, 0
        return [(key, TokenizedChunk.concat(buffer[key])) for key in sorted(buffer)]

    def _route_waiting(self) -> None:
        if not self._waiting:
            return
        joined = TokenizedChunk.concat(self._waiting)
        self._waiting, self._waiting_tokens = [], 0
        for key, piece in route_documents(joined, threshold=self._threshold, groups=self._groups):
            self._buffer.setdefault(key, []).append(piece)


@dataclasses.dataclass(frozen=True)
class ChunkPiece:
    """A packing group's documents as a staged route step left them in a file: `documents` hashes
    (uint64), their lengths (int32), then `tokens` ids (`dtype`), from byte `offset` of `path`.

    For a local output only these cross the packing GroupByKey (see SplitSettings.directory): neither
    the runner nor a worker holds the token ids in between.
    """

    path: str
    offset: int
    documents: int
    tokens: int
    dtype: str

    @property
    def nbytes(self) -> int:
        ids = np.dtype(self.dtype).itemsize * self.tokens
        return (_HASH_DTYPE.itemsize + _LENGTH_DTYPE.itemsize) * self.documents + ids


def write_routed(
    routed: Sequence[tuple[GroupKey, TokenizedChunk]], directory: str
) -> list[tuple[GroupKey, ChunkPiece]]:
    """The routed chunks written one after another into a new file in `directory`; returns a ChunkPiece
    for each, once the file is complete."""
    path = fs.join(directory, f"{ROUTED_PREFIX}{uuid.uuid4().hex}")
    pieces: list[tuple[GroupKey, ChunkPiece]] = []
    offset = 0
    with fs.open_atomic(path) as f:
        for key, chunk in routed:
            tokens = np.ascontiguousarray(chunk.tokens)
            for array in (
                chunk.hashes.astype(_HASH_DTYPE),
                chunk.lengths.astype(_LENGTH_DTYPE),
                tokens,
            ):
                f.write(array.tobytes())
            piece = ChunkPiece(
                path=path,
                offset=offset,
                documents=chunk.num_documents,
                tokens=chunk.num_tokens,
                dtype=tokens.dtype.str,
            )
            pieces.append((key, piece))
            offset += piece.nbytes
    return pieces


def routed_chunks(elements: Iterable[TokenizedChunk | ChunkPiece]) -> Iterator[TokenizedChunk]:
    """A packing group's input as TokenizedChunks: a chunk as it came, a ChunkPiece read from its
    file (fs.read_pieces)."""
    for element, data in fs.read_pieces(elements, ChunkPiece):
        yield _chunk_of(element, data) if isinstance(element, ChunkPiece) else element


def _chunk_of(piece: ChunkPiece, data: bytes) -> TokenizedChunk:
    n = piece.documents
    hashes = np.frombuffer(data, _HASH_DTYPE, n, 0).astype(np.uint64)
    lengths = np.frombuffer(data, _LENGTH_DTYPE, n, _HASH_DTYPE.itemsize * n).astype(np.int32)
    at = (_HASH_DTYPE.itemsize + _LENGTH_DTYPE.itemsize) * n
    tokens = np.frombuffer(data, np.dtype(piece.dtype), piece.tokens, at)
    return TokenizedChunk(hashes=hashes, lengths=lengths, tokens=tokens)
