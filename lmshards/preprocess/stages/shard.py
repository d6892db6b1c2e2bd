"""Stage 5, shard: a seeded global shuffle of each split's blocks into balanced TFRecord shards.

The shuffle needs no sort: block i of N (numbered group by group) goes to position permute(i) of a
seeded bijection of [0, N), and position p to shard p * S // N, so shards hold N // S or N // S + 1
records whatever the runner, worker count or bundle sizes. Each shard is written in position order.

Both preprocess paths run the same two steps: assign_to_shards (a group's blocks -> ShardBatch per
shard) and ShardWriter (a shard's batches -> its file, sorted, serialized as written, counted). The
staged pipeline hands the batches on through a GroupByKey, or for a local output writes each group's
batches into one file, shard after shard (assign_to_file), and hands on only where they lie and their
positions (ShardPiece: see rows_in_files). lmshards.preprocess.in_process appends them to a file per
shard. Both keep
each packed group's rows in a file while the layout waits for every group's size (spill_group), so
that only the sizes travel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import math
import os
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import BinaryIO

import numpy as np

from lmshards.plumbing import fs
from lmshards.plumbing.errors import LmshardsError
from lmshards.preprocess.stages.encode import UINT16_VALUES
from lmshards.preprocess.stages.metrics import ShardCounters
from lmshards.preprocess.stages.pack import PackedBlocks, PackedGroup
from lmshards.schemas.constants import SPLITS, TRAIN_SPLIT
from lmshards.schemas.layouts import TEMP_DIR_NAME
from lmshards.schemas.manifest import ShardInfo
from lmshards.schemas.records import frame_examples
from lmshards.schemas.shards import shard_relpath

DEFAULT_TARGET_SHARD_MB = 128.0  # MiB, as --target_shard_mb reads a bare number
DEFAULT_SHARD_MULTIPLE = 8
# Records serialized and written at once: bounds the varint buffers and what is held of a shard.
SERIALIZE_ROWS = 2048
# The most of a shard's feature rows the staged pipeline's writer holds at once: a larger shard is put
# in position order through files of local disk, a window of positions at a time.
SHARD_WINDOW_BYTES = 2 << 20
MAX_SHARD_WINDOWS = 256
_ROWS_HEADER = np.dtype("<i8")  # a write_rows piece's record count
SHARD_WINDOWS_PREFIX = "lmshards-shard-"
# The feature rows' dtypes between assigning and writing: narrow when every value fits 16 bits.
NARROW_ROW_DTYPE, WIDE_ROW_DTYPE = np.dtype("<u2"), np.dtype("<i4")
# Under the output's TEMP_DIR_NAME: a staged run's packed groups' rows, a new name each write; and the
# same rows again, shard after shard, once assigned.
PACKED_ROWS_PREFIX = "packed-"
ASSIGNED_ROWS_PREFIX = "assigned-"

_FEISTEL_ROUNDS = 4
_U64 = np.uint64

ShardKey = tuple[str, int]  # (split, shard index)


# ---------------------------------------------------------------- logic: shard counts and layout


def num_shards_for(
    total_bytes: int, *, target_shard_bytes: float, multiple: int, num_shards: int | None = None
) -> int:
    """Shards for a split: `num_shards` if given, else ceil(total_bytes / target), rounded up to `multiple`.

    A split with no bytes gets no shards.
    """
    if total_bytes <= 0:
        return 0
    count = num_shards if num_shards else math.ceil(total_bytes / target_shard_bytes)
    return max(multiple, math.ceil(count / multiple) * multiple)


class ShardCountError(LmshardsError):
    """--num_shards asks for more shards than the records can fill."""


def check_shard_count(num_shards: int | None, *, records: int, split: str) -> None:
    """Refuses, before any shard is written, a --num_shards larger than the train split's records: every
    shard past them would be an empty file. (A small validation split may keep empty shards.)

    Raises:
      ShardCountError: naming the count, the records and the fix.
    """
    if num_shards and split == TRAIN_SPLIT and 0 < records < num_shards:
        raise ShardCountError(
            f"--num_shards {num_shards} is more than the {records} records of the {split} split: "
            f"{num_shards - records} shards would be empty. Pass --num_shards {records} or fewer, "
            "or size shards by --target_shard_mb."
        )


def shard_of(positions: np.ndarray, num_records: int, num_shards: int) -> np.ndarray:
    """Shard of each shuffled position: contiguous ranges whose sizes differ by at most 1."""
    return (positions.astype(np.int64) * num_shards) // num_records


@dataclasses.dataclass(frozen=True)
class GroupSize:
    """How many blocks one packing group holds: all the layout needs to know of it."""

    split: str
    group: int
    blocks: int

    @staticmethod
    def of(packed: PackedGroup) -> GroupSize:
        return GroupSize(split=packed.split, group=packed.group, blocks=packed.blocks.num_blocks)


@dataclasses.dataclass(frozen=True)
class SplitLayout:
    """Where a split's blocks go: N records, S shards, and each packing group's first global index."""

    num_records: int
    num_shards: int
    group_offsets: dict[int, int]


def layout_splits(
    sizes: Iterable[GroupSize],
    *,
    record_bytes: int,
    target_shard_bytes: float,
    multiple: int,
    num_shards: int | None,
) -> dict[str, SplitLayout]:
    """Every packing group's size -> each split's SplitLayout (all splits present)."""
    by_split: dict[str, dict[int, int]] = {split: {} for split in SPLITS}
    for size in sizes:
        by_split[size.split][size.group] = size.blocks
    layouts = {}
    for split, counts in by_split.items():
        offsets, total = {}, 0
        for group in sorted(counts):
            offsets[group] = total
            total += counts[group]
        check_shard_count(num_shards, records=total, split=split)
        shards = num_shards_for(
            total * record_bytes,
            target_shard_bytes=target_shard_bytes,
            multiple=multiple,
            num_shards=num_shards,
        )
        layouts[split] = SplitLayout(num_records=total, num_shards=shards, group_offsets=offsets)
    return layouts


# ---------------------------------------------------------------- logic: the permutation


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer on uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def _feistel(x: np.ndarray, *, half_bits: int, keys: np.ndarray) -> np.ndarray:
    mask = _U64((1 << half_bits) - 1)
    left, right = x >> _U64(half_bits), x & mask
    for key in keys:
        left, right = right, left ^ (_mix64(right ^ key) & mask)
    return (left << _U64(half_bits)) | right


def permute(indices: np.ndarray, n: int, seed: int) -> np.ndarray:
    """A seeded bijection of [0, n) applied to `indices` (a Feistel network with cycle walking).

    Pure and O(1) in memory: any subset of indices can be permuted independently, on any worker.
    """
    indices = np.asarray(indices, dtype=np.uint64)
    if n <= 1:
        return indices.astype(np.int64)
    half_bits = max(1, math.ceil((n - 1).bit_length() / 2))
    with np.errstate(over="ignore"):
        keys = _mix64(
            np.arange(_FEISTEL_ROUNDS, dtype=np.uint64)
            + _U64(seed % (1 << 64)) * _U64(_FEISTEL_ROUNDS + 1)
        )
        out = _feistel(indices, half_bits=half_bits, keys=keys)
        # Cycle walking: the network permutes [0, 4^half_bits); re-apply until inside [0, n).
        outside = out >= _U64(n)
        while outside.any():
            out[outside] = _feistel(out[outside], half_bits=half_bits, keys=keys)
            outside = out >= _U64(n)
    return out.astype(np.int64)


# ---------------------------------------------------------------- logic: records into shards


def narrow_dtype(vocab_size: int, seq_len: int) -> np.dtype:
    """The smallest unsigned dtype holding every feature value (ids, masks, segment ids, positions)."""
    return NARROW_ROW_DTYPE if max(vocab_size, seq_len + 1) <= UINT16_VALUES else WIDE_ROW_DTYPE


def feature_rows(blocks: PackedBlocks, dtype: np.dtype) -> tuple[tuple[str, ...], np.ndarray]:
    """The blocks' records as (feature names, sorted; rows [blocks, features, seq_len] as dtype)."""
    features = blocks.features()
    names = tuple(sorted(features))
    return names, np.stack([features[name] for name in names], axis=1).astype(dtype)


@dataclasses.dataclass(frozen=True)
class SpilledGroup:
    """A packed group's feature rows, written to a file under the output's temporary directory, and what
    the layout needs of it.

    The staged pipeline hands this on instead of the rows: the rows wait for the layout (every group's
    size) in a file, not in the runner's memory or a Dask worker's, and cross no data channel in between.
    """

    size: GroupSize
    names: tuple[str, ...]
    shape: tuple[int, ...]  # the rows' [blocks, features, seq_len]
    dtype: str
    path: str


def spill_group(packed: PackedGroup, *, dtype: np.dtype, directory: str) -> SpilledGroup:
    """Writes a packed group's feature rows (feature_rows) into `directory` (the staged pipeline: the
    output's temporary directory), under a new name each time (a retried bundle's file is never read);
    returns where and what they are."""
    names, rows = feature_rows(packed.blocks, dtype)
    path = fs.join(
        directory, f"{PACKED_ROWS_PREFIX}{packed.split}-{packed.group:05d}-{uuid.uuid4().hex}"
    )
    fs.write_bytes_atomic(path, rows.tobytes())
    return SpilledGroup(
        size=GroupSize.of(packed), names=names, shape=rows.shape, dtype=rows.dtype.str, path=path
    )


def spilled_rows(spilled: SpilledGroup) -> np.ndarray:
    """The rows spill_group wrote, as they were."""
    rows = np.frombuffer(fs.read_bytes(spilled.path), dtype=np.dtype(spilled.dtype))
    return rows.reshape(spilled.shape)


@dataclasses.dataclass(frozen=True, eq=False)
class ShardBatch:
    """Some records of one shard: their feature rows, and their positions in the split's shuffled order.

    Records travel in per-shard batches, not one element each (Beam's cost is per element), and as
    rows of the narrowest dtype, not serialized: the writer serializes a shard in position order as
    it writes it, SERIALIZE_ROWS records at a time.
    """

    positions: np.ndarray  # int64 [records]
    rows: np.ndarray  # [records, features, seq_len], features in `names` order
    names: tuple[str, ...]

    @staticmethod
    def empty() -> ShardBatch:
        return ShardBatch(positions=np.zeros(0, dtype=np.int64), rows=np.zeros((0, 0, 0)), names=())


def assign_to_shards(
    rows: np.ndarray, names: tuple[str, ...], *, first: int, layout: SplitLayout, seed: int
) -> Iterator[tuple[int, ShardBatch]]:
    """A packing group's records (rows, block `first` of its split onwards) -> (shard, ShardBatch) for
    every shard they are shuffled into, in shard order."""
    indices = np.arange(rows.shape[0], dtype=np.int64) + first
    positions = permute(indices, layout.num_records, seed)
    shards = shard_of(positions, layout.num_records, layout.num_shards)
    order = np.argsort(shards, kind="stable")
    keys, firsts = np.unique(shards[order], return_index=True)
    for shard, mine in zip(keys.tolist(), np.split(order, firsts[1:])):
        yield shard, ShardBatch(positions=positions[mine], rows=rows[mine], names=names)


def group_to_shards(
    spilled: SpilledGroup, layout: SplitLayout, *, seed: int
) -> Iterator[tuple[ShardKey, ShardBatch]]:
    """A spilled group's blocks, one ShardBatch per shard they are shuffled into."""
    size = spilled.size
    first = layout.group_offsets[size.group]
    rows = spilled_rows(spilled)
    for shard, batch in assign_to_shards(
        rows, spilled.names, first=first, layout=layout, seed=seed
    ):
        yield (size.split, shard), batch


@dataclasses.dataclass(frozen=True, eq=False)
class ShardPiece:
    """Some records of one shard as the staged assign step left them: their positions in the split's
    shuffled order, and where their rows lie (the bytes from `offset` of the file at `path`).

    For a local output (rows_in_files) only these cross the staged shard GroupByKey, not the rows:
    neither the runner nor a worker holds a shard's rows before its writer reads them (shard_batches).
    """

    positions: np.ndarray  # int64 [records]
    path: str
    offset: int
    shape: tuple[int, ...]  # the rows' [records, features, seq_len]
    dtype: str
    names: tuple[str, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


def assign_to_file(
    spilled: SpilledGroup, layout: SplitLayout, *, seed: int, directory: str
) -> list[tuple[ShardKey, ShardPiece]]:
    """A spilled group's blocks (group_to_shards) written into one new file in `directory`, shard after
    shard; returns a ShardPiece for each shard they feed, once the file is complete."""
    size = spilled.size
    path = fs.join(
        directory, f"{ASSIGNED_ROWS_PREFIX}{size.split}-{size.group:05d}-{uuid.uuid4().hex}"
    )
    pieces: list[tuple[ShardKey, ShardPiece]] = []
    offset = 0
    with fs.open_atomic(path) as f:
        for key, batch in group_to_shards(spilled, layout, seed=seed):
            rows = np.ascontiguousarray(batch.rows)
            f.write(rows.tobytes())
            piece = ShardPiece(
                positions=batch.positions,
                path=path,
                offset=offset,
                shape=rows.shape,
                dtype=rows.dtype.str,
                names=batch.names,
            )
            pieces.append((key, piece))
            offset += rows.nbytes
    return pieces


def rows_in_files(output: str) -> bool:
    """Whether the staged pipeline leaves what crosses its two GroupByKeys in files, for a local output:
    the routed chunks (lmshards.preprocess.stages.split.ChunkPiece) and the assigned rows (ShardPiece),
    rather than sending them through the shuffle.

    Locally a file is cheaper than the runner's shuffle, which holds all of it (the DirectRunner hands
    each worker its whole share of a GroupByKey in one message). On an object store a piece is a
    request, and groups x shards pieces (millions on a large corpus) pass the rate a bucket serves
    reads at, where Dataflow Shuffle streams the data.
    """
    return not fs.is_remote(output)


def shard_batches(elements: Iterable[ShardBatch | ShardPiece]) -> Iterator[ShardBatch]:
    """A shard writer's input as ShardBatches: a ShardBatch as it came, a ShardPiece's rows read from
    its file (fs.read_pieces)."""
    for element, data in fs.read_pieces(elements, ShardPiece):
        if isinstance(element, ShardPiece):
            rows = np.frombuffer(data, np.dtype(element.dtype)).reshape(element.shape)
            yield ShardBatch(positions=element.positions, rows=rows, names=element.names)
        else:
            yield element


def empty_shards(layouts: dict[str, SplitLayout]) -> Iterator[tuple[ShardKey, ShardBatch]]:
    """An empty batch for every shard, so that a shard no group feeds is written too."""
    for split, layout in layouts.items():
        for shard in range(layout.num_shards):
            yield (split, shard), ShardBatch.empty()


def shard_range(shard: int, layout: SplitLayout) -> tuple[int, int]:
    """The shuffled positions [lo, hi) that shard_of puts in `shard`."""
    n, s = layout.num_records, layout.num_shards
    return -(-shard * n // s), -(-(shard + 1) * n // s)


def shard_bytes(windows: Iterable[np.ndarray], names: Sequence[str]) -> Iterator[bytes]:
    """The framed records of rows in file order ([n, features, seq_len] arrays, features in `names`
    order), SERIALIZE_ROWS records a piece: the shard is written as it is serialized, never held whole."""
    for rows in windows:
        for lo in range(0, rows.shape[0], SERIALIZE_ROWS):
            part = rows[lo : lo + SERIALIZE_ROWS]
            yield frame_examples({name: part[:, i] for i, name in enumerate(names)})


class ShardRecordsError(LmshardsError):
    """A shard's batches do not hold each of its positions exactly once."""


class _Coverage:
    """Which of a shard's positions [lo, lo + records) its batches held, as they pass."""

    def __init__(self, key: ShardKey, lo: int, records: int):
        self._key, self._lo = key, lo
        self._seen = np.zeros(records, dtype=bool)
        self._count = 0

    def batches(self, batches: Iterable[ShardBatch]) -> Iterator[ShardBatch]:
        """The non-empty batches, each counted as it passes."""
        for batch in batches:
            if not batch.positions.size:
                continue
            offsets = batch.positions - self._lo
            if offsets.min() < 0 or offsets.max() >= self._seen.size:
                raise self._error(f"a position outside [{self._lo}, {self._lo + self._seen.size})")
            self._seen[offsets] = True
            self._count += offsets.size
            yield batch

    def check(self) -> None:
        """Raises ShardRecordsError unless every position came exactly once."""
        if self._count != self._seen.size or not self._seen.all():
            raise self._error(f"{self._count} records for {self._seen.size} positions")

    def _error(self, what: str) -> ShardRecordsError:
        split, shard = self._key
        return ShardRecordsError(
            f"shard {shard} of the {split} split got {what}: a batch was lost or repeated between "
            "assigning and writing; the shard is not written. Run the job again."
        )


def write_rows(f: BinaryIO, positions: np.ndarray, rows: np.ndarray) -> None:
    """Appends records to an open rows file: [records], their shuffled positions, their feature rows."""
    f.write(np.array([positions.size], _ROWS_HEADER).tobytes())
    f.write(positions.astype("<i8").tobytes())
    f.write(np.ascontiguousarray(rows).tobytes())


def append_rows(path: str, positions: np.ndarray, rows: np.ndarray) -> None:
    """write_rows to the end of the file at `path`."""
    with open(path, "ab") as f:
        write_rows(f, positions, rows)


def read_rows_in_order(
    path: str, dtype: np.dtype, row_shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """(positions int64 [n] ascending, rows [n, features, seq_len] in that order) of every write_rows
    to path, read a piece at a time straight into their places: the rows are held once, not also as
    the file's bytes or in file order."""
    if not os.path.exists(path):
        return np.zeros(0, np.int64), np.zeros((0, *row_shape), dtype)
    piece_bytes = dtype.itemsize * math.prod(row_shape)  # a record's rows
    with open(path, "rb") as f:
        pieces = []  # (positions, where its rows start), read first: each row's place needs them all
        while header := f.read(_ROWS_HEADER.itemsize):
            (n,) = np.frombuffer(header, _ROWS_HEADER).tolist()
            pieces.append((np.frombuffer(f.read(8 * n), "<i8"), f.tell()))
            f.seek(n * piece_bytes, os.SEEK_CUR)
        positions = np.concatenate([p for p, _ in pieces]) if pieces else np.zeros(0, np.int64)
        order = np.argsort(positions)
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        rows = np.empty((positions.size, *row_shape), dtype)
        at = 0
        for piece_positions, start in pieces:
            n = piece_positions.size
            f.seek(start)
            rows[rank[at : at + n]] = np.frombuffer(f.read(n * piece_bytes), dtype).reshape(
                n, *row_shape
            )
            at += n
    return positions[order], rows


def _placed(first: ShardBatch, more: Iterator[ShardBatch], lo: int, records: int) -> np.ndarray:
    """The rows of `first` and `more` in position order: position p at row p - lo of [records, ...].
    When `first` alone holds every position in order (the in-process path sorts its shard's rows as
    it reads them), its own rows: a shard's rows are not held twice."""
    second = next(more, None)
    if second is None and np.array_equal(first.positions, np.arange(lo, lo + records)):
        return first.rows
    rows = np.empty((records, *first.rows.shape[1:]), first.rows.dtype)
    for batch in itertools.chain([first], [] if second is None else [second], more):
        rows[batch.positions - lo] = batch.rows
    return rows


def _spill_windows(
    batches: Iterable[ShardBatch], lo: int, window: int, directory: str
) -> list[str]:
    """Each batch's records written (write_rows) to the files of the windows of `window` positions from
    `lo` that they fall in; returns the windows' files, in position order."""
    paths: dict[int, str] = {}
    with contextlib.ExitStack() as stack:
        files: dict[int, BinaryIO] = {}
        for batch in batches:
            where = (batch.positions - lo) // window
            order = np.argsort(where, kind="stable")
            keys, firsts = np.unique(where[order], return_index=True)
            for w, mine in zip(keys.tolist(), np.split(order, firsts[1:])):
                if w not in files:
                    paths[w] = os.path.join(directory, f"{w:05d}")
                    files[w] = stack.enter_context(open(paths[w], "wb"))
                write_rows(files[w], batch.positions[mine], batch.rows[mine])
    return [paths[w] for w in sorted(paths)]


def _read_windows(
    paths: Iterable[str], lo: int, records: int, window: int, like: ShardBatch
) -> Iterator[np.ndarray]:
    """Each window _spill_windows wrote, in position order, one at a time."""
    for w, path in enumerate(paths):
        positions, rows = read_rows_in_order(path, like.rows.dtype, like.rows.shape[1:])
        batch = ShardBatch(positions=positions, rows=rows, names=like.names)
        yield _placed(batch, iter(()), lo + w * window, min(window, records - w * window))


def write_shard(
    output: str,
    key: ShardKey,
    batches: Iterable[ShardBatch],
    *,
    layout: SplitLayout,
    window_bytes: int | None = None,
) -> ShardInfo:
    """Writes one shard's records in position order; returns its ShardInfo once the file is complete.

    The batches are read once, as they come. A shard whose rows pass `window_bytes` is put in order
    through files of local disk, a window of positions at a time; else (or with None) in memory.

    Raises:
      ShardRecordsError: the batches do not hold each of the shard's positions exactly once.
    """
    lo, hi = shard_range(key[1], layout)
    coverage = _Coverage(key, lo, hi - lo)
    passing = coverage.batches(batches)
    first = next(passing, None)
    if first is None:
        coverage.check()
        return write_shard_bytes(output, key, (), records=0, num_shards=layout.num_shards)
    row_bytes = first.rows[0].nbytes
    if window_bytes is None or (hi - lo) * row_bytes <= window_bytes:
        rows = _placed(first, passing, lo, hi - lo)
        coverage.check()
        return write_shard_bytes(
            output,
            key,
            shard_bytes([rows], first.names),
            records=hi - lo,
            num_shards=layout.num_shards,
        )
    # At most MAX_SHARD_WINDOWS files open at once: a larger shard gets larger windows.
    window = max(1, window_bytes // row_bytes, -(-(hi - lo) // MAX_SHARD_WINDOWS))
    with tempfile.TemporaryDirectory(prefix=SHARD_WINDOWS_PREFIX) as directory:
        paths = _spill_windows(itertools.chain([first], passing), lo, window, directory)
        coverage.check()
        windows = _read_windows(paths, lo, hi - lo, window, first)
        return write_shard_bytes(
            output,
            key,
            shard_bytes(windows, first.names),
            records=hi - lo,
            num_shards=layout.num_shards,
        )


class ShardWriter:
    """write_shard, counting every shard it writes (ShardCounters): the write step of both paths.

    `window_bytes`: the most of a shard's rows held in memory (write_shard); None holds a whole shard
    (the in-process path, which has read its shard's file whole)."""

    def __init__(self, output: str, window_bytes: int | None):
        self._output, self._window_bytes = output, window_bytes
        self.counters = ShardCounters()

    def write(
        self, key: ShardKey, batches: Iterable[ShardBatch], layouts: dict[str, SplitLayout]
    ) -> ShardInfo:
        info = self.write_uncounted(key, batches, layouts)
        self.count(info, layouts)
        return info

    def write_uncounted(
        self, key: ShardKey, batches: Iterable[ShardBatch], layouts: dict[str, SplitLayout]
    ) -> ShardInfo:
        """write without counting, for a thread beside the step's: count() each shard on the step's
        thread (a Beam counter counts only there)."""
        split, _ = key
        return write_shard(
            self._output, key, batches, layout=layouts[split], window_bytes=self._window_bytes
        )

    def count(self, info: ShardInfo, layouts: dict[str, SplitLayout]) -> None:
        self.counters.add(info.records, total=sum(layout.num_shards for layout in layouts.values()))


def write_shard_bytes(
    output: str, key: ShardKey, data: Iterable[bytes], *, records: int, num_shards: int
) -> ShardInfo:
    """Writes one shard of `records` framed records from `data` (their bytes, in file order, in
    pieces of any size); returns its ShardInfo once the file is complete.

    Locally the shard is written under a temporary name, then renamed. On an object store it is
    written under its final name: an object only appears once its upload is finalized, and a rename
    there is a copy (gcsfs also first tries an API that emulators lack, with long retries).
    A retried writer rewrites the same bytes, so either way readers never see half a shard.
    """
    split, shard = key
    relpath = shard_relpath(split, shard, num_shards, records)
    final = fs.join(output, relpath)
    remote = fs.is_remote(final)
    target = (
        final
        if remote
        else fs.join(output, TEMP_DIR_NAME, f"{split}-{shard:05d}-{uuid.uuid4().hex}")
    )
    if not remote:
        fs.makedirs(fs.join(output, TEMP_DIR_NAME))
        fs.makedirs(fs.join(output, split))
    digest, size = hashlib.sha256(), 0
    with fs.open_file(target, "wb") as f:
        for piece in data:
            f.write(piece)
            digest.update(piece)
            size += len(piece)
    if not remote:
        os.replace(target, final)
    return ShardInfo(path=relpath, records=records, bytes=size, sha256=digest.hexdigest())
