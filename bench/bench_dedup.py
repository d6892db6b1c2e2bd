"""Near-duplicate removal benchmark: `lmshards preprocess --dedup near` side by side with datatrove's MinHash
pipeline and with a plain `lmshards preprocess`, on one corpus with planted copies.

The corpus (made here, seeded): --docs documents of about --words words drawn from the word frequencies
of the bundled sample corpus (so no two of them are alike by chance), then planted copies of some of
them: exact copies, and near copies with a share of their words replaced (--edit_rates; a rate p leaves
about (1-p)^5 of the 5-grams, a Jaccard similarity near that over 2 - that). Written as corpus.txt (one
document per line, for lmshards) and corpus.jsonl (the same documents, ids = line numbers, for datatrove).

In one run, each in a fresh subprocess on the same machine (wall time, CPU seconds, peak memory of the
process tree, see common.py):
  (a) plain     - `lmshards preprocess` of corpus.txt;
  (b) near      - (a) with `--dedup near` (5-gram, 14 bands x 8 rows);
  (c) datatrove - reference_datatrove_minhash.py under --datatrove_python: datatrove's four MinHash stages
                  with the same parameters, one task each (14 for the buckets stage), one worker.
For (b) and (c): recall (planted copies removed, each group of copies reduced to one document) per edit
rate, and false removals (documents removed that belong to no planted group). Also measured in this
process: MinHash signatures (shingles and 112 permutations) in MB of text per CPU second (one core).

datatrove's environment: `python3 -m venv /tmp/dtvenv && /tmp/dtvenv/bin/pip install datatrove regex spacy
"xxhash<4" tokenizers orjson` (its MinHash steps, word tokenizer and JSON Lines reader need them; datatrove 0.10.1
does not install them itself, and its xxhash call passes a str, which xxhash 4 refuses).

With --cost_corpus DIR (a directory of *.txt, e.g. the benchmark corpus's en/), the cost of curation on
the default runner instead, in one run: plain, `--dedup near` and `--dedup exact`, each a fresh
subprocess, on two corpora at --cost_mb MB and at --cost_scale times that:
  lines - the same leading share of every file of DIR, one document per non-empty line (~60 bytes each);
  long  - make_corpus's planted corpus (200 to 300 words a document, ~1.5 KB), sized to the same MB.
Reported per corpus and size: CPU seconds and peak RSS of each, their ratios to plain's, and each
mode's peak RSS at the larger size over the smaller's (flat: about 1).

With --cost_corpus DIR --dask, the same on Beam's DaskRunner instead (`--runner DaskRunner`): plain,
`--dedup near` and the document steps (--languages en and the four quality filters) on the line documents at
--cost_mb and --cost_scale times that. Each run gets a fresh local cluster (dask_runner.local_cluster: 2
single-threaded worker processes on 127.0.0.1) started here and passed as --dask_client_address; each worker
process's RSS is sampled every 0.2 s, and its kernel high-water mark (VmHWM) read before the cluster closes.
Every Dask run reads ranges of --dask_range_mb (default 0.25 MB) of one file holding the size's line
documents (the subset's files joined): a Dask bag partition is one read range and a worker holds a whole
partition, so ranges of the default 64 MB would make each small corpus one partition per file, growing with
the corpus, where a real corpus is thousands of fixed-size ranges. With small ranges of one file every
partition has the same size at both corpus sizes and their count is the size over the range (the subset's
20 files, each smaller than a range at 1 MB, made 20 partitions at 1 MB and 27 at 4 MB: the partitions, not
their count, grew).
Reported: per mode and size, each worker's peak and CPU seconds, and the larger size's highest worker peak
over the smaller's.
--dask_modes picks some of the three (`--dedup near` takes minutes per MB on Dask).

Usage (from the repository root, with the venv active):
  python -m bench.bench_dedup --datatrove_python /tmp/dtvenv/bin/python --json bench-dedup.json
  python -m bench.bench_dedup --docs 2000 --datatrove_python /tmp/dtvenv/bin/python   # quick check
  python -m bench.bench_dedup --cost_corpus /tmp/benchcorpus/en --json bench-dedup-cost.json
  python -m bench.bench_dedup --cost_corpus /tmp/benchcorpus/en --dask --cost_mb 4 --json bench-dedup-dask.json
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import random
import re
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from bench.common import (
    MB,
    RUN_TIMEOUT_S,
    SAMPLE_CORPUS,
    SAMPLE_INTERVAL_S,
    Measurement,
    child_env,
    corpus_files,
    load_average,
    report_header,
    reported,
    run_checked,
    take_subset,
    train_tokenizer,
)

CODE_DIRS = ("preprocess", "schemas", "bench")
BENCH_DIR = Path(__file__).resolve().parent
DATATROVE_SCRIPT = BENCH_DIR / "reference_datatrove_minhash.py"
NGRAM, BANDS, ROWS = 5, 14, 8
DEFAULT_DOCS = 20_000
DEFAULT_WORDS = 200
DEFAULT_EDIT_RATES = (0.0, 0.01, 0.02, 0.03)  # 0.0: exact copies
COPIES_PER_RATE = 0.02  # planted copies of each rate, as a share of --docs
TARGET_COST_RATIO = 2.0  # (b) wall / (a) wall
TARGET_SIGNATURE_MB_S = 1.0  # per core
PLAIN, NEAR, DATATROVE, EXACT = "plain", "near", "datatrove", "exact"
# Curation on the default runner against a plain preprocess of the same corpus.
TARGET_CPU_RATIO = 2.0  # --dedup near CPU seconds / plain's
TARGET_RSS_RATIO = 1.5  # --dedup near peak RSS / plain's
DEFAULT_COST_MB = 16
DEFAULT_COST_SCALE = 4
COST_MODES = {PLAIN: (), NEAR: ("--dedup", "near"), EXACT: ("--dedup", "exact")}
LONG_DOC_BYTES = 1_500  # about make_corpus's document at DEFAULT_WORDS
DOCUMENT_STEPS = "documents"
# Curation on Beam's DaskRunner: a local cluster of this many single-threaded worker processes per run.
DASK_WORKERS = 2
# With --dask: each run's --range_mb; small, so that partitions keep a real corpus's size (see above).
DASK_RANGE_MB = 0.25
DASK_MODES = {
    PLAIN: (),
    NEAR: ("--dedup", "near"),
    DOCUMENT_STEPS: ("--languages", "en", "--quality_filters",
                     "gopher_quality,gopher_repetition,c4_quality,fineweb_quality"),
}  # fmt: skip
# With --dask: how GroupByKeys move data (--dask_shuffle), the default first.
DASK_SHUFFLES = ("files", "tasks")


@dataclasses.dataclass(frozen=True)
class Corpus:
    texts: list[str]
    groups: list[list[int]]  # each planted group: the original's line, then its copies'
    rate_of: dict[int, float]  # copy line -> its edit rate
    txt: Path
    jsonl: Path


def vocabulary() -> tuple[list[str], list[int]]:
    """The bundled English sample's words and their counts."""
    counts: collections.Counter[str] = collections.Counter()
    for path in sorted(SAMPLE_CORPUS.glob("*.txt")):
        counts.update(re.findall(r"[A-Za-z']+", path.read_text(encoding="utf-8")))
    words, weights = zip(*counts.most_common())
    return list(words), list(weights)


def make_corpus(
    work: Path, *, docs: int, words: int, edit_rates: tuple[float, ...], seed: int = 0
) -> Corpus:
    rng = random.Random(seed)
    vocab, weights = vocabulary()

    def document() -> list[str]:
        return rng.choices(vocab, weights, k=words + rng.randrange(words // 2))

    base = [document() for _ in range(docs)]
    texts = [" ".join(d) for d in base]
    groups: dict[int, list[int]] = {}
    rate_of: dict[int, float] = {}
    originals = rng.sample(range(docs), k=int(docs * COPIES_PER_RATE) * len(edit_rates))
    for i, original in enumerate(originals):
        rate = edit_rates[i % len(edit_rates)]
        copy = [
            w if rng.random() >= rate else rng.choices(vocab, weights)[0] for w in base[original]
        ]
        rate_of[len(texts)] = rate
        groups.setdefault(original, [original]).append(len(texts))
        texts.append(" ".join(copy))
    order = list(range(len(texts)))
    rng.shuffle(order)  # copies anywhere in the file, not after their originals
    position = {old: new for new, old in enumerate(order)}
    texts = [texts[old] for old in order]
    work.mkdir(parents=True, exist_ok=True)
    txt, jsonl = work / "corpus.txt", work / "corpus.jsonl"
    txt.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    jsonl.write_text(
        "".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)),
        encoding="utf-8",
    )
    return Corpus(
        texts=texts,
        groups=[[position[i] for i in g] for g in groups.values()],
        rate_of={position[i]: r for i, r in rate_of.items()},
        txt=txt,
        jsonl=jsonl,
    )


def quality(corpus: Corpus, removed: set[int]) -> dict[str, Any]:
    """Recall per edit rate (a copy counts as caught when its group kept exactly one document) and
    false removals (removed documents of no planted group)."""
    planted = {i for g in corpus.groups for i in g}
    caught: collections.Counter[float] = collections.Counter()
    total: collections.Counter[float] = collections.Counter()
    for group in corpus.groups:
        kept = [i for i in group if i not in removed]
        for copy in group[1:]:
            rate = corpus.rate_of[copy]
            total[rate] += 1
            caught[rate] += len(kept) == 1  # every group is one original and one copy
    return {
        "recall": {str(r): caught[r] / total[r] for r in sorted(total)},
        "recall_all": sum(caught.values()) / max(sum(total.values()), 1),
        "false_removals": len(removed - planted),
        "removed": len(removed),
    }


def signature_mb_s(texts: list[str]) -> float:
    """MinHash signatures of texts on this one core, MB of UTF-8 text per CPU second of this process
    (CPU time, not wall: on a loaded machine the wall clock also counts other processes' turns)."""
    from lmshards.preprocess.curation.minhash import hash_family, signature
    from lmshards.preprocess.curation.text import shingles

    offsets = hash_family(BANDS * ROWS)
    start = time.process_time()
    for text in texts:
        signature(shingles(text, NGRAM), offsets)
    seconds = time.process_time() - start
    return sum(len(t.encode("utf-8")) for t in texts) / MB / seconds


def lmshards_argv(corpus: Corpus, tokenizer: Path, output: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "lmshards",
        "preprocess",
        "--input",
        str(corpus.txt),
        "--tokenizer",
        str(tokenizer),
        "--output",
        str(output),
        *extra,
    ]


def measured(m: Measurement, **extra: Any) -> dict[str, Any]:
    return {
        "wall_s": round(m.wall_s, 2),
        "cpu_s": round(m.cpu_s, 2),
        "peak_rss_mb": round(m.peak_rss_bytes / MB, 1),
        "mean_load1": round(m.mean_load1, 2),
        **extra,
    }


def lmshards_removed(output: Path) -> set[int]:
    return {
        json.loads(line)["index"]
        for path in (output / "curation").glob("*.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines()
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    corpus = make_corpus(
        work / "corpus", docs=args.docs, words=args.words, edit_rates=tuple(args.edit_rates)
    )
    tokenizer = train_tokenizer([corpus.txt], work)
    results: dict[str, Any] = {
        "corpus": {
            "documents": len(corpus.texts),
            "mb": round(corpus.txt.stat().st_size / MB, 2),
            "planted_copies": len(corpus.rate_of),
        },
        "load_before": load_average(),
    }
    env = child_env()
    plain = run_checked(
        lmshards_argv(corpus, tokenizer, work / PLAIN), env=env, timeout_s=RUN_TIMEOUT_S
    )
    results[PLAIN] = measured(plain)
    near = run_checked(
        lmshards_argv(corpus, tokenizer, work / NEAR, "--dedup", "near"),
        env=env,
        timeout_s=RUN_TIMEOUT_S,
    )
    results[NEAR] = measured(near, **quality(corpus, lmshards_removed(work / NEAR)))
    if args.datatrove_python:
        trove = run_checked(
            [
                args.datatrove_python,
                str(DATATROVE_SCRIPT),
                str(corpus.jsonl),
                str(work / DATATROVE),
                str(NGRAM),
                str(BANDS),
                str(ROWS),
            ],
            timeout_s=RUN_TIMEOUT_S,
        )
        found = reported(trove)
        removed = {int(i) for i in found["removed"]}
        results[DATATROVE] = measured(trove, stages_s=found["seconds"], **quality(corpus, removed))
    results["near_over_plain_wall"] = round(near.wall_s / plain.wall_s, 2)
    results["signatures_mb_s_one_core"] = round(signature_mb_s(corpus.texts[:2000]), 2)
    return results


def cost_corpora(source: Path, work: Path, mb: int, scale: int) -> dict[str, Path]:
    """name -> input directory: line documents and long documents at mb and at mb x scale."""
    files = corpus_files(source)
    corpora = {}
    for size in (mb, mb * scale):
        corpora[f"lines_{size}mb"] = work / f"lines_{size}mb"
        take_subset(files, int(size * MB), corpora[f"lines_{size}mb"])
        long = make_corpus(
            work / f"long_{size}mb",
            docs=int(size * MB / LONG_DOC_BYTES),
            words=DEFAULT_WORDS,
            edit_rates=DEFAULT_EDIT_RATES,
        )
        long.jsonl.unlink()  # the .txt is the input
        corpora[f"long_{size}mb"] = long.txt.parent
    return corpora


def preprocess_argv(
    directory: Path, tokenizer: Path, output: Path, flags: tuple[str, ...]
) -> list[str]:
    """`lmshards preprocess` of every file in directory into output, with flags."""
    argv = [sys.executable, "-m", "lmshards", "preprocess", "--input", str(directory)]
    return [*argv, "--tokenizer", str(tokenizer), "--output", str(output), *flags]


def run_cost(args: argparse.Namespace) -> dict[str, Any]:
    """Plain, --dedup near and --dedup exact on each cost corpus, side by side in one run."""
    work = Path(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    corpora = cost_corpora(Path(args.cost_corpus), work, args.cost_mb, args.cost_scale)
    tokenizer = train_tokenizer(corpus_files(Path(args.cost_corpus)), Path(args.tokenizer_dir))
    env = child_env()
    results: dict[str, Any] = {"load_before": load_average(), "corpora": {}}
    for name, directory in corpora.items():
        row: dict[str, Any] = {
            "mb": round(sum(f.stat().st_size for f in directory.glob("*.txt")) / MB, 1)
        }
        for mode, flags in COST_MODES.items():
            output = work / f"out-{name}-{mode}"
            argv = preprocess_argv(directory, tokenizer, output, flags)
            row[mode] = measured(run_checked(argv, env=env, timeout_s=RUN_TIMEOUT_S))
            shutil.rmtree(output)
        for mode in (NEAR, EXACT):
            row[f"{mode}_over_plain_cpu"] = round(row[mode]["cpu_s"] / row[PLAIN]["cpu_s"], 2)
            row[f"{mode}_over_plain_rss"] = round(
                row[mode]["peak_rss_mb"] / row[PLAIN]["peak_rss_mb"], 2
            )
        results["corpora"][name] = row
    for kind in ("lines", "long"):
        small = results["corpora"][f"{kind}_{args.cost_mb}mb"]
        large = results["corpora"][f"{kind}_{args.cost_mb * args.cost_scale}mb"]
        results[f"{kind}_rss_large_over_small"] = {
            mode: round(large[mode]["peak_rss_mb"] / small[mode]["peak_rss_mb"], 2)
            for mode in COST_MODES
        }
    return results


def _kernel_peak_rss(pid: int) -> int:
    """Bytes: the process's RSS high-water mark as the kernel keeps it (VmHWM; Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _sample_peaks(procs: list[psutil.Process], peaks: list[int], stop: threading.Event) -> None:
    """Keeps peaks[i] the largest RSS seen of procs[i], sampled every SAMPLE_INTERVAL_S until stop."""
    while not stop.wait(SAMPLE_INTERVAL_S):
        for i, proc in enumerate(procs):
            try:
                peaks[i] = max(peaks[i], proc.memory_info().rss)
            except psutil.Error:
                continue


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def dask_worker_peaks(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Runs argv (a preprocess) on a fresh local cluster; each worker process's peak RSS and CPU seconds
    during it."""
    from distributed import Client

    from lmshards.preprocess.dask_runner import local_cluster

    with local_cluster(DASK_WORKERS) as cluster, Client(cluster) as client:
        pids = sorted(client.run(os.getpid).values())
        procs = [psutil.Process(pid) for pid in pids]
        idle = [proc.memory_info().rss for proc in procs]
        cpu_before = [_cpu_s(proc) for proc in procs]
        peaks, stop = list(idle), threading.Event()
        sampler = threading.Thread(target=_sample_peaks, args=(procs, peaks, stop), daemon=True)
        sampler.start()
        try:
            argv = [
                *argv,
                "--runner",
                "DaskRunner",
                "--dask_client_address",
                cluster.scheduler_address,
            ]
            m = run_checked(argv, env=env, timeout_s=RUN_TIMEOUT_S)
        finally:
            stop.set()
            sampler.join()
        kernel = [_kernel_peak_rss(pid) for pid in pids]
        worker_cpu_s = [_cpu_s(proc) - cpu for proc, cpu in zip(procs, cpu_before)]
    return measured(
        m,
        worker_cpu_s=[round(c, 1) for c in worker_cpu_s],
        worker_idle_mb=[round(b / MB, 1) for b in idle],
        worker_peak_mb=[round(b / MB, 1) for b in peaks],
        worker_vmhwm_mb=[round(b / MB, 1) for b in kernel],
    )


def run_dask(args: argparse.Namespace) -> dict[str, Any]:
    """Plain, --dedup near and the document steps on DaskRunner, line documents at two sizes."""
    work = Path(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    files = corpus_files(Path(args.cost_corpus))
    tokenizer = train_tokenizer(files, Path(args.tokenizer_dir))
    env = child_env()
    results: dict[str, Any] = {
        "load_before": load_average(),
        "workers": DASK_WORKERS,
        "corpora": {},
    }
    sizes = (args.cost_mb, args.cost_mb * args.cost_scale)
    modes = {mode: DASK_MODES[mode] for mode in args.dask_modes}
    for size in sizes:
        directory = work / f"lines_{size}mb"
        join_files(take_subset(files, int(size * MB), work / f"subset_{size}mb"), directory)
        row: dict[str, Any] = {
            "mb": round(sum(f.stat().st_size for f in directory.glob("*.txt")) / MB, 1)
        }
        for mode, flags in modes.items():
            for shuffle in args.dask_shuffles:
                run = dask_run_name(mode, shuffle)
                output = work / f"out-{size}mb-{mode}-{shuffle}"
                ranged = (*flags, "--range_mb", str(args.dask_range_mb), "--dask_shuffle", shuffle)
                row[run] = dask_worker_peaks(
                    preprocess_argv(directory, tokenizer, output, ranged), env
                )
                shutil.rmtree(output)
        results["corpora"][f"lines_{size}mb"] = row
    small, large = (results["corpora"][f"lines_{size}mb"] for size in sizes)
    results["worker_peak_large_over_small"] = {
        run: round(max(large[run]["worker_peak_mb"]) / max(small[run]["worker_peak_mb"]), 2)
        for run in (dask_run_name(m, s) for m in modes for s in args.dask_shuffles)
    }
    return results


def join_files(files: Sequence[Path], directory: Path, name: str = "lines.txt") -> Path:
    """The files' lines one after another in one file under `directory` (each file ends with a newline)."""
    directory.mkdir(parents=True, exist_ok=True)
    joined = directory / name
    with joined.open("wb") as out:
        for f in files:
            out.write(f.read_bytes())
    return joined


def dask_run_name(mode: str, shuffle: str) -> str:
    """A Dask run's name: the mode, and the shuffle when it is not the default one."""
    return mode if shuffle == DASK_SHUFFLES[0] else f"{mode}/{shuffle}"


def print_dask_table(results: dict[str, Any]) -> None:
    for name, row in results["corpora"].items():
        print(f"{name} ({row['mb']} MB), {results['workers']} workers:")
        for mode in results["worker_peak_large_over_small"]:
            r = row[mode]
            print(
                f"  {mode:<15} wall {r['wall_s']:>7.1f} s  workers cpu {r['worker_cpu_s']} s  "
                f"launcher peak {r['peak_rss_mb']:>6.0f} MB  "
                f"workers idle {r['worker_idle_mb']} peak {r['worker_peak_mb']} VmHWM {r['worker_vmhwm_mb']} MB"
                f"  load {r['mean_load1']:.1f}"
            )
    print(
        f"highest worker peak at the larger size over the smaller: {results['worker_peak_large_over_small']}"
    )


def print_cost_table(results: dict[str, Any]) -> None:
    for name, row in results["corpora"].items():
        print(f"{name} ({row['mb']} MB):")
        for mode in COST_MODES:
            r = row[mode]
            ratios = (
                f"  cpu {row[f'{mode}_over_plain_cpu']:.2f}x, rss {row[f'{mode}_over_plain_rss']:.2f}x plain"
                if mode != PLAIN
                else ""
            )
            print(
                f"  {mode:<6} wall {r['wall_s']:>7.1f} s  cpu {r['cpu_s']:>7.1f} s  "
                f"peak {r['peak_rss_mb']:>7.0f} MB  load {r['mean_load1']:.1f}{ratios}"
            )
    for kind in ("lines", "long"):
        print(
            f"{kind}: peak RSS at the larger size over the smaller: {results[f'{kind}_rss_large_over_small']}"
        )
    print(
        f"targets: --dedup near <= {TARGET_CPU_RATIO}x plain's CPU, <= {TARGET_RSS_RATIO}x its peak RSS"
    )


def print_table(results: dict[str, Any]) -> None:
    print(f"corpus: {results['corpus']}")
    for system in (PLAIN, NEAR, DATATROVE):
        r = results.get(system)
        if r is None:
            continue
        quality_part = (
            f" | recall {r['recall_all']:.3f} {r['recall']} | false removals {r['false_removals']}"
            if "recall" in r
            else ""
        )
        print(
            f"  {system:<10} wall {r['wall_s']:>7.1f} s  cpu {r['cpu_s']:>7.1f} s  "
            f"peak {r['peak_rss_mb']:>7.0f} MB  load {r['mean_load1']:.1f}{quality_part}"
        )
    print(
        f"  --dedup near / plain wall: {results['near_over_plain_wall']:.2f}x "
        f"(target <= {TARGET_COST_RATIO}x); signatures {results['signatures_mb_s_one_core']:.2f} MB/s "
        f"per CPU second on one core (target >= {TARGET_SIGNATURE_MB_S})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=DEFAULT_DOCS)
    parser.add_argument("--words", type=int, default=DEFAULT_WORDS)
    parser.add_argument("--edit_rates", type=float, nargs="+", default=list(DEFAULT_EDIT_RATES))
    parser.add_argument(
        "--datatrove_python", default=None, help="datatrove's Python (its own venv)"
    )
    parser.add_argument("--work-dir", dest="work_dir", default="/tmp/lmshards-bench-dedup")
    parser.add_argument(
        "--cost_corpus", default=None, help="measure curation's cost on this directory of *.txt"
    )
    parser.add_argument(
        "--dask",
        action="store_true",
        help="with --cost_corpus: per-worker peak memory on DaskRunner",
    )
    parser.add_argument(
        "--dask_range_mb",
        type=float,
        default=DASK_RANGE_MB,
        help="with --dask: --range_mb of every run (a bag partition is one read range)",
    )
    parser.add_argument(
        "--dask_modes",
        type=lambda text: text.split(","),
        default=list(DASK_MODES),
        help=f"with --dask: which runs, comma-separated (default: {','.join(DASK_MODES)})",
    )
    parser.add_argument(
        "--dask_shuffles",
        type=lambda text: text.split(","),
        default=[DASK_SHUFFLES[0]],
        help=f"with --dask: each mode once per --dask_shuffle given, comma-separated ({','.join(DASK_SHUFFLES)}; "
        f"default: {DASK_SHUFFLES[0]})",
    )
    parser.add_argument("--cost_mb", type=int, default=DEFAULT_COST_MB)
    parser.add_argument("--cost_scale", type=int, default=DEFAULT_COST_SCALE)
    parser.add_argument(
        "--tokenizer_dir",
        default="/tmp/lmshards-bench-tokenizer",
        help="where the tokenizer is cached",
    )
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    unknown = [mode for mode in args.dask_modes if mode not in DASK_MODES]
    if unknown:
        parser.error(
            f"--dask_modes {','.join(unknown)}: not a run; choose from {','.join(DASK_MODES)}"
        )
    wrong = [shuffle for shuffle in args.dask_shuffles if shuffle not in DASK_SHUFFLES]
    if wrong:
        parser.error(
            f"--dask_shuffles {','.join(wrong)}: not a shuffle; choose from {','.join(DASK_SHUFFLES)}"
        )
    header = report_header("dedup", started=time.time(), argv=argv, code_dirs=CODE_DIRS)
    if args.cost_corpus and args.dask:
        results = run_dask(args)
        print_dask_table(results)
    elif args.cost_corpus:
        results = run_cost(args)
        print_cost_table(results)
    else:
        results = run(args)
        print_table(results)
    if args.json:
        Path(args.json).write_text(
            json.dumps({**header, **results}, indent=2) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
