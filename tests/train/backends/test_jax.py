"""`lmshards train --backend jax` end to end on 4 XLA host devices: the run directory, SIGTERM -> exit 75 ->
rerun equal to an uninterrupted run, and export / fill-mask from the JAX run with the run's logits."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

from lmshards.plumbing.cli import EXIT_PREEMPTED  # noqa: E402
from tests.helpers.jax_subprocess import REPO, jax_env, run_jax  # noqa: E402
from tests.helpers.shard_factory import write_sample_shards  # noqa: E402

pytestmark = pytest.mark.slow
DEVICES = 4
STEPS = 12
TIMEOUT_S = 400


def train_argv(shards: str, run: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "lmshards",
        "train",
        "--backend",
        "jax",
        "--shards",
        shards,
        "--output",
        str(run),
        "--steps",
        str(STEPS),
        "--per_replica_batch",
        "2",
        "--learning_rate",
        "1e-3",
        "--warmup_steps",
        "2",
        "--log_every",
        "3",
        "--checkpoint_every",
        "3",
        "--eval_every",
        "6",
        "--eval_batches",
        "2",
        "--steps_per_execution",
        "3",
        "--seed",
        "3",
        "--shuffle_buffer",
        "64",
    ]


def start(shards: str, run: Path) -> subprocess.Popen:
    return subprocess.Popen(
        train_argv(shards, run),
        env=jax_env(DEVICES),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen) -> int:
    _, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode in (0, EXIT_PREEMPTED), err[-4000:]
    return proc.returncode


def records(run: Path) -> dict[int, dict]:
    """{step: merged metrics records of that step}."""
    out: dict[int, dict] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        out.setdefault(r["step"], {}).update(r)
    return out


@pytest.fixture(scope="module")
def shards(tmp_path_factory, sample_tokenizer, sample_files) -> str:
    out = tmp_path_factory.mktemp("shards")
    write_sample_shards(out, sample_tokenizer, sample_files, seq_len=32, max_lines_per_file=60)
    return str(out)


@pytest.fixture(scope="module")
def whole_run(shards, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("jax") / "whole"
    assert finish(start(shards, run)) == 0
    return run


def test_the_run_directory_of_a_jax_run(whole_run):
    summary = json.loads((whole_run / "run_summary.json").read_text())
    assert summary["global_step"] == STEPS
    assert (summary["strategy"], summary["replicas"]) == ("data_parallel", DEVICES)
    assert summary["global_batch"] == 2 * DEVICES
    assert summary["config"]["train"]["backend"] == "jax"
    assert sorted(p.name for p in (whole_run / "checkpoints").iterdir()) == [
        "ckpt-12.npz",
        "ckpt-6.npz",
        "ckpt-9.npz",
    ]
    steps = records(whole_run)
    assert [s for s in steps if "loss" in steps[s]] == [3, 6, 9, 12]
    assert all("eval_loss" in steps[s] for s in (6, 12))
    assert steps[12]["loss"] < steps[3]["loss"]


def test_sigterm_then_rerun_equals_an_uninterrupted_run(shards, whole_run, tmp_path):
    run = tmp_path / "stopped"
    proc = start(shards, run)
    deadline = time.monotonic() + TIMEOUT_S
    while not (run / "checkpoints" / "ckpt-3.npz").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint at step 3"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert finish(proc) == EXIT_PREEMPTED
    stopped_at = max(int(p.stem.split("-")[1]) for p in (run / "checkpoints").iterdir())
    assert stopped_at < STEPS
    assert finish(start(shards, run)) == 0

    want, got = records(whole_run), records(run)
    assert sorted(got) == sorted(want)
    for step, record in want.items():
        for key in ("loss", "eval_loss", "final_eval_loss"):
            if key in record:
                assert abs(got[step][key] - record[key]) < 1e-4, (step, key)


LOGITS_PROGRAM = """
import json, sys
import numpy as np
from lmshards.train.backends.weights import load_model_from_run
model, _ = load_model_from_run(sys.argv[1])
ids = np.load(sys.argv[2])
positions = np.tile(np.arange(ids.shape[1], dtype="int32"), (ids.shape[0], 1))
logits = model({"token_ids": ids, "padding_mask": np.ones_like(ids), "mask_positions": positions},
               training=False)
np.save(sys.argv[3], np.asarray(logits))
print(json.dumps({"backend": __import__("keras").backend.backend()}))
"""


def test_export_and_fill_mask_from_a_jax_run(whole_run, sample_tokenizer, tmp_path, capsys):
    import torch
    import transformers

    from lmshards.train.commands import export_cli, fill_mask_cli

    ids = np.random.default_rng(0).integers(5, 500, (2, 16)).astype("int32")
    np.save(tmp_path / "ids.npy", ids)
    code = (
        f"import sys; sys.argv = ['-', {str(whole_run)!r}, {str(tmp_path / 'ids.npy')!r}, "
        f"{str(tmp_path / 'logits.npy')!r}]\n" + LOGITS_PROGRAM
    )
    assert run_jax(code, devices=1, without_tensorflow=True) == {"backend": "jax"}
    jax_logits = np.load(tmp_path / "logits.npy")

    out = tmp_path / "hf"
    argv = [str(whole_run), "--output", str(out), "--tokenizer", str(sample_tokenizer)]
    assert export_cli.main(argv) == 0
    model = transformers.AutoModelForMaskedLM.from_pretrained(out)
    with torch.no_grad():
        hf_logits = model(input_ids=torch.tensor(ids, dtype=torch.long)).logits.numpy()
    assert np.abs(hf_logits - jax_logits).max() < 1e-4
    assert np.abs(jax_logits).max() > 0.5  # logits of a real scale

    capsys.readouterr()
    assert fill_mask_cli.main([str(out), "The capital of France is <mask>.", "--json"]) == 0
    predictions = json.loads(capsys.readouterr().out)
    assert len(predictions) == 1 and len(predictions[0]) == 5


def test_weights_that_go_non_finite_stop_a_jax_run_as_divergence(shards, tmp_path):
    # A step of this decay makes the weights huge, the next one infinite: the run must stop, never exit 0.
    run = tmp_path / "diverged"
    argv = train_argv(shards, run)
    for flag, value in (("--steps", "2"), ("--checkpoint_every", "1"), ("--eval_every", "1")):
        argv[argv.index(flag) + 1] = value
    argv[argv.index("--steps_per_execution") + 1] = "1"
    done = subprocess.run(
        [*argv, "--weight_decay", "1e20", "--warmup_steps", "0", "--final_eval", "none"],
        env=jax_env(DEVICES),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2, done.stderr[-4000:]
    assert last.startswith("lmshards train: error: Training diverged at step "), last
    for path in (run / "checkpoints").iterdir():  # never a checkpoint of non-finite weights
        with np.load(path) as arrays:
            assert all(
                np.isfinite(arrays[k]).all() for k in arrays.files if arrays[k].dtype.kind == "f"
            )
    assert not (run / "run_summary.json").exists()
