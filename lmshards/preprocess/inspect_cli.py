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

from lmshards.plumbing import bounded, fs
from lmshards.plumbing.cli import (
    EXIT_FAILURE,
    EXIT_OK,
    CommandParser,
    add_verbose_flag,
    run_command,
    setup_logging,
)
from lmshards.plumbing.flag_types import whole
from lmshards.plumbing.progress import bytes_progress
from lmshards.plumbing.units import format_duration, megabytes
from lmshards.preprocess.curation.audit import audit_problems, describe_curation
from lmshards.schemas.constants import INPUT_IDS, MANIFEST_NAME
from lmshards.schemas.directory_kind import is_token_store
from lmshards.schemas.manifest import Manifest, ShardInfo, read_manifest, tokenizer_copy_problem
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
        "and input ids within the tokenizer's vocabulary",
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
    setup_logging(verbose=args.verbose, packages=("preprocess", "schemas"))
    return run_command(COMMAND, lambda: _inspect(args))


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
    print(
        f"verify: OK, {shards} shards{audited} match the manifest (records, bytes, sha256, input ids "
        f"< vocab_size {manifest.tokenizer.vocab_size:,}) {took}",
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
    """What every record's input_ids must be: seq_len values in [0, vocab_size)."""

    vocab_size: int
    seq_len: int
    fix: str  # how to repair an output whose records break the rule


class ShardIds:
    """The input_ids of one shard's records, checked batch by batch against an IdRule."""

    def __init__(self, rule: IdRule):
        self.rule = rule
        self.outside = 0  # ids outside [0, vocab_size)
        self.low: int | None = None
        self.high: int | None = None
        self.problem = ""  # a record that cannot be checked; nothing more is checked after it

    def add(self, records: list[bytes]) -> None:
        if self.problem or not records:
            return
        try:
            ids = decode_examples(records, (INPUT_IDS,))[INPUT_IDS]
        except MalformedExampleError as e:
            self.problem = f"a record is not a tf.train.Example of the manifest's features ({e})"
            return
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

    def problems(self) -> list[str]:
        if self.problem:
            return [f"{self.problem}; {self.rule.fix}"]
        if self.outside:
            return [
                f"{self.outside:,} input ids outside [0, vocab_size {self.rule.vocab_size:,}) "
                f"(lowest {self.low:,}, highest {self.high:,}): not written with the manifest's tokenizer; "
                f"{self.rule.fix}"
            ]
        return []


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
