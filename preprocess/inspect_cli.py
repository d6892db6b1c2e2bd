"""`lmshards inspect PATH`: summarize a preprocess output; `--verify` re-reads every shard."""

from __future__ import annotations

import argparse
import hashlib
import sys
from typing import Sequence

from schemas import fs
from schemas.cli import EXIT_FAILURE, EXIT_OK, CommandParser, run_command, setup_logging
from schemas.constants import MANIFEST_NAME
from schemas.manifest import Manifest, ShardInfo, read_manifest
from schemas.records import CorruptRecordError, read_records

COMMAND = "inspect"
EXIT_MISMATCH = EXIT_FAILURE  # --verify found shards that do not match the manifest


def build_parser() -> CommandParser:
    parser = CommandParser(COMMAND, description=__doc__.split("\n")[0])
    parser.add_argument("path", help="a preprocess output directory (or its manifest.json), local or gs://")
    parser.add_argument("--verify", action="store_true",
                        help="re-read every shard: record count (TFRecord framing and CRCs), bytes and sha256")
    parser.add_argument("--json", action="store_true", help="print the manifest as JSON")
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    setup_logging(packages=("preprocess", "schemas"))
    return run_command(COMMAND, lambda: _inspect(args))


def _inspect(args: argparse.Namespace) -> int:
    output = args.path.rstrip("/")
    if output.endswith("/" + MANIFEST_NAME) or output == MANIFEST_NAME:
        output = output[: -len(MANIFEST_NAME)].rstrip("/") or "."
    manifest = read_manifest(output)
    print(manifest.to_json() if args.json else describe(manifest, output), end="" if args.json else "\n")
    if not args.verify:
        return EXIT_OK
    problems = verify(manifest, output)
    for problem in problems:
        print(f"MISMATCH {problem}", file=sys.stderr)
    shards = sum(len(s.shards) for s in manifest.splits.values())
    if problems:
        print(f"verify: {len(problems)} problem(s) in {shards} shards", file=sys.stderr)
        return EXIT_MISMATCH
    print(f"verify: OK, {shards} shards match the manifest (records, bytes, sha256)", file=sys.stderr)
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
    if manifest.reading:
        lines.append(f"  reading: {', '.join(f'{k} {v:,}' for k, v in sorted(manifest.reading.items()))}")
    for name, split in manifest.splits.items():
        t, records = split.totals, [s.records for s in split.shards]
        size = sum(s.bytes for s in split.shards)
        per_shard = f"{min(records)}-{max(records)} per shard" if records else "no shards"
        lines += [
            f"  {name}: {split.records:,} records in {len(split.shards)} shards ({per_shard}), {size:,} bytes",
            f"    documents {t.documents:,}; tokens in {t.tokens_in:,}, written {t.tokens_written:,}, "
            f"dropped {t.tokens_dropped:,}, padding {t.padding_tokens:,}",
        ]
    return "\n".join(lines)


def verify(manifest: Manifest, output: str) -> list[str]:
    """One line per shard that does not match the manifest (missing, bytes, sha256, records, framing)."""
    problems = []
    for name in manifest.splits:
        for shard, path in zip(manifest.split(name).shards, manifest.shard_paths(output, name)):
            problems += [f"{path}: {p}" for p in _verify_shard(shard, path)]
    return problems


class _HashingReader:
    """A binary reader that hashes and counts every byte read through it."""

    def __init__(self, f):
        self._f, self.digest, self.bytes = f, hashlib.sha256(), 0

    def read(self, n: int) -> bytes:
        data = self._f.read(n)
        self.digest.update(data)
        self.bytes += len(data)
        return data


def _verify_shard(shard: ShardInfo, path: str) -> list[str]:
    if not fs.exists(path):
        return ["missing"]
    problems = []
    records: int | None = 0
    with fs.open_file(path, "rb") as f:
        reader = _HashingReader(f)
        try:
            for _ in read_records(reader):
                records += 1
        except CorruptRecordError as e:
            problems.append(f"corrupt TFRecord: {e}")
            records = None  # unknown past a corrupt frame
        while reader.read(1 << 20):  # hash whatever follows a corrupt frame too
            pass
    if records is not None and records != shard.records:
        problems.append(f"{records} records, manifest says {shard.records}")
    if reader.bytes != shard.bytes:
        problems.append(f"{reader.bytes} bytes, manifest says {shard.bytes}")
    if reader.digest.hexdigest() != shard.sha256:
        problems.append(f"sha256 {reader.digest.hexdigest()}, manifest says {shard.sha256}")
    return problems
