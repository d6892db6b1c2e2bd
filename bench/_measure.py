"""Shared benchmark helpers: run a command in a fresh process and measure its wall time and peak memory; the
header every JSON report starts with.

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

import dataclasses
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

REPO_ROOT = Path(__file__).resolve().parents[1]
MB = 1e6
SAMPLE_INTERVAL_S = 0.2
PSS_MIN_INTERVAL_S = 1.0
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


def _sample_until_exit(proc: psutil.Popen, *, timeout_s: float | None, start: float) -> _Peaks:
    peaks = _Peaks()
    next_pss = start
    while proc.poll() is None:
        procs = descendants(proc)  # the root is the wrapper: not counted
        peaks.rss = max(peaks.rss, summed_rss(procs))
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
# system) of the whole tree. Both cover every descendant that its parent waited for.
_RUSAGE_MARK = "__bench_rusage="
_RUSAGE_WRAPPER = (
    sys.executable,
    "-c",
    "import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
    "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
    f"print('{_RUSAGE_MARK}%d %.3f' % (u.ru_maxrss, u.ru_utime + u.ru_stime), file=sys.stderr); "
    "sys.exit(rc)",
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
