"""A tiny fixed run on each backend computes and writes what it did when its figures were recorded: moving code
inside train/ must not change what a run computes or writes.

Each run is a fresh `python -m lmshards train` process (Keras fixes its backend once per process). Pinned exactly:
run_config.json with the run's two paths and its tool_version (checked to be this release's) replaced; every
checkpoint's variable names, dtypes and shapes, and the values of its integer ones; every metrics record's fields
(without wall-clock ones) and integer values. Pinned to rounding (RTOL): every float variable's sum, L2 norm and
projection on a fixed random vector, each within RTOL of its norm, and every float metric within RTOL of itself.
Bit-exact digests of the values pinned the machine as well as the code: the same code, with oneDNN and XLA capped
at AVX2, computed other low bits on an AVX-512 machine than on an AVX2-only one (the last step's loss 7.60622478
and 7.60622430 on one machine, oneDNN capped and not); a change of the code that changes what a run computes
moves these figures by orders of magnitude more than RTOL.
A deliberate change records them again, in the same commit: RECORD_ENV=1 rewrites PINS_FILE.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("keras_hub")

from lmshards.schemas.version import __version__  # noqa: E402
from tests.helpers.jax_subprocess import REPO, jax_env  # noqa: E402
from tests.helpers.shard_factory import write_sample_shards  # noqa: E402

pytestmark = pytest.mark.slow
TIMEOUT_S = 400
# The instruction set the CPU kernels are capped at (backend_env); every x86-64 machine since 2015 has it.
PINNED_ISA = "AVX2"
# Metrics fields that hold wall-clock time or rates measured with it: they differ from run to run.
WALL_CLOCK_FIELDS = ("step_time_s", "sequences_per_second", "tokens_per_second")
# run_config.json's tool_version names the release that wrote it, so it changes with every release: it is
# checked against this one's __version__ and pinned as this placeholder.
TOOL_VERSION_PIN = "VERSION"

# What the runs computed, recorded by RECORD_ENV=1 (see the module docstring before recording again). Recorded
# again on purpose: when a CPU run's default steps per host call went from 1 to 10 (its run config only); when
# TensorFlow's CPU step began to run the head on the predicted positions only, to take the cross-entropy as
# log-sum-exp minus the label's logit, and to use oneDNN's kernels (the same loss, other low bits); when
# the values were first pinned to rounding rather than bytes; when run_config.json's tool_version began to be
# pinned as TOOL_VERSION_PIN (its digest only); and when run_config.json began to record each shard set's digest
# (its digest only).
PINS_FILE = REPO / "tests" / "data" / "run_pins.json"
RECORD_ENV = "LMSHARDS_RECORD_RUN_PINS"
# Rounding moved a figure by up to 1.3e-6 of its variable's norm (an Adam moment; oneDNN's kernels uncapped
# against capped, on one machine) and a loss by 6e-8 of itself; two Adam steps at the run's learning rate move
# a weight by ~5% of its norm.
RTOL = 1e-4
# Variables that are rounding noise themselves (a key bias, whose gradient is zero in exact arithmetic, and its
# Adam moments: values of 1e-10 and below) are compared to this.
ATOL = 1e-8


def train_argv(shards: str, run: Path, backend: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "lmshards",
        "train",
        "--backend",
        backend,
        "--shards",
        shards,
        "--output",
        str(run),
        "--steps",
        "4",
        "--per_replica_batch",
        "4",
        "--learning_rate",
        "1e-3",
        "--warmup_steps",
        "2",
        "--log_every",
        "2",
        "--checkpoint_every",
        "2",
        "--eval_every",
        "2",
        "--eval_batches",
        "1",
        "--seed",
        "3",
        "--shuffle_buffer",
        "64",
    ]


def backend_env(backend: str) -> dict[str, str]:
    """The run's environment, its CPU kernels capped at PINNED_ISA: oneDNN and XLA pick kernels by the
    processor's instruction sets, and kernels for wider ones round differently: capped, machines differ
    less (not at all, for this run, between oneDNN's AVX2 and SSE4.1 kernels on one machine)."""
    if backend == "jax":
        env = jax_env(1)
    else:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("KERAS_BACKEND", None)
    xla_flags = " ".join(filter(None, [env.get("XLA_FLAGS"), f"--xla_cpu_max_isa={PINNED_ISA}"]))
    return {**env, "ONEDNN_MAX_CPU_ISA": PINNED_ISA, "XLA_FLAGS": xla_flags}


def checkpoint_arrays(path: Path) -> dict[str, np.ndarray]:
    """The variables of one checkpoint: a JAX .npz, or a TensorFlow checkpoint prefix."""
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(path))
    return {
        name: np.asarray(reader.get_tensor(name))
        for name, _ in tf.train.list_variables(str(path))
        if name != "_CHECKPOINTABLE_OBJECT_GRAPH"
    }


def checkpoint_names(run: Path) -> list[Path]:
    """One entry per checkpoint: the .npz file, or the TensorFlow prefix its .index file names."""
    ckpts = run / "checkpoints"
    out = [p for p in ckpts.iterdir() if p.suffix == ".npz"]
    out += [p.with_suffix("") for p in ckpts.iterdir() if p.suffix == ".index"]
    return sorted(out)


def metrics_without_wall_clock(run: Path) -> list[dict]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_FIELDS} for r in records]


def variable_figures(name: str, value: np.ndarray) -> dict[str, Any]:
    """What is pinned of one variable: dtype and shape; the values of an integer one, and of a float one its
    sum, L2 norm and projection on a random unit-variance vector fixed by its name."""
    a = np.asarray(value)
    figures: dict[str, Any] = {"dtype": a.dtype.str, "shape": list(a.shape)}
    if not np.issubdtype(a.dtype, np.floating):
        figures["values"] = a.ravel().tolist()
        return figures
    x = a.astype(np.float64).ravel()
    probe = np.random.default_rng(zlib.crc32(name.encode())).standard_normal(x.size)
    figures["sum_norm_projection"] = [float(x.sum()), float(np.linalg.norm(x)), float(x @ probe)]
    return figures


def run_figures(run: Path, shards: str) -> dict[str, Any]:
    text = (run / "run_config.json").read_text()
    assert json.loads(text)["tool_version"] == __version__
    config = (
        text.replace(str(run), "RUN")
        .replace(shards, "SHARDS")
        .replace(f'"tool_version": "{__version__}"', f'"tool_version": "{TOOL_VERSION_PIN}"')
    )
    return {
        "run_config.json": hashlib.sha256(config.encode()).hexdigest(),
        "checkpoints": {
            p.name: {
                name: variable_figures(name, value)
                for name, value in sorted(checkpoint_arrays(p).items())
            }
            for p in checkpoint_names(run)
        },
        "metrics": metrics_without_wall_clock(run),
    }


def differences(actual: Any, pinned: Any, where: str = "") -> list[str]:
    """Where actual differs from pinned: structure, strings and integers exactly; floats within RTOL (a
    variable's sum, norm and projection within RTOL of its pinned norm, plus ATOL)."""
    if isinstance(pinned, dict) and "sum_norm_projection" in pinned and isinstance(actual, dict):
        rest = {k: v for k, v in pinned.items() if k != "sum_norm_projection"}
        out = differences(
            {k: v for k, v in actual.items() if k != "sum_norm_projection"}, rest, where
        )
        got, want = actual.get("sum_norm_projection"), pinned["sum_norm_projection"]
        tolerance = RTOL * want[1] + ATOL
        if got is None or any(abs(g - w) > tolerance for g, w in zip(got, want)):
            out.append(f"{where}: sum, norm, projection {got} != {want} (+- {tolerance:.3g})")
        return out
    if isinstance(pinned, dict) and isinstance(actual, dict):
        if sorted(actual) != sorted(pinned):
            return [f"{where}: keys {sorted(actual)} != {sorted(pinned)}"]
        return [d for k in pinned for d in differences(actual[k], pinned[k], f"{where}/{k}")]
    if isinstance(pinned, list) and isinstance(actual, list):
        if len(actual) != len(pinned):
            return [f"{where}: {len(actual)} items != {len(pinned)}"]
        return [
            d
            for i, (a, p) in enumerate(zip(actual, pinned))
            for d in differences(a, p, f"{where}[{i}]")
        ]
    if isinstance(pinned, float) and isinstance(actual, float):
        ok = math.isclose(actual, pinned, rel_tol=RTOL, abs_tol=ATOL)
        return [] if ok else [f"{where}: {actual!r} != {pinned!r}"]
    return (
        []
        if actual == pinned and type(actual) is type(pinned)
        else [f"{where}: {actual!r} != {pinned!r}"]
    )


def pins_text(pins: dict[str, Any]) -> str:
    """pins as JSON with each variable's and each metrics record's figures on one line, so a diff reads by line."""
    text = json.dumps(pins, indent=1, sort_keys=True)
    text = re.sub(r"\[[^\[\]{}]*\]", lambda m: " ".join(m.group(0).split()), text)
    return re.sub(r"\{[^{}]*\}", lambda m: " ".join(m.group(0).split()), text) + "\n"


def pinned_figures() -> dict[str, Any]:
    return json.loads(PINS_FILE.read_text()) if PINS_FILE.exists() else {}


@pytest.fixture(scope="module")
def shards(tmp_path_factory, sample_tokenizer, sample_files) -> str:
    # The directory's name is the source's name in the metrics: a fixed one, whatever the temporary parent.
    out = tmp_path_factory.mktemp("pins") / "shards"
    out.mkdir()
    write_sample_shards(out, sample_tokenizer, sample_files, seq_len=32, max_lines_per_file=60)
    return str(out)


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_tiny_run_computes_and_writes_what_it_always_did(backend, shards, tmp_path):
    if backend == "jax":
        pytest.importorskip("jax")
    run = tmp_path / "run"
    done = subprocess.run(
        train_argv(shards, run, backend),
        env=backend_env(backend),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    figures = run_figures(run, shards)
    if os.environ.get(RECORD_ENV) == "1":
        PINS_FILE.write_text(pins_text({**pinned_figures(), backend: figures}))
        pytest.skip(f"recorded {backend}'s figures in {PINS_FILE}")
    found = differences(figures, pinned_figures()[backend], backend)
    assert not found, "\n".join(found[:20])


def test_the_comparison_takes_rounding_and_refuses_a_change():
    rng = np.random.default_rng(0)
    kernel = rng.normal(0.0, 0.02, (64, 200)).astype(np.float32)
    pinned = {
        "kernel": variable_figures("kernel", kernel),
        "step": variable_figures("step", np.int64(4)),
    }

    def differs(changed: np.ndarray, step: int = 4) -> list[str]:
        actual = {
            "kernel": variable_figures("kernel", changed),
            "step": variable_figures("step", np.int64(step)),
        }
        return differences(actual, pinned)

    rounding = kernel * (1 + rng.uniform(-1e-7, 1e-7, kernel.shape)).astype(np.float32)
    assert not np.array_equal(rounding, kernel) and differs(rounding) == []
    # One weight in 12,800 moved by 1e-3 (a change of code would move many more)
    one_moved = kernel.copy()
    one_moved[3, 5] += 1e-3
    assert differs(one_moved) and "/kernel: sum, norm, projection" in differs(one_moved)[0]
    # The same values in another order: sum and norm stay, the projection moves.
    assert differs(kernel[::-1].copy())
    assert differs(kernel, step=5) == ["/step/values[0]: 5 != 4"]
    assert differences({"loss": 7.6062247}, {"loss": 7.6062243}) == []
    assert differences({"loss": 7.61}, {"loss": 7.6}) == ["/loss: 7.61 != 7.6"]
    assert differences({"loss": 1}, {"loss": 1.0}) == ["/loss: 1 != 1.0"]


def test_the_run_config_is_pinned_with_this_release_as_its_tool_version(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.jsonl").write_text("")
    shards = "/data/shards"

    def write_config(tool_version: str) -> None:
        config = {"tool_version": tool_version, "train": {"output": str(run), "shards": [shards]}}
        (run / "run_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")

    write_config(__version__)
    pinned = {"tool_version": TOOL_VERSION_PIN, "train": {"output": "RUN", "shards": ["SHARDS"]}}
    pinned_text = json.dumps(pinned, indent=2, sort_keys=True) + "\n"
    figures = run_figures(run, shards)
    assert figures["run_config.json"] == hashlib.sha256(pinned_text.encode()).hexdigest()
    # A run written by another release is not this code's run.
    write_config("0.0.1")
    with pytest.raises(AssertionError):
        run_figures(run, shards)
