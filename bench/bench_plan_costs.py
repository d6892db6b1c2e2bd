"""Plan-cost benchmark: CPU seconds per MB of `lmshards preprocess` with each option that changes the work.

The Dataflow dry run's estimate (lmshards.preprocess.runners.estimate_dataflow_cost) multiplies the plain
run's cost by one measured ratio per option; this measures them. Each option runs alone on the same corpus
with the same tokenizer, in a fresh process on the default runner; a run on a few KB of the corpus gives the
fixed start-up cost (imports, tokenizer load), subtracted from every run before dividing by the corpus's MB.
Every run takes the staged pipeline, as on Dataflow: curation always does on the default runner; the runs
without curation, which the default runner would do in one step (lmshards.preprocess.in_process), run it in
threads (--direct_running_mode multi_threading), so the ratios compare like with like.

Usage (from the repository root, with the venv active):
  python -m bench.bench_plan_costs                                  # the bundled English sample
  python -m bench.bench_plan_costs --corpus /tmp/corpus --json bench-plan-costs.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench.common import (
    MB,
    SAMPLE_CORPUS,
    child_env,
    corpus_files,
    lmshards_argv,
    lmshards_tokenizer,
    load_average,
    report_header,
    run_checked,
)

CODE_DIRS = ("preprocess", "bench")
# The staged Beam pipeline in this process, as Dataflow runs it, for runs without curation.
STAGED_RUNNER_FLAGS = ["--runner", "FnApiRunner", "--direct_running_mode", "multi_threading"]
# Paragraphs as documents: the sample's books wrap lines at ~70 characters, and a line per document would
# weigh the per-document work of curation far above a real corpus's.
DOC_FLAGS = ["--doc_separator", "blank_line"]
STARTUP_BYTES = 4_000  # the start-up run's input: a few KB, so its CPU time is the fixed cost
EVAL_BYTES = 200_000  # --decontaminate's eval set: the first 200 KB of the corpus's first file


def option_runs(eval_set: Path) -> dict[str, list[str]]:
    """option name -> the preprocess flags it adds to the plain run."""
    return {
        "plain": STAGED_RUNNER_FLAGS,
        "dedup_exact": ["--dedup", "exact"],
        "dedup_near": ["--dedup", "near"],
        "decontaminate": ["--decontaminate", str(eval_set)],
        "packing_best_fit": [*STAGED_RUNNER_FLAGS, "--packing", "best_fit"],
        "keep_tokens": [*STAGED_RUNNER_FLAGS, "--keep_tokens"],
    }


def preprocess_cpu_s(corpus: Path, tokenizer: Path, output: Path, extra: list[str]) -> float:
    """CPU seconds (the whole process tree) of one `lmshards preprocess` of corpus."""
    argv = lmshards_argv("preprocess", "--input", str(corpus), "--tokenizer", str(tokenizer),
                         "--output", str(output), "--seq_len", "128", "--num_shards", "1",
                         "--shard_multiple", "1", *DOC_FLAGS, *extra)  # fmt: skip
    return run_checked(argv, env=child_env()).cpu_s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, default=SAMPLE_CORPUS, help="a directory of .txt files")
    p.add_argument("--json", type=Path, help="also write the report here")
    args = p.parse_args(argv)
    started = time.time()
    files = corpus_files(args.corpus)
    corpus_mb = sum(f.stat().st_size for f in files) / MB
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tokenizer = work / "tokenizer"
        lmshards_tokenizer(args.corpus, tokenizer, env=child_env(), log_path=work / "tok.log")
        eval_set = work / "eval.txt"
        eval_set.write_bytes(files[0].read_bytes()[:EVAL_BYTES])
        small = work / "small.txt"
        small.write_bytes(files[0].read_bytes()[:STARTUP_BYTES])
        startup = preprocess_cpu_s(small, tokenizer, work / "startup", STAGED_RUNNER_FLAGS)
        results = {}
        for name, extra in option_runs(eval_set).items():
            cpu_s = preprocess_cpu_s(args.corpus, tokenizer, work / name, extra)
            results[name] = {"cpu_s": round(cpu_s, 2),
                             "cpu_s_per_mb": round(max(cpu_s - startup, 0.0) / corpus_mb, 3)}  # fmt: skip
    plain = results["plain"]["cpu_s_per_mb"]
    for result in results.values():
        result["ratio"] = round(result["cpu_s_per_mb"] / plain, 2)
    report = {
        **report_header("plan_costs", started=started, argv=argv, code_dirs=CODE_DIRS),
        "corpus": str(args.corpus),
        "corpus_mb": round(corpus_mb, 3),
        "startup_cpu_s": round(startup, 2),
        "load_average": load_average(),
        "options": results,
    }
    print(f"{'option':<18} {'CPU s':>8} {'CPU s/MB':>9} {'ratio':>6}")
    for name, r in results.items():
        print(f"{name:<18} {r['cpu_s']:>8.2f} {r['cpu_s_per_mb']:>9.3f} {r['ratio']:>6.2f}")
    print(f"({corpus_mb:.2f} MB corpus, start-up {startup:.2f} CPU s subtracted)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
