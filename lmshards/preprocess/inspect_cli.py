"""`lmshards inspect PATH`: summarize a preprocess output; `--verify` re-reads every shard."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import BinaryIO, cast

import numpy as np

from lmshards.plumbing import bounded, fs, stopping
from lmshards.plumbing.cli import (
    EXIT_FAILURE,
    EXIT_OK,
    CommandParser,
    add_verbose_flag,
    one_line_errors,
    setup_logging,
)
from lmshards.plumbing.flag_types import whole
from lmshards.plumbing.progress import bytes_progress
from lmshards.plumbing.units import format_duration, megabytes
from lmshards.preprocess.curation.audit import audit_problems, describe_curation
from lmshards.schemas.constants import (
    ATTENTION_MASK,
    INPUT_IDS,
    MANIFEST_NAME,
    PACKED_FEATURE_NAMES,
    POSITIONS,
    SEGMENT_IDS,
)
from lmshards.schemas.directory_kind import is_token_store
from lmshards.schemas.manifest import (
    Manifest,
    ShardInfo,
    continued_positions,
    read_manifest,
    tokenizer_copy_problem,
)
from lmshards.schemas.records import (
    CorruptRecordError,
    MalformedExampleError,
    decode_examples,
    read_records,
)

logger = logging.getLogger(__name__)

COMMAND = "inspect"
EXIT_MISMATCH = EXIT_FAILURE  # --verify found shards that do not match the manifest
# Shards verified at once: reads wait on I/O (gs:// above all) and sha256 releases the GIL.
DEFAULT_THREADS = 8
MAX_THREADS = 256
PROGRESS_EVERY_S = 5.0  # at most one progress line per this many seconds
DECODE_BATCH_RECORDS = 4096  # records decoded at once for the input id check


def build_parser() -> CommandParser:
    parser = CommandParser(COMMAND, description=__doc__.split("\n")[0])
    parser.add_argument(
        "path",
        help="a preprocess output directory (or its manifest.json), or a token store, local or gs://",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="re-read every shard: record count (TFRecord framing and CRCs), bytes, sha256, "
        "input ids within the tokenizer's vocabulary, and a packed set's segments and positions",
    )
    parser.add_argument(
        "--threads",
        type=whole(1, MAX_THREADS),
        default=DEFAULT_THREADS,
        help="shards verified at once with --verify",
    )
    parser.add_argument("--json", action="store_true", help="print the manifest as JSON")
    add_verbose_flag(parser)
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    setup_logging(verbose=args.verbose, packages=("lmshards.preprocess", "lmshards.schemas"))
    with one_line_errors(COMMAND) as failed, stopping.stop_signals():
        return _inspect(args)
    return failed.code


def _inspect(args: argparse.Namespace) -> int:
    output = args.path.rstrip("/")
    if output.endswith("/" + MANIFEST_NAME) or output == MANIFEST_NAME:
        output = output[: -len(MANIFEST_NAME)].rstrip("/") or "."
    if is_token_store(output):
        from lmshards.preprocess.stages.tokens import describe_store, read_store_manifest

        store = read_store_manifest(output)
        print(
            store.to_json() if args.json else describe_store(store, output),
            end="" if args.json else "\n",
        )
        if args.verify:
            verify_store(output, store)
        return EXIT_OK
    manifest = read_manifest(output)
    print(
        manifest.to_json() if args.json else describe(manifest, output),
        end="" if args.json else "\n",
    )
    if not args.verify:
        return EXIT_OK
    start = time.monotonic()
    problems = verify(manifest, output, threads=args.threads, progress_every_s=PROGRESS_EVERY_S)
    elapsed = time.monotonic() - start
    size = megabytes(
        sum(shard.bytes for split in manifest.splits.values() for shard in split.shards)
    )
    took = f"in {format_duration(elapsed)} ({size:,.1f} MB, {size / max(elapsed, 1e-9):,.1f} MB/s)"
    for problem in problems:
        print(f"MISMATCH {problem}", file=sys.stderr)
    shards = sum(len(s.shards) for s in manifest.splits.values())
    if problems:
        print(f"verify: {len(problems)} problem(s) in {shards} shards, {took}", file=sys.stderr)
        return EXIT_MISMATCH
    audited = " and the curation audit" if manifest.curation is not None else ""
    packing = ", segments and positions" if manifest.packed else ""
    print(
        f"verify: OK, {shards} shards{audited} match the manifest (records, bytes, sha256, input ids "
        f"< vocab_size {manifest.tokenizer.vocab_size:,}{packing}) {took}",
        file=sys.stderr,
    )
    return EXIT_OK


def describe(manifest: Manifest, output: str) -> str:
    """A few readable lines: what made the output, and what each split holds."""
    tok = manifest.tokenizer
    lines = [
        f"{output}: {manifest.format} v{manifest.format_version}, lmshards {manifest.tool_version}, "
        f"created {manifest.created_at or '?'}",
        f"  seq_len {manifest.seq_len}, features {', '.join(manifest.features())}, seed {manifest.seed}",
        f"  tokenizer {tok.fingerprint} vocab {tok.vocab_size:,} special {tok.special_token_ids}",
        f"  inputs: {len(manifest.inputs)} files, {sum(i.bytes for i in manifest.inputs):,} bytes",
        f"  options: {', '.join(f'{k}={v}' for k, v in sorted(manifest.options.items()))}",
    ]
    lines.append(
        f"  tokens: kept in {manifest.tokens}/ (`lmshards repack --tokens {output}` builds other shard sets)"
        if manifest.tokens
        else "  tokens: not kept (`lmshards preprocess --keep_tokens` keeps them, for `lmshards repack`)"
    )
    if manifest.repacked_from:
        lines.append(f"  repacked from the token store {manifest.repacked_from}")
    if manifest.reading:
        lines.append(
            f"  reading: {', '.join(f'{k} {v:,}' for k, v in sorted(manifest.reading.items()))}"
        )
    if manifest.curation is not None:
        lines += describe_curation(manifest.curation)
    for name, split in manifest.splits.items():
        t, records = split.totals, [s.records for s in split.shards]
        size = sum(s.bytes for s in split.shards)
        per_shard = f"{min(records)}-{max(records)} per shard" if records else "no shards"
        lines += [
            f"  {name}: {split.records:,} records in {len(split.shards)} shards ({per_shard}), {size:,} bytes",
            f"    documents {t.documents:,}; tokens in {t.tokens_in:,}, written {t.tokens_written:,}, "
            f"dropped {t.tokens_dropped:,}, padding {t.padding_tokens:,} "
            f"({t.padding_share(manifest.seq_len):.2%})",
        ]
        if manifest.packed:
            lines.append(
                f"    {manifest.packing}: {t.segments:,} segments, {t.segments_per_block:.2f} per block; "
                f"{t.documents_split:,} documents longer than a block, cut into block-sized pieces"
            )
    if continued_positions(manifest):
        lines.append(
            "  positions: a long document's pieces continue past seq_len (format_version "
            f"{manifest.format_version}); `lmshards train` refuses this set until it is written again"
        )
    return "\n".join(lines)


def verify_store(store: str, manifest) -> None:
    """Re-reads every part file of a token store: sha256, Parquet, document and token counts.

    Raises:
      TokenStoreError: naming the first file that does not match the store's manifest.
    """
    from lmshards.preprocess.stages.tokens import check_store_files, iter_store

    check_store_files(store, manifest)
    for _ in iter_store(store, manifest):
        pass
    print(f"verified {len(manifest.files)} token files, {manifest.tokens:,} tokens: OK")


# ---------------------------------------------------------------- --verify


def verify(
    manifest: Manifest,
    output: str,
    *,
    threads: int = DEFAULT_THREADS,
    progress_every_s: float = PROGRESS_EVERY_S,
) -> list[str]:
    """One line per problem, in manifest order: each shard's (missing, framing, records, bytes, sha256, input
    ids), then the tokenizer copy's (missing, or not the manifest's fingerprint), then the curation
    audit's (files, lines and counts against the manifest's curation section).

    Shards are verified `threads` at a time; the result does not depend on the thread count. A progress
    line (shards, MB, MB/s, ETA) is logged every `progress_every_s` seconds while shards remain.
    """
    shards = [
        (shard, path)
        for name in manifest.splits
        for shard, path in zip(manifest.split(name).shards, manifest.shard_paths(output, name))
    ]
    progress = VerifyProgress(
        shards_total=len(shards), bytes_total=sum(shard.bytes for shard, _ in shards)
    )
    rule = IdRule(
        vocab_size=manifest.tokenizer.vocab_size,
        seq_len=manifest.seq_len,
        fix=f"re-run `lmshards preprocess --overwrite` into {output} with the manifest's tokenizer "
        f"({manifest.tokenizer.fingerprint})",
        pad_id=manifest.tokenizer.special_token_ids.get("pad") if manifest.packed else None,
    )
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="verify")
    try:
        futures = [
            pool.submit(_verify_shard, shard, path, rule=rule, progress=progress)
            for shard, path in shards
        ]
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=progress_every_s)
            if pending:
                logger.info("%s", progress.line())
    finally:
        pool.shutdown(cancel_futures=True)  # on Ctrl-C, only the shards being read are finished
    tokenizer = tokenizer_copy_problem(manifest, output)
    return (
        [
            f"{path}: {problem}"
            for (_, path), future in zip(shards, futures)
            for problem in future.result()
        ]
        + ([f"{output}: {tokenizer}"] if tokenizer else [])
        + audit_problems(manifest, output)
    )


def progress_line(
    *, shards_done: int, shards_total: int, bytes_done: int, bytes_total: int, elapsed_s: float
) -> str:
    """'verify: k/N shards, x of y MB (p%), r MB/s, ETA t'."""
    progress = bytes_progress(done=bytes_done, total=bytes_total, seconds=elapsed_s)
    return f"verify: {shards_done}/{shards_total} shards, {progress}"


class VerifyProgress:
    """Shards finished and bytes read, counted by every verifying thread."""

    def __init__(
        self, *, shards_total: int, bytes_total: int, clock: Callable[[], float] = time.monotonic
    ):
        self.shards_total, self.bytes_total, self._clock = shards_total, bytes_total, clock
        self._start = clock()
        self._lock = threading.Lock()
        self.shards_done = self.bytes_done = 0

    def add_bytes(self, n: int) -> None:
        with self._lock:
            self.bytes_done += n

    def shard_done(self) -> None:
        with self._lock:
            self.shards_done += 1

    def line(self) -> str:
        with self._lock:
            return progress_line(
                shards_done=self.shards_done,
                shards_total=self.shards_total,
                bytes_done=self.bytes_done,
                bytes_total=self.bytes_total,
                elapsed_s=self._clock() - self._start,
            )


@dataclasses.dataclass(frozen=True)
class IdRule:
    """What every record's input_ids must be: seq_len values in [0, vocab_size).

    pad_id: set for a packed set, whose records are also checked by packed_record_problem.
    """

    vocab_size: int
    seq_len: int
    fix: str  # how to repair an output whose records break the rule
    pad_id: int | None = None

    @property
    def packed(self) -> bool:
        return self.pad_id is not None


def _first(bad: np.ndarray) -> tuple[int, int] | None:
    """(record, token) of the first True of a [records, seq_len] array, row by row; None if none."""
    flat = np.flatnonzero(bad)
    return divmod(int(flat[0]), bad.shape[1]) if flat.size else None


def packed_record_problem(
    features: dict[str, np.ndarray], *, seq_len: int, pad_id: int
) -> tuple[int, str] | None:
    """The first record of a batch of packed records that breaks the packing rule, and what it breaks.

    The rule (lmshards.preprocess.stages.pack.pack_best_fit): segment ids are 1 at the first token and
    rise by 1 from one segment to the next, padding (segment 0) only after the last; a segment's
    positions are 0, 1, 2, ... (so below seq_len); a padding token is pad_id with attention_mask,
    segment id and position 0, and every other token has attention_mask 1.
    features: int64 [records, seq_len] arrays of PACKED_FEATURE_NAMES.
    """
    seg, pos = features[SEGMENT_IDS], features[POSITIONS]
    mask, ids = features[ATTENTION_MASK], features[INPUT_IDS]
    prev_seg = np.pad(seg[:, :-1], ((0, 0), (1, 0)))
    prev_pos = np.pad(pos[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    real, first = seg > 0, np.zeros(seg.shape, bool)
    first[:, 0] = True
    starts = real & (seg != prev_seg)
    segment_ok = np.where(
        first, seg == 1, (seg == 0) | (seg == prev_seg) | ((seg == prev_seg + 1) & (prev_seg > 0))
    )
    checks = (
        (
            real & ((pos < 0) | (pos >= seq_len)),
            lambda r, t: f"position {pos[r, t]} at token {t} is not in [0, seq_len {seq_len})",
        ),
        (
            ~segment_ok,
            lambda r, t: (
                f"segment id {seg[r, t]} at token {t} (after {prev_seg[r, t]}): segment "
                "ids run 1, 2, ... from the first token, padding (0) only after the last"
            ),
        ),
        (
            starts & (pos != 0),
            lambda r, t: (
                f"segment {seg[r, t]} starts at token {t} with position {pos[r, t]}, not 0"
            ),
        ),
        (
            real & ~starts & (pos != prev_pos + 1),
            lambda r, t: (
                f"position {pos[r, t]} at token {t} does not follow {prev_pos[r, t]} "
                f"within segment {seg[r, t]}"
            ),
        ),
        (
            ~real & ((pos != 0) | (mask != 0) | (ids != pad_id)),
            lambda r, t: (
                f"padding token {t} holds position {pos[r, t]}, {ATTENTION_MASK} "
                f"{mask[r, t]}, {INPUT_IDS} {ids[r, t]}; padding is position 0, {ATTENTION_MASK} 0, "
                f"the pad id {pad_id}"
            ),
        ),
        (
            real & (mask != 1),
            lambda r, t: (
                f"token {t} of segment {seg[r, t]} has {ATTENTION_MASK} {mask[r, t]}, not 1"
            ),
        ),
    )
    found = [(where, describe) for bad, describe in checks if (where := _first(bad)) is not None]
    if not found:
        return None
    # The first bad record; of its problems, the first check's.
    (record, token), describe = min(found, key=lambda f: f[0][0])
    return record, describe(record, token)


class ShardIds:
    """The input_ids of one shard's records (and a packed set's segments and positions), checked batch
    by batch against an IdRule."""

    def __init__(self, rule: IdRule):
        self.rule = rule
        self.outside = 0  # ids outside [0, vocab_size)
        self.low: int | None = None
        self.high: int | None = None
        self.problem = ""  # a record that cannot be checked; nothing more is checked after it
        self.packing_problem = ""  # the first packed record that breaks the packing rule
        self.records = 0  # records checked so far: the index of the next batch's first

    def add(self, records: list[bytes]) -> None:
        if self.problem or not records:
            return
        names = PACKED_FEATURE_NAMES if self.rule.packed else (INPUT_IDS,)
        try:
            features = decode_examples(records, names)
        except MalformedExampleError as e:
            self.problem = f"a record is not a tf.train.Example of the manifest's features ({e})"
            return
        ids = features[INPUT_IDS]
        if ids.shape[1] != self.rule.seq_len:
            self.problem = (
                f"{INPUT_IDS} hold {ids.shape[1]} values per record, the manifest's seq_len is "
                f"{self.rule.seq_len}"
            )
            return
        self.outside += int(np.count_nonzero((ids < 0) | (ids >= self.rule.vocab_size)))
        low, high = int(ids.min()), int(ids.max())  # records hold seq_len >= 1 ids each
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)
        if self.rule.pad_id is not None and not self.packing_problem:
            found = packed_record_problem(
                features, seq_len=self.rule.seq_len, pad_id=self.rule.pad_id
            )
            if found is not None:
                record, what = found
                self.packing_problem = f"record {self.records + record}: {what}"
        self.records += len(records)

    def problems(self) -> list[str]:
        if self.problem:
            return [f"{self.problem}; {self.rule.fix}"]
        problems = []
        if self.outside:
            problems.append(
                f"{self.outside:,} input ids outside [0, vocab_size {self.rule.vocab_size:,}) "
                f"(lowest {self.low:,}, highest {self.high:,}): not written with the manifest's tokenizer; "
                f"{self.rule.fix}"
            )
        if self.packing_problem:
            problems.append(
                f"{self.packing_problem} (the first such record of the shard); {self.rule.fix}"
            )
        return problems


class _HashingReader:
    """A binary reader that hashes and counts every byte read through it."""

    def __init__(self, f: BinaryIO, progress: VerifyProgress):
        self._f, self._progress, self.digest, self.bytes = f, progress, hashlib.sha256(), 0

    def read(self, n: int) -> bytes:
        data = self._f.read(n)
        self.digest.update(data)
        self.bytes += len(data)
        self._progress.add_bytes(len(data))
        return data


def _verify_shard(
    shard: ShardInfo, path: str, *, rule: IdRule, progress: VerifyProgress
) -> list[str]:
    try:
        return _check_shard(shard, path, rule=rule, progress=progress)
    finally:
        progress.shard_done()


def _check_shard(
    shard: ShardInfo, path: str, *, rule: IdRule, progress: VerifyProgress
) -> list[str]:
    """Problems of one shard against its manifest entry, from one read: framing, counts, sha256, input ids."""
    if not fs.exists(path):
        return ["missing"]
    bounded.check_regular_file(path, "shard file")  # a FIFO or /dev/zero would never end
    problems: list[str] = []
    shard_ids = ShardIds(rule)
    records = 0
    corrupt = False
    batch: list[bytes] = []
    with fs.open_file(path, "rb") as f:
        reader = _HashingReader(f, progress)
        try:
            for record in read_records(cast(BinaryIO, reader)):
                batch.append(record)
                if len(batch) == DECODE_BATCH_RECORDS:
                    records += len(batch)
                    shard_ids.add(batch)
                    batch = []
            records += len(batch)
        except CorruptRecordError as e:
            problems.append(f"corrupt TFRecord: {e}")
            corrupt = True  # the record count is unknown past a corrupt frame
        shard_ids.add(batch)  # the records before a corrupt frame too
        while reader.read(1 << 20):  # hash whatever follows a corrupt frame too
            pass
    if not corrupt and records != shard.records:
        problems.append(f"{records} records, manifest says {shard.records}")
    if reader.bytes != shard.bytes:
        problems.append(f"{reader.bytes} bytes, manifest says {shard.bytes}")
    if reader.digest.hexdigest() != shard.sha256:
        problems.append(f"sha256 {reader.digest.hexdigest()}, manifest says {shard.sha256}")
    return problems + shard_ids.problems()
