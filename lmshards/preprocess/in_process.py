"""The default runner's path: the whole preprocess in one step, streaming in this process.

The step imports nothing of Beam: lmshards.preprocess.local calls it directly (no Beam flag, a local
output), lmshards.preprocess.pipeline as a Beam step of one element (a Beam flag given).

On Beam's in-process FnApiRunner every stage ran in one Python process anyway, but through Beam's
data plane: each batch became an element (pickled, buffered, handed on), and both GroupByKeys held
the whole corpus in memory (tokens before packing, framed records before the shard files), about 9x
the shard bytes at peak. Here the same stage functions run without that:

  read -> encode -> route: the step's own thread reading, a thread calling the tokenizer (its Rust
      threads; the GIL released) and a thread turning encodings into arrays run at once, through
      short queues (Tokenizing); each packing group's documents are appended to its own file;
  pack: group by group from those files; each group's blocks to a file;
  shard: the layout from every group's size, then each group's blocks to the files of the shards
      they are shuffled into, and each shard's records sorted by position, framed and written.

Memory is a fixed working set (a few batches, one group, one shard's rows: its records are written
as they are serialized), not the corpus: the heap's free pages go back to the system as the run goes
(lmshards.plumbing.memory). The files are local, under the output's temporary directory, and removed on every
exit. Every step but the files is the staged pipeline's own: its router (GroupRouter), token store
writer (TokenPartWriter), packer and counters (Packer), packed groups' files and shard assignment
(spill_group, group_to_shards), shard writer and counters (ShardWriter) and manifest
(finish_shard_set); so the shard bytes, the counters and the manifest are the staged pipeline's, as
tests check.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import queue
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from lmshards.plumbing import fs
from lmshards.plumbing.memory import freeze_startup_heap, release_free_memory
from lmshards.plumbing.progress import PROGRESS_EVERY_S
from lmshards.plumbing.units import MIB
from lmshards.preprocess.options import PreprocessConfig
from lmshards.preprocess.sources import ReadOptions, ReadStats
from lmshards.preprocess.stages.encode import (
    TokenizedChunk,
    encode_accepted,
    encoded_chunk,
    limit_tokenizer_threads,
    log_rejected,
    planned_tokenizer_text,
)
from lmshards.preprocess.stages.manifest import finish_shard_set
from lmshards.preprocess.stages.metrics import (
    DOCUMENTS_TOKENIZED,
    DOCUMENTS_TOKENIZER_ERROR,
    TOKENS,
    counter,
)
from lmshards.preprocess.stages.pack import PackedGroup, Packer, split_totals
from lmshards.preprocess.stages.read import ReadProgress, SizedRange, count_read, read_sized_range
from lmshards.preprocess.stages.shard import (
    ShardBatch,
    ShardWriter,
    SpilledGroup,
    SplitLayout,
    append_rows,
    group_to_shards,
    layout_splits,
    narrow_dtype,
    read_rows_in_order,
    spill_group,
)
from lmshards.preprocess.stages.split import GroupKey, GroupRouter
from lmshards.preprocess.stages.tokens import (
    TokenFileInfo,
    TokenPartWriter,
    TokenStoreManifest,
    count_parts,
    write_store_manifest,
)
from lmshards.schemas.constants import SPLITS, TOKENS_DIR_NAME
from lmshards.schemas.layouts import SPILL_DIR_PREFIX, TEMP_DIR_NAME
from lmshards.schemas.manifest import CurationInfo, Manifest, ShardInfo, SplitTotals

if TYPE_CHECKING:  # curation's modules load Beam: imported only by a run that curates
    from lmshards.preprocess.curation.stage import CurationSettings

_LOG = logging.getLogger(__name__)

# Characters of text per tokenizer call (one encode thread's batch): small enough that the call's
# Encodings (about 100 bytes a token, held until they are turned into arrays) stay in the cache and
# under a few MB whatever the documents' size, large enough that the Python work per call is small
# beside it (measured against 256 KiB: see docs/benchmarks.md).
ENCODE_BATCH_CHARS = 64 << 10
# Batches waiting between the threads: enough to ride out a slow batch, few enough to bound memory.
QUEUE_DEPTH = 2
# Packing groups packed, then shards written, at once after tokenizing (pack_to_files, write_shards):
# one per core of the 2-core machines the benchmarks run on; more only holds more in memory.
PACK_THREADS = 2
_HEADER = np.dtype("<i8")
_T = TypeVar("_T")
_R = TypeVar("_R")


# ---------------------------------------------------------------- logic: spill files


def append_chunk(path: str, chunk: TokenizedChunk, dtype: np.dtype) -> None:
    """Appends a chunk to a group's file: [documents, tokens], hashes, lengths, tokens (as dtype)."""
    with open(path, "ab") as f:
        f.write(np.array([chunk.num_documents, chunk.num_tokens], _HEADER).tobytes())
        f.write(chunk.hashes.astype("<u8").tobytes())
        f.write(chunk.lengths.astype("<i4").tobytes())
        f.write(chunk.tokens.astype(dtype).tobytes())


def read_chunks(path: str, dtype: np.dtype) -> TokenizedChunk:
    """Every chunk append_chunk wrote to path, as one chunk (tokens as dtype: the packer takes the
    staged pipeline's narrow ids too, and a narrow gather moves half the bytes)."""
    with open(path, "rb") as f:
        data = memoryview(f.read())
    hashes, lengths, tokens = [], [], []
    at = 0
    while at < len(data):
        n, m = np.frombuffer(data, _HEADER, 2, at).tolist()
        at += 2 * _HEADER.itemsize
        hashes.append(np.frombuffer(data, "<u8", n, at))
        at += 8 * n
        lengths.append(np.frombuffer(data, "<i4", n, at))
        at += 4 * n
        tokens.append(np.frombuffer(data, dtype, m, at))
        at += dtype.itemsize * m
    return TokenizedChunk(
        hashes=np.concatenate(hashes),
        lengths=np.concatenate(lengths),
        tokens=np.concatenate(tokens),
    )


# ---------------------------------------------------------------- logic: the stages


@dataclasses.dataclass(frozen=True)
class InProcessJob:
    """Everything the in-process run needs; small and picklable (the tokenizer is built when it runs).

    The tokenizer travels as its path, not its text: Beam compresses every pickled step with bz2, and a
    tokenizer.json is MBs.
    """

    config: PreprocessConfig
    ranges: tuple[SizedRange, ...]
    read_options: ReadOptions
    total_bytes: int
    tokenizer_path: (
        str  # the tokenizer.json the plan read; its text is read again when the job runs
    )
    tokenizer_sha256: str  # of that text: the job refuses a tokenizer changed since it was planned
    vocab_size: int
    groups: dict[str, int]  # split -> packing groups
    pad_id: int | None
    record_bytes: int
    header: Manifest
    store_header: TokenStoreManifest | None  # --keep_tokens
    curation: CurationSettings | None = None  # --dedup / --decontaminate (curation/local.py)


class _Relay:
    """Runs producer functions on threads linked by bounded queues; the first error stops them all."""

    _END = object()

    def __init__(self) -> None:
        self._error: BaseException | None = None
        self._stop = threading.Event()

    def put(self, q: queue.Queue, item) -> None:
        while not self._stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Stopped

    def items(self, q: queue.Queue) -> Iterator:
        while True:
            try:
                item = q.get(timeout=0.1)
            except queue.Empty:
                if self._stop.is_set():
                    raise _Stopped from None
                continue
            if item is self._END:
                return
            yield item

    def start(self, target: Callable[[], None], out: queue.Queue | None) -> threading.Thread:
        def run() -> None:
            try:
                target()
                if out is not None:
                    self.put(out, self._END)
            except _Stopped:
                pass
            except BaseException as e:  # handed to the caller's thread by check()
                self._error = self._error or e
                self._stop.set()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        self._stop.set()


class _Stopped(Exception):
    """Another thread failed: this one stops."""


class BatchMerger:
    """Regroups batches of documents into lists of about max_chars characters: small batches are
    merged, a large one is cut (each list ends with the document that reaches max_chars)."""

    def __init__(self, max_chars: int):
        self._max_chars = max_chars
        self._out: list[str] = []
        self._chars = 0

    def add(self, batch: list[str]) -> list[list[str]]:
        """The lists that batch completes, in order (none while fewer than max_chars are held)."""
        if not batch:
            return []
        # Where each list ends, from the batch's running character count: a search per list, not
        # a Python step per document (2.2 million of them in the benchmark corpus).
        ends = np.cumsum(np.fromiter(map(len, batch), np.int64, len(batch)))
        full = []
        start, counted = 0, -self._chars  # ends[i] - counted: the current list's characters at i
        while True:
            last = start + int(np.searchsorted(ends[start:], counted + self._max_chars))
            if last == len(batch):
                break
            full.append(self._out + batch[start : last + 1])
            self._out, start, counted = [], last + 1, int(ends[last])
        self._out += batch[start:]
        self._chars = int(ends[-1]) - counted
        return full

    def rest(self) -> list[str] | None:
        """What is held (None: nothing), and holds nothing after it."""
        out, self._out, self._chars = self._out, [], 0
        return out or None


def group_path(directory: str, key: GroupKey) -> str:
    """The file of a packing group's documents under the spill directory."""
    split, group = key
    return os.path.join(directory, f"group-{split}-{group:06d}")


def shard_spill_path(directory: str, split: str, shard: int) -> str:
    """The file of a shard's shuffled blocks under the spill directory."""
    return os.path.join(directory, f"shard-{split}-{shard:06d}")


class _GroupFiles:
    """The staged pipeline's router (GroupRouter), its flushes appended to the packing groups' files."""

    def __init__(self, directory: str, job: InProcessJob, dtype: np.dtype):
        self._directory, self._dtype = directory, dtype
        self._router = GroupRouter(
            validation_fraction=job.config.validation_fraction, groups=job.groups
        )
        self.keys: set[GroupKey] = set()

    def add(self, chunk: TokenizedChunk) -> None:
        self._append(self._router.add(chunk))

    def flush(self) -> None:
        self._append(self._router.flush())

    def _append(self, routed: list[tuple[GroupKey, TokenizedChunk]]) -> None:
        if not routed:
            return
        for key, chunk in routed:  # (GroupKey, TokenizedChunk), one per group
            append_chunk(group_path(self._directory, key), chunk, self._dtype)
            self.keys.add(key)
        # The freed Encodings and arrays of the last batches leave free pages all over the heap:
        # handed back here, peak RSS stays flat in the corpus size instead of creeping up.
        release_free_memory()


@dataclasses.dataclass
class TokenizeResult:
    reading: ReadStats
    documents: int
    tokens: int
    group_keys: set[GroupKey]
    token_files: list[TokenFileInfo]


def tokenizer_text(job: InProcessJob) -> str:
    """The planned tokenizer's JSON text, read again (planned_tokenizer_text).

    Raises:
      TokenizerError: the file changed since the run was planned.
    """
    return planned_tokenizer_text(job.tokenizer_path, job.tokenizer_sha256)


class Tokenizing:
    """Encodes and routes every document to its packing group's file under directory, on threads of
    its own: `--tokenizer_threads` encode threads, each calling the tokenizer on whole batches (one
    batch at a time, without the GIL and without the tokenizer's own thread pool) and turning its
    Encodings into arrays, and one thread routing the arrays in the order the batches were added.
    The caller's thread reads and hands each batch to add, so all of them run at once; finish waits
    for the last batch. A with block stops the threads on every exit; an error on any thread is
    raised in the caller's.

    One batch per thread rather than the tokenizer's pool splitting each call: the pool's threads
    wait for the slowest document of every call and spin while they wait, and they compete for the
    cores with the Python threads beside them (docs/benchmarks.md measures both).
    """

    def __init__(self, job: InProcessJob, directory: str, dtype: np.dtype):
        self._workers = max(1, job.config.tokenizer_threads)
        limit_tokenizer_threads(1)  # each call runs on its caller's thread
        from tokenizers import Tokenizer  # after the thread limit, so the pool starts with it

        self._tokenizer = Tokenizer.from_str(tokenizer_text(job))
        self._relay = _Relay()
        self._texts: queue.Queue = queue.Queue(QUEUE_DEPTH * self._workers)
        self._encoded: queue.Queue = queue.Queue(QUEUE_DEPTH * self._workers)
        self._added = 0  # batches handed to the encode threads: each one's place in the order
        self._logged = 0  # batches whose rejected documents were logged
        self.reading = ReadStats()  # the caller merges each range's counts in
        self._merger = BatchMerger(ENCODE_BATCH_CHARS)
        self._groups = _GroupFiles(directory, job, dtype)
        self._store = (
            TokenPartWriter(fs.join(job.config.output, TOKENS_DIR_NAME), job.store_header.id_dtype)
            if job.store_header is not None
            else None
        )
        self._token_files: list[TokenFileInfo] = []
        self._counts = {"documents": 0, "tokens": 0, "rejected": 0}
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Tokenizing:
        self._threads = [
            *(self._relay.start(self._encode, self._encoded) for _ in range(self._workers)),
            self._relay.start(self._route, None),
        ]
        return self

    def __exit__(self, *exc) -> None:
        self._relay.stop()
        for thread in self._threads:
            thread.join()

    def add(self, batch: list[str]) -> None:
        """Hands a batch of documents on to be encoded (merged into calls of ENCODE_BATCH_CHARS)."""
        for merged in self._merger.add(batch):
            self._put_batch(merged)

    def finish(self) -> TokenizeResult:
        """Waits until every document added is routed; what the run read, encoded and routed."""
        rest = self._merger.rest()
        if rest is not None:
            self._put_batch(rest)
        for _ in range(self._workers):
            self._put(self._texts, _Relay._END)
        for thread in self._threads:
            thread.join()
        self._relay.check()
        self.reading.documents_tokenizer_error += self._counts["rejected"]  # the threads have ended
        return TokenizeResult(
            reading=self.reading,
            documents=self._counts["documents"],
            tokens=self._counts["tokens"],
            group_keys=self._groups.keys,
            token_files=self._token_files,
        )

    def _put(self, q: queue.Queue, item) -> None:
        try:
            self._relay.put(q, item)
        except _Stopped:
            self._relay.check()  # the thread's error, in the caller's thread
            raise

    def _put_batch(self, batch: list[str]) -> None:
        self._put(self._texts, (self._added, batch))
        self._added += 1

    def _encode(self) -> None:
        for place, batch in self._relay.items(self._texts):
            result = encode_accepted(self._tokenizer, batch)
            self._logged = log_rejected(result, self._logged)  # at most one more if two race
            self._relay.put(self._encoded, (place, encoded_chunk(result)))

    def _in_order(self) -> Iterator[TokenizedChunk]:
        """The encode threads' chunks in the order their batches were added (until each has ended)."""
        waiting: dict[int, TokenizedChunk] = {}  # arrived before an earlier batch: a few at most
        following = 0
        for _ in range(self._workers):
            for place, chunk in self._relay.items(self._encoded):
                waiting[place] = chunk
                while following in waiting:
                    yield waiting.pop(following)
                    following += 1
        assert not waiting, f"batches {sorted(waiting)} came after batch {following} was missed"

    def _route(self) -> None:
        for chunk in self._in_order():
            self._counts["documents"] += chunk.num_documents
            self._counts["tokens"] += chunk.num_tokens
            self._counts["rejected"] += chunk.rejected
            self._groups.add(chunk)
            if self._store is not None:
                self._token_files.extend(self._store.add(chunk))
        self._groups.flush()
        if self._store is not None:
            self._token_files.extend(self._store.flush())


def pack_to_files(
    packer: Packer, keys: Iterable[GroupKey], spill: str, dtype: np.dtype
) -> Iterator[tuple[PackedGroup, SpilledGroup]]:
    """Each packing group packed (in key order) from its documents' file in `spill`, which is removed,
    and its feature rows written beside it (lmshards.preprocess.stages.shard.spill_group, as the staged
    pipeline); yields the group and where its rows are.

    PACK_THREADS groups are packed at once: their work is array operations and file writes, which
    release the GIL, so the phase uses both cores instead of one.
    """

    def pack(key: GroupKey) -> tuple[PackedGroup, SpilledGroup]:
        path = group_path(spill, key)
        packed = packer.pack_uncounted(key, [read_chunks(path, dtype)])
        os.remove(path)
        return packed, spill_group(packed, dtype=dtype, directory=spill)

    with ThreadPoolExecutor(PACK_THREADS) as pool:
        for packed, spilled in ordered_map(pool, pack, sorted(keys), ahead=PACK_THREADS):
            packer.count(packed)  # here, on the step's thread
            release_free_memory()
            yield packed, spilled


def ordered_map(
    pool: Executor, fn: Callable[[_T], _R], items: Iterable[_T], *, ahead: int
) -> Iterator[_R]:
    """fn of each item, run on `pool`, in the items' order; at most `ahead` + 1 submitted and not
    yet taken, so results never pile up faster than the caller takes them."""
    pending: collections.deque[Future[_R]] = collections.deque()
    for item in items:
        pending.append(pool.submit(fn, item))
        if len(pending) > ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def shuffle_to_shards(
    groups: Iterable[SpilledGroup],
    layouts: dict[str, SplitLayout],
    *,
    seed: int,
    shard_path: Callable[[str, int], str],
) -> None:
    """Each group's blocks appended to the files of the shards they are shuffled into, with their
    positions (lmshards.preprocess.stages.shard.group_to_shards, as the staged pipeline); each group's
    file is removed once read."""
    for group in groups:
        for (split, shard), batch in group_to_shards(group, layouts[group.size.split], seed=seed):
            append_rows(shard_path(split, shard), batch.positions, batch.rows)
        os.remove(group.path)


def read_shard_batch(
    path: str, names: tuple[str, ...], dtype: np.dtype, seq_len: int
) -> ShardBatch:
    """A shard's records from its file under the spill directory, in position order (so the writer
    holds them once: write_shard takes a batch in order as it is); the file is removed once read."""
    positions, rows = read_rows_in_order(path, dtype, (len(names), seq_len))
    if os.path.exists(path):
        os.remove(path)
    return ShardBatch(positions=positions, rows=rows, names=names)


def write_shards(
    writer: ShardWriter,
    layouts: dict[str, SplitLayout],
    *,
    shard_path: Callable[[str, int], str],
    names: tuple[str, ...],
    dtype: np.dtype,
    seq_len: int,
) -> Iterator[tuple[str, ShardInfo]]:
    """Each shard written from its file (read_shard_batch) by the staged pipeline's ShardWriter;
    yields (split, its ShardInfo) in shard order.

    PACK_THREADS shards are serialized and written at once (their array work, checksums of whole
    buffers and writes release the GIL), each counted here, on the step's thread.
    """
    keys = [(split, shard) for split in SPLITS for shard in range(layouts[split].num_shards)]

    def write(key: tuple[str, int]) -> ShardInfo:
        batch = read_shard_batch(shard_path(*key), names, dtype, seq_len)
        info = writer.write_uncounted(key, [batch], layouts)
        release_free_memory()
        return info

    with ThreadPoolExecutor(PACK_THREADS) as pool:
        for (split, _), info in zip(keys, ordered_map(pool, write, keys, ahead=PACK_THREADS)):
            writer.count(info, layouts)
            yield split, info


def run_in_process(job: InProcessJob) -> str:
    """The whole preprocess of `job`; returns the manifest's path. Counts in Beam counters when run
    in a Beam step (call it from the step's thread).

    The documents are read here, on the calling thread, while Tokenizing's threads encode and route
    them; then the packing groups are packed, shuffled into shards and written (write_shard_set).
    """
    # Each tokenizer call makes an object per document: the collector's full passes over Beam's
    # startup heap cost 2.8 s of the benchmark corpus' run, holding the GIL (docs/benchmarks.md).
    freeze_startup_heap()
    config = job.config
    dtype = narrow_dtype(job.vocab_size, config.seq_len)
    spill = fs.join(config.output, TEMP_DIR_NAME, f"{SPILL_DIR_PREFIX}{uuid.uuid4().hex}")
    os.makedirs(spill)
    try:
        phases = _Phases()
        curation = None
        documents = None  # only document steps: judged as they are read, in the one pass
        if job.curation is not None and not job.curation.corpus:
            from lmshards.preprocess.curation.documents import DocumentCuration

            documents = DocumentCuration(job.curation.steps, output=config.output, directory=spill)
        elif job.curation is not None:  # pass 1: every removal decided before anything is tokenized
            from lmshards.preprocess.curation.local import LocalCuration

            curation = LocalCuration(
                job.curation,
                output=config.output,
                directory=spill,
                sources=[sized.range.path for sized in job.ranges],
                total_bytes=job.total_bytes,
                options=job.read_options,
                batch_size=config.documents_per_tokenizer_call,
            )
            progress = ReadProgress(job.total_bytes, PROGRESS_EVERY_S)
            for sized in job.ranges:
                numbers = curation.start_range(sized)
                for batch in read_sized_range(
                    sized,
                    job.read_options,
                    batch_size=config.documents_per_tokenizer_call,
                    stats=ReadStats(),  # counted by the second read
                    progress=progress,
                    numbers=numbers,
                ):
                    curation.add(batch)
            curation.decide()
            phases.done("curate")
        progress = ReadProgress(job.total_bytes, PROGRESS_EVERY_S)
        read = (
            documents.read_range
            if documents is not None
            else curation.read_range  # pass 2: the kept documents
            if curation is not None
            else read_sized_range
        )
        with Tokenizing(job, spill, dtype) as tokenizing:
            for sized in job.ranges:
                stats = ReadStats()
                for batch in read(
                    sized,
                    job.read_options,
                    batch_size=config.documents_per_tokenizer_call,
                    stats=stats,
                    progress=progress,
                ):
                    tokenizing.add(batch)
                tokenizing.reading.merge(stats)
            tokenized = tokenizing.finish()
        phases.done("read, encode, route")
        info = curation.finish() if curation is not None else None  # the audit files
        if documents is not None:
            info = documents.finish()
        return write_shard_set(job, tokenized, spill, dtype, curation=info)
    finally:
        shutil.rmtree(spill, ignore_errors=True)


def write_shard_set(
    job: InProcessJob,
    tokenized: TokenizeResult,
    spill: str,
    dtype: np.dtype,
    *,
    curation: CurationInfo | None = None,
) -> str:
    """Packs, shuffles and writes the shards of the routed documents, then the manifest (with what
    curation removed, when it ran); returns its path."""
    config = job.config
    phases = _Phases()
    count_read(tokenized.reading, job.total_bytes)
    counter(DOCUMENTS_TOKENIZED).inc(tokenized.documents)
    counter(TOKENS).inc(tokenized.tokens)
    counter(DOCUMENTS_TOKENIZER_ERROR).inc(tokenized.reading.documents_tokenizer_error)
    count_parts(tokenized.token_files)  # here: the routing thread that wrote them has no counters

    packer = Packer(
        seq_len=config.seq_len,
        remainder=config.remainder,
        pad_id=job.pad_id,
        packing=config.packing,
    )
    spilled: list[SpilledGroup] = []
    totals: list[tuple[str, SplitTotals]] = []
    for packed, group in pack_to_files(packer, tokenized.group_keys, spill, dtype):
        spilled.append(group)
        totals.append(split_totals(packed))
    packer.counters.flush()
    phases.done("pack")

    names = tuple(sorted(job.header.features()))  # as feature_rows orders them
    layouts = layout_splits(
        [group.size for group in spilled],
        record_bytes=job.record_bytes,
        target_shard_bytes=config.target_shard_mb * MIB,
        multiple=config.shard_multiple,
        num_shards=config.num_shards,
    )

    def shard_path(split: str, shard: int) -> str:
        return shard_spill_path(spill, split, shard)

    shuffle_to_shards(spilled, layouts, seed=config.seed, shard_path=shard_path)
    phases.done("shuffle")

    writer = ShardWriter(config.output, window_bytes=None)  # each shard's file is read whole
    shards = list(
        write_shards(
            writer, layouts, shard_path=shard_path, names=names, dtype=dtype, seq_len=config.seq_len
        )
    )
    writer.counters.flush()
    phases.done("serialize, write")

    if job.store_header is not None:
        write_store_manifest(
            fs.join(config.output, TOKENS_DIR_NAME),
            job.store_header,
            files=tokenized.token_files,
            reading=tokenized.reading,
        )
    path = finish_shard_set(
        config.output,
        job.header,
        patterns=config.inputs,
        shards=shards,
        totals=totals,
        reading=tokenized.reading,
        curation=curation,
    )
    phases.done("manifest")
    return path


class _Phases:
    """Logs (at DEBUG: --verbose) how long each phase took, the profile the docs quote."""

    def __init__(self) -> None:
        self._last = time.monotonic(), time.process_time()

    def done(self, name: str) -> None:
        now = time.monotonic(), time.process_time()
        wall, cpu = (b - a for a, b in zip(self._last, now))
        _LOG.debug("in-process %s: %.1f s, %.1f CPU s", name, wall, cpu)
        self._last = now
