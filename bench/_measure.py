"""Shared benchmark helpers: run a command in a fresh process and measure its wall time and peak memory.

Memory is measured over the whole process tree (the command and every descendant alive at that moment),
sampled every `SAMPLE_INTERVAL_S`: Beam's multi_processing mode and `datasets.map(num_proc=...)` do their work
in child processes, so the top process alone undercounts. Two sums are kept, and the peak of each reported:
  - RSS: resident pages of each process, summed. Pages shared between processes (the libraries a
    forked worker inherits from its parent, e.g. `datasets.map` workers forked from a process that
    imported TensorFlow) are counted once per process, so this overstates forked trees.
  - PSS: each shared page divided among the processes that share it (Linux smaps_rollup), summed:
    the memory the tree really occupies. This is the figure to compare systems on.
Sampling can miss a spike shorter than the interval. The largest single-process `ru_maxrss` is reported
beside them: an exact lower bound that no sampling can miss.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import threading
import time
from typing import Any, Mapping, Sequence

import psutil

SAMPLE_INTERVAL_S = 0.2
MB = 1e6


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One command's run. Sizes in bytes, times in seconds."""

    argv: tuple[str, ...]
    returncode: int
    wall_s: float
    peak_rss_bytes: int  # peak of the summed RSS of the process tree (sampled)
    peak_pss_bytes: int  # peak of the summed PSS of the process tree (sampled)
    max_single_rss_bytes: int  # largest ru_maxrss of any one process of the tree (exact, a lower bound)
    peak_processes: int  # most processes alive in the tree at one sample
    stdout: str
    stderr: str


@dataclasses.dataclass(frozen=True)
class TreeMemory:
    rss_bytes: int
    pss_bytes: int
    processes: int


def tree_memory(root: psutil.Process, *, include_root: bool = True) -> TreeMemory:
    """Summed RSS and PSS of root's live descendants, and of root itself if asked."""
    try:
        procs = [root, *root.children(recursive=True)] if include_root else root.children(recursive=True)
    except psutil.NoSuchProcess:
        return TreeMemory(0, 0, 0)
    rss, pss, count = 0, 0, 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # exited between listing and reading: its memory is gone already
        rss, pss, count = rss + info.rss, pss + info.pss, count + 1
    return TreeMemory(rss, pss, count)


def run_measured(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout_s: float | None = None,
) -> Measurement:
    """Runs argv to completion in a new process, sampling the tree's RSS until it exits.

    stdout/stderr go to temporary files (not pipes), so a chatty command never blocks on a full pipe.
    The single-process peak comes from `ru_maxrss` of the waited-for command, read in a wrapper
    process of its own so that earlier runs of this process do not leak into it.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = psutil.Popen(
            [*_RUSAGE_WRAPPER, *argv], stdout=out, stderr=err, env=dict(env) if env else None, cwd=cwd
        )
        peak = _sample_until_exit(proc, timeout_s=timeout_s, start=start)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    stderr, max_single = _split_rusage_line(stderr)
    return Measurement(
        argv=tuple(argv),
        returncode=proc.returncode,
        wall_s=wall,
        peak_rss_bytes=max(peak.rss_bytes, max_single),
        peak_pss_bytes=peak.pss_bytes,
        max_single_rss_bytes=max_single,
        peak_processes=peak.processes,
        stdout=stdout,
        stderr=stderr,
    )


def _sample_until_exit(proc: psutil.Popen, *, timeout_s: float | None, start: float) -> TreeMemory:
    """Peaks (each taken separately) of the tree's memory until proc exits."""
    rss, pss, count = 0, 0, 0
    while proc.poll() is None:
        now = tree_memory(proc, include_root=False)  # the root is the small rusage wrapper
        rss, pss, count = max(rss, now.rss_bytes), max(pss, now.pss_bytes), max(count, now.processes)
        if timeout_s is not None and time.perf_counter() - start > timeout_s:
            _kill_tree(proc)
            break
        time.sleep(SAMPLE_INTERVAL_S)
    proc.wait()
    return TreeMemory(rss, pss, count)


def _kill_tree(proc: psutil.Popen) -> None:
    for child in proc.children(recursive=True):
        child.kill()
    proc.kill()


# A tiny parent that runs the command, waits for it, and reports RUSAGE_CHILDREN.ru_maxrss (KiB on
# Linux): the largest RSS any single process of the command's tree reached, as its parents reaped it.
_RUSAGE_MARK = "__bench_max_single_rss_kib="
_RUSAGE_WRAPPER = (
    sys.executable,
    "-c",
    "import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
    f"print('{_RUSAGE_MARK}%d' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
    "sys.exit(rc)",
)


def _split_rusage_line(stderr: str) -> tuple[str, int]:
    """Removes the wrapper's rusage line from stderr; returns (stderr, max single RSS in bytes)."""
    kept, kib = [], 0
    for line in stderr.splitlines(keepends=True):
        if line.startswith(_RUSAGE_MARK):
            kib = int(line[len(_RUSAGE_MARK) :])
        else:
            kept.append(line)
    return "".join(kept), kib * 1024


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages (how busy the shared machine was)."""
    return os.getloadavg()


def run_checked(argv: Sequence[str], **kwargs: Any) -> Measurement:
    """run_measured, raising RuntimeError with the tail of stderr if the command fails."""
    m = run_measured(argv, **kwargs)
    if m.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... exited {m.returncode}; stderr tail:\n{m.stderr[-4000:]}")
    return m
