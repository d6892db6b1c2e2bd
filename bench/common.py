"""What every benchmark shares: run a command in a fresh process and measure its wall time and peak memory; the
header every JSON report starts with; the environment each system runs in; the corpus files and a tokenizer
trained on them; `lmshards` commands run to completion, and the shard sets they make.

Memory is measured over the whole process tree (the command and every descendant alive at that moment):
Beam's multi_processing mode and `datasets.map(num_proc=...)` do their work in child processes, so the top
process alone undercounts. Two sums are kept, and the peak of each reported:
  - RSS, sampled every `SAMPLE_INTERVAL_S`: resident pages of each process, summed. Pages shared between
    processes (the libraries a forked worker inherits from its parent, e.g. `datasets.map` workers forked
    from a process that imported TensorFlow) count once per process, so this overstates forked trees.
  - PSS: each shared page divided among the processes that share it (Linux smaps_rollup), summed: the
    memory the tree really occupies, the figure to compare systems on. The kernel walks every page
    table to compute it (~50-250 ms for a 1 GB process), so it is sampled at most every
    `PSS_MIN_INTERVAL_S` and at most `PSS_MAX_SHARE` of one core goes to it.
Sampling can miss a spike shorter than the interval. The largest single-process `ru_maxrss` is reported
beside them: an exact lower bound that no sampling can miss.

CPU seconds (user + system, the whole tree) are reported beside wall time: on a machine that others
share, wall time stretches with their load, while CPU seconds mostly do not.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from lmshards.schemas.manifest import Manifest, TokenizerInfo
from lmshards.schemas.metrics_log import read_metrics

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO_ROOT / "data" / "sample" / "en"  # the bundled English sample
MB = 1e6
RUN_TIMEOUT_S = 3600.0  # one measured command, or one `lmshards` run
RESULT_PREFIX = "RESULT "  # the line a reference script prints its counts on, as JSON
SAMPLE_INTERVAL_S = 0.2
PSS_MIN_INTERVAL_S = 1.0
PROCESS_MIN_CPU_S = 0.5  # a process of the tree below this is left out of the per-process figures
PSS_MAX_SHARE = (
    0.05  # of one core: after a PSS sample that took t seconds, wait at least t / PSS_MAX_SHARE
)

_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One command's run. Sizes in bytes, times in seconds."""

    argv: tuple[str, ...]
    returncode: int
    wall_s: float
    cpu_s: float  # user + system CPU seconds of the whole tree (every descendant its parent waited for)
    peak_rss_bytes: int  # peak of the summed RSS of the process tree
    peak_pss_bytes: int  # peak of the summed PSS of the process tree
    max_single_rss_bytes: (
        int  # largest ru_maxrss of any one process of the tree (exact, a lower bound)
    )
    peak_processes: int  # most processes alive in the tree at one sample
    pss_samples: int
    mean_load1: float  # the machine's 1-minute load average, averaged over the samples
    stdout: str
    stderr: str
    # Each process of the tree that used at least PROCESS_MIN_CPU_S, largest CPU first (sampled figures).
    processes: tuple[ProcessFigures, ...] = ()


COMMAND_ROLE = "command"  # ProcessFigures.role of the measured command itself


@dataclasses.dataclass(frozen=True)
class ProcessFigures:
    """One process of a measured tree, as sampled every SAMPLE_INTERVAL_S: its last CPU seconds seen (up to
    one interval short of its end) and its peak RSS."""

    role: str  # "command" (the measured command itself), else what it runs (process_role)
    cpu_s: float
    peak_rss_bytes: int


def process_role(cmdline: Sequence[str]) -> str:
    """A short name of what a child process runs: its `-m` module, a multiprocessing child, or its program."""
    args = list(cmdline)
    if "-m" in args[:-1]:
        return args[args.index("-m") + 1]
    if any("multiprocessing" in arg for arg in args):
        return "multiprocessing child"
    return os.path.basename(args[0]) if args else "?"


def descendants(root: psutil.Process) -> list[psutil.Process]:
    try:
        return root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def summed_rss(procs: Sequence[psutil.Process]) -> int:
    """Bytes; a process that exited meanwhile counts 0 (its memory is gone already)."""
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except _GONE:
            continue
    return total


def summed_pss(procs: Sequence[psutil.Process]) -> int:
    """Bytes; a process that exited meanwhile counts 0."""
    total = 0
    for proc in procs:
        try:
            total += proc.memory_full_info().pss
        except _GONE:
            continue
    return total


def run_measured(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout_s: float | None = None,
) -> Measurement:
    """Runs argv to completion in a new process, sampling its tree's memory until it exits.

    stdout/stderr go to temporary files (not pipes), so a chatty command never blocks on a full pipe.
    The command runs under a small wrapper process that reports `ru_maxrss` of what it waited for, so
    that earlier runs made by this process do not leak into the figure; the wrapper itself is not counted.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = psutil.Popen(
            [*_RUSAGE_WRAPPER, *argv],
            stdout=out,
            stderr=err,
            env=dict(env) if env else None,
            cwd=cwd,
        )
        peaks = _sample_until_exit(proc, timeout_s=timeout_s, start=start)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    stderr, max_single, cpu_s = _split_rusage_line(stderr)
    return Measurement(
        argv=tuple(argv),
        returncode=proc.returncode,
        wall_s=wall,
        cpu_s=cpu_s,
        peak_rss_bytes=max(peaks.rss, max_single),
        peak_pss_bytes=peaks.pss,
        max_single_rss_bytes=max_single,
        peak_processes=peaks.processes,
        pss_samples=peaks.pss_samples,
        mean_load1=sum(peaks.load1) / len(peaks.load1) if peaks.load1 else os.getloadavg()[0],
        stdout=stdout,
        stderr=stderr,
        processes=peaks.process_figures(),
    )


def run_checked(argv: Sequence[str], **kwargs: Any) -> Measurement:
    """run_measured, raising RuntimeError with the tail of stderr if the command fails."""
    m = run_measured(argv, **kwargs)
    if m.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:4])} ... exited {m.returncode}; stderr tail:\n{m.stderr[-4000:]}"
        )
    return m


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages (how busy the shared machine was)."""
    return os.getloadavg()


def source_version(code_dirs: Sequence[str]) -> dict[str, Any]:
    """The commit of the lmshards tree being measured, and whether the code the bench runs (code_dirs) differs."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    changed = git("status", "--porcelain", "--", *code_dirs)
    return {"commit": git("rev-parse", "HEAD") or None, "uncommitted_changes": bool(changed)}


def report_header(
    benchmark: str,
    *,
    started: float,
    argv: Sequence[str] | None,
    code_dirs: Sequence[str],
    **machine: Any,
) -> dict[str, Any]:
    """What every bench's JSON report starts with: which bench, when, the command, the code and the machine."""
    return {
        "benchmark": benchmark,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "command": " ".join(
            [f"python -m bench.bench_{benchmark}", *(argv if argv is not None else sys.argv[1:])]
        ),
        "lmshards": source_version(code_dirs),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            **machine,
        },
    }


@dataclasses.dataclass
class _Peaks:
    rss: int = 0
    pss: int = 0
    processes: int = 0
    pss_samples: int = 0
    load1: list[float] = dataclasses.field(default_factory=list)
    # pid -> [role, last CPU seconds seen, peak RSS]
    each: dict[int, list[Any]] = dataclasses.field(default_factory=dict)

    def sample_each(self, procs: Sequence[psutil.Process], wrapper_pid: int) -> None:
        for proc in procs:
            try:
                times, rss = proc.cpu_times(), proc.memory_info().rss
                if proc.pid not in self.each:  # the wrapper's one child is the measured command
                    command = proc.ppid() == wrapper_pid
                    role = COMMAND_ROLE if command else process_role(proc.cmdline())
                    self.each[proc.pid] = [role, 0.0, 0]
            except _GONE:
                continue
            seen = self.each[proc.pid]
            seen[1], seen[2] = times.user + times.system, max(seen[2], rss)

    def process_figures(self) -> tuple[ProcessFigures, ...]:
        figures = [ProcessFigures(role, cpu, rss) for role, cpu, rss in self.each.values()]
        kept = [f for f in figures if f.cpu_s >= PROCESS_MIN_CPU_S]
        return tuple(sorted(kept, key=lambda f: -f.cpu_s))


def _sample_until_exit(proc: psutil.Popen, *, timeout_s: float | None, start: float) -> _Peaks:
    peaks = _Peaks()
    next_pss = start
    while proc.poll() is None:
        procs = descendants(proc)  # the root is the wrapper: not counted
        peaks.rss = max(peaks.rss, summed_rss(procs))
        peaks.sample_each(procs, proc.pid)
        peaks.processes = max(peaks.processes, len(procs))
        peaks.load1.append(os.getloadavg()[0])
        now = time.perf_counter()
        if now >= next_pss and procs:
            peaks.pss = max(peaks.pss, summed_pss(procs))
            peaks.pss_samples += 1
            cost = time.perf_counter() - now
            next_pss = now + max(PSS_MIN_INTERVAL_S, cost / PSS_MAX_SHARE)
        if timeout_s is not None and now - start > timeout_s:
            _kill_tree(proc)
            break
        time.sleep(SAMPLE_INTERVAL_S)
    proc.wait()
    return peaks


def _kill_tree(proc: psutil.Popen) -> None:
    for child in descendants(proc):
        try:
            child.kill()
        except _GONE:
            continue
    proc.kill()


# A tiny parent that runs the command, waits for it, and reports its RUSAGE_CHILDREN: ru_maxrss (KiB on
# Linux), the largest RSS any single process of the command's tree reached, and the CPU seconds (user +
# system) of the whole tree. Both cover every descendant that its parent waited for. On Linux the wrapper
# is the tree's subreaper: a descendant orphaned when its parent exits (a fork server, which waited for
# the worker processes it forked) comes back to it and is waited for too, else its CPU seconds were lost.
_RUSAGE_MARK = "__bench_rusage="
_PR_SET_CHILD_SUBREAPER = 36
_RUSAGE_WRAPPER = (
    sys.executable,
    "-c",
    "\n".join(
        [
            "import ctypes, os, resource, subprocess, sys",
            "if sys.platform == 'linux':",
            f"    ctypes.CDLL(None).prctl({_PR_SET_CHILD_SUBREAPER}, 1, 0, 0, 0)",
            "rc = subprocess.call(sys.argv[1:])",
            "while True:",
            "    try:",
            "        os.wait()",
            "    except ChildProcessError:",
            "        break",
            "u = resource.getrusage(resource.RUSAGE_CHILDREN)",
            f"print('{_RUSAGE_MARK}%d %.3f' % (u.ru_maxrss, u.ru_utime + u.ru_stime), file=sys.stderr)",
            "sys.exit(rc)",
        ]
    ),
)


def _split_rusage_line(stderr: str) -> tuple[str, int, float]:
    """Removes the wrapper's rusage line from stderr; returns (stderr, max single RSS bytes, CPU seconds)."""
    kept, kib, cpu = [], 0, 0.0
    for line in stderr.splitlines(keepends=True):
        if line.startswith(_RUSAGE_MARK):
            max_kib, cpu_s = line[len(_RUSAGE_MARK) :].split()
            kib, cpu = int(max_kib), float(cpu_s)
        else:
            kept.append(line)
    return "".join(kept), kib * 1024, cpu


# ---------------------------------------------------------------- the environment and the corpus


def child_env(**extra: str) -> dict[str, str]:
    """The environment every system runs in: offline, quiet TF, tokenizers left at their default threading."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS")
    }
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def reported(m: Measurement) -> dict[str, Any]:
    """The JSON a reference script printed after RESULT_PREFIX."""
    for line in reversed(m.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    raise RuntimeError(
        f"{m.argv[:3]} printed no {RESULT_PREFIX!r} line; stdout tail:\n{m.stdout[-2000:]}"
    )


def corpus_files(corpus: Path) -> list[Path]:
    """The *.txt files directly under corpus, sorted. Raises SystemExit if there are none."""
    files = sorted(p for p in corpus.glob("*.txt") if p.is_file() and p.stat().st_size > 0)
    if not files:
        raise SystemExit(
            f"--corpus {str(corpus)!r} holds no non-empty *.txt files; pass the directory with the text."
        )
    return files


def take_subset(files: Sequence[Path], target_bytes: int, out_dir: Path) -> list[Path]:
    """Writes about target_bytes of the corpus to out_dir: the same leading share of every file.

    Taking a prefix of each file (cut at a line end) keeps the mix of sources of the full corpus.
    """
    total = sum(f.stat().st_size for f in files)
    share = min(1.0, target_bytes / total)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for f in files:
        data = f.read_bytes()
        cut = data.rfind(b"\n", 0, int(len(data) * share)) + 1
        if cut == 0:
            continue
        dest = out_dir / f.name
        dest.write_bytes(data[:cut])
        written.append(dest)
    return written


# ---------------------------------------------------------------- a tokenizer.json trained in this process

TOKENIZER_VOCAB_SIZE = 32000
TOKENIZER_SAMPLE_BYTES = 20_000_000
TOKENIZER_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")

# A RoBERTa-style vocabulary for shards of random ids, generated without a tokenizer.
GENERATED_TOKENIZER = TokenizerInfo(
    fingerprint="sha256:" + "0" * 64,
    vocab_size=25_000,
    special_token_ids={"cls": 0, "pad": 1, "sep": 2, "unk": 3, "mask": 4},
    all_special_ids=(0, 1, 2, 3, 4),
)


def train_tokenizer(files: list[Path], work_dir: Path) -> Path:
    """A RoBERTa-style byte-level BPE (vocab 32000) trained on a 20 MB sample; cached per corpus."""
    key = hashlib.sha256(repr([(f.name, f.stat().st_size) for f in files]).encode()).hexdigest()[
        :12
    ]
    path = work_dir / f"tokenizer-{key}" / "tokenizer.json"
    if path.exists():
        return path
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    sample = take_subset(files, TOKENIZER_SAMPLE_BYTES, path.parent / "sample")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB_SIZE,
        special_tokens=list(TOKENIZER_SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(f) for f in sample], trainer=trainer)
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>"))
    )
    tmp = path.with_suffix(".tmp")
    tok.save(str(tmp))
    os.replace(tmp, path)
    shutil.rmtree(path.parent / "sample")
    return path


# ---------------------------------------------------------------- lmshards through its command line

# `lmshards tokenizer train` for the benches that train: fast to train, enough for the bundled sample.
LMSHARDS_TOKENIZER_MODEL = "bpe"
LMSHARDS_TOKENIZER_VOCAB_SIZE = 8000
# The shard set make_shards makes.
SHARDS_SEQ_LEN = 128
SHARDS_VALIDATION_FRACTION = (
    0.1  # ~450 validation sequences from the bundled sample: ~8k masked tokens per evaluation
)
SHARDS_NUM_SHARDS = 8


def lmshards_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "lmshards", *args]


def run_lmshards(args: Sequence[str], *, env: Mapping[str, str], log_path: Path) -> None:
    """Runs one `lmshards` command to completion; raises RuntimeError with its output's tail on failure."""
    with open(log_path, "w") as log:
        rc = subprocess.call(
            lmshards_argv(*args), stdout=log, stderr=subprocess.STDOUT, env=dict(env), cwd=REPO_ROOT
        )
    if rc != 0:
        raise RuntimeError(
            f"lmshards {' '.join(args[:2])} exited {rc}; its output ends:\n{log_tail(log_path)}"
        )


def log_tail(log_path: Path) -> str:
    return log_path.read_text()[-4000:]


def lmshards_tokenizer(
    corpus: str | Path,
    output: Path,
    *,
    env: Mapping[str, str],
    log_path: Path,
    vocab_size: int = LMSHARDS_TOKENIZER_VOCAB_SIZE,
) -> None:
    """`lmshards tokenizer train` of corpus (a directory or glob) into output."""
    run_lmshards(["tokenizer", "train", "--input", str(corpus), "--model", LMSHARDS_TOKENIZER_MODEL,
                  "--vocab_size", str(vocab_size), "--output", str(output)],
                 env=env, log_path=log_path)  # fmt: skip


def make_shards(
    corpus: Path,
    work: Path,
    *,
    env: Mapping[str, str],
    vocab_size: int = LMSHARDS_TOKENIZER_VOCAB_SIZE,
) -> tuple[str, str]:
    """(shards dir, tokenizer dir) made from corpus with the CLI."""
    tokenizer, shards = work / "tokenizer", work / "shards"
    lmshards_tokenizer(
        corpus, tokenizer, env=env, log_path=work / "tokenizer.log", vocab_size=vocab_size
    )
    run_lmshards(["preprocess", "--input", str(corpus), "--tokenizer", str(tokenizer), "--output", str(shards),
                  "--seq_len", str(SHARDS_SEQ_LEN), "--validation_fraction", str(SHARDS_VALIDATION_FRACTION),
                  "--num_shards", str(SHARDS_NUM_SHARDS)], env=env, log_path=work / "preprocess.log")  # fmt: skip
    return str(shards), str(tokenizer)


def shards_digest(manifest: Manifest) -> str:
    """One SHA-256 over every shard's path and SHA-256 in the manifest: equal for two runs that wrote the same shards."""
    shards = sorted(
        (shard.path, shard.sha256) for split in manifest.splits.values() for shard in split.shards
    )
    return hashlib.sha256(repr(shards).encode()).hexdigest()


def add_corpus_flag(p: argparse.ArgumentParser) -> None:
    """--corpus: the text a bench that trains makes its shards from (make_shards)."""
    p.add_argument(
        "--corpus",
        type=Path,
        default=SAMPLE_CORPUS,
        help="directory of *.txt files to make shards from (default: %(default)s)",
    )


def add_schedule_flags(
    p: argparse.ArgumentParser, *, steps: int, batch_size: int, learning_rate: float, of: str
) -> None:
    """--steps, --batch-size and --learning-rate of the runs a bench trains; `of` names them in the help."""
    p.add_argument(
        "--steps", type=int, default=steps, help=f"training steps of {of} (default: %(default)s)"
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=batch_size,
        help="sequences per step (default: %(default)s)",
    )
    p.add_argument(
        "--learning-rate",
        type=float,
        default=learning_rate,
        help=f"peak learning rate of {of} (default: %(default)s)",
    )


def add_run_output_flags(p: argparse.ArgumentParser) -> None:
    """--work-dir and --json of a bench that trains: where its shards, runs and logs go, and its report."""
    p.add_argument(
        "--work-dir",
        type=Path,
        help="keep shards, runs and logs here (default: a temporary directory)",
    )
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")


def logged_windows(metrics_jsonl: str) -> list[dict[str, Any]]:
    """The training-window records of a metrics.jsonl (the ones with a train loss), in step order."""
    return [r for r in read_metrics(metrics_jsonl) if "loss" in r]
