"""scripts/setup_tpu_env.sh --backend jax builds the JAX TPU venv on Python 3.12 or later: jax initialises its TPU
plugin with the pinned libtpu mapped, `env --check --backend jax` passes, it trains with --backend jax, and exports.

Building the venv needs the package index and a Python >= 3.12 (found on PATH, under pyenv or by uv); without
one the module is skipped, saying so. Everything that loads libtpu runs inside `unshare -n` with
TPU_SKIP_MDS_QUERY=1. The venv has no torch (export writes without it): its export of the run must be the
checkout's, byte for byte.
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
from pathlib import Path

import pytest

from lmshards.train.commands.runtime_check import JAX_FOR_PYTHON_3_12, TENSORFLOW_DISTRIBUTIONS
from tests.helpers.shard_factory import write_sample_shards
from tests.helpers.venv_check import (
    REPO,
    check_torch_free_export,
    clean_env,
    isolated,
    network_namespace_reason,
    python_at_least,
    tracked_copy,
)

pytestmark = pytest.mark.slow
SCRIPT = REPO / "scripts" / "setup_tpu_env.sh"
STEPS = 8
BUILD_TIMEOUT_S = 1500
# Run in the venv inside the namespace: JAX looks for TPUs (loading libtpu; none here, so it falls back to the
# CPU), then what is loaded and installed.
INSPECT = """
import importlib.metadata, json, os
import jax
devices = jax.devices()
maps = open("/proc/self/maps").read().split()
print(json.dumps({
    "jax": jax.__version__,
    "platform": devices[0].platform,
    "libtpu_loaded": sorted({p for p in maps if os.path.basename(p) == "libtpu.so"}),
    "distributions": dict(
        (d.metadata["Name"].lower().replace("_", "-"), d.version) for d in importlib.metadata.distributions()
    ),
}))
"""


@pytest.fixture(scope="module")
def jax_venv():
    reason = network_namespace_reason()
    if reason:
        pytest.skip(reason)
    python = python_at_least(12)
    if python is None:
        pytest.skip(
            "NOT CHECKED: the JAX TPU set needs Python >= 3.12 and none is on this machine "
            "(PATH, pyenv or uv); install one to run this check"
        )
    with tempfile.TemporaryDirectory(prefix="lmshards-jax-tpu-venv-") as tmp:
        venv = Path(tmp) / "venv"
        source = tracked_copy(Path(tmp) / "src")
        done = subprocess.run(
            ["bash", str(SCRIPT), "--backend", "jax", str(venv), str(source)],
            env={**clean_env(), "PYTHON": python},
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        yield venv


def run_isolated(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        isolated(cmd), env=clean_env(), capture_output=True, text=True, timeout=timeout
    )


def test_jax_loads_the_pinned_libtpu_and_the_venv_holds_no_tensorflow_tpu(jax_venv):
    done = run_isolated([str(jax_venv / "bin" / "python"), "-c", INSPECT], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert loaded["jax"] == JAX_FOR_PYTHON_3_12 and loaded["platform"] == "cpu"
    (libtpu_so,) = loaded["libtpu_loaded"]
    assert Path(libtpu_so).is_relative_to(jax_venv)
    installed = loaded["distributions"]
    assert installed["libtpu"].startswith("0.0.50")
    assert [name for name in TENSORFLOW_DISTRIBUTIONS if name in installed] == ["tensorflow"]


def test_env_check_of_the_jax_backend_passes(jax_venv):
    done = run_isolated(
        [str(jax_venv / "bin" / "lmshards"), "env", "--check", "--backend", "jax", "--json"]
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert (report["backend"], report["runtime_ok"], report["problems"]) == ("jax", True, [])


@pytest.fixture(scope="module")
def jax_run(jax_venv, tmp_path_factory, sample_tokenizer, sample_files) -> Path:
    """A tiny run trained with the JAX venv's lmshards, --backend jax (it must succeed)."""
    work = tmp_path_factory.mktemp("jax_run")
    shards = work / "shards"
    write_sample_shards(shards, sample_tokenizer, sample_files, seq_len=32, max_lines_per_file=60)
    run = work / "run"
    cmd = [str(jax_venv / "bin" / "lmshards"), "train", "--backend", "jax", "--strategy", "cpu"]
    cmd += ["--shards", str(shards), "--output", str(run), "--tokenizer", str(sample_tokenizer)]
    cmd += ["--model_preset", "tiny", "--steps", str(STEPS), "--per_replica_batch", "16"]
    cmd += ["--learning_rate", "3e-3", "--warmup_steps", "2", "--log_every", "1"]
    cmd += ["--eval_every", str(STEPS), "--eval_batches", "2", "--final_eval", "none"]
    done = run_isolated(cmd)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run


def test_trains_tiny_with_the_jax_backend(jax_run):
    summary = json.loads((jax_run / "run_summary.json").read_text())
    assert (summary["global_step"], summary["strategy"]) == (STEPS, "data_parallel")
    assert math.isfinite(summary["eval_loss"])


def test_exports_without_torch_what_the_checkout_exports(jax_venv, jax_run, tmp_path):
    check_torch_free_export(jax_venv, jax_run, tmp_path)
