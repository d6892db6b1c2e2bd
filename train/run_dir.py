"""A run directory across commands: what its first command fixed, and whether this command may continue it.

Without TensorFlow, so `lmshards train` refuses a rerun that would change a run's schedule, and
answers a rerun of a finished run, before the training stack loads.

A rerun of the same command resumes. Options in RUN_OPTIONS are compared with the ones the run
recorded: a REFUSE option that differs ends the command (exit 2) naming the option and both values,
except the run's length under --extend; a WARN option that differs only draws a warning.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from plumbing import fs
from plumbing.errors import LmshardsError
from train.config import (
    CHECKPOINTS_DIR,
    METRICS_JSONL,
    RUN_CONFIG_JSON,
    RUN_SUMMARY_JSON,
    TENSORBOARD_DIR,
    TOKENIZER_DIR,
    ModelConfig,
    TrainConfig,
)

log = logging.getLogger(__name__)

REFUSE = "refuse"
WARN = "warn"
# What `--restart` deletes: everything a training command writes in its run directory, nothing else.
RUN_OUTPUTS = (
    RUN_SUMMARY_JSON,
    CHECKPOINTS_DIR,
    METRICS_JSONL,
    TENSORBOARD_DIR,
    TOKENIZER_DIR,
    RUN_CONFIG_JSON,
)
_RESTART_HINT = (
    "pass --restart to train this run again from step 0 (deleting its checkpoints and metrics)"
)


@dataclasses.dataclass(frozen=True)
class RunOption:
    """A TrainConfig field whose value a rerun must keep (REFUSE) or had better keep (WARN).

    extendable: --extend lets it change (it sets the run's length).
    """

    name: str
    on_change: str
    extendable: bool = False

    @property
    def flag(self) -> str:
        return f"--{self.name}"


RUN_OPTIONS = (
    # The learning-rate schedule: changing it mid-run would make the rate jump.
    RunOption("steps", REFUSE, extendable=True),
    RunOption("epochs", REFUSE, extendable=True),
    RunOption("learning_rate", REFUSE),
    RunOption("warmup_steps", REFUSE),
    RunOption("lr_schedule", REFUSE),
    # The masking recipe: another one would train another objective.
    RunOption("masking", REFUSE),
    RunOption("mlm_probability", REFUSE),
    # With the global step, these fix which batches and masks come next.
    RunOption("shards", WARN),
    RunOption("shard_weights", WARN),
    RunOption("per_replica_batch", WARN),
    RunOption("seed", WARN),
    RunOption("shuffle_buffer", WARN),
)


@dataclasses.dataclass(frozen=True)
class Change:
    option: RunOption
    recorded: Any  # the value the run's run_config.json holds
    given: Any  # this command's value

    def describe(self) -> str:
        return f"{self.option.flag} {_shown(self.recorded)} in the run, {_shown(self.given)} in this command"


def _shown(value: Any) -> str:
    return "unset" if value is None else json.dumps(value)


def read_json_object(path: str, *, fix: str) -> dict[str, Any]:
    """The JSON object in path (local or gs://).

    Raises:
      LmshardsError: the file cannot be read, is not JSON or not an object; the message names it and `fix`.
    """
    try:
        data = json.loads(fs.read_text(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LmshardsError(f"{path!r} is damaged: not valid JSON ({e}). {fix}") from e
    except OSError as e:
        raise LmshardsError(f"{path!r} cannot be read ({e}). {fix}") from e
    if not isinstance(data, dict):
        raise LmshardsError(
            f"{path!r} is damaged: it holds a JSON {type(data).__name__}, not an object. {fix}"
        )
    return data


def read_run_config(run_dir: str, *, fix: str | None = None) -> dict[str, Any]:
    """RUN_DIR/run_config.json, checked to hold the sections every reader needs ("train", "model").

    Raises:
      LmshardsError: no run_config.json (not a run directory), or a damaged one.
    """
    path = fs.join(run_dir, RUN_CONFIG_JSON)
    if not fs.exists(path):
        raise LmshardsError(
            f"No {RUN_CONFIG_JSON} in {run_dir!r}: not a training run directory (`lmshards train --output DIR`)."
        )
    fix = fix or "Restore it from a copy: the run's checkpoints cannot be used without it."
    config = read_json_object(path, fix=fix)
    missing = [key for key in ("train", "model") if not isinstance(config.get(key), dict)]
    if missing:
        raise LmshardsError(
            f"{path!r} is damaged: it has no {' or '.join(repr(k) for k in missing)} section. {fix}"
        )
    return config


def previous_run_config(run_dir: str) -> dict[str, Any] | None:
    """The run_config.json an earlier command wrote in run_dir, or None for a new run.

    Raises:
      LmshardsError: it is damaged.
    """
    if not fs.exists(fs.join(run_dir, RUN_CONFIG_JSON)):
        return None
    return read_run_config(
        run_dir, fix=f"Restore it from a copy, {_RESTART_HINT}, or use a new --output."
    )


def changes(recorded_train: dict[str, Any], config: TrainConfig) -> list[Change]:
    """The RUN_OPTIONS whose value in this command differs from the one the run recorded."""
    given = json.loads(
        json.dumps(config.to_dict())
    )  # tuples become the lists they were recorded as
    return [
        Change(option, recorded_train.get(option.name), given[option.name])
        for option in RUN_OPTIONS
        if option.name in given and recorded_train.get(option.name) != given[option.name]
    ]


def check_continuation(
    previous: dict[str, Any], config: TrainConfig, model_config: ModelConfig
) -> list[Change]:
    """Checks that this command may continue the run that wrote `previous`; returns what changed.

    Warns about WARN options that changed.
    Raises:
      LmshardsError: another model, or a REFUSE option that differs (its length only with --extend).
    """
    if previous["model"] != model_config.to_dict():
        raise LmshardsError(
            f"{config.output!r} holds a run of another model ({previous['model']}); this command builds "
            f"{model_config.to_dict()}. Use a new --output, the same model options to resume, or {_RESTART_HINT}."
        )
    found = changes(previous["train"], config)
    refused = [
        c
        for c in found
        if c.option.on_change == REFUSE and not (config.extend and c.option.extendable)
    ]
    if refused:
        raise LmshardsError(
            f"{config.output!r} is a run whose schedule and masking its first command fixed, and this command changes "
            "them: "
            f"{'; '.join(c.describe() for c in refused)}. Rerun with the run's values to resume it; to train it longer, "
            "pass the new --steps with --extend (the rate then falls linearly from where it is to 0 over the added "
            f"steps); or {_RESTART_HINT}."
        )
    warned = [c for c in found if c.option.on_change == WARN]
    if warned:
        log.warning(
            "Resuming with %s: the data order and masks will not continue the earlier run's sequence.",
            "; ".join(c.describe() for c in warned),
        )
    return found


def finished_summary(run_dir: str, found: list[Change]) -> dict[str, Any] | None:
    """The run's run_summary.json when it has finished and this command does not extend it, else None.

    The summary is written when the last step is trained and evaluated, and removed when --extend adds steps.
    """
    path = fs.join(run_dir, RUN_SUMMARY_JSON)
    if any(c.option.extendable for c in found) or not fs.exists(path):
        return None
    return read_json_object(
        path, fix=f"Delete it to evaluate the run's last checkpoint again, or {_RESTART_HINT}."
    )


def forget_summary(run_dir: str) -> None:
    """Removes RUN_DIR/run_summary.json: the run is not finished any more (--extend added steps)."""
    filesystem, path = fs.filesystem(fs.join(run_dir, RUN_SUMMARY_JSON))
    if filesystem.exists(path):
        filesystem.rm(path)


def clear_run(run_dir: str) -> list[str]:
    """Deletes what training wrote in run_dir (RUN_OUTPUTS), the summary first; returns the names deleted."""
    filesystem, path = fs.filesystem(run_dir)
    deleted = []
    for name in RUN_OUTPUTS:
        target = fs.join(path, name)
        if filesystem.exists(target):
            filesystem.rm(target, recursive=True)
            deleted.append(name)
    return deleted


def format_summary(summary: dict[str, Any], run_dir: str) -> str:
    """The few lines `lmshards train` prints on stdout about a finished run."""

    def number(key: str, spec: str) -> str:
        value = summary.get(key)
        return "-" if value is None else format(value, spec)

    eval_what = (
        "the whole validation split"
        if summary.get("final_eval") == "full"
        else f"{summary.get('eval_batches')} validation batches"
    )
    return "\n".join(
        [
            f"run {run_dir}: finished at step {summary.get('global_step')}",
            f"train loss {number('train_loss', '.4f')}",
            f"eval loss {number('eval_loss', '.4f')}, perplexity {number('eval_perplexity', '.2f')}, "
            f"accuracy {number('eval_accuracy', '.4f')} (on {eval_what})",
            f"strategy {summary.get('strategy')}, {summary.get('replicas')} replicas, device kind {summary.get('device_kind')}",
            f"details: {fs.join(run_dir, RUN_SUMMARY_JSON)}",
        ]
    )
