"""A run directory across commands: what its first command fixed, and whether this command may continue it.

Without TensorFlow, so `lmshards train` refuses a rerun that would change a run's schedule, and
answers a rerun of a finished run, before the training stack loads.

A rerun of the same command resumes. Options in RUN_OPTIONS are compared with the ones the run
recorded: a REFUSE option that differs ends the command (exit 2) naming the option and both values,
except the run's length under --extend; a WARN option that differs only draws a warning.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from lmshards.plumbing import bounded, fs
from lmshards.plumbing.errors import FailedRunError, LmshardsError, OutputError
from lmshards.plumbing.outputs import (
    check_no_overlap,
    check_not_inside_output,
    clear_owned_output,
    owned_entries,
)
from lmshards.schemas.constants import RUN_CONFIG_JSON, TOKENIZER_DIR_NAME
from lmshards.schemas.directory_kind import OTHER, RUN_DIRECTORY, WHAT, directory_kind
from lmshards.schemas.layouts import (
    CHECKPOINTS_DIR,
    METRICS_JSONL,
    OUTPUT_KINDS,
    RUN_SUMMARY_JSON,
    TENSORBOARD_DIR,
    TRAIN_RUN_OUTPUT,
)
from lmshards.schemas.manifest import Manifest, read_manifest
from lmshards.schemas.metrics_log import read_metrics
from lmshards.schemas.tokenizer_info import TokenizerSource
from lmshards.train.backend_names import DEFAULT_BACKEND
from lmshards.train.config import ModelConfig, TrainConfig
from lmshards.train.evaluation import format_perplexity

log = logging.getLogger(__name__)

REFUSE = "refuse"
WARN = "warn"
_RESTART_HINT = (
    "pass --restart to train this run again from step 0 (deleting its checkpoints and metrics)"
)


@dataclasses.dataclass(frozen=True)
class RunOption:
    """A TrainConfig field whose value a rerun must keep (REFUSE) or had better keep (WARN).

    extendable: --extend lets it change (it sets the run's length).
    restarts_rate: --extend lets it change too, restarting the rate of a run whose schedule has ended.
    recorded_default: its value in runs recorded before the option existed.
    """

    name: str
    on_change: str
    extendable: bool = False
    restarts_rate: bool = False
    recorded_default: Any = None

    @property
    def flag(self) -> str:
        return f"--{self.name}"


RUN_OPTIONS = (
    # The learning-rate schedule: changing it mid-run would make the rate jump.
    RunOption("steps", REFUSE, extendable=True),
    RunOption("epochs", REFUSE, extendable=True),
    RunOption("learning_rate", REFUSE, restarts_rate=True),
    RunOption("warmup_steps", REFUSE, restarts_rate=True),
    RunOption("lr_schedule", REFUSE),
    RunOption("decay_fraction", REFUSE),
    RunOption("decay_shape", REFUSE),
    # What each update does: another value would train another model than the one recorded.
    RunOption("weight_decay", REFUSE, recorded_default=TrainConfig.weight_decay),
    RunOption("clip_norm", REFUSE),
    RunOption("optimizer", REFUSE),
    RunOption("rope_theta_global", REFUSE),
    # The masking recipe: another one would train another objective.
    RunOption("masking", REFUSE),
    RunOption("mlm_probability", REFUSE),
    # The network and what trains it: another one would not restore the run's checkpoints.
    RunOption("model_family", REFUSE),
    RunOption("model_preset", REFUSE),
    RunOption("backend", REFUSE, recorded_default=DEFAULT_BACKEND),
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
        data = bounded.read_json(path, what="run file")
    except bounded.ReadLimitError as e:
        raise LmshardsError(f"{e} {fix}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LmshardsError(f"{path!r} is damaged: not valid JSON ({e}). {fix}") from e
    except OSError as e:
        raise LmshardsError(f"{path!r} cannot be read ({e}). {fix}") from e
    if not isinstance(data, dict):
        raise LmshardsError(
            f"{path!r} is damaged: it holds a JSON {type(data).__name__}, not an object. {fix}"
        )
    return data


def changes(recorded_train: dict[str, Any], config: TrainConfig) -> list[Change]:
    """The RUN_OPTIONS whose value in this command differs from the one the run recorded."""
    given = json.loads(
        json.dumps(config.to_dict())
    )  # tuples become the lists they were recorded as
    recorded = {o.name: recorded_train.get(o.name, o.recorded_default) for o in RUN_OPTIONS}
    return [
        Change(option, recorded[option.name], given[option.name])
        for option in RUN_OPTIONS
        if option.name in given and recorded[option.name] != given[option.name]
    ]


_SHARD_KEYS_SHOWN = {"tokenizer_fingerprint": "tokenizer fingerprint"}


def shard_identity(manifest: Manifest) -> dict[str, Any]:
    """What run_config.json records of the shards a run trains on, which every later command must match."""
    return {
        "tokenizer_fingerprint": manifest.tokenizer.fingerprint,
        "seq_len": manifest.seq_len,
        "features": manifest.features(),
    }


def check_same_shards(previous: dict[str, Any], manifest: Manifest, run_dir: str) -> None:
    """Raises LmshardsError when this command's shards differ from the run's in tokenizer, seq_len or features.

    A key the run did not record (runs of older versions) is not compared. Shards of the same tokenizer
    that differ otherwise (a repack to a longer --seq_len) can take the run's weights in a new run: the
    message says so (--init_from).
    """
    given = json.loads(json.dumps(shard_identity(manifest)))  # as it would be recorded
    differ = [key for key, value in given.items() if key in previous and previous[key] != value]
    if not differ:
        return
    if (
        "seq_len" in differ
        and "features" in differ
        and _kinds(previous["features"]) == _kinds(given["features"])
    ):
        differ.remove("features")  # only their shapes differ, and seq_len says so
    if "tokenizer_fingerprint" in differ:
        what = _SHARD_KEYS_SHOWN["tokenizer_fingerprint"]
        raise LmshardsError(
            f"{run_dir!r} is a run on shards with {what} {_shown(previous['tokenizer_fingerprint'])}, and this "
            f"command's --shards have {what} {_shown(given['tokenizer_fingerprint'])}: one run cannot continue on "
            f"another tokenization. Pass the run's --shards to resume it, {_RESTART_HINT}, or use a new --output."
        )
    changed = "; ".join(
        f"{key} {_shown(previous[key])} in the run, {_shown(given[key])} in these --shards"
        for key in differ
    )
    raise LmshardsError(
        f"{run_dir!r} is a run on shards of the same tokenizer but another layout ({changed}), and a run resumes "
        "only on shards like its own. To train its weights on these shards (BERT's second phase on a set repacked "
        f"to a longer --seq_len), start a new run from it: --init_from {run_dir} --output NEW_DIR. To resume it, "
        f"pass the run's --shards; or {_RESTART_HINT}."
    )


# run_config.json: each --shards path -> shard_set_digest of the set the run trains on.
SHARD_DIGESTS = "shard_digests"


class ShardSetChangedError(FailedRunError):
    """A shard set changed (was overwritten) while the run trained on it: exit 1, one line."""


def shard_set_digest(manifest: Manifest) -> str:
    """The SHA-256 of what a shard set holds: every shard of every split (path, records, bytes, SHA-256), its
    tokenizer's fingerprint and seq_len. A set written again from the same inputs keeps it (created_at and
    the input paths are left out); a set with any other shard gets another."""
    identity = {
        "tokenizer_fingerprint": manifest.tokenizer.fingerprint,
        "seq_len": manifest.seq_len,
        "splits": {
            name: [[s.path, s.records, s.bytes, s.sha256] for s in split.shards]
            for name, split in manifest.splits.items()
        },
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def shard_digests(sets: Mapping[str, Manifest]) -> dict[str, str]:
    """{--shards path: shard_set_digest}, as run_config.json records it."""
    return {path: shard_set_digest(manifest) for path, manifest in sets.items()}


def check_same_shard_sets(previous: dict[str, Any], sets: Mapping[str, Manifest]) -> None:
    """Refuses to continue a run on a shard set whose content changed since the run recorded it.

    A path the run did not record (another --shards, a run of an older version) is not compared.
    Raises:
      LmshardsError: naming the set, the recorded and current digests, and the fix.
    """
    recorded = previous.get(SHARD_DIGESTS) or {}
    for path, digest in shard_digests(sets).items():
        if path in recorded and recorded[path] != digest:
            raise LmshardsError(
                f"--shards {path!r} changed since this run trained on it: its digest is {recorded[path]} in "
                f"the run's {RUN_CONFIG_JSON} and {digest} now, so resuming would continue on other data. "
                f"Restore the set as it was to resume, or train on it as a new run (a new --output, or "
                "--restart)."
            )


def changed_shard_set(sets: Mapping[str, Manifest], *, step: int) -> ShardSetChangedError | None:
    """The error to stop a run with when a set it trains on is not the one it started on any more (its
    manifest gone or rewritten, as `preprocess --overwrite` does), else None. Reads every set's manifest."""
    for path, manifest in sets.items():
        was = shard_set_digest(manifest)
        try:
            now = shard_set_digest(read_manifest(path))
        except LmshardsError:
            now = "none (its manifest is missing or unreadable: being written again?)"
        if now != was:
            return ShardSetChangedError(
                f"--shards {path!r} changed while this run trained on it (digest {was} when the run "
                f"started, {now} now); training stopped at step {step}, and its checkpoints hold only "
                "steps on the set as it was. Restore the set and rerun this command to resume, or train "
                "on the new set as a new run (a new --output, or --restart)."
            )
    return None


def _kinds(features: Any) -> Any:
    """{feature: dtype}: what a features record says besides its shapes."""
    if not isinstance(features, dict):
        return features
    return {
        name: spec.get("dtype") if isinstance(spec, dict) else spec
        for name, spec in features.items()
    }


def check_continuation(
    previous: dict[str, Any],
    config: TrainConfig,
    model_config: ModelConfig,
    *,
    manifest: Manifest | None = None,
) -> list[Change]:
    """Checks that this command may continue the run that wrote `previous`; returns what changed.

    manifest: this command's shards (check_same_shards). Warns about WARN options that changed.
    Raises:
      LmshardsError: other shards, another model, or a REFUSE option that differs (its length only with --extend).
    """
    if manifest is not None:
        check_same_shards(previous, manifest, config.output)
    started_from = previous["train"].get("init_from")
    if started_from != config.init_from:
        raise LmshardsError(
            f"{config.output!r} is a run started from --init_from {_shown(started_from)}, and this command gives "
            f"--init_from {_shown(config.init_from)}. Rerun with the run's --init_from to resume it (once it has a "
            f"checkpoint its source is not read again), use a new --output, or {_RESTART_HINT}."
        )
    if previous["model"] != model_config.to_dict():
        raise LmshardsError(
            f"{config.output!r} holds a run of another model ({previous['model']}); this command builds "
            f"{model_config.to_dict()}. Use a new --output, the same model options to resume, or {_RESTART_HINT}."
        )
    found = changes(previous["train"], config)
    refused = [
        c
        for c in found
        if c.option.on_change == REFUSE
        and not (config.extend and (c.option.extendable or c.option.restarts_rate))
    ]
    if refused:
        raise LmshardsError(
            f"{config.output!r} is a run whose schedule, optimizer, masking, model and backend its first command fixed, and this "
            "command changes them: "
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


def finished_summary(run: RunDir, found: list[Change]) -> dict[str, Any] | None:
    """The run's run_summary.json when it has finished and this command does not extend it, else None.

    The summary is written when the last step is trained and evaluated, and removed when --extend adds steps.
    """
    if any(c.option.extendable for c in found) or not fs.exists(run.summary_path):
        return None
    return read_json_object(
        run.summary_path,
        fix=f"Delete it to evaluate the run's last checkpoint again, or {_RESTART_HINT}.",
    )


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
            f"eval loss {number('eval_loss', '.4f')}, perplexity {format_perplexity(summary.get('eval_perplexity'))}, "
            f"accuracy {number('eval_accuracy', '.4f')} (on {eval_what})",
            f"strategy {summary.get('strategy')}, {summary.get('replicas')} replicas, device kind {summary.get('device_kind')}",
            f"details: {fs.join(run_dir, RUN_SUMMARY_JSON)}",
        ]
    )


# ---------------------------------------------------------------- the run directory's files


class MetricsLog:
    """RUN_DIR/metrics.jsonl: one object per logging window and per evaluation, rewritten atomically.

    sink: also called with each record added (TensorBoard scalars).
    """

    def __init__(
        self,
        path: str,
        *,
        resume_step: int,
        sink: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.path = path
        self.sink = sink
        # Records past the restored step belong to work the checkpoint lost; that work is redone.
        records = read_metrics(path)
        self.records = [r for r in records if r["step"] <= resume_step]
        if len(self.records) < len(records):
            log.warning(
                "%s holds %d records past step %d, where training resumes; they are replaced as those steps "
                "are trained again.",
                path,
                len(records) - len(self.records),
                resume_step,
            )

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        fs.write_text_atomic(
            self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records)
        )
        if self.sink is not None:
            self.sink(record)

    def drop(self, keep: Callable[[dict[str, Any]], bool]) -> None:
        """Forgets the records `keep` rejects (written with the next add)."""
        self.records = [r for r in self.records if keep(r)]

    def last(self, key: str) -> dict | None:
        return next((r for r in reversed(self.records) if key in r), None)

    def at(self, step: int, key: str) -> dict | None:
        """The last record of `step` that holds `key`, or None."""
        return next((r for r in reversed(self.records) if r["step"] == step and key in r), None)


@dataclasses.dataclass(frozen=True)
class RunDir:
    """A run directory (local or gs://) and every file training writes in it."""

    path: str

    @property
    def config_path(self) -> str:
        return fs.join(self.path, RUN_CONFIG_JSON)

    @property
    def summary_path(self) -> str:
        return fs.join(self.path, RUN_SUMMARY_JSON)

    @property
    def metrics_path(self) -> str:
        return fs.join(self.path, METRICS_JSONL)

    @property
    def checkpoints(self) -> str:
        return fs.join(self.path, CHECKPOINTS_DIR)

    @property
    def tensorboard(self) -> str:
        return fs.join(self.path, TENSORBOARD_DIR)

    @property
    def tokenizer(self) -> str:
        return fs.join(self.path, TOKENIZER_DIR_NAME)

    # ------------------------------------------------------------ run_config.json

    def read_config(self, *, fix: str | None = None) -> dict[str, Any]:
        """run_config.json, checked to hold the sections every reader needs ("train", "model").

        Raises:
          LmshardsError: no run_config.json (not a run directory), or a damaged one.
        """
        if not fs.exists(self.config_path):
            raise LmshardsError(
                f"No {RUN_CONFIG_JSON} in {self.path!r}: not a training run directory (`lmshards train --output DIR`)."
            )
        fix = fix or "Restore it from a copy: the run's checkpoints cannot be used without it."
        config = read_json_object(self.config_path, fix=fix)
        missing = [key for key in ("train", "model") if not isinstance(config.get(key), dict)]
        if missing:
            raise LmshardsError(
                f"{self.config_path!r} is damaged: it has no {' or '.join(repr(k) for k in missing)} section. {fix}"
            )
        return config

    def previous_config(self) -> dict[str, Any] | None:
        """The run_config.json an earlier command wrote, or None for a new run.

        Raises:
          LmshardsError: it is damaged.
        """
        if not fs.exists(self.config_path):
            return None
        return self.read_config(
            fix=f"Restore it from a copy, {_RESTART_HINT}, or use a new --output."
        )

    def write_config(self, run_config: dict[str, Any]) -> None:
        fs.write_text_atomic(
            self.config_path, json.dumps(run_config, indent=2, sort_keys=True) + "\n"
        )

    # ------------------------------------------------------------ run_summary.json

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Written last: its presence is what marks the run finished."""
        fs.write_text_atomic(
            self.summary_path, json.dumps(summary, indent=2, sort_keys=True) + "\n"
        )

    def forget_summary(self) -> None:
        """Removes run_summary.json: the run is not finished any more (--extend added steps)."""
        filesystem, path = fs.filesystem(self.summary_path)
        if filesystem.exists(path):
            filesystem.rm(path)

    # ------------------------------------------------------------ metrics, tokenizer, clearing

    def read_metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.metrics_path)

    def metrics_log(
        self, *, resume_step: int, sink: Callable[[dict[str, Any]], None] | None = None
    ) -> MetricsLog:
        return MetricsLog(self.metrics_path, resume_step=resume_step, sink=sink)

    def copy_tokenizer(self, source: TokenizerSource) -> None:
        """Copies the tokenizer's file(s) into RUN_DIR/tokenizer/, so `export` and `fill-mask` need no --tokenizer."""
        files = (
            [p for p in fs.listdir(source.path) if not fs.isdir(p)]
            if fs.isdir(source.path)
            else [source.json_path]
        )
        for path in files:
            name = path.rstrip("/").rsplit("/", 1)[-1]
            fs.write_bytes_atomic(fs.join(self.tokenizer, name), fs.read_bytes(path))

    def clear(self) -> list[str]:
        """Deletes what training wrote here (TRAIN_RUN_OUTPUT), the summary first; returns the names deleted.

        Raises:
          OutputError: the directory holds anything else (nothing is deleted then).
        """
        return list(clear_owned_output(self.path, kind=TRAIN_RUN_OUTPUT))


def check_run_output(output: str, shards: tuple[str, ...]) -> None:
    """Refuses, before any work, an --output that is not this run's to write: a shard set or a token store,
    a directory inside (or holding) a --shards set or inside any lmshards output, or one holding files no
    training command wrote.

    Raises:
      OutputError: naming the directory, what it is or the files that are not the run's, and the fix.
    """
    check_no_overlap(shards, output, output_flag="--output", input_flag="--shards")
    check_not_inside_output(output, kinds=OUTPUT_KINDS, flag="--output")
    kind = directory_kind(output)
    if kind not in (RUN_DIRECTORY, OTHER):
        raise OutputError(
            f"--output {output!r} is {WHAT[kind]}, not a run directory: training there would mix the run's "
            "files with it (and --restart would delete them). Choose a new --output for the run, e.g. "
            "runs/NAME."
        )
    foreign = owned_entries(output, kind=TRAIN_RUN_OUTPUT).foreign
    if foreign:
        shown = ", ".join(repr(f) for f in foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise OutputError(
            f"--output {output!r} holds files no training run wrote ({shown}): a run directory holds only its "
            "run's files, and --restart deletes only those. Choose a new or empty --output, or move those "
            "files away."
        )
