"""Can `lmshards train` run on this install? The runtime's distributions, and whether it imports.

Two checks, neither of which initialises a TPU or reaches the network:
- `stack_problems`: installed distributions only (their metadata, no import). Two TensorFlow
  distributions side by side, or a libtpu outside the releases known to load with the installed
  tensorflow-tpu or jax (KNOWN_LIBTPU_RANGES), are errors.
- `probe_runtime`: imports the backend's runtime, keras and keras-hub in a subprocess, with
  TPU_SKIP_MDS_QUERY=1 so a libtpu that loads does not ask a metadata server for minutes. A libtpu
  that does not match aborts that process, not this one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence

from lmshards.train.backend_names import JAX as BACKEND_JAX
from lmshards.train.backend_names import TENSORFLOW as BACKEND_TENSORFLOW

# The backends whose accelerator runtime `lmshards env --backend` knows how to check.
BACKENDS = (BACKEND_TENSORFLOW, BACKEND_JAX)

# Distributions that each provide the `tensorflow` package: only one may be installed, or whichever was
# installed last has overwritten part of the other's files.
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu")
TENSORFLOW_TPU = "tensorflow-tpu"
LIBTPU = "libtpu"
JAX = "jax"
JAXLIB = "jaxlib"
# What each backend's runtime check imports (after the runtime itself), and pip's names for them.
KERAS_STACK = ("keras", "keras-hub")
# Every distribution the checks read, so `lmshards env` lists each one's version.
CHECKED_DISTRIBUTIONS = (*TENSORFLOW_DISTRIBUTIONS, LIBTPU, JAX, JAXLIB, *KERAS_STACK)

# The pinned sets named in fixes (constraints/tpu.txt, setup.py's jax pin per Python).
TENSORFLOW_TPU_RELEASE = "2.20.0"
LIBTPU_FOR_TENSORFLOW_TPU = "0.0.31"
JAX_FOR_PYTHON_3_11 = "0.10.2"
JAX_FOR_PYTHON_3_12 = "0.12.0.1"
SETUP_TPU_ENV = "scripts/setup_tpu_env.sh"

# Loading libtpu off a TPU VM makes it query the cloud metadata server (30 tries per variable).
SKIP_METADATA_ENV = {"TPU_SKIP_MDS_QUERY": "1"}
# Importing TensorFlow with keras-hub takes ~10 s on a small CPU; a libtpu that still asks the
# network, or hangs, is reported rather than waited for.
PROBE_TIMEOUT_S = 300.0
# How much of a failed import's stderr a problem quotes.
ERROR_TAIL_CHARS = 300
# A fatal log line, in absl's format ('F1201 13:16:58.470804 ... file.cc:12] why') or TensorFlow's
# ('2026-12-01 13:16:58.470804: F external/.../tpu_library_init_fns.inc:12] why').
FATAL_LOG_LINE = re.compile(r"F[0-9]{4} |[0-9-]+ [0-9:.]+: F ")


@dataclasses.dataclass(frozen=True)
class LibtpuRange:
    """The libtpu releases known to load with one runtime release: lowest..highest, both inclusive.

    runtime_version and the bounds are release prefixes: runtime_version '2.20' covers 2.20.0 and 2.20.1,
    highest '0.0.31' covers 0.0.31.1. fix is the pip requirement that installs a matching libtpu.
    """

    runtime: str  # distribution: tensorflow-tpu | jax
    runtime_version: str
    lowest: str
    highest: str
    fix: str

    def covers_runtime(self, version: str) -> bool:
        prefix = release(self.runtime_version)
        return release(version)[: len(prefix)] == prefix

    def contains(self, libtpu_version: str) -> bool:
        v, high = release(libtpu_version), release(self.highest)
        return release(self.lowest) <= v and v[: len(high)] <= high

    @property
    def text(self) -> str:
        """'0.0.17-0.0.31', or '0.0.42.*' for a single release."""
        return (
            f"{self.lowest}.*" if self.lowest == self.highest else f"{self.lowest}-{self.highest}"
        )


# Checked against PyPI's libtpu releases: with tensorflow-tpu 2.20, 0.0.17-0.0.31 load, 0.0.32-0.0.43
# abort `import tensorflow` on missing symbols (ConfigureDistributedTpuOp_DoWork), 0.0.45 and later are
# JAX-only builds. jax[tpu] pins the one libtpu each jax release is built against.
KNOWN_LIBTPU_RANGES = (
    LibtpuRange(TENSORFLOW_TPU, "2.20", "0.0.17", "0.0.31", fix="libtpu==0.0.31"),
    LibtpuRange(JAX, "0.10.2", "0.0.42", "0.0.42", fix="jax[tpu]==0.10.2"),
    LibtpuRange(JAX, "0.12", "0.0.50", "0.0.50", fix="jax[tpu]==0.12.*"),
)


def release(version: str) -> tuple[int, ...]:
    """The leading release numbers of a version: '0.0.21.1' -> (0, 0, 21, 1), '2.20.0rc1' -> (2, 20, 0)."""
    match = re.match(r"[0-9]+(?:\.[0-9]+)*", version)
    return tuple(int(part) for part in match.group().split(".")) if match else ()


def libtpu_range(runtime: str, version: str) -> LibtpuRange | None:
    """The known libtpu range of one runtime release, or None when none is known."""
    for known in KNOWN_LIBTPU_RANGES:
        if known.runtime == runtime and known.covers_runtime(version):
            return known
    return None


def tensorflow_conflict(versions: Mapping[str, str | None]) -> str | None:
    """The problem when more than one TensorFlow distribution is installed, else None."""
    installed = [name for name in TENSORFLOW_DISTRIBUTIONS if versions.get(name)]
    if len(installed) < 2:
        return None
    keep = TENSORFLOW_TPU if TENSORFLOW_TPU in installed else "tensorflow"
    both = " and ".join(f"{name} {versions[name]}" for name in installed)
    return (
        f"{both} are installed side by side: each provides the `tensorflow` package, so the one "
        f"installed last has overwritten part of the other. Keep one: `pip uninstall -y "
        f"{' '.join(installed)}` then `pip install {keep}=={versions[keep]}`, or build a fresh venv "
        "(scripts/setup_tpu_env.sh for TPUs)."
    )


def libtpu_problem(backend: str, versions: Mapping[str, str | None]) -> str | None:
    """The problem when the installed libtpu is outside the range known to load with the backend's runtime."""
    libtpu = versions.get(LIBTPU)
    runtime = TENSORFLOW_TPU if backend == BACKEND_TENSORFLOW else JAX
    runtime_version = versions.get(runtime)
    if not libtpu or not runtime_version:
        return None
    known = libtpu_range(runtime, runtime_version)
    if known is None or known.contains(libtpu):
        return None
    return (
        f"libtpu {libtpu} is outside {known.text}, the libtpu releases known to load with "
        f"{runtime} {runtime_version}; install a matching one: `pip install '{known.fix}'`."
    )


def libtpu_notes(backend: str, versions: Mapping[str, str | None]) -> list[str]:
    """What cannot be judged: a libtpu beside a runtime release with no known range."""
    libtpu = versions.get(LIBTPU)
    runtime = TENSORFLOW_TPU if backend == BACKEND_TENSORFLOW else JAX
    runtime_version = versions.get(runtime)
    if libtpu and runtime_version and libtpu_range(runtime, runtime_version) is None:
        return [f"no known libtpu range for {runtime} {runtime_version}; libtpu {libtpu} unchecked"]
    return []


def jax_release(python: Sequence[int] = tuple(sys.version_info[:2])) -> str:
    """The jax release lmshards pins for this Python: jax 0.11 and later need Python 3.12."""
    return JAX_FOR_PYTHON_3_11 if tuple(python[:2]) < (3, 12) else JAX_FOR_PYTHON_3_12


def jax_accelerator_fix(python: Sequence[int] = tuple(sys.version_info[:2])) -> str:
    """The pinned install of the JAX backend's runtime for TPUs and for NVIDIA GPUs."""
    jax = jax_release(python)
    return (
        f"on a TPU VM `{SETUP_TPU_ENV} --backend jax VENV` (jax[tpu]=={jax} with the libtpu it pins), "
        f"on NVIDIA GPUs `pip install 'lmshards[train,jax]' 'jax[cuda12]=={jax}'`"
    )


def missing_runtime(
    backend: str, versions: Mapping[str, str | None], *, python: Sequence[int] | None = None
) -> str | None:
    """The problem when the backend's runtime or keras/keras-hub is not installed at all."""
    python = python or tuple(sys.version_info[:2])
    absent = [name for name in KERAS_STACK if not versions.get(name)]
    if backend == BACKEND_TENSORFLOW:
        if any(versions.get(name) for name in TENSORFLOW_DISTRIBUTIONS):
            runtime: list[str] = []
        else:
            runtime = ["a TensorFlow distribution (tensorflow or tensorflow-tpu)"]
        how = f"`pip install 'lmshards[train]'` (on a TPU VM: `{SETUP_TPU_ENV} VENV`)"
    else:
        runtime = [name for name in (JAX, JAXLIB) if not versions.get(name)]
        if runtime and versions.get(TENSORFLOW_TPU):
            # The TensorFlow TPU venv: the JAX set there would add `tensorflow` and move libtpu.
            return (
                f"--backend jax needs {' and '.join(runtime)}, and this is the TensorFlow TPU venv (tensorflow-tpu "
                f"{versions[TENSORFLOW_TPU]}, libtpu {versions.get(LIBTPU) or 'none'}): installing jax[tpu] here would "
                "put tensorflow beside tensorflow-tpu and replace its libtpu, breaking --backend tensorflow. Make a "
                f"JAX venv beside it: `{SETUP_TPU_ENV} --backend jax VENV` (jax[tpu]=={jax_release(python)})."
            )
        how = jax_accelerator_fix(python)
    if not runtime and not absent:
        return None
    return f"--backend {backend} needs {' and '.join(runtime + absent)}, not installed here: {how}."


def mixed_venv(versions: Mapping[str, str | None]) -> str | None:
    """The problem when one venv holds both backends' TPU stacks: tensorflow-tpu and jax.

    jax[tpu] needs a libtpu that tensorflow-tpu cannot load (and the JAX set adds `tensorflow`), so in
    such a venv one backend is broken whichever libtpu is installed.
    """
    if not (versions.get(TENSORFLOW_TPU) and versions.get(JAX)):
        return None
    return (
        f"tensorflow-tpu {versions[TENSORFLOW_TPU]} and jax {versions[JAX]} are installed in one venv: they need "
        "libtpu releases that exclude each other, so one of the backends cannot load. Keep one backend per venv: "
        f"`{SETUP_TPU_ENV} VENV` for --backend tensorflow, `{SETUP_TPU_ENV} --backend jax VENV` for --backend jax."
    )


def tpu_problems(
    backend: str, versions: Mapping[str, str | None], signals: Sequence[str]
) -> list[str]:
    """What keeps the backend off the TPU that the signals (lmshards.train.devices.detect_tpu_signals) announce.

    TPU signals with a runtime that has no TPU support (plain `tensorflow`, jax without libtpu) would
    train on the CPU without a word; variables of a TPU VM with no chip under /dev mean this host has none.
    """
    if not signals:
        return []
    shown = ", ".join(signals)
    problems = []
    chips = [s for s in signals if s.startswith("device ")]
    remote = any(s.startswith(("--tpu ", "env TPU_NAME=")) for s in signals)
    if backend == BACKEND_TENSORFLOW:
        plain = [n for n in TENSORFLOW_DISTRIBUTIONS if n != TENSORFLOW_TPU and versions.get(n)]
        if plain and not versions.get(TENSORFLOW_TPU):
            other = (
                "; this venv has jax and libtpu: train here with --backend jax"
                if versions.get(JAX) and versions.get(LIBTPU)
                else ""
            )
            problems.append(
                f"TPU signals ({shown}) but {plain[0]} {versions[plain[0]]} is not TensorFlow's TPU build: --backend "
                f"tensorflow would train on the CPU. Use the TensorFlow TPU venv: `{SETUP_TPU_ENV} VENV` "
                f"(tensorflow-tpu=={TENSORFLOW_TPU_RELEASE}, libtpu=={LIBTPU_FOR_TENSORFLOW_TPU}){other}."
            )
    elif versions.get(JAX) and not versions.get(LIBTPU):
        problems.append(
            f"TPU signals ({shown}) but no libtpu: jax {versions[JAX]} would train on the CPU. Install the libtpu "
            f"this jax pins: `pip install 'jax[tpu]=={versions[JAX]}'` (or make the JAX TPU venv: "
            f"`{SETUP_TPU_ENV} --backend jax VENV`)."
        )
    if not chips and (backend == BACKEND_JAX or not remote):
        problems.append(
            f"TPU signals ({shown}) but no TPU chip on this host (no /dev/accel* or /dev/vfio/N): run on the TPU VM "
            "itself (every host of a slice runs the same command), or unset the TPU_* variables and pass "
            "--strategy cpu to train on this machine's CPU or GPUs."
        )
    return problems


def stack_problems(
    backend: str, versions: Mapping[str, str | None], *, signals: Sequence[str] = ()
) -> list[str]:
    """Every reason, read from distribution metadata (and TPU signals) alone, that `lmshards train --backend`
    cannot run, or could not use the TPU the signals announce.

    A TensorFlow conflict counts for the jax backend too: its input pipeline is tf.data.
    """
    problems = (
        missing_runtime(backend, versions),
        tensorflow_conflict(versions),
        mixed_venv(versions),
        libtpu_problem(backend, versions),
    )
    return [problem for problem in problems if problem] + tpu_problems(backend, versions, signals)


@dataclasses.dataclass(frozen=True)
class RuntimeProbe:
    """How importing a backend's runtime in a fresh process went."""

    ok: bool
    detail: str  # 'tensorflow 2.20.0, keras 3.15.1, keras-hub 0.32.0', or what failed


# Run by `python -c`: imports the runtime, keras and keras_hub, and prints their versions as JSON.
# keras's backend is chosen by KERAS_BACKEND before keras is imported.
_PROBE_CODE = """
import importlib, json, sys
versions = {}
for module in sys.argv[1:]:
    versions[module] = getattr(importlib.import_module(module), "__version__", "?")
print(json.dumps(versions))
"""
_PROBE_MODULES = {
    BACKEND_TENSORFLOW: ("tensorflow", "keras", "keras_hub"),
    BACKEND_JAX: ("jax", "keras", "keras_hub"),
}


def probe_environ(backend: str, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The probe's environment: this one, plus TPU_SKIP_MDS_QUERY=1, KERAS_BACKEND and quiet TF logs."""
    return {
        **environ,
        **SKIP_METADATA_ENV,
        "KERAS_BACKEND": backend,
        "TF_CPP_MIN_LOG_LEVEL": environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
    }


def probe_runtime(
    backend: str,
    *,
    python: str = sys.executable,
    environ: Mapping[str, str] = os.environ,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> RuntimeProbe:
    """Imports the backend's runtime, keras and keras_hub in a subprocess of `python`.

    Only imports: no device is listed, so no TPU is initialised and no chip is claimed.
    """
    modules = _PROBE_MODULES[backend]
    try:
        done = subprocess.run(
            [python, "-c", _PROBE_CODE, *modules],
            env=probe_environ(backend, environ),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return RuntimeProbe(False, f"importing {modules[0]} did not finish in {timeout_s:g} s")
    if done.returncode == 0:
        try:
            loaded = json.loads(done.stdout.strip().splitlines()[-1])
            return RuntimeProbe(True, ", ".join(f"{m} {v}" for m, v in loaded.items()))
        except (IndexError, json.JSONDecodeError):
            pass  # the import printed something else last: reported as a failure below
    return RuntimeProbe(False, _failure_text(modules[0], done))


def _failure_text(runtime: str, done: subprocess.CompletedProcess) -> str:
    """'importing tensorflow failed (killed by signal 6): <the line that says why>'."""
    lines = [
        line.strip() for line in (done.stderr or done.stdout or "").splitlines() if line.strip()
    ]
    # An abort says why in absl's fatal log line ('F1201 ...'), before its stack dump; a Python error
    # says it last.
    fatal = [line for line in lines if FATAL_LOG_LINE.match(line)]
    why = (fatal or lines or ["no output"])[-1 if not fatal else 0]
    status = (
        f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
    )
    return f"importing {runtime} failed ({status}): {why[:ERROR_TAIL_CHARS]}"


def runtime_problem(backend: str, probe: RuntimeProbe) -> str | None:
    """The problem a failed probe is, with the fix."""
    if probe.ok:
        return None
    return (
        f"--backend {backend} does not load: {probe.detail.rstrip('.')}. Reinstall its runtime in a fresh venv "
        "(on a TPU VM: scripts/setup_tpu_env.sh)."
    )


def check_backend(
    backend: str,
    versions: Mapping[str, str | None],
    *,
    probe: RuntimeProbe | None,
    signals: Sequence[str] = (),
) -> list[str]:
    """Every problem: the metadata and TPU-signal checks, then the import (None: not tried)."""
    problems = stack_problems(backend, versions, signals=signals)
    if probe is not None and (problem := runtime_problem(backend, probe)):
        problems.append(problem)
    return problems


def distribution_versions(names: Sequence[str]) -> dict[str, str | None]:
    """name -> installed version (None when not installed), from metadata only."""
    import importlib.metadata

    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions
