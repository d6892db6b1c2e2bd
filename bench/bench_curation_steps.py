"""What the document curation steps cost: `lmshards preprocess` with and without them, in CPU seconds.

In one invocation, on the same corpus, tokenizer and machine, alternating:
  (a) plain    - `lmshards preprocess` on the default runner (its in-process path), no curation flag;
  (b) curated  - the same with --languages all --quality_filters gopher_quality,gopher_repetition,
                 c4_quality,fineweb_quality (every document identified and judged by the four filters,
                 in the same single pass as tokenizing), plus any --extra flags.
Each run is a fresh subprocess; its CPU seconds (user + system, the tokenizer's threads included) come from
getrusage of the finished child, its wall seconds from start to exit. The report gives each side's median
over --pairs runs and the ratio b/a of the medians; the target is b/a <= 1.3 in CPU seconds.
Then, in this process, where (b)'s extra time goes: the CPU seconds of judge_documents (every step in
turn, as preprocess runs them) over the corpus's documents, and of each step's own judge() on all of them.

Usage (from the repository root, with the venv active):
  python -m bench.bench_curation_steps --corpus data/sample/en --pairs 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOKENIZER = Path(__file__).resolve().parents[1] / "tests" / "data" / "golden" / "tokenizer.json"
STEPS = [
    "--languages=all",
    "--quality_filters=gopher_quality,gopher_repetition,c4_quality,fineweb_quality",
]
TARGET = 1.3  # curated CPU seconds over plain: the budget the steps must fit in


def run_once(corpus: str, output: Path, flags: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one `lmshards preprocess` subprocess."""
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, "-m", "lmshards", "preprocess", f"--input={corpus}"]
    command += [f"--tokenizer={TOKENIZER}", f"--output={output}", "--seq_len=128", *flags]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run(command, check=True, capture_output=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def step_costs(corpus: str, steps: list[str]) -> dict[str, float]:
    """CPU seconds of judge_documents over every document of corpus, and of each step alone on all."""
    from lmshards.preprocess.curation import steps as framework
    from lmshards.preprocess.curation.judging import build_document_steps, judge_documents
    from lmshards.preprocess.curation.records import CurationDoc
    from lmshards.preprocess.sources import ReadOptions, iter_documents

    parsed = dict(flag.removeprefix("--").split("=", 1) for flag in steps)
    selected = framework.select_steps(
        quality=tuple(parsed.get("quality_filters", "").split(",")),
        values={"languages": parsed.get("languages", "")},
        switches={},
    )
    built = build_document_steps(selected)
    texts = list(iter_documents([corpus], ReadOptions()))
    batches = [
        [CurationDoc("", i + j, text, i + j) for j, text in enumerate(texts[i : i + 1000])]
        for i in range(0, len(texts), 1000)
    ]
    costs = {}
    start = time.process_time()
    for batch in batches:
        judge_documents(built, batch)
    costs["judge_documents"] = time.process_time() - start
    for step in built:
        start = time.process_time()
        for batch in batches:
            step.judge.judge([doc.text for doc in batch])
        costs[step.name] = time.process_time() - start
    return costs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True, help="input file, folder or glob")
    parser.add_argument("--pairs", type=int, default=3, help="runs of each side, alternating")
    parser.add_argument("--extra", default="", help="more flags for (b), space-separated")
    parser.add_argument("--json", default=None, help="write the figures here too")
    args = parser.parse_args()
    curated = STEPS + args.extra.split()
    runs: dict[str, list[tuple[float, float]]] = {"plain": [], "curated": []}
    with tempfile.TemporaryDirectory() as work:
        for _ in range(args.pairs):
            runs["plain"].append(run_once(args.corpus, Path(work) / "plain", []))
            runs["curated"].append(run_once(args.corpus, Path(work) / "curated", curated))
    medians = {
        side: (statistics.median(c for c, _ in r), statistics.median(w for _, w in r))
        for side, r in runs.items()
    }
    ratio = medians["curated"][0] / medians["plain"][0]
    print(f"corpus {args.corpus}, {os.cpu_count()} cores, {args.pairs} runs each (medians)")
    for side, (cpu, wall) in medians.items():
        print(f"  {side:<8} {cpu:7.2f} CPU s {wall:7.2f} wall s")
    print(f"  curated / plain: {ratio:.2f}x CPU (target <= {TARGET}x), flags {' '.join(curated)}")
    costs = step_costs(args.corpus, STEPS)
    print("  CPU s in this process: " + ", ".join(f"{k} {v:.2f}" for k, v in costs.items()))
    if args.json:
        figures = {"runs": runs, "cpu_ratio": ratio, "step_cpu_s": costs}
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
