"""End to end on shards of the sample corpus: loss falls, SIGTERM -> exit 75 + rerun equals an uninterrupted run, 2 replicas."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("keras_hub")

from lmshards.train.backends.tensorflow_checkpoint import complete_checkpoints  # noqa: E402
from tests.helpers.shard_factory import write_sample_shards  # noqa: E402

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SEQ_LEN = 32
STEPS = 300
KILL_AFTER = 60
# Sized so loss falls clearly within STEPS on a 2-core machine.
TRAIN_ARGS = [
    "--steps",
    str(STEPS),
    "--per_replica_batch",
    "16",
    "--learning_rate",
    "3e-3",
    "--warmup_steps",
    "30",
    "--lr_schedule",
    "cosine",
    "--log_every",
    "1",
    "--eval_every",
    "150",
    "--checkpoint_every",
    "100",
    "--shuffle_buffer",
    "256",
    "--seed",
    "5",
]


@pytest.fixture(scope="module")
def shards(tmp_path_factory, sample_tokenizer, sample_files) -> str:
    out = tmp_path_factory.mktemp("shards")
    write_sample_shards(
        out, sample_tokenizer, sample_files, seq_len=SEQ_LEN, max_lines_per_file=150
    )
    return str(out)


def train_cmd(shards: str, run: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "lmshards",
        "train",
        "--shards",
        shards,
        "--output",
        str(run),
        *TRAIN_ARGS,
        *extra,
    ]


def env() -> dict[str, str]:
    """This environment without TF_CPP_MIN_LOG_LEVEL: the trainer itself keeps TensorFlow quiet."""
    return {
        **{k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
        "PYTHONPATH": str(REPO),
    }


def run_ok(cmd: list[str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def train_losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in metrics(run) if "loss" in r}


@pytest.fixture(scope="module")
def uninterrupted(shards, sample_tokenizer, tmp_path_factory) -> Path:
    """The reference run, in this process (saves a TensorFlow start-up); the others run as subprocesses."""
    from lmshards.train.commands.cli import parse_config
    from lmshards.train.loop.trainer import train

    run = tmp_path_factory.mktemp("uninterrupted") / "run"
    train(parse_config(train_cmd(shards, run, "--tokenizer", str(sample_tokenizer))[4:]))
    return run


def test_loss_falls_and_eval_is_reported(uninterrupted):
    summary = json.loads((uninterrupted / "run_summary.json").read_text())
    vocab = summary["config"]["model"]["vocabulary_size"]
    losses = train_losses(uninterrupted)
    assert sorted(losses) == list(range(1, STEPS + 1))
    first = sum(losses[s] for s in range(1, 6)) / 5
    last = sum(losses[s] for s in range(STEPS - 19, STEPS + 1)) / 20
    assert abs(first - math.log(vocab)) < 0.3  # an untrained model predicts about uniformly
    assert last < math.log(vocab) - 1.0
    assert summary["global_step"] == STEPS and summary["train_loss"] == losses[STEPS]
    assert summary["eval_loss"] < math.log(vocab) - 0.7
    assert summary["eval_perplexity"] == pytest.approx(math.exp(summary["eval_loss"]))
    assert 0.0 < summary["eval_accuracy"] < 1.0 and summary["sequences_per_second"] > 0
    evals = [r for r in metrics(uninterrupted) if "eval_loss" in r]
    assert [r["step"] for r in evals] == [150, 300] and evals[1]["eval_loss"] < evals[0][
        "eval_loss"
    ]
    (final,) = [r for r in metrics(uninterrupted) if "final_eval_loss" in r]
    assert final["step"] == STEPS and summary["eval_loss"] == final["final_eval_loss"]
    assert summary["eval_batches"] == final["final_eval_batches"] >= evals[1]["eval_batches"]
    assert (summary["strategy"], summary["replicas"], summary["device_kind"]) == ("cpu", 1, "CPU")
    run_config = json.loads((uninterrupted / "run_config.json").read_text())
    assert (
        run_config["model"]["family"] == "roberta" and run_config["special_token_ids"]["mask"] == 4
    )
    assert (uninterrupted / "tokenizer" / "tokenizer.json").exists()
    assert list((uninterrupted / "tensorboard" / "train").glob("events.out.tfevents.*"))
    assert list((uninterrupted / "tensorboard" / "validation").glob("events.out.tfevents.*"))


def test_load_model_from_run_restores_the_trained_weights(uninterrupted):
    import numpy as np

    from lmshards.plumbing.errors import LmshardsError
    from lmshards.train.backends.weights import load_model_from_run
    from lmshards.train.network.model import build_masked_lm

    latest, config = load_model_from_run(str(uninterrupted))
    named, _ = load_model_from_run(
        str(uninterrupted), str(uninterrupted / "checkpoints" / f"ckpt-{STEPS}")
    )
    older, _ = load_model_from_run(
        str(uninterrupted), str(uninterrupted / "checkpoints" / "ckpt-200")
    )
    weights = [w.numpy() for w in latest.weights]
    for other, same in ((named, True), (older, False), (build_masked_lm(config), False)):
        equal = all(np.array_equal(a, b.numpy()) for a, b in zip(weights, other.weights))
        assert equal == same
    with pytest.raises(LmshardsError, match="ckpt-7"):
        load_model_from_run(str(uninterrupted), str(uninterrupted / "checkpoints" / "ckpt-7"))


def test_sigterm_then_rerun_continues_like_an_uninterrupted_run(
    shards, sample_tokenizer, uninterrupted, tmp_path
):
    run = tmp_path / "run"
    cmd = train_cmd(shards, run, "--tokenizer", str(sample_tokenizer))
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 300
    while (
        max(train_losses(run), default=0) < KILL_AFTER
        and proc.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 75, out[-3000:]  # EX_TEMPFAIL: schedulers restart it
    # Every line is ours: TensorFlow's start-up and C++ log lines are silenced.
    assert [line for line in out.splitlines() if not line.startswith("20")] == [], out[-3000:]
    stopped = max(train_losses(run))
    assert KILL_AFTER <= stopped < STEPS and not (run / "run_summary.json").exists()
    assert f"preempted at step {stopped}; rerun the same command to resume" in out
    # The save on SIGTERM is at the step the run stopped; then a save killed half-way leaves debris.
    assert (run / "checkpoints" / f"ckpt-{stopped}.index").exists()
    (run / "checkpoints" / f"ckpt-{stopped + 1}.data-00000-of-00001").write_bytes(b"partial")
    (run / "checkpoints" / f"ckpt-{stopped + 1}_temp").mkdir()

    proc = run_ok(cmd)
    assert (
        f"Resumed from {run / 'checkpoints' / f'ckpt-{stopped}'} at step {stopped}" in proc.stderr
    )
    assert proc.stdout.startswith(
        f"run {run}: finished at step {STEPS}\n"
    )  # logs go to stderr, the summary to stdout
    resumed, expected = train_losses(run), train_losses(uninterrupted)
    assert sorted(resumed) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert resumed[step] == pytest.approx(expected[step], rel=1e-4, abs=1e-4), step
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["global_step"] == STEPS
    assert summary["eval_loss"] == pytest.approx(
        json.loads((uninterrupted / "run_summary.json").read_text())["eval_loss"], rel=1e-4
    )
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(run / "checkpoints"))
    iterations = [
        k
        for k in reader.get_variable_to_shape_map()
        if k.startswith("optimizer/") and "_iterations" in k
    ]
    assert [int(reader.get_tensor(k)) for k in iterations] == [STEPS]


MIRRORED = """
import sys, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from lmshards.train.commands.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_mirrored_strategy_over_two_cpu_devices(shards, tmp_path):
    run = tmp_path / "run"
    run_ok(
        [
            sys.executable,
            "-c",
            MIRRORED,
            "--shards",
            shards,
            "--output",
            str(run),
            "--strategy",
            "mirrored",
            "--model_family",
            "bert",
            "--steps",
            "30",
            "--per_replica_batch",
            "8",
            "--learning_rate",
            "3e-3",
            "--warmup_steps",
            "5",
            "--log_every",
            "10",
            "--eval_every",
            "30",
            "--checkpoint_every",
            "30",
        ]
    )
    summary = json.loads((run / "run_summary.json").read_text())
    assert (
        summary["replicas"] == 2
        and summary["global_batch"] == 16
        and summary["strategy"] == "mirrored"
    )
    assert summary["config"]["model"]["family"] == "bert" and summary["global_step"] == 30
    losses = train_losses(run)
    assert sorted(losses) == [10, 20, 30] and losses[30] < losses[10]
    assert math.isfinite(summary["eval_perplexity"])


def test_export_keeps_tensorflows_start_up_lines_off_stderr(uninterrupted, tmp_path):
    proc = run_ok(
        [
            sys.executable,
            "-m",
            "lmshards",
            "export",
            str(uninterrupted),
            "--output",
            str(tmp_path / "hf"),
        ]
    )
    assert proc.stdout == f"Exported {uninterrupted} to {tmp_path / 'hf'}\n"
    # Ours start with the date; transformers' progress bar is the one other writer.
    foreign = [
        line
        for line in proc.stderr.splitlines()
        if line.strip() and not line.startswith("20") and "Writing model shards" not in line
    ]
    assert foreign == [], proc.stderr[-3000:]


def test_weights_that_go_non_finite_stop_a_tensorflow_run_as_divergence(shards, tmp_path):
    # A step of this decay makes the weights huge, the next one infinite: the run must stop, never exit 0.
    run = tmp_path / "diverged"
    cmd = train_cmd(shards, run, "--weight_decay", "1e20", "--warmup_steps", "0")
    for flag, value in (("--steps", "2"), ("--checkpoint_every", "1"), ("--eval_every", "1")):
        cmd[len(cmd) - 1 - cmd[::-1].index(flag) + 1] = value  # the last --flag wins
    done = subprocess.run(
        [*cmd, "--eval_batches", "1", "--final_eval", "none"],
        cwd=REPO,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2, done.stderr[-4000:]
    assert last.startswith("lmshards train: error: Training diverged at step "), last
    import tensorflow as tf

    for prefix in complete_checkpoints(str(run / "checkpoints")):  # never one of non-finite weights
        reader = tf.train.load_checkpoint(prefix)
        for name, dtype in reader.get_variable_to_dtype_map().items():
            if dtype.is_floating:
                assert np.isfinite(reader.get_tensor(name)).all(), name
    assert not (run / "run_summary.json").exists()
