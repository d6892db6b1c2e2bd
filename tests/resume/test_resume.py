"""Resume you can trust, through `lmshards train` in this process: exact evaluations, SIGINT -> exit 75 -> resume,
--extend, and damaged checkpoints that fall back without losing metrics."""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
from pathlib import Path

import pytest

pytest.importorskip("keras_hub")

from lmshards.schemas.manifest import read_manifest  # noqa: E402
from tests.helpers.shard_factory import write_sample_shards  # noqa: E402

pytestmark = pytest.mark.slow
SEQ_LEN = 32
BATCH = 8


def args(steps: int) -> list[str]:
    return [
        "--steps",
        str(steps),
        "--per_replica_batch",
        str(BATCH),
        "--learning_rate",
        "1e-3",
        "--warmup_steps",
        "2",
        "--log_every",
        "1",
        "--checkpoint_every",
        "3",
        "--eval_every",
        "3",
        "--eval_batches",
        "2",
        "--seed",
        "3",
        "--shuffle_buffer",
        "64",
    ]


@pytest.fixture(scope="module")
def shards(tmp_path_factory, sample_tokenizer, sample_files) -> str:
    out = tmp_path_factory.mktemp("shards")
    write_sample_shards(out, sample_tokenizer, sample_files, seq_len=SEQ_LEN, max_lines_per_file=60)
    return str(out)


def train(shards: str, run: Path, *extra: str, steps: int = 6) -> int:
    from lmshards.train.commands import cli

    return cli.main(["--shards", shards, "--output", str(run), *args(steps), *extra])


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in metrics(run) if "loss" in r}


def copy_run(run: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(run, target)
    return target


@pytest.fixture(scope="module")
def reference(shards, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("reference") / "run"
    assert train(shards, run) == 0
    return run


@pytest.fixture(scope="module")
def preempted(shards, tmp_path_factory) -> Path:
    """The same command, stopped by SIGINT right after step 4."""
    from lmshards.train import run_dir

    add = run_dir.MetricsLog.add

    def add_then_interrupt(self, record):
        add(self, record)
        if record["step"] == 4 and "loss" in record:
            signal.raise_signal(signal.SIGINT)

    run = tmp_path_factory.mktemp("preempted") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_dir.MetricsLog, "add", add_then_interrupt)
        assert train(shards, run) == 75
    return run


def test_evaluations_are_bounded_then_one_full_pass_is_reported(reference, shards):
    rows = metrics(reference)
    evals = [r for r in rows if "eval_loss" in r]
    assert [(r["step"], r["eval_batches"]) for r in evals] == [(3, 2), (6, 2)]
    (final,) = [r for r in rows if "final_eval_loss" in r]
    validation = read_manifest(shards).splits["validation"].records
    assert (final["step"], final["final_eval_batches"]) == (
        6,
        math.ceil(validation / BATCH),
    ) and validation > 2 * BATCH
    assert final["final_eval_masked_tokens"] > evals[-1]["eval_masked_tokens"]
    summary = json.loads((reference / "run_summary.json").read_text())
    assert (summary["eval_loss"], summary["eval_batches"], summary["final_eval"]) == (
        final["final_eval_loss"],
        final["final_eval_batches"],
        "full",
    )
    assert {
        k: summary[k]
        for k in ("strategy", "replicas", "device_kind", "precision", "steps_per_execution")
    } == {
        "strategy": "cpu",
        "replicas": 1,
        "device_kind": "CPU",
        "precision": "float32",
        "steps_per_execution": 10,
    }
    run_config = json.loads((reference / "run_config.json").read_text())
    assert (run_config["train"]["precision"], run_config["train"]["steps_per_execution"]) == (
        "auto",
        "auto",
    )
    assert (run_config["resolved"]["precision"], run_config["resolved"]["steps_per_execution"]) == (
        "float32",
        10,
    )
    assert run_config["schedule"] == {
        "peak": 1e-3,
        "warmup_steps": 2,
        "total_steps": 6,
        "decay": "linear",
        "extensions": [],
    }


def test_evaluating_the_same_weights_again_gives_exactly_the_same_numbers(
    reference, shards, tmp_path, capsys
):
    run = copy_run(reference, tmp_path)
    (run / "run_summary.json").unlink()  # as if stopped before its summary
    before = metrics(run)
    kept = [r for r in before if not (r["step"] == 6 and "eval_loss" in r)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    assert train(shards, run) == 0
    err = capsys.readouterr().err
    assert "eval at step 6 (2 batches read)" in err and "Resumed from" in err
    after = metrics(run)
    for key in ("eval_loss", "final_eval_loss"):
        old = [r for r in before if key in r and r["step"] == 6]
        new = [r for r in after if key in r and r["step"] == 6]
        assert len(new) == 1 and new == old  # every number equal, not just close


def test_sigint_saves_exits_75_and_the_rerun_continues_like_an_uninterrupted_run(
    preempted, reference, shards, tmp_path, capsys
):
    assert (preempted / "checkpoints" / "ckpt-4.index").exists() and not (
        preempted / "run_summary.json"
    ).exists()
    assert max(losses(preempted)) == 4
    run = copy_run(preempted, tmp_path)
    assert train(shards, run) == 0
    captured = capsys.readouterr()
    assert f"Resumed from {run / 'checkpoints' / 'ckpt-4'} at step 4" in captured.err
    assert "strategy cpu, 1 replicas, device kind CPU" in captured.err
    assert captured.out.startswith(f"run {run}: finished at step 6\n")
    assert re.search(
        r"step 6/6  loss \S+  epoch \d\.\d\d\d  lr \S+  \d+ seq/s  \S+ ms/step  elapsed \d[\d.]* (s|min \d\d s)  "
        r"eta 0\.0 s",
        captured.err,
    )
    assert losses(run) == pytest.approx(losses(reference), abs=1e-6)


def test_the_preemption_is_logged_with_the_step_and_what_to_do(shards, tmp_path, capsys):
    from lmshards.train import run_dir

    add = run_dir.MetricsLog.add

    def add_then_terminate(self, record):
        add(self, record)
        if record["step"] == 2 and "loss" in record:
            signal.raise_signal(signal.SIGTERM)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_dir.MetricsLog, "add", add_then_terminate)
        assert train(shards, tmp_path / "run") == 75
    err = capsys.readouterr().err
    assert (
        "SIGTERM: stopping at the next step boundary" in err
        and "preempted at step 2; rerun the same command to resume" in err
    )
    assert (tmp_path / "run" / "checkpoints" / "ckpt-2.index").exists()


def test_extend_continues_from_the_current_rate_without_warmup(
    preempted, reference, shards, tmp_path, capsys
):
    run = copy_run(preempted, tmp_path)
    assert train(shards, run, "--extend", steps=10) == 0
    rate_at_4 = {r["step"]: r["learning_rate"] for r in metrics(reference) if "loss" in r}[4]
    run_config = json.loads((run / "run_config.json").read_text())
    (extension,) = run_config["schedule"]["extensions"]
    assert (extension["start_step"], extension["end_step"]) == (4, 10)
    assert extension["start_rate"] == pytest.approx(rate_at_4, rel=1e-6)
    assert run_config["train"]["steps"] == 10 and run_config["schedule"]["total_steps"] == 6
    rates = {r["step"]: r["learning_rate"] for r in metrics(run) if "loss" in r}
    assert sorted(rates) == list(range(1, 11))
    for step in range(4, 11):
        assert rates[step] == pytest.approx(rate_at_4 * (10 - step) / 6, rel=1e-5, abs=1e-12)
    capsys.readouterr()
    # The extended command is now the run's: rerunning it only prints the summary; the first command is refused.
    assert train(shards, run, "--extend", steps=10) == 0
    assert "has finished; nothing to train" in capsys.readouterr().err
    assert train(shards, run, steps=6) == 2
    assert "--steps 10 in the run, 6 in this command" in capsys.readouterr().err


def test_extending_a_finished_run_is_refused_as_its_rate_is_0(reference, shards, tmp_path, capsys):
    run = copy_run(reference, tmp_path)
    assert train(shards, run, "--extend", steps=12) == 2
    assert "this run's rate has already fallen to 0" in capsys.readouterr().err
    assert (run / "run_summary.json").read_bytes() == (reference / "run_summary.json").read_bytes()
    assert (run / "metrics.jsonl").read_bytes() == (reference / "metrics.jsonl").read_bytes()


def damage(run: Path, kind: str) -> None:
    checkpoints = run / "checkpoints"
    if kind == "state-file":
        (checkpoints / "checkpoint").write_bytes(b"\xff\xfe not a checkpoint state")
        return
    (data,) = checkpoints.glob("ckpt-6.data-*")
    raw = bytearray(data.read_bytes())
    if kind == "truncated":
        raw = raw[: len(raw) // 2]
    else:
        raw[len(raw) // 2] ^= 0x01
    data.write_bytes(bytes(raw))


@pytest.mark.parametrize("kind, restored", [("truncated", 3), ("bit-flip", 3), ("state-file", 6)])
def test_a_damaged_checkpoint_falls_back_and_metrics_keep_their_rows(
    reference, shards, tmp_path, capsys, kind, restored
):
    run = copy_run(reference, tmp_path)
    (run / "run_summary.json").unlink()  # as if stopped before its summary
    damage(run, kind)
    before = metrics(run)
    assert train(shards, run) == 0
    err = capsys.readouterr().err
    assert f"Resumed from {run / 'checkpoints' / f'ckpt-{restored}'} at step {restored}" in err
    if restored == 3:
        assert f"Skipping checkpoint {run / 'checkpoints' / 'ckpt-6'}: it does not restore" in err
    else:
        assert "is unreadable" in err
    after = metrics(run)
    # Rows up to the restored step stay as they were; the steps after it are trained again, to the same losses.
    kept = [r for r in before if r["step"] <= restored and "final_eval_loss" not in r]
    assert [r for r in after if r["step"] <= restored and "final_eval_loss" not in r] == kept
    assert losses(run) == pytest.approx(losses(reference), abs=1e-6)
    assert json.loads((run / "run_summary.json").read_text())["global_step"] == 6


def test_when_no_checkpoint_restores_the_run_stops_until_restart(
    reference, shards, tmp_path, capsys
):
    run = copy_run(reference, tmp_path)
    (run / "run_summary.json").unlink()
    for data in (run / "checkpoints").glob("ckpt-*.data-*"):
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0x01
        data.write_bytes(bytes(raw))
    metrics_bytes = (run / "metrics.jsonl").read_bytes()
    assert train(shards, run) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(
        f"lmshards train: error: No checkpoint in {str(run / 'checkpoints')!r} restores (ckpt-6: "
    )
    assert "--restart" in err
    assert (run / "metrics.jsonl").read_bytes() == metrics_bytes  # nothing was overwritten
    assert train(shards, run, "--restart") == 0
    assert (
        f"--restart: deleted checkpoints, metrics.jsonl, run_config.json, tensorboard from {run}"
        in capsys.readouterr().err
    )
    assert losses(run) == pytest.approx(
        losses(reference), abs=1e-6
    )  # trained again from step 0, the same way


def test_loading_the_latest_model_skips_a_damaged_checkpoint_too(reference, tmp_path):
    import numpy as np

    from lmshards.plumbing.errors import LmshardsError
    from lmshards.train.backends.weights import load_model_from_run

    run = copy_run(reference, tmp_path)
    # Loading a model reads only the model's tensors (each checked against its CRC32C); they come first in the file.
    (data,) = (run / "checkpoints").glob("ckpt-6.data-*")
    data.write_bytes(data.read_bytes()[:1000])
    latest, _ = load_model_from_run(str(run))
    older, _ = load_model_from_run(str(run), str(run / "checkpoints" / "ckpt-3"))
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(latest.weights, older.weights))
    with pytest.raises(LmshardsError, match="ckpt-6' does not restore"):
        load_model_from_run(str(run), str(run / "checkpoints" / "ckpt-6"))


def test_several_steps_per_host_call_keep_every_logging_eval_and_checkpoint_step(
    reference, shards, tmp_path
):
    run = tmp_path / "run"
    assert train(shards, run, "--steps_per_execution", "4", "--log_every", "2") == 0
    rows = metrics(run)
    assert [r["step"] for r in rows if "loss" in r] == [2, 4, 6]
    assert [r["step"] for r in rows if "eval_loss" in r] == [3, 6]
    assert sorted(p.name for p in (run / "checkpoints").glob("*.index")) == [
        "ckpt-3.index",
        "ckpt-6.index",
    ]
    expected = losses(reference)
    for r in rows:
        if "loss" in r:  # the window's mean: the same steps, trained the same way
            assert r["loss"] == pytest.approx(
                (expected[r["step"] - 1] + expected[r["step"]]) / 2, abs=1e-6
            )
    assert json.loads((run / "run_config.json").read_text())["resolved"]["steps_per_execution"] == 4
