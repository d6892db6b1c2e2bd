"""The token store: every document's token ids, kept beside the shards by `preprocess --keep_tokens`.

`lmshards repack` builds new shard sets from it (another seq_len, shard count, split or seed)
without tokenizing again. Per document it holds what the stages after encode need to place the
document: its text hash (its split, packing group and place in the group) and its ids; the input
sizes the plan sized the packing groups from are in its manifest. Layout of `OUTPUT/tokens/` (names:
lmshards.schemas.layouts):

  part-{uuid4 hex}.parquet  rows (doc_hash: uint64, input_ids: list<uint16 or uint32>), zstd
  tokenizer/                a copy of the tokenizer the ids come from: the store stands alone
  manifest.json             written last (format lmshards.tokens): the sign the store is complete

The id type is the narrowest unsigned one that holds every id of the vocabulary (what readers of the
Parquet see; on disk zstd makes either about 1.4 bytes per token of English text, against ~3 in the
shards).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from lmshards.plumbing import bounded, fs
from lmshards.plumbing.errors import LmshardsError
from lmshards.preprocess.sources import ReadStats, sum_stats
from lmshards.preprocess.stages.encode import UINT16_VALUES, TokenizedChunk
from lmshards.preprocess.stages.metrics import TOKEN_PARTS_WRITTEN, counter
from lmshards.schemas.constants import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    TOKENS_DIR_NAME,
    TOKENS_FORMAT,
)
from lmshards.schemas.layouts import TEMP_DIR_NAME, is_token_part_name, new_token_part_name
from lmshards.schemas.manifest import InputFileInfo, TokenizerInfo, tokenizer_info_from_dict

TOKENS_FORMAT_VERSION = 1
DOC_HASH_COLUMN = "doc_hash"
IDS_COLUMN = "input_ids"
UINT16, UINT32 = "uint16", "uint32"
PARQUET_COMPRESSION = "zstd"
# Tokens a writer buffers before writing one part file (int32 in memory: 4 bytes each): parts of a
# few MB on disk, few enough that listing them is cheap, many enough to spread over the workers.
PART_FLUSH_TOKENS = 4 << 20
# A part is handed on in pieces of about this many tokens: the split stage reorders each element it
# gets with int64 indices (12 bytes per token), so one whole part at once would be its memory peak.
READ_PIECE_TOKENS = 1 << 20
# Tokens per Parquet row group (about): a reader decodes one row group at a time, so its memory
# stays near one row group's ids whatever the part's size.
ROW_GROUP_TOKENS = 1 << 20
_REPACK_HINT = "re-run `lmshards preprocess --keep_tokens` to write the token store again."


class TokenStoreError(LmshardsError):
    """A token store that is missing, incomplete, damaged, or not the one a run expects."""


# ---------------------------------------------------------------- logic: the store's manifest


@dataclasses.dataclass(frozen=True)
class TokenFileInfo:
    """One part file; `path` is relative to the store directory."""

    path: str
    documents: int
    tokens: int
    bytes: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class TokenStoreManifest:
    """What made the store and what it holds; written last.

    inputs: the input files and sizes the producing run planned with (the packing group counts follow
    from their total); reading: what reading them found (the producing manifest's `reading`);
    options: the producing run's manifest options (seq_len, seed, ... and the reading options).
    """

    tool_version: str
    tokenizer: TokenizerInfo
    id_dtype: str
    documents: int
    tokens: int
    files: tuple[TokenFileInfo, ...]
    inputs: tuple[InputFileInfo, ...]
    reading: dict[str, int]
    options: dict[str, Any]
    created_at: str = ""
    format: str = TOKENS_FORMAT
    format_version: int = TOKENS_FORMAT_VERSION

    @property
    def input_bytes(self) -> int:
        return sum(f.bytes for f in self.inputs)

    @property
    def data_bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"


def id_dtype_for(vocab_size: int) -> str:
    """The narrowest unsigned id type holding ids 0 .. vocab_size - 1."""
    return UINT16 if vocab_size <= UINT16_VALUES else UINT32


def store_manifest_from_dict(data: dict[str, Any], path: str) -> TokenStoreManifest:
    """Raises TokenStoreError naming `path` on a wrong format, version or a malformed field."""
    if data.get("format") != TOKENS_FORMAT:
        raise TokenStoreError(
            f"{path!r} is not a token store manifest (format {data.get('format')!r}); {_REPACK_HINT}"
        )
    if data.get("format_version") != TOKENS_FORMAT_VERSION:
        raise TokenStoreError(
            f"{path!r} has token store format version {data.get('format_version')!r}; this lmshards "
            f"reads version {TOKENS_FORMAT_VERSION}. Upgrade lmshards, or {_REPACK_HINT}"
        )
    try:
        tok = data["tokenizer"]
        files = tuple(TokenFileInfo(**f) for f in data["files"])
        for f in files:
            if not is_token_part_name(f.path):
                raise ValueError(f"file {f.path!r} is not a part file name")
        manifest = TokenStoreManifest(
            tool_version=data["tool_version"],
            tokenizer=tokenizer_info_from_dict(tok),
            id_dtype=data["id_dtype"],
            documents=int(data["documents"]),
            tokens=int(data["tokens"]),
            files=files,
            inputs=tuple(InputFileInfo(**i) for i in data["inputs"]),
            reading={k: int(v) for k, v in data["reading"].items()},
            options=dict(data["options"]),
            created_at=data.get("created_at", ""),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise TokenStoreError(f"{path!r} is malformed ({e!r}); {_REPACK_HINT}") from e
    if manifest.id_dtype not in (UINT16, UINT32):
        raise TokenStoreError(f"{path!r}: unknown id_dtype {manifest.id_dtype!r}; {_REPACK_HINT}")
    if manifest.documents != sum(f.documents for f in files) or manifest.tokens != sum(
        f.tokens for f in files
    ):
        raise TokenStoreError(
            f"{path!r}: its document and token counts are not the sums over its files; {_REPACK_HINT}"
        )
    return manifest


def _json_format(path: str) -> str | None:
    try:
        data = bounded.read_json(path, what="manifest", max_bytes=bounded.MAX_MANIFEST_BYTES)
    except (ValueError, OSError):  # not JSON, over a read limit, unreadable
        return None
    return data.get("format") if isinstance(data, dict) else None


def locate_store(source: str) -> str:
    """The token store directory for --tokens `source`: the store itself, or a shard set holding one.

    Raises:
      TokenStoreError: source holds no (complete) token store; the message says which case and the fix.
    """
    source = source.rstrip("/") or "/"
    own = _json_format(fs.join(source, MANIFEST_NAME))
    if own == TOKENS_FORMAT:
        return source
    nested = fs.join(source, TOKENS_DIR_NAME)
    if fs.exists(fs.join(nested, MANIFEST_NAME)):
        return nested
    if fs.isdir(nested) or (own is None and fs.exists(fs.join(source, TEMP_DIR_NAME))):
        raise TokenStoreError(
            f"The token store {nested if fs.isdir(nested) else source!r} has no {MANIFEST_NAME}: it is "
            f"incomplete (its run did not finish); {_REPACK_HINT}"
        )
    if own == MANIFEST_FORMAT:
        raise TokenStoreError(
            f"The shard set {source!r} keeps no token store ({TOKENS_DIR_NAME}/); run `lmshards "
            "preprocess --keep_tokens` once, then repack from its output."
        )
    raise TokenStoreError(
        f"--tokens {source!r} is neither a token store nor a shard set holding one (no lmshards "
        f"{MANIFEST_NAME}); pass the output of `lmshards preprocess --keep_tokens` or its {TOKENS_DIR_NAME}/."
    )


def read_store_manifest(store: str) -> TokenStoreManifest:
    """Reads `{store}/manifest.json`. Raises TokenStoreError naming the file when missing or bad."""
    path = fs.join(store, MANIFEST_NAME)
    if not fs.exists(path):
        raise TokenStoreError(
            f"No {MANIFEST_NAME} in token store {store!r}: it is incomplete; {_REPACK_HINT}"
        )
    try:
        data = bounded.read_json(path, what="manifest", max_bytes=bounded.MAX_MANIFEST_BYTES)
    except bounded.ReadLimitError as e:
        raise TokenStoreError(f"{e} {_REPACK_HINT}") from e
    except (ValueError, UnicodeDecodeError) as e:
        raise TokenStoreError(f"{path!r} is not valid JSON ({e}); {_REPACK_HINT}") from e
    if not isinstance(data, dict):
        raise TokenStoreError(f"{path!r} is not a token store manifest; {_REPACK_HINT}")
    return store_manifest_from_dict(data, path)


def check_store_files(store: str, manifest: TokenStoreManifest) -> None:
    """Every listed part is there with its listed size. Raises TokenStoreError naming the first that is not."""
    filesystem, root = fs.filesystem(store)
    filesystem.invalidate_cache(root)
    for info in manifest.files:
        path = fs.join(store, info.path)
        if not fs.exists(path):
            raise TokenStoreError(f"Token store file {path!r} is missing; {_REPACK_HINT}")
        size = bounded.check_regular_file(path, "token store file")
        if size != info.bytes:
            raise TokenStoreError(
                f"Token store file {path!r} holds {size} bytes, its manifest says {info.bytes}: "
                f"it is damaged or truncated; {_REPACK_HINT}"
            )


def describe_store(manifest: TokenStoreManifest, store: str) -> str:
    """A few readable lines for `lmshards inspect STORE`."""
    tok = manifest.tokenizer
    per_token = manifest.data_bytes / manifest.tokens if manifest.tokens else 0.0
    return "\n".join(
        [
            f"{store}: {manifest.format} v{manifest.format_version}, lmshards {manifest.tool_version}, "
            f"created {manifest.created_at or '?'}",
            f"  {manifest.documents:,} documents, {manifest.tokens:,} tokens ({manifest.id_dtype}) in "
            f"{len(manifest.files)} files, {manifest.data_bytes:,} bytes ({per_token:.2f} bytes per token)",
            f"  tokenizer {tok.fingerprint} vocab {tok.vocab_size:,}",
            f"  inputs: {len(manifest.inputs)} files, {manifest.input_bytes:,} bytes",
            f"  made with: {', '.join(f'{k}={v}' for k, v in sorted(manifest.options.items()))}",
        ]
    )


# ---------------------------------------------------------------- logic: part files


def encode_part(chunk: TokenizedChunk, id_dtype: str) -> bytes:
    """The chunk's documents as one Parquet file's bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    offsets = np.concatenate([[0], np.cumsum(chunk.lengths, dtype=np.int64)]).astype(np.int32)
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(chunk.tokens.astype(id_dtype)))
    table = pa.table({DOC_HASH_COLUMN: pa.array(chunk.hashes, type=pa.uint64()), IDS_COLUMN: ids})
    sink = io.BytesIO()
    pq.write_table(
        table,
        sink,
        compression=PARQUET_COMPRESSION,
        row_group_size=max(1, chunk.num_documents * ROW_GROUP_TOKENS // max(chunk.num_tokens, 1)),
        use_dictionary=False,  # hashes are random and ids dense: dictionaries only cost time here
        # Ids byte by byte: as small under zstd as plain, and faster to write and read.
        use_byte_stream_split=[f"{IDS_COLUMN}.list.element"],
    )
    return sink.getvalue()


def decode_pieces(data: bytes, info: TokenFileInfo, path: str) -> Iterator[TokenizedChunk]:
    """A part file's bytes -> its documents, one TokenizedChunk per row group, checked against its
    TokenFileInfo (the counts once every row group is read).

    Raises:
      TokenStoreError: naming `path`, when the bytes are not the listed ones or not a valid part.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    damaged = f"Token store file {path!r} is damaged"
    if hashlib.sha256(data).hexdigest() != info.sha256:
        raise TokenStoreError(f"{damaged}: its sha256 is not its manifest's; {_REPACK_HINT}")
    documents = tokens = 0
    try:
        part = pq.ParquetFile(pa.BufferReader(data))
        for group in range(part.num_row_groups):
            table = part.read_row_group(group, columns=[DOC_HASH_COLUMN, IDS_COLUMN])
            ids = table.column(IDS_COLUMN).combine_chunks()
            offsets = ids.offsets.to_numpy()
            chunk = TokenizedChunk(
                hashes=table.column(DOC_HASH_COLUMN).to_numpy().astype(np.uint64),
                lengths=np.diff(offsets).astype(np.int32),
                # Kept at the store's width: the shuffle before packing then holds half the bytes
                # of int32 ids (packing widens each group's ids to int32, so the records are the same).
                tokens=ids.values.to_numpy()[offsets[0] : offsets[-1]],
            )
            documents, tokens = documents + chunk.num_documents, tokens + chunk.num_tokens
            yield chunk
    except (pa.ArrowException, KeyError, ValueError) as e:
        raise TokenStoreError(f"{damaged} ({e}); {_REPACK_HINT}") from e
    if documents != info.documents or tokens != info.tokens:
        raise TokenStoreError(
            f"{damaged}: it holds {documents} documents and {tokens} tokens, its manifest says "
            f"{info.documents} and {info.tokens}; {_REPACK_HINT}"
        )


def decode_part(data: bytes, info: TokenFileInfo, path: str) -> TokenizedChunk:
    """decode_pieces as one TokenizedChunk."""
    return TokenizedChunk.concat(list(decode_pieces(data, info, path)))


def write_part(store: str, chunk: TokenizedChunk, id_dtype: str) -> TokenFileInfo:
    """Writes the chunk as a new part file (locally temp name then rename); returns its info."""
    data = encode_part(chunk, id_dtype)
    name = new_token_part_name()
    final = fs.join(store, name)
    if fs.is_remote(final):
        with fs.open_file(final, "wb") as f:  # an object appears only once its upload is final
            f.write(data)
    else:
        temp_dir = fs.join(store, TEMP_DIR_NAME)
        fs.makedirs(temp_dir)
        temp = fs.join(temp_dir, name)
        with open(temp, "wb") as f:
            f.write(data)
        os.replace(temp, final)
    return TokenFileInfo(
        path=name,
        documents=chunk.num_documents,
        tokens=chunk.num_tokens,
        bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )


def pieces(chunk: TokenizedChunk, max_tokens: int) -> list[TokenizedChunk]:
    """The chunk cut between documents into views of at most max_tokens tokens each (a longer document
    alone in its piece), in order."""
    if chunk.num_tokens <= max_tokens:
        return [chunk]
    ends = np.cumsum(chunk.lengths, dtype=np.int64)
    bounds = [0]
    while bounds[-1] < chunk.num_documents:
        start = bounds[-1]
        taken = int(ends[start - 1]) if start else 0
        end = int(np.searchsorted(ends, taken + max_tokens, side="right"))
        bounds.append(max(end, start + 1))
    return chunk.split(bounds)


def read_pieces(store: str, info: TokenFileInfo) -> Iterator[TokenizedChunk]:
    """The documents of one part file, read and checked, a row group at a time."""
    path = fs.join(store, info.path)
    try:
        bounded.check_regular_file(path, "token store file")
        data = fs.read_bytes(path)
    except FileNotFoundError as e:
        raise TokenStoreError(f"Token store file {path!r} is missing; {_REPACK_HINT}") from e
    yield from decode_pieces(data, info, path)


def read_part(store: str, info: TokenFileInfo) -> TokenizedChunk:
    return TokenizedChunk.concat(list(read_pieces(store, info)))


def iter_store(store: str, manifest: TokenStoreManifest) -> Iterator[TokenizedChunk]:
    """Every part of the store, read and checked a row group at a time, in manifest order."""
    for info in manifest.files:
        yield from read_pieces(store, info)


def finish_store(store: str, manifest: TokenStoreManifest) -> str:
    """Removes the writers' temporary directory and any part not listed (a retried writer's), then
    writes the store's manifest. Returns its path."""
    temp = fs.join(store, TEMP_DIR_NAME)
    filesystem, _ = fs.filesystem(store)
    if fs.exists(temp):
        filesystem.rm(fs.filesystem(temp)[1], recursive=True)
    listed = {f.path for f in manifest.files}
    for path in fs.listdir(store):
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if is_token_part_name(name) and name not in listed:
            filesystem.rm(fs.filesystem(path)[1])
    path = fs.join(store, MANIFEST_NAME)
    fs.write_text_atomic(path, manifest.to_json())
    return path


def write_store_manifest(
    store: str,
    header: TokenStoreManifest,
    *,
    files: Iterable[TokenFileInfo],
    reading: ReadStats,
) -> str | None:
    """Completes the store's manifest with its part files and the readers' counts and writes it (see
    finish_store); returns its path, or None (nothing written) when no document was read: the run then
    fails on the shard set's own check."""
    from lmshards.preprocess.stages.manifest import utc_timestamp

    files = sorted(files, key=lambda f: f.path)
    manifest = dataclasses.replace(
        header,
        files=tuple(files),
        documents=sum(f.documents for f in files),
        tokens=sum(f.tokens for f in files),
        reading=sum_stats([ReadStats(**header.reading), reading]).recorded(),
        created_at=utc_timestamp(),
    )
    return finish_store(store, manifest) if manifest.documents else None


def count_parts(files: Sequence[TokenFileInfo]) -> None:
    """Counts part files written (TOKEN_PARTS_WRITTEN), from the thread Beam runs the step in (a
    counter incremented on another thread is lost)."""
    counter(TOKEN_PARTS_WRITTEN).inc(len(files))


class TokenPartWriter:
    """Buffers documents and writes them as part files of about flush_tokens tokens: the store
    writer of both preprocess paths (_WritePartsFn, and lmshards.preprocess.in_process, whose
    writer runs on its routing thread; each counts the parts with count_parts)."""

    def __init__(self, store: str, id_dtype: str, flush_tokens: int = PART_FLUSH_TOKENS):
        self._store, self._id_dtype, self._flush_tokens = store, id_dtype, flush_tokens
        self._buffer: list[TokenizedChunk] = []
        self._buffered = 0

    def add(self, chunk: TokenizedChunk) -> list[TokenFileInfo]:
        """Buffers `chunk`; returns the part written when the buffer reached flush_tokens, else []."""
        self._buffer.append(chunk)
        self._buffered += chunk.num_tokens
        return self.flush() if self._buffered >= self._flush_tokens else []

    def flush(self) -> list[TokenFileInfo]:
        """Writes what is buffered as one part (none when nothing is); returns its info."""
        if not self._buffer:
            return []
        chunk = TokenizedChunk.concat(self._buffer)
        self._buffer, self._buffered = [], 0
        return [write_part(self._store, chunk, self._id_dtype)]
