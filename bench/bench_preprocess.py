"""Preprocessing benchmark: `lmshards preprocess` side by side with the tokenizer ceiling and an HF-style baseline.

In one run, on the same machine, with the same tokenizer.json:
  (a) ceiling   - reference_ceiling.py: Tokenizer.encode_batch_fast with special tokens over all lines, all
                  cores: the tokenizer call preprocess makes (a test keeps the two the same), nothing else;
  (a') ceiling_offsets - the same with Tokenizer.encode_batch (every token's offsets too, which preprocess
                  never asks for): the reference of earlier reports, run once as a second line;
  (b) lmshards  - `lmshards preprocess` with its default runner: Beam's DirectRunner engine in-process,
                  the tokenizer's threads on every core (--lmshards-args to measure others, e.g. multi_processing);
  (c) hf_style  - reference_hf_style.py: datasets.map tokenize + group_texts + serial TFRecordWriter, num_proc=2;
  (d) lmshards_dask - `lmshards preprocess --runner DaskRunner`: a local dask.distributed cluster started by
                  the command (scheduler in the launcher, one single-threaded worker process per core).
Each runs in a fresh subprocess; wall time is the process's, start to exit (imports and start-up included),
and peak RSS is the peak of the summed RSS of its whole process tree (see common.py): for (d) the launcher,
the scheduler and every worker. (d) must write the same shards as (b) (the summary checks the manifests'
SHA-256s). (b) also runs on the corpus repeated 2x and 4x (--scales: the same files copied under other
names) to show how its peak memory grows with input: bytes per written token at each scale, and the slope
(peak bytes per added token) between the smallest and the largest.

Usage (from the repository root, with the venv active):
  python -m bench.bench_preprocess --corpus /tmp/bench-corpus/en --json bench-preprocess.json
  python -m bench.bench_preprocess --corpus data/sample/en --sizes 1 --scales 1 --skip-baseline   # quick check
  python -m bench.bench_preprocess --corpus /tmp/bench-corpus/en --sizes all --scales 1 --skip-baseline --skip-ceiling  # (b) vs (d)
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    COMMAND_ROLE,
    MB,
    PSS_MIN_INTERVAL_S,
    RUN_TIMEOUT_S,
    SAMPLE_INTERVAL_S,
    TOKENIZER_VOCAB_SIZE,
    Measurement,
    ProcessFigures,
    child_env,
    corpus_files,
    load_average,
    report_header,
    reported,
    run_checked,
    shards_digest,
    take_subset,
    train_tokenizer,
)
from lmshards.schemas.constants import DEFAULT_SEQ_LEN
from lmshards.schemas.manifest import read_manifest

BENCH_DIR = Path(__file__).resolve().parent
# The code a preprocessing run executes: an uncommitted change there makes the report's commit not the whole story.
CODE_DIRS = ("preprocess", "schemas", "lmshards", "bench")
CEILING_SCRIPT = BENCH_DIR / "reference_ceiling.py"
HF_STYLE_SCRIPT = BENCH_DIR / "reference_hf_style.py"

NUM_WORKERS = 2  # (c)'s num_proc: the machine this targets has 2 cores
DEFAULT_LMSHARDS_ARGS = ""  # the product's default runner set-up
DEFAULT_SIZES = ("all",)  # MB of input for (b)'s extra runs on subsets; "all" is the whole corpus
DEFAULT_SCALES = (1, 2, 4)  # (b) on the corpus repeated this many times: how its peak memory grows
# (a) and (b) run as this many pairs, in the order a b, b a, a b, ...: a shared machine's speed drifts by
# 10-30% within minutes (the same ceiling took 45 s and 59 s back to back), so one pair can mislead;
# the verdict is the median pair's ratio.
DEFAULT_PAIRS = 3

# What the product promises on the ~130 MB corpus.
TARGET_VS_CEILING = 0.9  # (b) throughput / (a) throughput
TARGET_VS_BASELINE = 2.0  # (b) throughput / (c) throughput
TARGET_BYTES_PER_TOKEN = 10.0  # (b)'s peak RSS per written token, at every scale
TARGET_LARGEST_PEAK_BYTES = 2_000_000_000  # (b)'s peak RSS on the 4x corpus (about 540 MB of text)

TARGET_CPU_VS_CEILING = 1.15  # (b) CPU seconds / (a) CPU seconds
# A staged run's workers (every process but the command: the launcher or the DirectRunner's runner) against
# (a), per CPU second: what a Dataflow or Dask worker pays per core.
TARGET_WORKERS_PER_CPU_S = 0.85

CEILING, LMSHARDS, HF_STYLE, LMSHARDS_DASK = "ceiling", "lmshards", "hf_style", "lmshards_dask"
CEILING_OFFSETS = "ceiling_offsets"
# reference_ceiling.py's --method of each ceiling system.
CEILING_METHODS = {CEILING: "fast", CEILING_OFFSETS: "offsets"}
DASK_ARGS = ("--runner", "DaskRunner")  # (d): the flags that make (b) run on Dask


@dataclasses.dataclass(frozen=True)
class Config:
    corpus: Path
    sizes: tuple[str, ...]
    skip_baseline: bool
    skip_ceiling: bool
    skip_dask: bool
    json_out: Path | None
    work_dir: Path
    seq_len: int
    keep_outputs: bool
    lmshards_args: tuple[str, ...]  # runner flags of (b)
    scales: tuple[int, ...] = (1,)  # (b) on the corpus repeated k times
    pairs: int = 1  # (a) and (b) run this many times each, alternating


@dataclasses.dataclass(frozen=True)
class Input:
    """A set of text files the systems read; `label` is e.g. '30MB' or 'all'."""

    label: str
    files: tuple[Path, ...]

    @property
    def bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)


@dataclasses.dataclass(frozen=True)
class Result:
    system: str
    input_label: str
    input_bytes: int
    tokens: int  # tokens the system produced (special tokens included); see token_note
    records: int | None
    wall_s: float  # process start to exit
    internal_s: float | None  # the script's own timed region, where it reports one
    cpu_s: float  # user + system CPU seconds of the whole process tree
    peak_rss_bytes: (
        int  # peak summed RSS of the process tree (counts shared pages once per process)
    )
    peak_pss_bytes: (
        int  # peak summed PSS of the process tree (shared pages divided): compare on this
    )
    max_single_rss_bytes: int
    peak_processes: int
    load_before: tuple[float, float, float]
    mean_load1: float  # 1-minute load average, averaged over the run
    shards_sha256: str | None = (
        None  # lmshards runs: one hash over every shard's path and SHA-256 in the manifest
    )
    tokens_written: int | None = None  # lmshards runs: manifest tokens_written summed over splits
    # Each busy process of the tree: the command's (the runner), its workers'.
    processes: tuple[ProcessFigures, ...] = ()

    @property
    def mb_per_s(self) -> float:
        return self.input_bytes / MB / self.wall_s

    @property
    def workers_cpu_s(self) -> float | None:
        """CPU seconds of every process but the command: a staged run's workers (on a local Dask cluster
        with their fork server); None for a run whose work is the command's alone."""
        command = [p.cpu_s for p in self.processes if p.role == COMMAND_ROLE]
        if not command or all(p.role == COMMAND_ROLE for p in self.processes):
            return None
        return self.cpu_s - command[0]

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s


TOKEN_NOTES = {
    CEILING: "tokens of every non-empty line",
    CEILING_OFFSETS: "tokens of every non-empty line",
    LMSHARDS: "manifest tokens_in summed over splits",
    LMSHARDS_DASK: "manifest tokens_in summed over splits",
    HF_STYLE: "tokens written (each 1000-row batch's remainder dropped)",
}


def inputs_for(config: Config, files: list[Path]) -> dict[str, Input]:
    """size label -> Input; subsets are written once under the work dir and reused."""
    total = sum(f.stat().st_size for f in files)
    inputs = {}
    for size in config.sizes:
        if size == "all" or float(size) * MB >= total:
            inputs[size] = Input("all", tuple(files))
            continue
        key = hashlib.sha256(
            repr([(str(f), f.stat().st_size) for f in files]).encode()
        ).hexdigest()[:12]
        out_dir = config.work_dir / f"subset-{key}-{size}MB"
        subset = (
            sorted(out_dir.glob("*.txt"))
            if out_dir.is_dir()
            else take_subset(files, int(float(size) * MB), out_dir)
        )
        inputs[size] = Input(f"{size}MB", tuple(subset))
    return inputs


def scaled_input(files: Sequence[Path], scale: int, work_dir: Path) -> Input:
    """The corpus repeated `scale` times: copy k of each file as `k-<name>` (scale 1: the files themselves).

    Copies, not links: discovery reads a file reached twice (a link) only once.
    """
    if scale == 1:
        return Input("all", tuple(files))
    key = hashlib.sha256(repr([(str(f), f.stat().st_size) for f in files]).encode()).hexdigest()[
        :12
    ]
    out_dir = work_dir / f"scaled-{key}-{scale}x"
    out_dir.mkdir(parents=True, exist_ok=True)
    copies = []
    for k in range(scale):
        for f in files:
            dest = out_dir / f"{k}-{f.name}"
            if not dest.exists() or dest.stat().st_size != f.stat().st_size:
                shutil.copyfile(f, dest)
            copies.append(dest)
    return Input(f"{scale}x", tuple(copies))


def memory_growth(results: list[Result]) -> dict[str, Any]:
    """(b)'s peak RSS per written token on each scaled input (the highest of its runs), and the slope
    between the smallest and largest."""
    # input -> the run with the highest peak (the input of the pairs runs more than once)
    worst: dict[str, Result] = {}
    for r in results:
        if r.system == LMSHARDS and r.input_label.endswith(("x", "all")) and r.tokens_written:
            if r.input_label not in worst or r.peak_rss_bytes > worst[r.input_label].peak_rss_bytes:
                worst[r.input_label] = r
    runs = sorted(worst.values(), key=lambda r: r.input_bytes)
    out: dict[str, Any] = {
        "runs": [
            {"input": r.input_label, "tokens_written": r.tokens_written,
             "peak_rss_mb": r.peak_rss_bytes / MB, "peak_pss_mb": r.peak_pss_bytes / MB,
             "rss_bytes_per_token": r.peak_rss_bytes / (r.tokens_written or 1)}
            for r in runs
        ],
        "target_bytes_per_token": TARGET_BYTES_PER_TOKEN,
    }  # fmt: skip
    if runs:
        out["met_bytes_per_token"] = all(
            r.peak_rss_bytes / (r.tokens_written or 1) <= TARGET_BYTES_PER_TOKEN for r in runs
        )
        largest = runs[-1]
        out["largest"] = {"input": largest.input_label, "peak_rss_mb": largest.peak_rss_bytes / MB,
                          "met_2gb": largest.peak_rss_bytes <= TARGET_LARGEST_PEAK_BYTES}  # fmt: skip
    if len(runs) >= 2 and runs[-1].tokens_written != runs[0].tokens_written:
        first, last = runs[0], runs[-1]
        out["slope_rss_bytes_per_added_token"] = (last.peak_rss_bytes - first.peak_rss_bytes) / (
            (last.tokens_written or 0) - (first.tokens_written or 0)
        )
    return out


def run_ceiling(inp: Input, tokenizer: Path, *, system: str = CEILING) -> Result:
    """(a), or with system=CEILING_OFFSETS (a'): the tokenizer alone over every line."""
    load = load_average()
    argv = [sys.executable, str(CEILING_SCRIPT), "--method", CEILING_METHODS[system], str(tokenizer),
            *map(str, inp.files)]  # fmt: skip
    m = run_checked(argv, env=child_env(), timeout_s=RUN_TIMEOUT_S)
    out = reported(m)
    return _result(
        system, inp, m, tokens=out["tokens"], records=None, internal_s=out["internal_s"], load=load
    )


def run_lmshards(inp: Input, tokenizer: Path, config: Config, *, system: str = LMSHARDS) -> Result:
    """(b), or with system=LMSHARDS_DASK (d): the same command on a local Dask cluster."""
    out_dir = Path(tempfile.mkdtemp(prefix=f"{system}-{inp.label}-", dir=config.work_dir))
    shutil.rmtree(out_dir)  # the pipeline creates its output directory
    argv = [
        sys.executable, "-m", "lmshards", "preprocess",
        *(arg for f in inp.files for arg in ("--input", str(f))),
        "--tokenizer", str(tokenizer),
        "--output", str(out_dir),
        "--seq_len", str(config.seq_len),
        *(DASK_ARGS if system == LMSHARDS_DASK else config.lmshards_args),
    ]  # fmt: skip
    load = load_average()
    try:
        m = run_checked(argv, env=child_env(), timeout_s=RUN_TIMEOUT_S)
        manifest = read_manifest(str(out_dir))
    finally:
        if not config.keep_outputs:
            shutil.rmtree(out_dir, ignore_errors=True)
    tokens = sum(s.totals.tokens_in for s in manifest.splits.values())
    written = sum(s.totals.tokens_written for s in manifest.splits.values())
    records = sum(s.totals.records for s in manifest.splits.values())
    return dataclasses.replace(
        _result(system, inp, m, tokens=tokens, records=records, internal_s=None, load=load),
        shards_sha256=shards_digest(manifest),
        tokens_written=written,
    )


def run_hf_style(inp: Input, tokenizer: Path, config: Config) -> Result:
    scratch = Path(tempfile.mkdtemp(prefix="hf-style-", dir=config.work_dir))
    argv = [sys.executable, str(HF_STYLE_SCRIPT), str(tokenizer), str(scratch / "out"), str(config.seq_len),
            str(NUM_WORKERS), *map(str, inp.files)]  # fmt: skip
    load = load_average()
    try:
        # A fresh datasets cache, so the run is not served from an earlier one.
        env = child_env(HF_DATASETS_CACHE=str(scratch / "hf-cache"))
        m = run_checked(argv, env=env, timeout_s=RUN_TIMEOUT_S)
    finally:
        if not config.keep_outputs:
            shutil.rmtree(scratch, ignore_errors=True)
    out = reported(m)
    return _result(
        HF_STYLE,
        inp,
        m,
        tokens=out["tokens"],
        records=out["records"],
        internal_s=out["internal_s"],
        load=load,
    )


def _result(system: str, inp: Input, m: Measurement, *, tokens: int, records: int | None,
            internal_s: float | None, load: tuple[float, float, float]) -> Result:  # fmt: skip
    return Result(
        system=system,
        input_label=inp.label,
        input_bytes=inp.bytes,
        tokens=int(tokens),
        records=records,
        wall_s=m.wall_s,
        internal_s=internal_s,
        cpu_s=m.cpu_s,
        peak_rss_bytes=m.peak_rss_bytes,
        peak_pss_bytes=m.peak_pss_bytes,
        max_single_rss_bytes=m.max_single_rss_bytes,
        peak_processes=m.peak_processes,
        load_before=load,
        mean_load1=m.mean_load1,
        processes=m.processes,
    )


def process_line(r: Result) -> str:
    """Each busy process of a run: what it runs, its CPU seconds and peak RSS."""
    each = "; ".join(
        f"{p.role} {p.cpu_s:.1f} CPU s, {p.peak_rss_bytes / MB:.0f} MB" for p in r.processes
    )
    return f"  per process: {each}"


def ratios(results: list[Result], label: str) -> dict[str, Any]:
    """Throughput ratios of (b) against (a) and (c) on one input, with the promised targets."""
    by_system = {r.system: r for r in results if r.input_label == label}
    ours = by_system.get(LMSHARDS)
    out: dict[str, Any] = {"input": label}
    if ours is None:
        return out
    # Targets are on throughput (wall time); the CPU-time ratio says the same without the machine's other load.
    pairs = ceiling_pairs(results, label)
    if pairs:
        values = [mine.mb_per_s / ceiling.mb_per_s for ceiling, mine in pairs]
        median = statistics.median(values)
        cpu = [mine.cpu_s / ceiling.cpu_s for ceiling, mine in pairs]
        cpu_median = statistics.median(cpu)
        out["b_over_a"] = {"value": median, "target": TARGET_VS_CEILING, "met": median >= TARGET_VS_CEILING,
                           "by_cpu_time": statistics.median(1 / c for c in cpu), "pairs": values,
                           "cpu_ratio": cpu_median, "cpu_pairs": cpu, "cpu_target": TARGET_CPU_VS_CEILING,
                           "cpu_met": cpu_median <= TARGET_CPU_VS_CEILING}  # fmt: skip
        workers = workers_per_cpu_s(pairs)
        if workers is not None:
            out["b_workers_over_a"] = workers
    ceilings = [r for r in results if r.system == CEILING and r.input_label == label]
    if (
        pairs and CEILING_OFFSETS in by_system
    ):  # against the median runs of (a) and (b): (a') runs once
        offsets = by_system[CEILING_OFFSETS]
        out["a_offsets"] = {
            "fast_wall_share": statistics.median(r.wall_s for r in ceilings) / offsets.wall_s,
            "fast_cpu_share": statistics.median(r.cpu_s for r in ceilings) / offsets.cpu_s,
            "b_over_offsets_wall": offsets.wall_s / statistics.median(mine.wall_s for _, mine in pairs),
            "b_over_offsets_cpu": offsets.cpu_s / statistics.median(mine.cpu_s for _, mine in pairs),
        }  # fmt: skip
    if HF_STYLE in by_system:
        base = by_system[HF_STYLE]
        value = ours.mb_per_s / base.mb_per_s
        out["b_over_c"] = {"value": value, "target": TARGET_VS_BASELINE, "met": value >= TARGET_VS_BASELINE,
                           "by_cpu_time": base.cpu_s / ours.cpu_s}  # fmt: skip
        out["memory_b_below_c"] = {
            "b_pss_mb": ours.peak_pss_bytes / MB, "c_pss_mb": base.peak_pss_bytes / MB,
            "b_rss_mb": ours.peak_rss_bytes / MB, "c_rss_mb": base.peak_rss_bytes / MB,
            "met": ours.peak_pss_bytes < base.peak_pss_bytes and ours.peak_rss_bytes < base.peak_rss_bytes,
        }  # fmt: skip
    if LMSHARDS_DASK in by_system:
        dask = by_system[LMSHARDS_DASK]
        if ceilings:  # against the median ceiling: (d) runs once
            ceiling_cpu = statistics.median(r.cpu_s for r in ceilings)
            out["d_over_a"] = {
                "wall": statistics.median(r.wall_s for r in ceilings) / dask.wall_s,
                "cpu_ratio": dask.cpu_s / ceiling_cpu,
                "workers_per_cpu_s": ceiling_cpu / workers
                if (workers := dask.workers_cpu_s)
                else None,
            }
        out["d_vs_b"] = {
            "wall": dask.wall_s / ours.wall_s, "cpu": dask.cpu_s / ours.cpu_s,
            "pss": dask.peak_pss_bytes / ours.peak_pss_bytes, "rss": dask.peak_rss_bytes / ours.peak_rss_bytes,
            "same_shards": dask.shards_sha256 == ours.shards_sha256,
        }  # fmt: skip
    return out


def workers_per_cpu_s(pairs: list[tuple[Result, Result]]) -> dict[str, Any] | None:
    """A staged run's workers against the ceiling per CPU second, the median pair's; None where a run
    had no process besides the command (the default path)."""
    values = [ceiling.cpu_s / workers for ceiling, mine in pairs if (workers := mine.workers_cpu_s)]
    if len(values) < len(pairs):
        return None
    median = statistics.median(values)
    return {"value": median, "pairs": values, "target": TARGET_WORKERS_PER_CPU_S,
            "met": median >= TARGET_WORKERS_PER_CPU_S}  # fmt: skip


def ceiling_pairs(results: list[Result], label: str) -> list[tuple[Result, Result]]:
    """(ceiling, lmshards) runs on `label`, paired in the order they ran."""
    ceilings = [r for r in results if r.system == CEILING and r.input_label == label]
    ours = [r for r in results if r.system == LMSHARDS and r.input_label == label]
    return list(zip(ceilings, ours))


def comparison_plan(largest: Input, config: Config) -> list[tuple[str, Input]]:
    """(a) and (b) on the largest input: `pairs` pairs, each pair's order the reverse of the last's
    (a b, b a, ...), so that a drift in the machine's speed weighs on both; then (a'), (d) and (c)."""
    if config.skip_ceiling:
        plan = [(LMSHARDS, largest)]
    else:
        pair = [(CEILING, largest), (LMSHARDS, largest)]
        plan = [run for i in range(config.pairs) for run in (pair if i % 2 == 0 else pair[::-1])]
        plan.append((CEILING_OFFSETS, largest))
    if not config.skip_dask:
        plan.append((LMSHARDS_DASK, largest))
    if not config.skip_baseline:
        plan.append((HF_STYLE, largest))
    return plan


def table(results: list[Result]) -> str:
    head = ("system", "input", "MB", "tokens", "wall s", "inner s", "cpu s", "MB/s", "Mtok/s", "peak PSS MB", "peak RSS MB", "max 1-proc MB",
            "procs", "load")  # fmt: skip
    rows = [head]
    for r in results:
        rows.append((
            r.system, r.input_label, f"{r.input_bytes / MB:.1f}", f"{r.tokens:,}", f"{r.wall_s:.1f}",
            "-" if r.internal_s is None else f"{r.internal_s:.1f}", f"{r.cpu_s:.1f}", f"{r.mb_per_s:.2f}", f"{r.tokens_per_s / 1e6:.2f}",
            f"{r.peak_pss_bytes / MB:.0f}", f"{r.peak_rss_bytes / MB:.0f}", f"{r.max_single_rss_bytes / MB:.0f}", str(r.peak_processes),
            f"{r.mean_load1:.1f}",
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.rjust(w) if i > 1 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in rows]  # fmt: skip
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def scaled_ratios(results: list[Result], base_label: str) -> list[dict[str, Any]]:
    """(b) against (a) on each larger input (one run each), and on what it adds to `base_label` (the
    medians there): by CPU seconds, the added input's ratio leaves out what a run pays once (start-up,
    planning, a cluster), which is what a corpus of any size pays per byte."""

    def median_cpu(system: str, label: str) -> float | None:
        runs = [r.cpu_s for r in results if r.system == system and r.input_label == label]
        return statistics.median(runs) if runs else None

    base = median_cpu(CEILING, base_label), median_cpu(LMSHARDS, base_label)
    out = []
    for label in dict.fromkeys(r.input_label for r in results if r.input_label != base_label):
        ceiling, ours = median_cpu(CEILING, label), median_cpu(LMSHARDS, label)
        if ceiling is None or ours is None:
            continue
        row = {"input": label, "by_cpu_time": ceiling / ours, "added_by_cpu_time": None}
        if base[0] is not None and base[1] is not None and ours > base[1]:
            row["added_by_cpu_time"] = (ceiling - base[0]) / (ours - base[1])
        out.append(row)
    return out


def _median_of(values: Sequence[float]) -> str:
    return f"(median of {len(values)} pairs: {', '.join(f'{v:.2f}' for v in values)})"


def _verdict(goal: str, met: bool) -> str:
    return f"({goal}: {'met' if met else 'NOT met'})"


def ratio_lines(summary: dict[str, Any]) -> list[str]:
    lines = []
    for key, name in (("b_over_a", "lmshards / ceiling"), ("b_over_c", "lmshards / hf_style")):
        if key in summary:
            r = summary[key]
            each = f" {_median_of(r['pairs'])}" if "pairs" in r else ""
            verdict = _verdict(f"target >= {r['target']}", r["met"])
            lines.append(f"{name} throughput on {summary['input']}: {r['value']:.2f}{each} {verdict}; "
                         f"by CPU seconds: {r['by_cpu_time']:.2f}")  # fmt: skip
            if "cpu_ratio" in r:
                verdict = _verdict(f"target <= {r['cpu_target']}x", r["cpu_met"])
                lines.append(f"{name} CPU seconds on {summary['input']}: {r['cpu_ratio']:.2f}x "
                             f"{_median_of(r['cpu_pairs'])} {verdict}")  # fmt: skip
    if "b_workers_over_a" in summary:
        r = summary["b_workers_over_a"]
        verdict = _verdict(f"target >= {r['target']}", r["met"])
        lines.append(f"lmshards' workers (every process but the command) / ceiling per CPU second on "
                     f"{summary['input']}: {r['value']:.2f} {_median_of(r['pairs'])} {verdict}")  # fmt: skip
    if "a_offsets" in summary:
        r = summary["a_offsets"]
        lines.append(f"against encode_batch (offsets) on {summary['input']}: encode_batch_fast takes "
                     f"{r['fast_wall_share']:.2f} of its wall time and {r['fast_cpu_share']:.2f} of its CPU "
                     f"seconds; lmshards throughput {r['b_over_offsets_wall']:.2f}, by CPU seconds "
                     f"{r['b_over_offsets_cpu']:.2f}")  # fmt: skip
    if "d_over_a" in summary:
        r = summary["d_over_a"]
        workers = r.get("workers_per_cpu_s")
        lines.append(f"lmshards_dask / ceiling on {summary['input']}: throughput {r['wall']:.2f}, "
                     f"CPU seconds {r['cpu_ratio']:.2f}x"
                     + ("" if workers is None else f"; its workers per CPU second {workers:.2f}"))  # fmt: skip
    if "d_vs_b" in summary:
        r = summary["d_vs_b"]
        lines.append(f"lmshards_dask / lmshards on {summary['input']}: wall {r['wall']:.2f}x, CPU seconds {r['cpu']:.2f}x, "
                     f"peak PSS {r['pss']:.2f}x, peak RSS {r['rss']:.2f}x; "
                     f"same shards: {'yes' if r['same_shards'] else 'NO'}")  # fmt: skip
    for row in summary.get("scaled", []):
        added = row["added_by_cpu_time"]
        lines.append(f"lmshards / ceiling on {row['input']}: by CPU seconds {row['by_cpu_time']:.2f}"
                     + ("" if added is None else f"; on what it adds to {summary['input']}: {added:.2f}"))  # fmt: skip
    growth = summary.get("memory_growth", {})
    for run in growth.get("runs", []):
        lines.append(f"lmshards peak RSS on {run['input']}: {run['peak_rss_mb']:.0f} MB for {run['tokens_written']:,} "
                     f"written tokens = {run['rss_bytes_per_token']:.1f} bytes/token "
                     f"(target <= {growth['target_bytes_per_token']:g})")  # fmt: skip
    if "slope_rss_bytes_per_added_token" in growth:
        lines.append(
            f"lmshards peak RSS slope: {growth['slope_rss_bytes_per_added_token']:.2f} bytes per added token"
        )
    if "largest" in growth:
        big = growth["largest"]
        lines.append(f"lmshards peak RSS on {big['input']}: {big['peak_rss_mb']:.0f} MB "
                     f"{_verdict('fits in 2 GB', big['met_2gb'])}")  # fmt: skip
    if "memory_b_below_c" in summary:
        r = summary["memory_b_below_c"]
        lines.append(f"peak memory lmshards {r['b_pss_mb']:.0f} MB PSS / {r['b_rss_mb']:.0f} MB RSS vs hf_style "
                     f"{r['c_pss_mb']:.0f} MB PSS / {r['c_rss_mb']:.0f} MB RSS "
                     f"{_verdict('lmshards below hf_style on both', r['met'])}")  # fmt: skip
    return lines


def parse_args(argv: Sequence[str] | None) -> Config:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--corpus", required=True, type=Path, help="directory whose *.txt files are the corpus"
    )
    p.add_argument("--sizes", default=",".join(DEFAULT_SIZES),
                   help="comma-separated input sizes in MB for lmshards' RSS-growth runs, 'all' = whole corpus; "
                        "the ceiling and the baseline run on the largest (default: %(default)s)")  # fmt: skip
    p.add_argument(
        "--skip-baseline", action="store_true", help="do not run the (slow) HF-style baseline"
    )
    p.add_argument("--skip-ceiling", action="store_true", help="do not run the tokenizer ceiling")
    p.add_argument(
        "--skip-dask",
        action="store_true",
        help="do not run (d), lmshards on a local Dask cluster (needs the `dask` extra)",
    )
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")
    p.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "lmshards-bench",
                   help="tokenizer cache, subsets and scratch outputs (default: %(default)s)")  # fmt: skip
    p.add_argument("--seq-len", type=int, default=DEFAULT_SEQ_LEN)
    p.add_argument(
        "--keep-outputs", action="store_true", help="keep each system's shards under --work-dir"
    )
    p.add_argument("--lmshards-args", default=DEFAULT_LMSHARDS_ARGS,
                   help="runner (and other) flags for (b), replacing the default: %(default)r; e.g. "
                        "'--direct_running_mode=multi_processing --direct_num_workers=2'")  # fmt: skip
    p.add_argument("--pairs", type=int, default=DEFAULT_PAIRS,
                   help="runs of (a) and (b) each on the largest input, alternating; the verdict is the "
                        "median pair's ratio (default: %(default)s)")  # fmt: skip
    p.add_argument("--scales", default=",".join(map(str, DEFAULT_SCALES)),
                   help="comma-separated repeat counts of the whole corpus for (b)'s memory-growth runs "
                        "(default: %(default)s)")  # fmt: skip
    a = p.parse_args(argv)
    sizes = tuple(s.strip() for s in a.sizes.split(",") if s.strip())
    for s in sizes:
        if s != "all" and not _positive_number(s):
            p.error(f"--sizes: {s!r} is neither a number of MB nor 'all' (e.g. --sizes 30,65,all)")
    if not sizes:
        p.error("--sizes is empty (e.g. --sizes 30,65,all)")
    try:
        scales = tuple(sorted({int(k) for k in a.scales.split(",") if k.strip()}))
    except ValueError:
        scales = ()
    if not scales or min(scales) < 1:
        p.error(f"--scales: {a.scales!r} is not a list of repeat counts >= 1 (e.g. --scales 1,2,4)")
    if a.pairs < 1:
        p.error(f"--pairs: {a.pairs} is not a count of runs >= 1 (e.g. --pairs 3)")
    if not a.skip_dask and importlib.util.find_spec("distributed") is None:
        p.error('(d) needs dask: pip install "lmshards[dask]", or pass --skip-dask')
    return Config(corpus=a.corpus, sizes=sizes, skip_baseline=a.skip_baseline, skip_ceiling=a.skip_ceiling,
                  skip_dask=a.skip_dask, json_out=a.json,
                  work_dir=a.work_dir, seq_len=a.seq_len, keep_outputs=a.keep_outputs,
                  lmshards_args=tuple(shlex.split(a.lmshards_args)), scales=scales,
                  pairs=a.pairs)  # fmt: skip


def _positive_number(s: str) -> bool:
    try:
        return float(s) > 0
    except ValueError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    config.work_dir.mkdir(parents=True, exist_ok=True)
    files = corpus_files(config.corpus)
    inputs = inputs_for(config, files)
    largest = max(inputs.values(), key=lambda i: i.bytes)
    started = time.time()
    print(
        f"corpus: {config.corpus} ({len(files)} files, {sum(f.stat().st_size for f in files) / MB:.1f} MB)"
    )
    tokenizer = train_tokenizer(files, config.work_dir)
    print(f"tokenizer: {tokenizer}")

    # The comparison first, back to back on the largest input; then lmshards alone on the smaller ones.
    plan = comparison_plan(largest, config)
    plan += [
        (LMSHARDS, inp) for inp in sorted(set(inputs.values()) - {largest}, key=lambda i: i.bytes)
    ]
    for k in config.scales:
        if k > 1 or largest.label != "all":
            scaled = scaled_input(files, k, config.work_dir)
            plan += (
                [(LMSHARDS, scaled)]
                if config.skip_ceiling
                else [(CEILING, scaled), (LMSHARDS, scaled)]
            )
    results = []
    for system, inp in plan:
        print(f"running {system} on {inp.label} ({inp.bytes / MB:.1f} MB) ...", flush=True)
        if system in CEILING_METHODS:
            results.append(run_ceiling(inp, tokenizer, system=system))
        elif system in (LMSHARDS, LMSHARDS_DASK):
            results.append(run_lmshards(inp, tokenizer, config, system=system))
        else:
            results.append(run_hf_style(inp, tokenizer, config))
        r = results[-1]
        print(
            f"  {r.wall_s:.1f} s ({r.cpu_s:.1f} CPU s), {r.mb_per_s:.2f} MB/s, peak PSS {r.peak_pss_bytes / MB:.0f} MB, "
            f"RSS {r.peak_rss_bytes / MB:.0f} MB, mean load {r.mean_load1:.1f}",
            flush=True,
        )
        print(process_line(r), flush=True)

    summary = ratios(results, largest.label)
    summary["memory_growth"] = memory_growth(results)
    summary["scaled"] = scaled_ratios(results, largest.label)
    print()
    print(table(results))
    print()
    print("\n".join(ratio_lines(summary)))
    print(
        f"load average now: {' '.join(f'{x:.2f}' for x in load_average())} on {os.cpu_count()} cores"
    )
    if config.json_out:
        report = {
            **report_header("preprocess", started=started, argv=argv, code_dirs=CODE_DIRS),
            "corpus": {
                "dir": str(config.corpus),
                "files": len(files),
                "bytes": sum(f.stat().st_size for f in files),
            },
            "tokenizer": {
                "path": str(tokenizer),
                "vocab_size": TOKENIZER_VOCAB_SIZE,
                "kind": "byte-level BPE",
            },
            "seq_len": config.seq_len,
            "num_workers": NUM_WORKERS,
            "lmshards_args": list(config.lmshards_args),
            "lmshards_dask_args": [] if config.skip_dask else list(DASK_ARGS),
            "memory_method": f"peaks of the summed psutil RSS (every {SAMPLE_INTERVAL_S} s) and PSS (every "
            f">= {PSS_MIN_INTERVAL_S} s) over the process tree; max_single_rss = largest "
            "ru_maxrss of one process",  # fmt: skip
            "token_notes": TOKEN_NOTES,
            "results": [
                {**dataclasses.asdict(r), "mb_per_s": r.mb_per_s, "tokens_per_s": r.tokens_per_s}
                for r in results
            ],
            "ratios": summary,
            "load_after": load_average(),
        }
        config.json_out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {config.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
