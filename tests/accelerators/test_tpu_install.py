"""scripts/setup_tpu_env.sh builds a venv that imports TensorFlow with the pinned libtpu loaded, and trains.

Everything that loads libtpu runs inside `unshare -n` (a network namespace with no route out) with
TPU_SKIP_MDS_QUERY=1, so libtpu cannot reach a metadata server. Building the venv needs the package
index; the venv (~2.4 GB) lives in a temporary directory removed at the end. The venv has no torch: its export
must write what the checkout's does.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from lmshards.train.commands.runtime_check import TENSORFLOW_DISTRIBUTIONS
from tests.helpers.shard_factory import write_sample_shards
from tests.helpers.tpu_constraints import tpu_pins
from tests.helpers.venv_check import (
    check_torch_free_export,
    clean_env,
    isolated,
    network_namespace_reason,
    tracked_copy,
)

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "setup_tpu_env.sh"
STEPS = 20
BUILD_TIMEOUT_S = 1200
# Run in the venv inside the namespace: what is loaded, and which distributions are installed.
INSPECT = """
import importlib.metadata, json, os
import tensorflow as tf, keras, keras_hub
maps = open("/proc/self/maps").read().split()
print(json.dumps({
    "tensorflow": tf.__version__,
    "libtpu_loaded": sorted({p for p in maps if os.path.basename(p) == "libtpu.so"}),
    "distributions": sorted(
        (d.metadata["Name"].lower().replace("_", "-"), d.version)
        for d in importlib.metadata.distributions()
    ),
}))
"""


@pytest.fixture(scope="module")
def tpu_venv():
    reason = network_namespace_reason()
    if reason:
        pytest.skip(reason)
    with tempfile.TemporaryDirectory(prefix="lmshards-tpu-venv-") as tmp:
        venv = Path(tmp) / "venv"
        source = tracked_copy(Path(tmp) / "src")
        done = subprocess.run(
            ["bash", str(SCRIPT), str(venv), str(source)],
            env={**clean_env(), "PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        yield venv


def test_tensorflow_imports_with_the_pinned_libtpu_and_is_the_only_tensorflow(tpu_venv):
    pins = tpu_pins()
    done = subprocess.run(
        isolated([str(tpu_venv / "bin" / "python"), "-c", INSPECT]),
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert loaded["tensorflow"] == pins["tensorflow-tpu"]
    (libtpu_so,) = loaded["libtpu_loaded"]
    assert Path(libtpu_so).is_relative_to(tpu_venv)
    installed = dict(loaded["distributions"])
    assert [name for name in TENSORFLOW_DISTRIBUTIONS if name in installed] == ["tensorflow-tpu"]
    for name in ("tensorflow-tpu", "libtpu", "tensorflow-text", "keras", "keras-hub"):
        assert installed[name] == pins[name], name
    assert "lmshards" in installed


def test_lmshards_env_check_passes(tpu_venv):
    done = subprocess.run(
        isolated([str(tpu_venv / "bin" / "lmshards"), "env", "--check", "--json"]),
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert (report["backend"], report["runtime_ok"], report["problems"]) == ("tensorflow", True, [])
    assert report["versions"]["tensorflow-tpu"] == tpu_pins()["tensorflow-tpu"]


@pytest.fixture(scope="module")
def tpu_run(tpu_venv, tmp_path_factory, sample_tokenizer, sample_files) -> Path:
    """A tiny run trained on the CPU with the TPU venv's lmshards (it must succeed)."""
    work = tmp_path_factory.mktemp("tpu_run")
    shards = work / "shards"
    write_sample_shards(shards, sample_tokenizer, sample_files, seq_len=32, max_lines_per_file=60)
    run = work / "run"
    cmd = [str(tpu_venv / "bin" / "lmshards"), "train", "--shards", str(shards)]
    cmd += ["--output", str(run), "--tokenizer", str(sample_tokenizer), "--model_preset", "tiny"]
    cmd += ["--strategy", "cpu", "--steps", str(STEPS), "--per_replica_batch", "16"]
    cmd += ["--learning_rate", "3e-3", "--warmup_steps", "2", "--log_every", "1"]
    cmd += ["--eval_every", str(STEPS), "--eval_batches", "2", "--final_eval", "none"]
    done = subprocess.run(
        isolated(cmd), env=clean_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run


def test_trains_tiny_on_the_cpu(tpu_run):
    rows = [json.loads(line) for line in (tpu_run / "metrics.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["loss"] for r in rows if "loss" in r}
    assert sorted(losses) == list(range(1, STEPS + 1))
    assert all(math.isfinite(loss) for loss in losses.values())
    assert sum(losses[s] for s in range(16, 21)) < sum(losses[s] for s in range(1, 6))
    summary = json.loads((tpu_run / "run_summary.json").read_text())
    assert (summary["global_step"], summary["strategy"]) == (STEPS, "cpu")
    assert math.isfinite(summary["eval_loss"])


def test_exports_without_torch_what_the_checkout_exports(tpu_venv, tpu_run, tmp_path):
    check_torch_free_export(tpu_venv, tpu_run, tmp_path)
