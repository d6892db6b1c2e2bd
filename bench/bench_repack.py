"""Repack benchmark: `lmshards repack` to a new seq_len side by side with `lmshards preprocess` from the text.

In one run, on the same machine, with the same tokenizer.json and the same runner flags:
  (0) store     - `lmshards preprocess --keep_tokens --seq_len STORE_SEQ_LEN`: the shard set whose token
                  store the repack reads (measured too: what keeping the tokens costs on top of a run);
  (a) preprocess - `lmshards preprocess --seq_len SEQ_LEN` from the text;
  (b) repack    - `lmshards repack --tokens STORE --seq_len SEQ_LEN`.
(a) and (b) must write the same shards (the summary compares every shard's SHA-256). Each runs in a fresh
subprocess; wall time is the process's, start to exit, and peak memory that of its whole process tree
(see common.py). The machine's load averages before each run are reported beside it.

Usage (from the repository root, with the venv active):
  python -m bench.bench_repack --corpus /tmp/bench-corpus/en --json bench-repack.json
  python -m bench.bench_repack --corpus data/sample/en       # quick check
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    MB,
    RUN_TIMEOUT_S,
    Measurement,
    child_env,
    corpus_files,
    load_average,
    report_header,
    run_checked,
    shards_digest,
    train_tokenizer,
)
from lmshards.schemas.constants import TOKENS_DIR_NAME
from lmshards.schemas.manifest import read_manifest

CODE_DIRS = ("preprocess", "schemas", "plumbing", "bench")
DEFAULT_STORE_SEQ_LEN = 128  # BERT's first phase: the run that keeps the tokens
DEFAULT_SEQ_LEN = 512  # the second phase, by repack or by preprocess again
TARGET_SPEEDUP = 5.0  # (a) wall / (b) wall
STORE, PREPROCESS, REPACK = "store", "preprocess", "repack"


@dataclasses.dataclass(frozen=True)
class Config:
    corpus: Path
    work_dir: Path
    json_out: Path | None
    store_seq_len: int
    seq_len: int
    runner_args: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Result:
    system: str
    wall_s: float
    cpu_s: float
    peak_rss_bytes: int
    peak_pss_bytes: int
    max_single_rss_bytes: int
    load_before: tuple[float, float, float]
    mean_load1: float
    records: int
    shard_bytes: int
    shards_sha256: str  # over every shard's (path, sha256)


def measure(system: str, argv: Sequence[str], output: Path) -> Result:
    load = load_average()
    m: Measurement = run_checked(argv, env=child_env(), timeout_s=RUN_TIMEOUT_S)
    manifest = read_manifest(str(output))
    return Result(
        system=system,
        wall_s=m.wall_s,
        cpu_s=m.cpu_s,
        peak_rss_bytes=m.peak_rss_bytes,
        peak_pss_bytes=m.peak_pss_bytes,
        max_single_rss_bytes=m.max_single_rss_bytes,
        load_before=load,
        mean_load1=m.mean_load1,
        records=sum(s.totals.records for s in manifest.splits.values()),
        shard_bytes=sum(sh.bytes for s in manifest.splits.values() for sh in s.shards),
        shards_sha256=shards_digest(manifest),
    )


def store_figures(store: Path) -> dict[str, Any]:
    """The token store's size: bytes of its part files, tokens, bytes per token."""
    data = json.loads((store / "manifest.json").read_text())
    data_bytes = sum(f["bytes"] for f in data["files"])
    return {
        "documents": data["documents"],
        "tokens": data["tokens"],
        "id_dtype": data["id_dtype"],
        "files": len(data["files"]),
        "bytes": data_bytes,
        "bytes_per_token": data_bytes / data["tokens"],
    }


def run(config: Config) -> dict[str, Any]:
    files = corpus_files(config.corpus)
    tokenizer = train_tokenizer(files, config.work_dir)
    scratch = Path(tempfile.mkdtemp(prefix="repack-", dir=config.work_dir))
    inputs = [arg for f in files for arg in ("--input", str(f))]
    py = [sys.executable, "-m", "lmshards"]
    try:
        store_out, text_out, repack_out = (scratch / n for n in (STORE, PREPROCESS, REPACK))
        store = measure(
            STORE,
            [*py, "preprocess", *inputs, "--tokenizer", str(tokenizer), "--output", str(store_out),
             "--seq_len", str(config.store_seq_len), "--keep_tokens", *config.runner_args],
            store_out,
        )  # fmt: skip
        text = measure(
            PREPROCESS,
            [*py, "preprocess", *inputs, "--tokenizer", str(tokenizer), "--output", str(text_out),
             "--seq_len", str(config.seq_len), *config.runner_args],
            text_out,
        )  # fmt: skip
        repack = measure(
            REPACK,
            [*py, "repack", "--tokens", str(store_out), "--output", str(repack_out),
             "--seq_len", str(config.seq_len), *config.runner_args],
            repack_out,
        )  # fmt: skip
        tokens = store_figures(store_out / TOKENS_DIR_NAME)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "corpus_bytes": sum(f.stat().st_size for f in files),
        "store_seq_len": config.store_seq_len,
        "seq_len": config.seq_len,
        "runner_args": list(config.runner_args),
        "results": [dataclasses.asdict(r) for r in (store, text, repack)],
        "token_store": {
            **tokens,
            "vs_shard_set": tokens["bytes"] / store.shard_bytes,
            "shard_set_bytes_per_token": store.shard_bytes / tokens["tokens"],
        },
        "speedup_wall": text.wall_s / repack.wall_s,
        "speedup_cpu": text.cpu_s / repack.cpu_s,
        "peak_pss_ratio": repack.peak_pss_bytes / text.peak_pss_bytes,
        "peak_rss_ratio": repack.peak_rss_bytes / text.peak_rss_bytes,
        "same_shards": text.shards_sha256 == repack.shards_sha256,
        "target_speedup": TARGET_SPEEDUP,
    }


def summary_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        f"{'system':<11} {'wall s':>8} {'CPU s':>8} {'peak PSS MB':>12} {'peak RSS MB':>12} "
        f"{'load before':>16}"
    ]
    for r in report["results"]:
        load = "/".join(f"{x:.2f}" for x in r["load_before"])
        lines.append(
            f"{r['system']:<11} {r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} {r['peak_pss_bytes'] / MB:>12.0f} "
            f"{r['peak_rss_bytes'] / MB:>12.0f} {load:>16}"
        )
    t = report["token_store"]
    lines += [
        f"repack vs preprocess to seq {report['seq_len']}: {report['speedup_wall']:.1f}x by wall time, "
        f"{report['speedup_cpu']:.1f}x by CPU seconds (target {report['target_speedup']:.0f}x); peak PSS "
        f"{report['peak_pss_ratio']:.2f}x, peak RSS {report['peak_rss_ratio']:.2f}x; "
        f"same shards: {report['same_shards']}",
        f"token store: {t['tokens']:,} tokens ({t['id_dtype']}) in {t['files']} files, {t['bytes']:,} bytes = "
        f"{t['bytes_per_token']:.2f} bytes per token ({t['vs_shard_set']:.2f}x the seq-"
        f"{report['store_seq_len']} shard set beside it, {t['shard_set_bytes_per_token']:.2f} bytes per token)",
    ]
    return lines


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="directory of *.txt files")
    parser.add_argument("--work-dir", type=Path, default=None, help="scratch (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    parser.add_argument("--store-seq-len", type=int, default=DEFAULT_STORE_SEQ_LEN)
    parser.add_argument("--seq-len", type=int, default=DEFAULT_SEQ_LEN)
    parser.add_argument(
        "--runner-args",
        default="",
        help="Beam runner flags given to every run, e.g. '--runner DaskRunner' (default: the default runner)",
    )
    args = parser.parse_args(argv)
    work_dir = args.work_dir or Path(tempfile.gettempdir()) / "lmshards-bench"
    work_dir.mkdir(parents=True, exist_ok=True)
    return Config(
        corpus=args.corpus,
        work_dir=work_dir,
        json_out=args.json,
        store_seq_len=args.store_seq_len,
        seq_len=args.seq_len,
        runner_args=tuple(shlex.split(args.runner_args)),
    )


def main(argv: Sequence[str] | None = None) -> int:
    started = time.time()
    config = parse_args(argv)
    header = report_header("repack", started=started, argv=argv, code_dirs=CODE_DIRS)
    report = {**header, **run(config)}
    print("\n".join(summary_lines(report)))
    if config.json_out:
        config.json_out.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if report["same_shards"] else 1


if __name__ == "__main__":
    sys.exit(main())
