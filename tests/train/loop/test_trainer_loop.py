"""The training loop over the backend seam, driven by a backend without a model (tests/helpers/fake_backend):
what is logged when, what is evaluated, how a stop at any moment of start-up or training ends."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from lmshards.schemas.manifest import TokenizerInfo  # noqa: E402
from lmshards.train.config import TrainConfig  # noqa: E402
from tests.helpers import fake_backend  # noqa: E402
from tests.helpers.shard_factory import write_shards  # noqa: E402

TOKENIZER = TokenizerInfo(
    fingerprint="sha256:" + "0" * 64,
    vocab_size=100,
    special_token_ids={"cls": 0, "pad": 1, "sep": 2, "unk": 3, "mask": 4},
    all_special_ids=(0, 1, 2, 3, 4),
)
SEQ_LEN, BATCH = 16, 4
TRAIN_RECORDS, VALIDATION_RECORDS = 40, 8  # 10 steps per epoch; 2 validation batches


def random_shards(out: Path, *, seq_len: int = SEQ_LEN) -> str:
    rng = np.random.default_rng(0)

    def split(records: int, num_shards: int):
        ids = rng.integers(5, TOKENIZER.vocab_size, size=(records, seq_len), dtype=np.int64)
        return ids, np.ones_like(ids), num_shards

    write_shards(
        out,
        {"train": split(TRAIN_RECORDS, 2), "validation": split(VALIDATION_RECORDS, 1)},
        seq_len=seq_len,
        tokenizer=TOKENIZER,
        inputs=(),
    )
    return str(out)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> str:
    return random_shards(tmp_path_factory.mktemp("shards"))


@pytest.fixture(autouse=True)
def fake(monkeypatch):
    fake_backend.register(monkeypatch)


def config(shards: str, run: Path, **options) -> TrainConfig:
    return TrainConfig(
        **{
            "shards": (shards,),
            "output": str(run),
            "backend": fake_backend.NAME,
            "steps": 6,
            "per_replica_batch": BATCH,
            "log_every": 3,
            "eval_every": 6,
            "checkpoint_every": 3,
            "shuffle_buffer": 8,
            "steps_per_execution": 3,
            **options,
        }
    )


def run_train(cfg: TrainConfig) -> dict:
    from lmshards.train.loop.trainer import train

    return train(cfg)


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def events(name: str) -> list[object]:
    return [detail for event, detail in fake_backend.EVENTS if event == name]


def test_the_first_step_is_logged_at_once_then_every_log_every_with_the_epoch(
    shards, tmp_path, caplog
):
    with caplog.at_level(logging.INFO, logger="lmshards.train.loop.trainer"):
        run_train(config(shards, tmp_path / "run"))
    # One step first, then calls up to each logging step: 1, 3, 6.
    assert events("train_steps") == [1, 2, 3]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    assert len(lines) == 3
    assert lines[0].startswith("step 1/6  loss 1.0000  epoch 0.100  first step in ")
    assert "tracing and compiling included" in lines[0]
    assert lines[1].startswith("step 3/6  loss ") and "epoch 0.300" in lines[1]
    assert lines[2].startswith("step 6/6  loss ") and "epoch 0.600" in lines[2]
    windows = [r for r in metrics(tmp_path / "run") if "loss" in r]
    assert [(r["step"], r["epoch"]) for r in windows] == [(3, 0.3), (6, 0.6)]
    # The first window still averages every step it holds.
    assert windows[0]["loss"] == pytest.approx(
        np.mean([fake_backend.step_loss(s) for s in (1, 2, 3)])
    )


def test_the_final_evaluation_is_not_repeated_when_the_last_one_read_every_batch(shards, tmp_path):
    summary = run_train(config(shards, tmp_path / "run", eval_batches=5))
    assert events("eval") == [
        5
    ]  # the periodic one at step 6 read both batches; no pass with limit None
    rows = metrics(tmp_path / "run")
    periodic = next(r for r in rows if "eval_loss" in r)
    final = next(r for r in rows if "final_eval_loss" in r)
    assert periodic["eval_batches"] == final["final_eval_batches"] == 2
    assert final["final_eval_loss"] == periodic["eval_loss"] == pytest.approx(2.0)
    assert summary["final_eval"] == "full" and summary["eval_batches"] == 2


def test_the_final_evaluation_reads_everything_when_the_last_one_did_not(shards, tmp_path):
    run_train(config(shards, tmp_path / "run", eval_batches=1))
    assert events("eval") == [1, None]
    final = next(r for r in metrics(tmp_path / "run") if "final_eval_loss" in r)
    assert final["final_eval_batches"] == 2


def cli_train(shards: str, run: Path, *extra: str) -> int:
    from lmshards.train.commands import cli

    return cli.main(
        ["--shards", shards, "--output", str(run), "--backend", fake_backend.NAME, "--steps", "6",
         "--per_replica_batch", str(BATCH), "--log_every", "3", "--eval_every", "6",
         "--checkpoint_every", "3", "--shuffle_buffer", "8", "--steps_per_execution", "3", *extra]
    )  # fmt: skip


MOMENTS = ["preflight", "connect", "build", "start_training", "train_steps", "save", "eval"]


@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_at_any_moment_exits_75_and_the_rerun_finishes_like_an_uninterrupted_run(
    shards, tmp_path, monkeypatch, moment, signum
):
    assert cli_train(shards, tmp_path / "reference") == 0
    if moment == "preflight":
        from lmshards.train.commands import cli

        checks = cli.preflight

        def checks_then_signal(config):
            checked = checks(config)
            signal.raise_signal(signum)
            return checked

        monkeypatch.setattr(cli, "preflight", checks_then_signal)
    else:
        fake_backend.interrupt_at(moment, signum)
    fake_backend.EVENTS.clear()
    run = tmp_path / "run"
    assert cli_train(shards, run) == 75
    if moment in ("preflight", "connect", "build", "start_training"):
        assert events("train_steps") == [] and events("save") == []  # stopped before any step
    assert not (run / "run_summary.json").exists()
    monkeypatch.undo()
    fake_backend.register(monkeypatch)
    assert cli_train(shards, run) == 0
    reference = metrics(tmp_path / "reference")
    rows = metrics(run)
    assert [r for r in rows if "eval_loss" in r or "final_eval_loss" in r] == [
        r for r in reference if "eval_loss" in r or "final_eval_loss" in r
    ]
    last = [r for r in rows if "loss" in r][-1]
    assert last["step"] == 6 and last["loss"] == pytest.approx(
        next(r for r in reference if r["step"] == 6 and "loss" in r)["loss"]
    )
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["global_step"] == 6


def test_a_run_refuses_shards_of_another_seq_len_and_keeps_its_files(shards, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli_train(shards, run, "--steps", "3") == 0
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    other = random_shards(tmp_path / "other", seq_len=8)
    capsys.readouterr()
    assert cli_train(other, run, "--steps", "3") == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        f"lmshards train: error: {str(run)!r} is a run on shards of the same tokenizer but another layout "
        "(seq_len 16 in the run, 8 in these --shards)"
    )
    assert "--restart" in line and f"--init_from {run} --output NEW_DIR" in line
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_extend_of_a_finished_run_takes_a_new_rate_and_records_it(shards, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli_train(shards, run) == 0
    capsys.readouterr()
    assert cli_train(shards, run, "--extend", "--steps", "10") == 2  # the rate has fallen to 0
    assert "Pass a new --learning_rate" in capsys.readouterr().err
    longer = ("--extend", "--steps", "10", "--learning_rate", "1e-3", "--warmup_steps", "2")
    assert cli_train(shards, run, *longer) == 0
    recorded = json.loads((run / "run_config.json").read_text())
    assert recorded["train"]["learning_rate"] == 1e-3
    assert recorded["schedule"]["extensions"] == [
        {"start_step": 6, "end_step": 10, "start_rate": 1e-3, "warmup_steps": 2}
    ]
    rates = {r["step"]: r["learning_rate"] for r in metrics(run) if "loss" in r}
    # Warm-up 6 -> 8 to 1e-3, then linear to 0 at step 10: step 9 is half way down.
    assert rates[9] == pytest.approx(5e-4) and rates[10] == 0.0
    assert json.loads((run / "run_summary.json").read_text())["global_step"] == 10
    capsys.readouterr()
    assert cli_train(shards, run, *longer) == 0  # the same command again: finished
    assert "finished at step 10" in capsys.readouterr().out


@pytest.mark.parametrize(
    "what, shown",
    [("weights", "non-finite weights in 1 of 2 tensors (dense/kernel)"), ("eval", "eval loss nan")],
)
def test_non_finite_weights_or_eval_loss_stop_training_as_divergence_keeping_the_last_finite_checkpoint(
    shards, tmp_path, capsys, what, shown
):
    # Steps 4-6 make the weights (or the evaluation at step 6) NaN; the checkpoint of step 3 stays the newest.
    fake_backend.NON_FINITE_FROM_STEP[what] = 4
    run = tmp_path / "run"
    assert cli_train(shards, run) == 2
    err = capsys.readouterr().err
    assert (
        f"lmshards train: error: Training diverged at step 6 ({shown}); lower --learning_rate"
        in err
    )
    newest = 3 if what == "weights" else 6
    assert max(events("save")) == newest
    saved = [int(p.name.split("-")[1].split(".")[0]) for p in (run / "checkpoints").iterdir()]
    assert max(saved) == newest
    assert not (run / "run_summary.json").exists()
    assert all("eval_loss" not in r for r in metrics(run))  # no NaN evaluation is recorded
