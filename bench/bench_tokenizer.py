"""Tokenizer training benchmark: `lmshards tokenizer train` time and peak RSS on 10 MB and 100 MB samples.

Each (model, size) runs `lmshards tokenizer train --input CORPUS --max_bytes SIZE` in a fresh subprocess, so
peak RSS is that run's alone (see common.py); CPU seconds are its process tree's user + system time. Wall time is the process's, start to exit: imports, the two
streaming reads of the whole corpus that draw the sample, training and saving. The sampling share and
the trainer's own peak RSS (ru_maxrss, as the command prints it) are reported beside it.

Usage (from the repository root, with the venv active):
  python -m bench.bench_tokenizer /tmp/bench-corpus/en --json bench-tokenizer.json
  python -m bench.bench_tokenizer data/sample --sizes 1MB --models bpe      # quick check
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import MB, load_average, run_checked
from lmshards.corpus_tools.tokenizer.config import DEFAULT_VOCAB_SIZE, MODELS
from lmshards.plumbing.units import parse_size

DEFAULT_SIZES = ("10MB", "100MB")
DEFAULT_MODELS = MODELS
RUN_TIMEOUT_S = 3600.0
_TRAINED = re.compile(
    r"in (?P<total>[\d.]+) s \((?P<sampling>[\d.]+) s of it sampling\); peak RSS (?P<rss>[\d,]+) MiB"
)
_SAMPLED = re.compile(
    r"Sampled (?P<docs>[\d,]+) of [\d,]+ documents \((?P<mb>[\d,.]+) of (?P<total_mb>[\d,.]+) MB"
)


def run_one(
    corpus: Path, *, model: str, size: str, vocab_size: int, work_dir: Path
) -> dict[str, Any]:
    output = work_dir / f"{model}-{size}"
    argv = [
        sys.executable,
        "-m",
        "lmshards",
        "tokenizer",
        "train",
        "--input",
        str(corpus),
        "--output",
        str(output),
        "--model",
        model,
        "--vocab_size",
        str(vocab_size),
        "--max_bytes",
        size,
    ]
    m = run_checked(argv, timeout_s=RUN_TIMEOUT_S)
    trained, sampled = _TRAINED.search(m.stdout), _SAMPLED.search(m.stdout)
    if not (trained and sampled):
        raise RuntimeError(f"unexpected output of {' '.join(argv)}:\n{m.stdout}")
    return {
        "model": model,
        "max_bytes": parse_size(size, bare_unit="B"),
        "sampled_mb": float(sampled["mb"].replace(",", "")),
        "sampled_documents": int(sampled["docs"].replace(",", "")),
        "corpus_mb": float(sampled["total_mb"].replace(",", "")),
        "wall_s": round(m.wall_s, 1),
        "cpu_s": round(
            m.cpu_s, 1
        ),  # the machine may be shared: CPU seconds move less than wall time
        "sampling_s": float(trained["sampling"]),
        "peak_rss_mb": round(m.peak_rss_bytes / MB),
        "peak_pss_mb": round(m.peak_pss_bytes / MB),
        "command": " ".join(argv[1:]),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "corpus", type=Path, help="directory (or file) of UTF-8 text, one document per line"
    )
    parser.add_argument(
        "--sizes", nargs="+", default=list(DEFAULT_SIZES), help="--max_bytes of each run"
    )
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), choices=MODELS)
    parser.add_argument("--vocab_size", type=int, default=DEFAULT_VOCAB_SIZE)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="lmshards-bench-tokenizer-") as work:
        for model in args.models:
            for size in args.sizes:
                result = run_one(
                    args.corpus,
                    model=model,
                    size=size,
                    vocab_size=args.vocab_size,
                    work_dir=Path(work),
                )
                results.append(result)
                print(
                    f"{model:<10} {size:>7}: {result['sampled_mb']:8.1f} MB sampled, {result['wall_s']:7.1f} s "
                    f"({result['sampling_s']:.1f} s sampling), peak RSS {result['peak_rss_mb']:,} MB",
                    flush=True,
                )
    report = {
        "benchmark": "tokenizer_train",
        "corpus": str(args.corpus),
        "vocab_size": args.vocab_size,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average": load_average(),
        },
        "results": results,
    }
    print(_table(results))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def _table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| model | sample | wall s | CPU s | of wall: sampling s | rest (start-up, train, save) s | peak RSS MB "
        "| RSS / sample MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['model']} | {r['sampled_mb']:.1f} MB | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['sampling_s']:.1f} | "
            f"{r['wall_s'] - r['sampling_s']:.1f} | {r['peak_rss_mb']:,} | "
            f"{r['peak_rss_mb'] / max(r['sampled_mb'], 1e-9):.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
