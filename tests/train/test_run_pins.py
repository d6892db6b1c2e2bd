"""A tiny fixed run on each backend writes exactly the same checkpoints, metrics and run config as it did
when these digests were recorded: moving code inside train/ must not change what a run computes or writes.

Each run is a fresh `python -m lmshards train` process (Keras fixes its backend once per process). What is
pinned: every checkpoint's variables (name, dtype, shape and bytes) and, for TensorFlow, its .index and
.data files' bytes (a .npz's zip entries and TensorFlow's `checkpoint` state file carry wall-clock times);
every metrics record without its wall-clock fields; run_config.json with the run's two paths replaced. A deliberate change to what a run computes updates the digests here, in the same commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("keras_hub")

from tests.helpers.jax_subprocess import REPO, jax_env  # noqa: E402
from tests.helpers.shard_factory import write_sample_shards  # noqa: E402

pytestmark = pytest.mark.slow
TIMEOUT_S = 400
# The instruction set the CPU kernels are capped at (backend_env); every x86-64 machine since 2015 has it.
PINNED_ISA = "AVX2"
# Metrics fields that hold wall-clock time or rates measured with it: they differ from run to run.
WALL_CLOCK_FIELDS = ("step_time_s", "sequences_per_second", "tokens_per_second")

# Recorded on this code; see the module docstring before changing one. The run configs changed once, on
# purpose, when a CPU run's default steps per host call went from 1 to 10 (`resolved.steps_per_execution`):
# the checkpoints and metrics, what the run computes, stayed the same. The checkpoints and metrics were
# recorded again, with no code change, when the kernels were capped at PINNED_ISA: the first digests had
# been taken on another machine, and an AVX2-only one computed other low bits with the same code (the
# previous release's code, run there, gave these digests too). TensorFlow's checkpoints and metrics changed
# on purpose when its CPU step began to run the head on the predicted positions only, to take the cross-entropy
# as log-sum-exp minus the label's logit, and to use oneDNN's kernels (train.devices.TENSORFLOW_CPU_ENVIRONMENT).
PINNED = {
    "tensorflow": {
        "checkpoint ckpt-2": "7b7e17a78806c48833837f0f17cf3b2700c95f09605a898cda20983000384000",
        "checkpoint ckpt-4": "3e11f56feabff8288d891c1fcb275196b3ad7558eeaba84ebb11fd430ce39fd0",
        "checkpoint files ckpt-2": "bd9370b4d93b2518f24783e9b5632a54358f0088c4087d3c40d91db9d79ed756",
        "checkpoint files ckpt-4": "648101d85951052af4c5cf01dd54a3da539ff68a6cb980de773b2075de6a295e",
        "metrics": "f224f911c7981108ed996214c51f1d21ab2de93ca4b6d88e92ee1b0bdef39005",
        "run_config.json": "ef782879dcc09b89eebb710ef0948699b58dadea714834c6830031140677e115",
    },
    "jax": {
        "checkpoint ckpt-2.npz": "e07943e36abe652aa89ca5dcde70683d6dc9d2625a569c5cd1578345f3a70d04",
        "checkpoint ckpt-4.npz": "1ce0251c506638079155b007e497193dd113cd6966332d88b133075ca623e90e",
        "metrics": "e9a26e1dfa8995fa7877b3a7df6845b38e019ca35f3c16e5400df4703529cf07",
        "run_config.json": "9fd0efa7086188c932089e168a541eceb11d3e62cdc67644d7ff02d664ee7108",
    },
}


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
    processor's instruction sets, and kernels for wider ones may round differently, so uncapped the
    digests would pin the machine as well as the code."""
    if backend == "jax":
        env = jax_env(1)
    else:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("KERAS_BACKEND", None)
    xla_flags = " ".join(filter(None, [env.get("XLA_FLAGS"), f"--xla_cpu_max_isa={PINNED_ISA}"]))
    return {**env, "ONEDNN_MAX_CPU_ISA": PINNED_ISA, "XLA_FLAGS": xla_flags}


def variables_digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


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


def file_digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.name.encode() + b"|" + p.read_bytes())
    return h.hexdigest()


def run_digests(run: Path, shards: str) -> dict[str, str]:
    out = {
        f"checkpoint {p.name}": variables_digest(checkpoint_arrays(p))
        for p in checkpoint_names(run)
    }
    for p in checkpoint_names(run):
        if p.suffix != ".npz":
            out[f"checkpoint files {p.name}"] = file_digest(list(p.parent.glob(p.name + ".*")))
    metrics = json.dumps(metrics_without_wall_clock(run), sort_keys=True).encode()
    out["metrics"] = hashlib.sha256(metrics).hexdigest()
    config = (
        (run / "run_config.json").read_text().replace(str(run), "RUN").replace(shards, "SHARDS")
    )
    out["run_config.json"] = hashlib.sha256(config.encode()).hexdigest()
    return out


@pytest.fixture(scope="module")
def shards(tmp_path_factory, sample_tokenizer, sample_files) -> str:
    # The directory's name is the source's name in the metrics: a fixed one, whatever the temporary parent.
    out = tmp_path_factory.mktemp("pins") / "shards"
    out.mkdir()
    write_sample_shards(out, sample_tokenizer, sample_files, seq_len=32, max_lines_per_file=60)
    return str(out)


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_tiny_run_writes_what_it_always_wrote(backend, shards, tmp_path):
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
    digests = run_digests(run, shards)
    assert digests == PINNED[backend]
