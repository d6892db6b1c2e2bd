"""Curation on the default runner: the staged stage's decisions, from small keys spilled to local disk.

The staged stage (stage.py) holds every document, signature and bucket in Beam's memory on the
default runner. Here the same decisions come from two reads of the corpus and files under the run's
spill directory, so memory stays flat in the corpus size:

  pass 1 (decide): the documents are read and numbered as the staged reader numbers them; per block
      of documents, in numpy: the eval n-gram hits (decontaminate), then each remaining document's
      key (NODE_DTYPE: its NodeKey fields and bytes) to a partition file by its digest (exact), or,
      for near, to a node table with its LSH band keys to partition files by key. Each partition is
      then grouped on its own: equal digests are exact clusters; equal band keys give edges, and a
      union-find over the nodes that have an edge gives the near clusters (memory in proportion to
      the duplicates, not the corpus). Every cluster keeps its smallest node in NodeKey order, as
      dedup.py's Beam steps do.
  pass 2 (keep): the corpus is read again and its kept documents handed on in read order; the
      signatures of the near-removed documents and of their kept ones are computed again as they
      come (a signature is 8 bytes a permutation: storing every one would spill ~18x a corpus of
      short lines), the removed documents' URLs (WARC, JSON Lines --url_field) are noted, and
      finish() writes the audit with their similarities and URLs.

The tokenizer's packing orders each group's documents by hash (stages/pack.py), so the shard bytes
do not depend on the order the kept documents come in: they are the staged path's, as are the audit
files and the manifest's curation section (tests check both against the staged pipeline).

Band keys here are a 64-bit numpy hash of the band's values rather than dedup.py's BLAKE2b: both
only tell equal bands apart, each with a chance of about 2^-63 of two different bands colliding.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import zlib
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from lmshards.plumbing.progress import PROGRESS_EVERY_S
from lmshards.preprocess.curation.audit import (
    AUDIT_BLOCK,
    AuditKey,
    CurationCounts,
    audit_key,
    curation_info,
    write_audit_file,
)
from lmshards.preprocess.curation.judging import StepFunnel, build_document_steps, judge_documents
from lmshards.preprocess.curation.minhash import SHINGLE_BLOCK, SIMILARITY_DIGITS, hash_family
from lmshards.preprocess.curation.records import (
    CONTAMINATED,
    EXACT,
    NEAR,
    REASONS,
    CurationDoc,
    Removal,
    utf8_bytes,
)
from lmshards.preprocess.curation.stage import CurationSettings
from lmshards.preprocess.curation.steps.dedup import DEDUP_EXACT, DEDUP_NEAR, DEDUP_NONE
from lmshards.preprocess.curation.text import (
    digest,
    exact_form,
    mix64,
    ngram_finish,
    ngram_step,
    words,
)
from lmshards.preprocess.sources import ReadOptions, ReadStats, RecordNumbers
from lmshards.preprocess.sources.formats import format_for
from lmshards.preprocess.stages.read import (
    ReadProgress,
    SizedRange,
    known_urls,
    plan_sized_ranges,
    read_sized_range,
)
from lmshards.schemas.manifest import CurationInfo

_LOG = logging.getLogger(__name__)

# Input bytes per spill partition: a partition of 50-byte line documents then holds ~9 MB of band
# keys (14 bands x 16 bytes a document), sorted in a few times that.
PARTITION_INPUT_BYTES = 2 << 20
MAX_PARTITIONS = 4096  # files appended to at each flush
SPILL_BUFFER_BYTES = (
    32 << 20
)  # keys buffered in memory before they are appended to their partitions
# A block of documents is hashed at once in numpy: enough documents that numpy's per-call cost is
# small, few enough characters that its words and shingles stay a few tens of MB.
BLOCK_DOCS = 8192
BLOCK_CHARS = 4 << 20
TABLE_CHUNK_BYTES = 16 << 20  # rows of the node table read at a time
NODE_TABLE = "nodes"  # near dedup's NODE_DTYPE rows, numbered by node
SIGNED_FILE = "signed"  # pass 2's signatures of the near-removed documents
# An eval record (file, record) packed in one int64 whose order is the DocRef order: the eval file's
# rank among the sorted eval paths above the record's number (records of a file stay below 2^40).
REF_SHIFT = 40
_NO_REF = np.iinfo(np.int64).max
_MAX64 = np.uint64(np.iinfo(np.uint64).max)
# A document's key: its NodeKey fields (the digest as two big-endian halves, so that integer order
# is byte order; the source as its rank among the sorted input paths, so that rank order is path
# order) and its UTF-8 bytes, what its Removal reports.
NODE_DTYPE = np.dtype(
    [
        ("digest_hi", "<u8"),
        ("digest_lo", "<u8"),
        ("neg_length", "<i8"),
        ("source", "<i4"),
        ("index", "<i8"),
        ("record", "<i8"),
        ("bytes", "<i8"),
    ]
)
BAND_DTYPE = np.dtype([("key", "<u8"), ("node", "<i8")])  # a band key and the node holding it
# One removal: the removed document (source rank, index, record), why (REASONS' index), its bytes,
# the kept document's or eval record's ref (-1: none) and, near, the count of equal signature values.
REMOVAL_DTYPE = np.dtype(
    [
        ("source", "<i4"),
        ("index", "<i8"),
        ("record", "<i8"),
        ("reason", "<i1"),
        ("bytes", "<i8"),
        ("kept_source", "<i4"),
        ("kept_record", "<i8"),
        ("eval", "<i8"),
        ("equal", "<i4"),
    ]
)


# ---------------------------------------------------------------- logic: reading and numbering


@dataclasses.dataclass(frozen=True)
class NumberedTexts:
    """Documents of one file with each one's index among the file's documents and its raw record in
    the file (lmshards.preprocess.stages.read's numbering), and their records' URLs where the format has
    them (None: none known)."""

    source: str
    indices: np.ndarray  # int64
    texts: list[str]
    records: list[int]
    urls: list[str | None] | None = None


class FileNumbering:
    """Numbers documents as the staged reader does (NumberedBatch and range_offsets): each document's
    index among its file's documents and its raw record in the file, the ranges of a file taken in
    their order (as plan_sized_ranges lists them)."""

    def __init__(self, options: ReadOptions):
        self._options = options
        self._documents: dict[str, int] = {}  # per file: documents of its finished ranges
        self._records: dict[str, int] = {}  # ... and their raw records
        self._next_range: dict[str, int] = {}
        self._path: str | None = None
        self._numbers: RecordNumbers | None = None
        self._count = 0  # documents of the current range so far

    def start(self, sized: SizedRange) -> RecordNumbers | None:
        """Begins range `sized`; what to hand its reader as `numbers` (None: its records are its
        documents)."""
        self._end_range()
        path = sized.range.path
        if sized.number != self._next_range.get(path, 0):
            raise ValueError(f"range {sized.number} of {path!r} comes out of its file's order")
        self._next_range[path] = sized.number + 1
        raw = format_for(path, self._options).raw_records
        self._path, self._numbers, self._count = path, RecordNumbers() if raw else None, 0
        return self._numbers

    def number(self, texts: list[str]) -> NumberedTexts:
        """The next batch of the current range, numbered."""
        assert self._path is not None, "start() a range first"
        path, count = self._path, self._count
        local, urls = (
            self._numbers.take_with_urls(len(texts))
            if self._numbers is not None
            else (range(count, count + len(texts)), [])
        )
        first = self._documents.get(path, 0) + count
        self._count += len(texts)
        return NumberedTexts(
            path,
            np.arange(first, first + len(texts), dtype=np.int64),
            texts,
            [self._records.get(path, 0) + r for r in local],
            known_urls(urls),
        )

    def _end_range(self) -> None:
        if self._path is None:
            return
        path = self._path
        records = self._numbers.records if self._numbers is not None else self._count
        self._documents[path] = self._documents.get(path, 0) + self._count
        self._records[path] = self._records.get(path, 0) + records


def curation_docs(batch: NumberedTexts) -> list[CurationDoc]:
    """The batch's documents as CurationDocs (what the document steps judge)."""
    urls = batch.urls if batch.urls is not None else [None] * len(batch.texts)
    return [
        CurationDoc(batch.source, index, text, record, url)
        for index, text, record, url in zip(
            batch.indices.tolist(), batch.texts, batch.records, urls, strict=True
        )
    ]


def numbered_texts(
    ranges: Sequence[SizedRange],
    options: ReadOptions,
    *,
    batch_size: int,
    stats: ReadStats,
    progress: ReadProgress,
) -> Iterator[NumberedTexts]:
    """The documents of `ranges`, read in order and numbered (FileNumbering)."""
    numbering = FileNumbering(options)
    for sized in ranges:
        numbers = numbering.start(sized)
        for batch in read_sized_range(
            sized, options, batch_size=batch_size, stats=stats, progress=progress, numbers=numbers
        ):
            yield numbering.number(batch)


@dataclasses.dataclass
class Block:
    """Numbered documents hashed together: texts and, per text, its source rank, index and record."""

    texts: list[str]
    source: np.ndarray  # int32
    index: np.ndarray  # int64
    record: np.ndarray  # int64


class BlockMerger:
    """Regroups numbered batches into blocks of about max_docs documents or max_chars characters."""

    def __init__(
        self,
        source_ranks: dict[str, int],
        *,
        max_docs: int = BLOCK_DOCS,
        max_chars: int = BLOCK_CHARS,
    ):
        self._ranks = source_ranks
        self._max_docs, self._max_chars = max_docs, max_chars
        self._batches: list[NumberedTexts] = []
        self._docs = self._chars = 0

    def add(self, batch: NumberedTexts) -> Block | None:
        """The block that batch completes, None while fewer are held."""
        self._batches.append(batch)
        self._docs += len(batch.texts)
        self._chars += sum(map(len, batch.texts))
        full = self._docs >= self._max_docs or self._chars >= self._max_chars
        return self.rest() if full else None

    def rest(self) -> Block | None:
        """What is held (None: nothing), and holds nothing after it."""
        batches, self._batches, self._docs, self._chars = self._batches, [], 0, 0
        if not batches:
            return None
        return Block(
            texts=[t for b in batches for t in b.texts],
            source=np.concatenate(
                [np.full(len(b.texts), self._ranks[b.source], dtype=np.int32) for b in batches]
            ),
            index=np.concatenate([b.indices for b in batches]),
            record=np.array([r for b in batches for r in b.records], dtype=np.int64),
        )


# ---------------------------------------------------------------- logic: hashing a block


def word_hashes_of(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 CRC-32 of every word of every text, concatenated; int64 words per text): text.words
    and text.word_hashes for a whole block at once."""
    per_text = [words(t) for t in texts]
    counts = np.fromiter(map(len, per_text), dtype=np.int64, count=len(per_text))
    hashes = np.fromiter(
        (zlib.crc32(w.encode("utf-8", "surrogatepass")) for ws in per_text for w in ws),
        dtype=np.uint64,
        count=int(counts.sum()),
    )
    return hashes, counts


def window_hashes(
    hashes: np.ndarray, counts: np.ndarray, n: int, *, short: bool, bits: int
) -> tuple[np.ndarray, np.ndarray]:
    """(n-gram hashes, the text each belongs to) of concatenated word hashes: text.ngram_hashes of
    each text's words, for all texts at once. short: a text of 1 to n-1 words gets one hash of all
    its words (as text.shingles does); otherwise it gets none."""
    width = np.minimum(counts, n) if short else np.full_like(counts, n)
    windows = np.where((counts >= width) & (width > 0), counts - width + 1, 0)
    owner = np.repeat(np.arange(len(counts)), windows)
    text_start = np.cumsum(counts) - counts
    window_start = np.cumsum(windows) - windows
    start = text_start[owner] + np.arange(len(owner)) - window_start[owner]
    if not len(owner):
        return np.empty(0, dtype=np.uint64), owner
    width = width[owner]
    last = len(hashes) - 1
    # text.ngram_hashes' polynomial, word by word, each window stopped at its own width.
    acc = np.zeros(len(owner), dtype=np.uint64)
    for j in range(n):
        acc = np.where(j < width, ngram_step(acc, hashes[np.minimum(start + j, last)]), acc)
    return ngram_finish(acc, bits=bits), owner


def minhash_signatures(
    values: np.ndarray, owner: np.ndarray, num_texts: int, offsets: np.ndarray
) -> np.ndarray:
    """uint64 [num_texts, permutations]: minhash.signature of each text's shingles, for all texts at
    once (owner: each shingle's text, ascending; every text has one at least)."""
    result = np.full((num_texts, len(offsets)), _MAX64, dtype=np.uint64)
    for start in range(0, len(values), SHINGLE_BLOCK):
        own = owner[start : start + SHINGLE_BLOCK]
        with np.errstate(over="ignore"):  # modulo 2^64 on purpose
            hashed = mix64(values[start : start + SHINGLE_BLOCK, None] + offsets)
        firsts = np.flatnonzero(np.r_[True, own[1:] != own[:-1]])
        rows = own[firsts]  # each text once: a text's shingles are consecutive
        result[rows] = np.minimum(result[rows], np.minimum.reduceat(hashed, firsts, axis=0))
    return result


def band_hashes(signatures: np.ndarray, *, bands: int, rows: int) -> np.ndarray:
    """uint64 [texts, bands]: one key per band, equal exactly when the band's values are (but for a
    chance of about 2^-64), and different between bands."""
    values = signatures.reshape(len(signatures), bands, rows)
    acc = np.broadcast_to(np.arange(1, bands + 1, dtype=np.uint64), values.shape[:2])
    with np.errstate(over="ignore"):
        for row in range(rows):
            acc = mix64(acc ^ values[:, :, row])
    return acc


def plain_rows(block: Block, take: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """NODE_DTYPE [len(take)] of block texts `take` with their identity and bytes, no digest yet."""
    rows = np.zeros(len(take), dtype=NODE_DTYPE)
    rows["source"], rows["index"], rows["record"] = (
        block.source[take],
        block.index[take],
        block.record[take],
    )
    rows["bytes"] = nbytes[take]
    return rows


def node_keys(block: Block, take: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """NODE_DTYPE [len(take)]: the keys (records.node_key) and bytes of block texts `take`."""
    forms = [exact_form(block.texts[i]) for i in take.tolist()]
    halves = np.frombuffer(b"".join(map(digest, forms)), dtype=">u8").reshape(-1, 2)
    rows = plain_rows(block, take, nbytes)
    rows["digest_hi"], rows["digest_lo"] = halves[:, 0], halves[:, 1]
    rows["neg_length"] = [-len(form) for form in forms]
    return rows


def utf8_sizes(texts: Sequence[str]) -> np.ndarray:
    """int64: records.utf8_bytes of each text."""
    return np.fromiter(map(utf8_bytes, texts), dtype=np.int64, count=len(texts))


def digest_shingles(digest_hi: np.ndarray) -> np.ndarray:
    """uint64: text.shingles' one shingle of a text without words, its digest's first 4 bytes read
    little-endian (digest_hi: the digest's first 8 bytes as a big-endian number)."""
    first = digest_hi.astype(">u8").view(np.uint8).reshape(-1, 8)[:, :4]
    return np.ascontiguousarray(first).view("<u4").ravel().astype(np.uint64)


def text_shingles(
    hashes: np.ndarray, counts: np.ndarray, digest_hi: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """(shingles, the text each belongs to, ascending): text.shingles of each text (duplicates kept:
    a minimum does not see them), from its concatenated word hashes and its digest's first half."""
    values, owner = window_hashes(hashes, counts, n, short=True, bits=32)
    empty = np.flatnonzero(counts == 0)
    if not len(empty):
        return values, owner
    values = np.concatenate([values, digest_shingles(digest_hi[empty])])
    owner = np.concatenate([owner, empty])
    order = np.argsort(owner, kind="stable")
    return values[order], owner[order]


def select_words(
    hashes: np.ndarray, counts: np.ndarray, take: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The word hashes and counts of texts `take` (ascending) of a block's concatenated ones."""
    owner = np.repeat(np.arange(len(counts)), counts)
    chosen = np.zeros(len(counts), dtype=bool)
    chosen[take] = True
    return hashes[chosen[owner]], counts[take]


def packed_refs(ranks: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """int64: (rank, number) pairs packed so that their integer order is the pairs' order."""
    return (ranks.astype(np.int64) << REF_SHIFT) | numbers.astype(np.int64)


def unpacked_ref(packed: int) -> tuple[int, int]:
    return packed >> REF_SHIFT, packed & ((1 << REF_SHIFT) - 1)


# ---------------------------------------------------------------- logic: decontamination


@dataclasses.dataclass(frozen=True)
class EvalIndex:
    """The eval sets' n-grams: hashes (uint64, sorted, distinct) and for each the smallest eval record
    holding it (packed_refs of (rank in paths, record)); paths sorted; documents per eval file."""

    hashes: np.ndarray
    refs: np.ndarray
    paths: tuple[str, ...]
    documents: dict[str, int]


def eval_index(batches: Iterable[NumberedTexts], paths: Sequence[str], ngram: int) -> EvalIndex:
    """The EvalIndex of the eval sets' numbered documents (decontaminate.EvalIndex's dict, as arrays)."""
    ranks = {path: rank for rank, path in enumerate(sorted(paths))}
    all_hashes, all_refs = [], []
    documents: dict[str, int] = {}
    for batch in batches:
        documents[batch.source] = documents.get(batch.source, 0) + len(batch.texts)
        hashes, counts = word_hashes_of(batch.texts)
        values, owner = window_hashes(hashes, counts, ngram, short=False, bits=64)
        refs = packed_refs(np.full(len(batch.texts), ranks[batch.source]), np.array(batch.records))
        all_hashes.append(values)
        all_refs.append(refs[owner])
    hashes = np.concatenate(all_hashes) if all_hashes else np.empty(0, np.uint64)
    refs = np.concatenate(all_refs) if all_refs else np.empty(0, np.int64)
    order = np.lexsort((refs, hashes))
    hashes, refs = hashes[order], refs[order]
    first = np.r_[True, hashes[1:] != hashes[:-1]] if len(hashes) else np.empty(0, bool)
    return EvalIndex(hashes[first], refs[first], tuple(sorted(paths)), documents)


def contamination(
    values: np.ndarray, owner: np.ndarray, num_texts: int, index: EvalIndex
) -> np.ndarray:
    """int64 [num_texts]: the smallest eval ref sharing one of its n-grams with each text (_NO_REF:
    none), decontaminate.contamination for a block at once."""
    found = np.full(num_texts, _NO_REF, dtype=np.int64)
    if not len(index.hashes) or not len(values):
        return found
    at = np.minimum(np.searchsorted(index.hashes, values), len(index.hashes) - 1)
    hit = index.hashes[at] == values
    np.minimum.at(found, owner[hit], index.refs[at[hit]])
    return found


# ---------------------------------------------------------------- logic: clusters


def removal_rows(
    removed: np.ndarray,
    reason: np.ndarray | int,
    *,
    kept: np.ndarray | None = None,
    eval_refs: np.ndarray | None = None,
) -> np.ndarray:
    """REMOVAL_DTYPE rows of removed nodes (NODE_DTYPE), with their kept nodes or eval refs."""
    rows = np.empty(len(removed), dtype=REMOVAL_DTYPE)
    for field in ("source", "index", "record", "bytes"):
        rows[field] = removed[field]
    rows["reason"] = reason
    rows["kept_source"] = kept["source"] if kept is not None else -1
    rows["kept_record"] = kept["record"] if kept is not None else -1
    rows["eval"] = eval_refs if eval_refs is not None else -1
    rows["equal"] = -1
    return rows


def exact_clusters(nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(removed, kept) NODE_DTYPE rows: of each set of equal digests, every node but the smallest
    (dedup.exact_verdicts), each with that smallest."""
    nodes = nodes[
        np.lexsort(
            (
                nodes["record"],
                nodes["index"],
                nodes["source"],
                nodes["digest_lo"],
                nodes["digest_hi"],
            )
        )
    ]  # equal digests have equal lengths: by digest, then (source, index, record)
    same = (nodes["digest_hi"][1:] == nodes["digest_hi"][:-1]) & (
        nodes["digest_lo"][1:] == nodes["digest_lo"][:-1]
    )
    return _followers(nodes, same)


def _followers(ordered: np.ndarray, same: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(every row but the first of its run, the first of its run); same[i]: rows i and i + 1 share one."""
    starts = np.flatnonzero(np.r_[True, ~same])
    run = np.cumsum(np.r_[True, ~same]) - 1
    followers = np.flatnonzero(np.r_[False, same])
    return ordered[followers], ordered[starts[run[followers]]]


def bucket_edges(bands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(u, v) node arrays: each node of a band bucket joined to the bucket's first (BAND_DTYPE rows in).

    Any edges joining a bucket's nodes give the components dedup.bucket_edges' stars give."""
    bands = bands[np.lexsort((bands["node"], bands["key"]))]
    followers, first = _followers(bands, bands["key"][1:] == bands["key"][:-1])
    return first["node"], followers["node"]


def components(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, labels): every node of an edge (sorted) and its component's label (one of its nodes).

    Union-find in numpy: each round hooks the root of each edge's larger root to the smaller one,
    then points every node straight at its root, until both ends of every edge share one."""
    nodes = np.unique(np.concatenate([u, v]))
    a, b = np.searchsorted(nodes, u), np.searchsorted(nodes, v)
    parent = np.arange(len(nodes))
    while True:
        pa, pb = parent[a], parent[b]
        if np.array_equal(pa, pb):
            return nodes, nodes[parent]
        low = np.minimum(pa, pb)
        np.minimum.at(parent, pa, low)
        np.minimum.at(parent, pb, low)
        while not np.array_equal(grand := parent[parent], parent):
            parent = grand


def near_clusters(nodes: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(removed, kept) positions in nodes: of each component (label), every node but the smallest in
    NodeKey order (the kept one), each with the kept one."""
    order = np.lexsort(
        (
            nodes["record"],
            nodes["index"],
            nodes["source"],
            nodes["digest_lo"],
            nodes["digest_hi"],
            nodes["neg_length"],
            labels,
        )
    )
    return _followers(order, labels[order][1:] == labels[order][:-1])


def read_table_rows(path: str, dtype: np.dtype, wanted: np.ndarray) -> np.ndarray:
    """The rows numbered `wanted` (sorted, distinct) of a file of fixed-size rows, read in chunks."""
    chunk = max(TABLE_CHUNK_BYTES // dtype.itemsize, 1)
    parts = []
    with open(path, "rb") as f:
        for start in range(0, int(wanted[-1]) + 1 if len(wanted) else 0, chunk):
            lo, hi = np.searchsorted(wanted, [start, start + chunk])
            if lo == hi:
                continue
            f.seek(start * dtype.itemsize)
            rows = np.fromfile(f, dtype=dtype, count=chunk)
            parts.append(rows[wanted[lo:hi] - start])
    return np.concatenate(parts) if parts else np.empty(0, dtype)


def member_of(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """bool [len(values)]: whether each value is in sorted_set (sorted int64)."""
    if not len(sorted_set):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[at] == values


def similarity(equal: int, permutations: int) -> float:
    """minhash.estimated_similarity from the count of equal values."""
    return round(float(equal) / permutations, SIMILARITY_DIGITS)


# ---------------------------------------------------------------- logic: spill files


class SpillPartitions:
    """Rows of one dtype appended to `partitions` files by a partition number each, buffered up to
    SPILL_BUFFER_BYTES; read back one partition at a time."""

    def __init__(self, directory: str, name: str, partitions: int, dtype: np.dtype):
        self._paths = [os.path.join(directory, f"{name}-{p:05d}") for p in range(partitions)]
        self._dtype = dtype
        self._parts: list[np.ndarray] = []
        self._rows: list[np.ndarray] = []
        self._bytes = 0

    @property
    def partitions(self) -> int:
        return len(self._paths)

    def add(self, parts: np.ndarray, rows: np.ndarray) -> None:
        self._parts.append(parts)
        self._rows.append(rows)
        self._bytes += rows.nbytes
        if self._bytes >= SPILL_BUFFER_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self._rows:
            return
        parts, rows = np.concatenate(self._parts), np.concatenate(self._rows)
        self._parts, self._rows, self._bytes = [], [], 0
        order = np.argsort(parts, kind="stable")
        numbers, firsts = np.unique(parts[order], return_index=True)
        for number, piece in zip(numbers.tolist(), np.split(rows[order], firsts[1:])):
            with open(self._paths[number], "ab") as f:
                f.write(piece.tobytes())

    def read(self, partition: int) -> np.ndarray:
        """Partition `partition`'s rows (after flush), its file removed."""
        path = self._paths[partition]
        if not os.path.exists(path):
            return np.empty(0, self._dtype)
        rows = np.fromfile(path, dtype=self._dtype)
        os.remove(path)
        return rows


def partitions_for(total_bytes: int) -> int:
    """Spill partitions for an input of total_bytes: one per PARTITION_INPUT_BYTES, within [1, MAX]."""
    return min(max(-(-total_bytes // PARTITION_INPUT_BYTES), 1), MAX_PARTITIONS)


# ---------------------------------------------------------------- the two passes


class LocalCuration:
    """The curation stage on the default runner. Pass 1: the caller reads every range, start_range()
    then add() for each batch, then decide(). Pass 2: read_range() reads each range again in the same
    order, its batches filtered by keep(); finish() writes the audit and returns the manifest's
    curation section. Its files live under `directory` (the caller's spill directory, which the
    caller removes)."""

    def __init__(
        self,
        settings: CurationSettings,
        *,
        output: str,
        directory: str,
        sources: Sequence[str],
        total_bytes: int,
        options: ReadOptions,
        batch_size: int,
    ):
        self._settings = settings
        self._output = output
        self._directory = os.path.join(directory, "curation")
        os.makedirs(self._directory, exist_ok=True)
        self._paths = tuple(sorted(set(sources)))
        self._ranks = {path: rank for rank, path in enumerate(self._paths)}
        self._partitions = partitions_for(total_bytes)
        self._counts = CurationCounts()
        self._removals: list[np.ndarray] = []  # REMOVAL_DTYPE
        self._index: EvalIndex | None = None
        self._removed = np.empty(0, np.int64)  # packed (source, index) of every removal, sorted
        # The URLs of the documents the corpus steps remove, by packed (source, index): pass 2 reads
        # them, finish() writes them into the audit (as many as the removals, like the removal rows).
        self._urls: dict[int, str] = {}
        # Near removals whose similarity pass 2 measures: their rows, and the nodes of both ends.
        self._near = np.empty(0, REMOVAL_DTYPE)
        self._pairs = (np.empty(0, np.int64), np.empty(0, np.int64))  # (removed node, kept node)
        self._wanted = np.empty(0, np.int64)  # packed (source, index) of those nodes, sorted
        self._wanted_nodes = np.empty(0, np.int64)  # their node numbers, in that order
        self._wanted_digest = np.empty(0, np.uint64)  # their digests' first halves
        # Pass 2's signatures: the kept ends' in memory (one a cluster), the removed ends' to a file.
        self._root_signatures: list[tuple[np.ndarray, np.ndarray]] = []  # (nodes, signatures)
        self._signed = os.path.join(self._directory, SIGNED_FILE)
        minhash = settings.minhash
        self._offsets = hash_family(minhash.permutations) if settings.dedup == DEDUP_NEAR else None
        self._roots = np.empty(0, np.int64)  # the kept ends of near removals, sorted
        self._signed_dtype = np.dtype(
            [("node", "<i8"), ("signature", "<u8", (minhash.permutations,))]
        )
        self._next_node = 0
        self._steps = build_document_steps(settings.document_steps)  # language, quality, PII
        # Pass 2 knows from pass 1 which documents the steps keep: only those changing text run again.
        self._text_steps = [step for step in self._steps if step.changes_text]
        self._funnel = StepFunnel()
        self._judged: list[Removal] = []  # the document steps' removals
        self._step_removed: list[np.ndarray] = []  # packed (source, index) of those documents
        self._numbering = FileNumbering(options)
        self._renumbering = FileNumbering(options)  # pass 2's
        self._merger = BlockMerger(self._ranks)
        self._exact = SpillPartitions(self._directory, "exact", self._partitions, NODE_DTYPE)
        self._bands = SpillPartitions(self._directory, "bands", self._partitions, BAND_DTYPE)
        self._table = open(os.path.join(self._directory, NODE_TABLE), "wb")  # noqa: SIM115
        if settings.eval_sets is not None:
            self._index = self._eval_index(batch_size)

    # -------------------------------------------------------- pass 1

    def start_range(self, sized: SizedRange) -> RecordNumbers | None:
        """Pass 1: begins reading range `sized` (the ranges in their order); what to hand its reader
        as `numbers`."""
        return self._numbering.start(sized)

    def add(self, texts: list[str]) -> None:
        """Pass 1: the next batch of the current range."""
        batch = self._numbering.number(texts)
        self._counts.documents_in += len(texts)
        self._counts.bytes_in += int(utf8_sizes(texts).sum())
        if self._steps:
            batch = self._judge(batch)
        block = self._merger.add(batch)
        if block is not None:
            self._decide_block(block)

    def _judge(self, batch: NumberedTexts) -> NumberedTexts:
        """The document steps' verdicts on a batch: its removals kept, its survivors (their texts as
        the steps left them) returned."""
        judged = judge_documents(self._steps, curation_docs(batch))
        self._funnel += judged.funnel
        self._judged.extend(judged.removals)
        kept = np.array([doc.index for doc in judged.kept], dtype=np.int64)
        gone = np.setdiff1d(batch.indices, kept)
        self._step_removed.append(packed_refs(np.full(len(gone), self._ranks[batch.source]), gone))
        return NumberedTexts(
            batch.source,
            kept,
            [doc.text for doc in judged.kept],
            [doc.record for doc in judged.kept],
        )  # no URLs: the corpus steps' removals learn theirs in pass 2

    def decide(self) -> None:
        """Pass 1's end: every removal decided, from what add() spilled."""
        block = self._merger.rest()
        if block is not None:
            self._decide_block(block)
        self._table.close()
        self._exact.flush()
        self._bands.flush()
        for p in range(self._exact.partitions):
            removed, kept = exact_clusters(self._exact.read(p))
            self._removals.append(removal_rows(removed, REASONS.index(EXACT), kept=kept))
        table = os.path.join(self._directory, NODE_TABLE)
        if self._settings.dedup == DEDUP_NEAR:
            self._decide_near(self._bands, table)
        os.remove(table)
        removals = np.concatenate([*self._removals, self._near])
        steps_removed = np.sort(np.concatenate([np.empty(0, np.int64), *self._step_removed]))
        self._step_removed = [steps_removed]
        self._removed = np.sort(
            np.concatenate([packed_refs(removals["source"], removals["index"]), steps_removed])
        )
        _LOG.info(
            "curation: %d documents read, %d to remove; reading them again",
            self._counts.documents_in,
            len(self._removed),
        )

    def _eval_index(self, batch_size: int) -> EvalIndex:
        eval_sets = self._settings.eval_sets
        assert eval_sets is not None, "called with eval sets only"
        files, ranges = plan_sized_ranges(
            list(eval_sets.files), eval_sets.options, range_bytes=self._settings.range_bytes
        )
        progress = ReadProgress(sum(f.bytes for f in files), PROGRESS_EVERY_S)
        batches = numbered_texts(
            ranges, eval_sets.options, batch_size=batch_size, stats=ReadStats(), progress=progress
        )
        return eval_index(
            batches, [f.path for f in eval_sets.files], self._settings.decontaminate_ngram
        )

    def _decide_block(self, block: Block) -> None:
        settings = self._settings
        count = len(block.texts)
        nbytes = utf8_sizes(block.texts)  # as the text enters the corpus steps
        clean = np.ones(count, dtype=bool)
        if self._index is not None or settings.dedup == DEDUP_NEAR:
            hashes, counts = word_hashes_of(block.texts)
        if self._index is not None:
            values, owner = window_hashes(
                hashes, counts, settings.decontaminate_ngram, short=False, bits=64
            )
            found = contamination(values, owner, count, self._index)
            clean = found == _NO_REF
            dirty = np.flatnonzero(~clean)
            self._removals.append(
                removal_rows(
                    plain_rows(block, dirty, nbytes),
                    REASONS.index(CONTAMINATED),
                    eval_refs=found[dirty],
                )
            )
        if settings.dedup == DEDUP_NONE:
            return
        in_near = clean.copy()
        if settings.dedup == DEDUP_NEAR and settings.minhash.min_words > 0:
            in_near &= counts >= settings.minhash.min_words
        if settings.dedup == DEDUP_EXACT:
            in_near[:] = False
        only_exact = np.flatnonzero(clean & ~in_near)
        if len(only_exact):
            rows = node_keys(block, only_exact, nbytes)
            parts = rows["digest_hi"] % np.uint64(self._exact.partitions)
            self._exact.add(parts.astype(np.int64), rows)
        take = np.flatnonzero(in_near)
        if not len(take):
            return
        minhash = settings.minhash
        rows = node_keys(block, take, nbytes)
        self._table.write(rows.tobytes())
        nodes = np.arange(self._next_node, self._next_node + len(take), dtype=np.int64)
        self._next_node += len(take)
        signatures = self._signatures_of(*select_words(hashes, counts, take), rows["digest_hi"])
        keys = band_hashes(signatures, bands=minhash.bands, rows=minhash.rows)
        bands = np.empty(keys.size, dtype=BAND_DTYPE)
        bands["key"], bands["node"] = keys.ravel(), np.repeat(nodes, minhash.bands)
        parts = bands["key"] % np.uint64(self._bands.partitions)
        self._bands.add(parts.astype(np.int64), bands)

    def _signatures_of(
        self, hashes: np.ndarray, counts: np.ndarray, digest_hi: np.ndarray
    ) -> np.ndarray:
        assert self._offsets is not None, "near dedup only"
        values, owner = text_shingles(hashes, counts, digest_hi, self._settings.minhash.ngram)
        return minhash_signatures(values, owner, len(counts), self._offsets)

    def _decide_near(self, near: SpillPartitions, table: str) -> None:
        # Partition by partition, the components so far (as node -> label edges) with the new edges:
        # memory holds the nodes that have an edge, never every band's edges at once (an exact copy
        # is in a bucket of every band).
        nodes = labels = np.empty(0, np.int64)
        for p in range(near.partitions):
            u, v = bucket_edges(near.read(p))
            if len(u):
                nodes, labels = components(np.r_[nodes, u], np.r_[labels, v])
        if not len(nodes):
            return
        rows = read_table_rows(table, NODE_DTYPE, nodes)
        removed, kept = near_clusters(rows, labels)
        same = (rows["digest_hi"][removed] == rows["digest_hi"][kept]) & (
            rows["digest_lo"][removed] == rows["digest_lo"][kept]
        )  # an exact copy of the kept document
        self._removals.append(
            removal_rows(rows[removed[same]], REASONS.index(EXACT), kept=rows[kept[same]])
        )
        removed, kept = removed[~same], kept[~same]
        self._near = removal_rows(rows[removed], REASONS.index(NEAR), kept=rows[kept])
        self._pairs = nodes[removed], nodes[kept]
        self._roots = np.unique(nodes[kept])
        ends = np.unique(np.concatenate([removed, kept]))
        refs = packed_refs(rows["source"][ends], rows["index"][ends])
        order = np.argsort(refs)
        self._wanted = refs[order]
        self._wanted_nodes = nodes[ends][order]
        self._wanted_digest = rows["digest_hi"][ends][order]

    # -------------------------------------------------------- pass 2

    def read_range(
        self,
        sized: SizedRange,
        options: ReadOptions,
        *,
        batch_size: int,
        stats: ReadStats,
        progress: ReadProgress,
    ) -> Iterator[list[str]]:
        """Pass 2: read_sized_range's batches of range `sized` (the ranges in pass 1's order), each
        filtered by keep()."""
        numbers = self._renumbering.start(sized)
        for texts in read_sized_range(
            sized, options, batch_size=batch_size, stats=stats, progress=progress, numbers=numbers
        ):
            yield self.keep(self._renumbering.number(texts))

    def keep(self, batch: NumberedTexts) -> list[str]:
        """The texts of the next batch (read in pass 1's order) that are kept, as the document steps
        left them (those changing text judge the texts pass 1 kept again: they are deterministic, and
        their output is not spilled)."""
        source, texts, indices = batch.source, batch.texts, batch.indices
        refs = packed_refs(np.full(len(texts), self._ranks[source]), indices)
        if batch.urls is not None:
            self._note_urls(refs, batch.urls)
        if self._steps:
            texts, refs, indices = self._kept_by_steps(source, texts, refs, indices)
        if len(self._wanted):
            self._measure(texts, refs)
        gone = member_of(refs, self._removed).tolist()
        return [text for text, g in zip(texts, gone) if not g]

    def _note_urls(self, refs: np.ndarray, urls: list[str | None]) -> None:
        """Keeps the URLs of the documents of refs that a corpus step removes (the document steps'
        removals have theirs from pass 1)."""
        removed = member_of(refs, self._removed) & ~member_of(refs, self._step_removed[0])
        for i in np.flatnonzero(removed).tolist():
            url = urls[i]
            if url is not None:
                self._urls[int(refs[i])] = url

    def _kept_by_steps(
        self, source: str, texts: list[str], refs: np.ndarray, indices: np.ndarray
    ) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The texts the document steps kept in pass 1, as the steps that change text leave them
        (judged again by those only: the others' verdicts are pass 1's, and they are deterministic)."""
        passed = np.flatnonzero(~member_of(refs, self._step_removed[0]))
        if not self._text_steps:
            return [texts[i] for i in passed.tolist()], refs[passed], indices[passed]
        docs = [CurationDoc(source, int(indices[i]), texts[i], 0) for i in passed.tolist()]
        judged = judge_documents(self._text_steps, docs)
        if len(judged.kept) != len(docs):
            raise RuntimeError(
                f"a curation step removed a document of {source!r} it kept when first read: "
                "document steps must judge each document the same every time"
            )
        return [doc.text for doc in judged.kept], refs[passed], indices[passed]

    def _measure(self, texts: list[str], refs: np.ndarray) -> None:
        """Signs the texts that are an end of a near removal (their similarity is in the audit)."""
        at = np.minimum(np.searchsorted(self._wanted, refs), len(self._wanted) - 1)
        wanted = np.flatnonzero(self._wanted[at] == refs)
        if not len(wanted):
            return
        hashes, counts = word_hashes_of([texts[i] for i in wanted.tolist()])
        signatures = self._signatures_of(hashes, counts, self._wanted_digest[at[wanted]])
        nodes = self._wanted_nodes[at[wanted]]
        root = member_of(nodes, self._roots)
        self._root_signatures.append((nodes[root], signatures[root]))
        rows = np.empty(int((~root).sum()), dtype=self._signed_dtype)
        rows["node"], rows["signature"] = nodes[~root], signatures[~root]
        with open(self._signed, "ab") as f:
            f.write(rows.tobytes())

    def _near_equal(self) -> np.ndarray:
        """int32 [near removals]: the equal signature values of each and its kept document, the
        removed ends' signatures read back in chunks against the kept ends' held in memory."""
        roots = np.concatenate([n for n, _ in self._root_signatures])
        root_signatures = np.concatenate([s for _, s in self._root_signatures])
        order = np.argsort(roots)
        roots, root_signatures = roots[order], root_signatures[order]
        removed, kept = self._pairs
        by_node = np.argsort(removed)
        equal = np.full(len(removed), -1, dtype=np.int32)
        chunk = max(TABLE_CHUNK_BYTES // self._signed_dtype.itemsize, 1)
        with open(self._signed, "rb") as f:
            while len(rows := np.fromfile(f, dtype=self._signed_dtype, count=chunk)):
                pair = by_node[np.searchsorted(removed[by_node], rows["node"])]
                theirs = root_signatures[np.searchsorted(roots, kept[pair])]
                equal[pair] = np.count_nonzero(rows["signature"] == theirs, axis=1)
        os.remove(self._signed)
        return equal

    def finish(self) -> CurationInfo:
        """Writes the audit files; the manifest's curation section (after every keep())."""
        settings = self._settings
        near = self._near.copy()
        if len(near):
            near["equal"] = self._near_equal()
        removals = np.concatenate([*self._removals, near])
        audit = self._write_audit(removals)
        for code, reason in enumerate(REASONS):
            mine = removals[removals["reason"] == code]
            if len(mine):
                self._counts.removed[reason] = [len(mine), int(mine["bytes"].sum())]
        for removal in self._judged:
            counted = self._counts.removed.setdefault(removal.key, [0, 0])
            counted[0] += 1
            counted[1] += removal.bytes
        index = self._index
        if index is not None:
            dirty = removals["eval"][removals["eval"] >= 0]
            ranks, counts = np.unique(dirty >> REF_SHIFT, return_counts=True)
            self._counts.by_eval_file = {
                index.paths[r]: int(c) for r, c in zip(ranks.tolist(), counts.tolist())
            }
        with_kept = removals[removals["kept_source"] >= 0]
        clusters = len(np.unique(packed_refs(with_kept["kept_source"], with_kept["kept_record"])))
        eval_files = [f.path for f in settings.eval_sets.files] if settings.eval_sets else []
        return curation_info(
            dedup=settings.dedup,
            options=settings.manifest_options(),
            counts=self._counts,
            clusters=clusters,
            eval_files=eval_files,
            eval_documents=index.documents if index is not None else {},
            audit=audit,
            steps=settings.steps,
            funnel=self._funnel,
        )

    def _write_audit(self, removals: np.ndarray) -> list[dict]:
        """Each audit file (a source's block of records) written; their manifest entries."""
        removals = removals[np.lexsort((removals["record"], removals["source"]))]
        block = removals["record"] // AUDIT_BLOCK
        change = (removals["source"][1:] != removals["source"][:-1]) | (block[1:] != block[:-1])
        starts = np.flatnonzero(np.r_[True, change]) if len(removals) else np.empty(0, np.int64)
        spans = {
            (self._paths[int(removals["source"][lo])], int(block[lo])): (lo, hi)
            for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), len(removals)])
        }
        judged: dict[AuditKey, list[Removal]] = {}
        for removal in self._judged:
            judged.setdefault(audit_key(removal), []).append(removal)
        entries = []
        for key in sorted(spans.keys() | judged.keys()):
            lo, hi = spans.get(key, (0, 0))
            lines = [*judged.pop(key, []), *map(self._removal, removals[lo:hi])]
            entries.append(write_audit_file(self._output, key, lines))
        return entries

    def _removal(self, row: np.void) -> Removal:
        reason = REASONS[int(row["reason"])]
        kept = (
            (self._paths[int(row["kept_source"])], int(row["kept_record"]))
            if row["kept_source"] >= 0
            else None
        )
        eval_ref = None
        if row["eval"] >= 0:
            assert self._index is not None, "an eval ref comes from the eval index"
            rank, record = unpacked_ref(int(row["eval"]))
            eval_ref = (self._index.paths[rank], record)
        return Removal(
            self._paths[int(row["source"])],
            int(row["record"]),
            reason,
            int(row["bytes"]),
            kept=kept,
            eval=eval_ref,
            similarity=similarity(int(row["equal"]), len(self._offsets))
            if reason == NEAR and self._offsets is not None
            else None,
            url=self._urls.get(int(packed_refs(row["source"], row["index"]))),
        )
