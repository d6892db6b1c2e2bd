"""A run directory across commands, without TensorFlow: which reruns continue a run, which are refused, when it is finished."""

from __future__ import annotations

import json
import logging
import math

import pytest

from lmshards.plumbing.errors import LmshardsError, OutputError
from lmshards.schemas.constants import MANIFEST_FORMAT, TOKENS_FORMAT
from lmshards.schemas.manifest import Manifest, TokenizerInfo
from lmshards.train.config import ModelConfig, TrainConfig
from lmshards.train.run_dir import (
    REFUSE,
    RUN_OPTIONS,
    RunDir,
    changes,
    check_continuation,
    check_run_output,
    finished_summary,
    format_summary,
    shard_identity,
)

MODEL = ModelConfig(vocabulary_size=2000)


def config(tmp_path, **options) -> TrainConfig:
    return TrainConfig(**{"shards": ("shards",), "output": str(tmp_path), "steps": 100, **options})


def recorded(tmp_path, **options) -> dict:
    """What run_config.json of a run started with these options holds (the sections the checks read)."""
    return json.loads(
        json.dumps({"train": config(tmp_path, **options).to_dict(), "model": MODEL.to_dict()})
    )


def test_the_same_command_continues_the_run(tmp_path):
    assert check_continuation(recorded(tmp_path), config(tmp_path), MODEL) == []


@pytest.mark.parametrize(
    "option, first, rerun",
    [
        ("steps", 100, 200),
        ("learning_rate", 5e-4, 1e-3),
        ("warmup_steps", None, 10),
        ("lr_schedule", "linear", "cosine"),
        ("masking", "token", "whole_word"),
        ("mlm_probability", 0.15, 0.3),
        ("model_family", "roberta", "bert"),
        ("model_preset", "tiny", "small"),
        ("backend", "tensorflow", "jax"),
        ("weight_decay", 0.01, 0.1),
        ("clip_norm", None, 1.0),
    ],
)
def test_a_changed_schedule_or_masking_is_refused_naming_the_option_and_both_values(
    tmp_path, option, first, rerun
):
    previous = recorded(tmp_path, **{option: first})
    with pytest.raises(LmshardsError) as refused:
        check_continuation(previous, config(tmp_path, **{option: rerun}), MODEL)
    shown = {None: "unset"}.get(first, json.dumps(first))
    assert f"--{option} {shown} in the run, {json.dumps(rerun)} in this command" in str(
        refused.value
    )
    assert "--extend" in str(refused.value) and "--restart" in str(refused.value)


def test_extend_lets_only_the_length_and_the_rate_change(tmp_path):
    found = check_continuation(recorded(tmp_path), config(tmp_path, steps=300, extend=True), MODEL)
    assert [(c.option.name, c.recorded, c.given) for c in found] == [("steps", 100, 300)]
    # A new rate for the added steps (the trainer takes it only where the run's schedule has ended).
    found = check_continuation(
        recorded(tmp_path), config(tmp_path, steps=300, learning_rate=1e-3, extend=True), MODEL
    )
    assert [c.option.name for c in found] == ["steps", "learning_rate"]
    with pytest.raises(LmshardsError, match='--lr_schedule "linear" in the run, "cosine"'):
        check_continuation(
            recorded(tmp_path),
            config(tmp_path, steps=300, lr_schedule="cosine", extend=True),
            MODEL,
        )
    # --steps to --epochs is a change of length too.
    found = check_continuation(
        recorded(tmp_path), config(tmp_path, steps=None, epochs=2.0, extend=True), MODEL
    )
    assert [c.option.name for c in found] == ["steps", "epochs"]


def test_data_options_only_warn(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="lmshards.train.run_dir"):
        found = check_continuation(
            recorded(tmp_path), config(tmp_path, seed=7, shards=("a", "b")), MODEL
        )
    assert {c.option.name for c in found} == {"seed", "shards"}
    assert '--shards ["shards"] in the run, ["a", "b"] in this command' in caplog.text
    assert "--seed 0 in the run, 7 in this command" in caplog.text


def test_tuples_compare_equal_to_the_lists_they_were_recorded_as(tmp_path):
    assert (
        changes(
            recorded(tmp_path, shard_weights=(0.7, 0.3))["train"],
            config(tmp_path, shard_weights=(0.7, 0.3)),
        )
        == []
    )


def test_every_table_entry_is_an_option_of_the_command():
    fields = set(TrainConfig.__dataclass_fields__)
    assert {o.name for o in RUN_OPTIONS} <= fields
    assert {o.name for o in RUN_OPTIONS if o.extendable} == {"steps", "epochs"}
    assert all(o.on_change == REFUSE for o in RUN_OPTIONS if o.extendable)


def test_another_model_is_refused(tmp_path):
    with pytest.raises(LmshardsError, match="holds a run of another model"):
        check_continuation(
            recorded(tmp_path), config(tmp_path), ModelConfig(vocabulary_size=2000, num_layers=4)
        )


@pytest.mark.parametrize(
    "content, problem",
    [
        ('{"train": {', "is damaged: not valid JSON"),
        ("[1, 2]", "is damaged: it holds a JSON list, not an object"),
        ('{"model": {}}', "is damaged: it has no 'train' section"),
        (b"\xff\xfe\x00", "is damaged: not valid JSON"),
    ],
)
def test_a_damaged_run_config_is_a_clean_error_naming_the_file_and_the_fix(
    tmp_path, content, problem
):
    path = tmp_path / "run_config.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(LmshardsError) as damaged:
        RunDir(str(tmp_path)).previous_config()
    message = str(damaged.value)
    assert (
        message.startswith(f"{str(path)!r} {problem}")
        and "--restart" in message
        and "new --output" in message
    )
    with pytest.raises(LmshardsError, match="Restore it from a copy"):
        RunDir(str(tmp_path)).read_config()


def test_a_new_run_has_no_previous_config(tmp_path):
    assert RunDir(str(tmp_path / "new")).previous_config() is None
    with pytest.raises(LmshardsError, match="not a training run directory"):
        RunDir(str(tmp_path / "new")).read_config()


def test_a_run_with_a_summary_is_finished_unless_extended(tmp_path):
    assert finished_summary(RunDir(str(tmp_path)), []) is None
    (tmp_path / "run_summary.json").write_text(json.dumps({"global_step": 100}))
    assert finished_summary(RunDir(str(tmp_path)), []) == {"global_step": 100}
    warned_only = changes(recorded(tmp_path)["train"], config(tmp_path, seed=3))
    assert finished_summary(RunDir(str(tmp_path)), warned_only) == {"global_step": 100}
    longer = changes(recorded(tmp_path)["train"], config(tmp_path, steps=200, extend=True))
    assert finished_summary(RunDir(str(tmp_path)), longer) is None


RUN_FILES = [
    "run_config.json",
    "metrics.jsonl",
    "run_summary.json",
    "report.html",
    "checkpoints/checkpoint",
    "checkpoints/ckpt-3.index",
    "checkpoints/ckpt-3.data-00000-of-00001",
    "checkpoints/ckpt-6_temp/part-00000-of-00001.data-00000-of-00001",
    "checkpoints/ckpt-9.npz",
    "checkpoints/ckpt-12.npz.tmp-0123456789abcdef0123456789abcdef",
    "tensorboard/train/events.out.tfevents.1796160117.host.123.0.v2",
    "tensorboard/eval/events.out.tfevents.1796160117.host.123.1.v2",
    "tokenizer/tokenizer.json",
    "tokenizer/vocab.txt",
]


def write_run(root) -> None:
    for name in RUN_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("{}")


def test_restart_deletes_what_training_wrote_the_summary_first(tmp_path):
    write_run(tmp_path)
    deleted = RunDir(str(tmp_path)).clear()
    assert deleted[0] == "run_summary.json"
    assert sorted(deleted) == sorted({n.split("/")[0] for n in RUN_FILES})
    assert list(tmp_path.iterdir()) == []
    assert RunDir(str(tmp_path)).clear() == []


@pytest.mark.parametrize(
    "foreign", ["checkpoints/thesis.tex", "notes.txt", "tensorboard/plot.png", "plots/"]
)
def test_a_run_directory_holding_a_users_files_is_refused_and_nothing_is_deleted(tmp_path, foreign):
    write_run(tmp_path)
    if foreign.endswith("/"):
        (tmp_path / foreign).mkdir()
    else:
        (tmp_path / foreign).write_text("mine")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(OutputError, match=rf"holds files lmshards did not write \('{foreign}'"):
        RunDir(str(tmp_path)).clear()
    with pytest.raises(OutputError, match=rf"holds files no training run wrote \('{foreign}'"):
        check_run_output(str(tmp_path), ("elsewhere",))
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_an_output_that_is_a_shard_set_a_token_store_or_inside_the_shards_is_refused(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "manifest.json").write_text(json.dumps({"format": MANIFEST_FORMAT}))
    store = tmp_path / "store"
    store.mkdir()
    (store / "manifest.json").write_text(json.dumps({"format": TOKENS_FORMAT}))
    with pytest.raises(OutputError, match="is the same location as --shards"):
        check_run_output(str(shards), (str(shards),))
    with pytest.raises(OutputError, match="is inside --shards"):
        check_run_output(str(shards / "run"), (str(shards),))
    with pytest.raises(
        OutputError,
        match=r"is a shard set \(written by `lmshards preprocess`\), not a run directory",
    ):
        check_run_output(str(shards), (str(tmp_path / "other"),))
    with pytest.raises(
        OutputError, match=r"is a token store \(written by .*\), not a run directory"
    ):
        check_run_output(str(store), (str(shards),))
    check_run_output(str(tmp_path / "new-run"), (str(shards),))  # a new directory is fine


def test_summary_lines(tmp_path):
    summary = {
        "global_step": 300,
        "train_loss": 3.21,
        "eval_loss": 3.5,
        "eval_perplexity": 33.12,
        "eval_accuracy": 0.41,
        "final_eval": "full",
        "eval_batches": 12,
        "strategy": "cpu",
        "replicas": 1,
        "device_kind": "CPU",
    }
    lines = format_summary(summary, str(tmp_path)).splitlines()
    assert lines == [
        f"run {tmp_path}: finished at step 300",
        "train loss 3.2100",
        "eval loss 3.5000, perplexity 33.12, accuracy 0.4100 (on the whole validation split)",
        "strategy cpu, 1 replicas, device kind CPU",
        f"details: {tmp_path / 'run_summary.json'}",
    ]
    bounded = format_summary(
        {**summary, "final_eval": None, "eval_loss": None}, str(tmp_path)
    ).splitlines()
    assert bounded[2] == "eval loss -, perplexity 33.12, accuracy 0.4100 (on 12 validation batches)"
    diverged = {**summary, "eval_loss": 700.0, "eval_perplexity": math.exp(700.0)}
    assert (
        format_summary(diverged, str(tmp_path))
        .splitlines()[2]
        .startswith("eval loss 700.0000, perplexity 1.01e+304, accuracy")
    )
    assert "perplexity 999999.00," in format_summary({**summary, "eval_perplexity": 999999.0}, "r")


def test_a_damaged_metrics_log_keeps_its_complete_lines_and_warns(tmp_path, caplog):
    from lmshards.schemas.metrics_log import read_metrics
    from lmshards.train.run_dir import MetricsLog

    path = tmp_path / "metrics.jsonl"
    good = [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}, {"step": 3, "eval_loss": 1.4}]
    lines = [
        json.dumps(good[0]),
        "[1, 2]",
        json.dumps(good[1]),
        '{"no_step": 1}',
        json.dumps(good[2]),
    ]
    path.write_text("\n".join(lines) + '\n{"step": 4, "lo')  # the last line cut short by a crash
    with caplog.at_level(logging.WARNING):
        assert read_metrics(str(path)) == good
    assert f"{path} is damaged: line(s) 2, 4, 6 are not metrics records" in caplog.text
    assert read_metrics(str(tmp_path / "none.jsonl")) == []
    log = MetricsLog(str(path), resume_step=2)  # a resume keeps what is complete up to its step
    assert log.records == good[:2]
    log.add({"step": 3, "loss": 1.0})
    assert read_metrics(str(path)) == [*good[:2], {"step": 3, "loss": 1.0}]


def test_a_run_recorded_before_backends_existed_is_a_tensorflow_run(tmp_path):
    previous = recorded(tmp_path)
    del previous["train"]["backend"]
    assert check_continuation(previous, config(tmp_path), MODEL) == []
    with pytest.raises(
        LmshardsError, match='--backend "tensorflow" in the run, "jax" in this command'
    ):
        check_continuation(previous, config(tmp_path, backend="jax"), MODEL)


def shards_manifest(*, seq_len: int = 128, fingerprint: str = "sha256:aa") -> Manifest:
    tokenizer = TokenizerInfo(fingerprint, 2000, {"mask": 4}, (0, 1, 2, 3, 4))
    return Manifest("0", seq_len, tokenizer, splits={}, inputs=(), seed=0, options={})


@pytest.mark.parametrize(
    "other, shown",
    [
        (dict(fingerprint="sha256:bb"), 'tokenizer fingerprint "sha256:aa", and this command\'s --shards have '
         'tokenizer fingerprint "sha256:bb": one run cannot continue on another tokenization'),
        # The same tokens in longer sequences (a repack): not another tokenization; a new run takes the weights.
        (dict(seq_len=64), "same tokenizer but another layout (seq_len 128 in the run, 64 in these --shards)"),
    ],
)  # fmt: skip
def test_shards_of_another_tokenization_are_refused_naming_both_values(tmp_path, other, shown):
    previous = {**recorded(tmp_path), **shard_identity(shards_manifest())}
    previous = json.loads(json.dumps(previous))
    found = check_continuation(previous, config(tmp_path), MODEL, manifest=shards_manifest())
    assert found == []
    with pytest.raises(LmshardsError) as refused:
        check_continuation(previous, config(tmp_path), MODEL, manifest=shards_manifest(**other))
    message = str(refused.value)
    assert shown in message and "--restart" in message
    if "seq_len" in other:
        assert f"--init_from {tmp_path} --output NEW_DIR" in message
        assert "another tokenization" not in message
    else:
        assert "new --output" in message
