"""The training loop: a backend's devices, model and steps, driven step by step; logs, evaluations, summary.

Read top to bottom: `train(config)` is the whole story; what can be checked without TensorFlow was
checked before it loaded (lmshards.train.loop.preflight). The backend (lmshards.train.backends: TensorFlow's tf.distribute,
or another) owns devices, variables, compiled steps and checkpoint files; the input plan
(lmshards.train.inputs.input_plan) owns which batches come next; the run directory (lmshards.train.run_dir) owns every file.
Everything a resumed run needs is a function of the global step (data position, masking seeds,
learning rate) or lives in the checkpoint (weights, optimizer slots and iterations, dropout seed
states), so rerunning the same command continues exactly where the last checkpoint left off. The
learning-rate schedule is fixed by the run's first command and kept in run_config.json, with any
--extend segments, so every later command rebuilds it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.progress import Pacer
from lmshards.plumbing.units import format_duration
from lmshards.schemas.constants import TRAIN_SPLIT, VALIDATION_SPLIT
from lmshards.schemas.tokenizer_info import TokenizerSource
from lmshards.schemas.version import __version__
from lmshards.train import evaluation
from lmshards.train.backends.base import Backend, BuildSpec, Restored, Topology
from lmshards.train.backends.registry import load_backend
from lmshards.train.config import FINAL_EVAL_FULL, ModelConfig, TrainConfig
from lmshards.train.devices import MIXED_FLOAT16, steps_in_next_call
from lmshards.train.divergence import describe_non_finite, diverged, first_non_finite
from lmshards.train.export.init_source import (
    InitWeights,
    check_same_source,
    init_record,
    load_init_weights,
)
from lmshards.train.inputs.input_plan import InputPlan, run_masking
from lmshards.train.loop.preemption import PreemptionFlag
from lmshards.train.loop.preflight import Preflight, preflight
from lmshards.train.loop.tensorboard import TensorBoardWriter
from lmshards.train.optim import WarmupDecay, continue_schedule, first_schedule
from lmshards.train.run_dir import (
    SHARD_DIGESTS,
    MetricsLog,
    RunDir,
    changed_shard_set,
    shard_digests,
    shard_identity,
)

log = logging.getLogger(__name__)

# Seconds between progress lines of an evaluation.
EVAL_PROGRESS_SECONDS = 30.0


def check_precision_change(previous_run: dict[str, Any] | None, precision: str) -> None:
    """mixed_float16 wraps the optimizer in a LossScaleOptimizer, so its checkpoints hold other objects.

    Raises:
      LmshardsError: the run's earlier commands trained with loss scaling and this one would not, or the reverse.
    """
    before = (previous_run or {}).get("resolved", {}).get("precision")
    if before and (before == MIXED_FLOAT16) != (precision == MIXED_FLOAT16):
        raise LmshardsError(
            f"This run was trained with precision {before} and this command would resume it with {precision}; "
            f"checkpoints of {MIXED_FLOAT16} (loss scaling) and of other precisions do not restore into each other. "
            f"Pass --precision {before}."
        )


def build_model(backend: Backend, spec: BuildSpec, init_weights: InitWeights | None) -> Restored:
    """The backend's model and optimizer, restored from the run's newest checkpoint; a run without one starts
    from init_weights (--init_from) when given, else from the seeded initialisation."""
    restored = backend.build(spec)
    if restored.path is None and init_weights is not None:
        backend.load_weights(init_weights.arrays, family=spec.model_config.family)
    return restored


def log_topology(backend: str, topology: Topology) -> None:
    log.info(
        "backend %s: strategy %s, %d replicas, device kind %s",
        backend,
        topology.strategy,
        topology.replicas,
        topology.device_kind,
    )


def new_peak(config: TrainConfig, previous_run: dict[str, Any] | None) -> float | None:
    """--learning_rate when it differs from the one the run recorded (an --extend restarting the rate), else None."""
    recorded = (previous_run or {}).get("train", {}).get("learning_rate", config.learning_rate)
    return config.learning_rate if config.extend and recorded != config.learning_rate else None


def run_config_record(
    config: TrainConfig,
    inputs: InputPlan,
    topology: Topology,
    model_config: ModelConfig,
    *,
    schedule: WarmupDecay,
) -> dict[str, Any]:
    """RUN_DIR/run_config.json: the options as given ("train"), what they resolved to on this machine
    ("resolved"), and the learning-rate schedule ("schedule") every later command of the run keeps."""
    manifest = inputs.mixture.manifest
    resolved = {
        **topology.devices(),
        "precision": topology.precision,
        "steps_per_execution": topology.steps_per_execution,
        **inputs.resolved(),  # global_batch, input_pipelines, steps_per_epoch
    }
    return {
        "tool_version": __version__,
        "train": config.to_dict(),
        "resolved": resolved,
        "schedule": schedule.get_config(),
        "model": model_config.to_dict(),
        **shard_identity(manifest),  # tokenizer_fingerprint, seq_len, features
        SHARD_DIGESTS: shard_digests(set_manifests(inputs)),
        "special_token_ids": dict(manifest.tokenizer.special_token_ids),
        "all_special_ids": list(manifest.tokenizer.all_special_ids),
        "max_predictions": inputs.masking.max_predictions,
    }


def set_manifests(inputs: InputPlan) -> dict[str, Any]:
    """{--shards path: its manifest as the run read it when it started}."""
    return {s.path: s.manifest for s in inputs.mixture.sets}


@contextlib.contextmanager
def stopped_if_shards_changed(inputs: InputPlan, step: int) -> Iterator[None]:
    """A failure while reading the shards (a file gone, truncated or rewritten) that comes from a set being
    written again under the run ends it in one line saying so (run_dir.changed_shard_set)."""
    try:
        yield
    except Exception as e:
        changed = changed_shard_set(set_manifests(inputs), step=step)
        if changed is None:
            raise
        raise changed from e


def keep_tokenizer(run: RunDir, tokenizer: TokenizerSource | None) -> None:
    if tokenizer is not None:
        run.copy_tokenizer(tokenizer)
    else:
        log.warning(
            "No tokenizer in the shard set and no --tokenizer: `lmshards export` will need --tokenizer."
        )


def log_eval(record: dict[str, Any], what: str) -> None:
    log.info(
        "%s at step %d (%d batches read): loss %.4f  perplexity %s  accuracy %.3f",
        what,
        record["step"],
        record["eval_batches"],
        record["eval_loss"],
        evaluation.format_perplexity(record["eval_perplexity"]),
        record["eval_accuracy"],
    )


def check_eval(record: dict[str, Any]) -> None:
    """Raises DivergenceError when an evaluation's loss is not finite (the weights gave NaN or inf)."""
    if not math.isfinite(record["eval_loss"]):
        raise diverged(record["step"], f"eval loss {record['eval_loss']}")


def _never() -> bool:
    return False


@dataclasses.dataclass
class Loop:
    """The state of one command's training: where it is, the current logging window, the times."""

    config: TrainConfig
    backend: Backend
    inputs: InputPlan
    metrics: MetricsLog
    schedule: WarmupDecay
    total_steps: int
    start_step: int
    topology: Topology
    step: int = 0
    saved_step: int = 0
    train_time: float = 0.0
    window_losses: list[float] = dataclasses.field(default_factory=list)
    window_start: int = 0
    window_time: float = 0.0
    started: float = dataclasses.field(default_factory=time.monotonic)
    # Evaluate before the first step too: a run started from --init_from shows the loss it starts at.
    eval_at_start: bool = False

    def __post_init__(self):
        self.step = self.saved_step = self.window_start = self.start_step

    @property
    def has_eval(self) -> bool:
        return bool(self.inputs.eval_sets)

    def is_eval_step(self, step: int) -> bool:
        return self.has_eval and (step % self.config.eval_every == 0 or step == self.total_steps)

    def evaluate(
        self, step: int, *, limit: int | None, stop: Callable[[], bool] = _never
    ) -> dict[str, Any] | None:
        """Each set's validation split (its first `limit` global batches; None: all), then their weighted mean.

        The same batches with the same masks every time, so the same weights give the same numbers.
        None when stop() turned True part-way.
        """
        expected = sum(self.inputs.eval_batches(s, limit) for s in self.inputs.eval_sets)
        read, progress, sums = 0, Pacer(EVAL_PROGRESS_SECONDS), {}
        for shard_set in self.inputs.eval_sets:
            totals = evaluation.ZERO
            with (
                stopped_if_shards_changed(self.inputs, step),
                self.inputs.readable_errors(shard_set.files(VALIDATION_SPLIT).paths),
            ):
                for batch in self.backend.eval_batches(self.inputs, shard_set, limit):
                    totals, read = totals + batch, read + 1
                    if stop():
                        return None
                    if progress.due():
                        log.info("eval at step %d: %d/%d batches read", step, read, expected)
            sums[shard_set.name] = totals
        weights = {s.name: s.weight for s in self.inputs.mixture.sets}
        return {**evaluation.eval_record(step, sums, weights), "eval_batches": read}

    def periodic_eval(self, step: int) -> None:
        record = self.evaluate(step, limit=self.config.eval_batches)  # never stopped part-way
        if record is not None:
            check_eval(record)
            self.metrics.add(record)
            log_eval(record, "eval")

    def run(self, preemption: PreemptionFlag) -> None:
        """Trains to total_steps or until preempted; host calls end on every logging, eval and checkpoint step."""
        config = self.config
        # A run stopped between its checkpoint and its evaluation at that step evaluates first.
        if (
            (self.start_step or self.eval_at_start)
            and not preemption.raised
            and self.is_eval_step(self.start_step)
            and self.metrics.at(self.start_step, "eval_loss") is None
        ):
            self.periodic_eval(self.start_step)
        while self.step < self.total_steps and not preemption.raised:
            first = self.step == self.start_step
            # The first call runs one step, so its line (tracing and compiling included) comes at once.
            n = (
                1
                if first
                else steps_in_next_call(
                    self.step,
                    stop=self.total_steps,
                    steps_per_execution=self.topology.steps_per_execution,
                    every=(config.log_every, config.checkpoint_every, config.eval_every),
                )
            )
            seconds = self.train_call(n)
            if first:
                self.log_first_step(seconds)
            if self.step % config.log_every == 0 or self.step == self.total_steps:
                self.log_window()
            if (
                self.step % config.checkpoint_every == 0
                or self.step == self.total_steps
                or preemption.raised
            ):
                self.save()
            if self.is_eval_step(self.step) and not preemption.raised:
                self.periodic_eval(self.step)

    def train_call(self, n: int) -> float:
        """Runs n steps in one backend call; returns its seconds."""
        t0 = time.perf_counter()
        with (
            stopped_if_shards_changed(self.inputs, self.step),
            self.inputs.readable_errors(self.inputs.train_paths),
        ):
            losses = self.backend.train_steps(n)
        dt = time.perf_counter() - t0
        self.step += n
        self.train_time += dt
        self.window_losses.extend(float(x) for x in losses)
        self.window_time += dt
        bad = first_non_finite(float(x) for x in losses)
        if bad is not None:
            raise diverged(self.step, f"loss {bad}")
        return dt

    def log_first_step(self, seconds: float) -> None:
        log.info(
            "step %d/%d  loss %.4f  epoch %.3f  first step in %.1f s (tracing and compiling included)",
            self.step,
            self.total_steps,
            self.window_losses[-1],
            self.inputs.epoch(self.step),
            seconds,
        )

    def log_window(self) -> None:
        step, steps_done = self.step, self.step - self.window_start
        tokens_per_step = self.inputs.global_batch * self.inputs.mixture.manifest.seq_len
        sequences = self.inputs.sequences_read(step)
        self.metrics.add(
            {
                "step": step,
                "loss": sum(self.window_losses) / len(self.window_losses),
                "learning_rate": float(self.schedule(step)),
                "sequences_per_second": steps_done * self.inputs.global_batch / self.window_time,
                "tokens_per_second": steps_done * tokens_per_step / self.window_time,
                "step_time_s": self.window_time / steps_done,
                "epoch": self.inputs.epoch(step),
                **{f"sequences/{s.name}": n for s, n in zip(self.inputs.mixture.sets, sequences)},
            }
        )
        r = self.metrics.records[-1]
        elapsed = time.monotonic() - self.started
        eta = elapsed / (step - self.start_step) * (self.total_steps - step)
        log.info(
            "step %d/%d  loss %.4f  epoch %.3f  lr %.2e  %.0f seq/s  %.1f ms/step  elapsed %s  eta %s",
            step,
            self.total_steps,
            r["loss"],
            r["epoch"],
            r["learning_rate"],
            r["sequences_per_second"],
            1000 * r["step_time_s"],
            format_duration(elapsed),
            format_duration(eta),
        )
        self.window_losses, self.window_start, self.window_time = [], step, 0.0

    def save(self) -> None:
        """A checkpoint of finite weights only: the newest checkpoint of a diverged run is its last good one."""
        bad, total = self.backend.non_finite_weights()
        if bad:
            raise diverged(self.step, describe_non_finite(bad, total))
        # Steps since the last checkpoint may have read a set written again under the run: not kept.
        changed = changed_shard_set(set_manifests(self.inputs), step=self.step)
        if changed is not None:
            raise changed
        self.backend.save(self.step)
        self.saved_step = self.step

    def preempted(self) -> dict[str, Any]:
        """Saves the steps trained since the last checkpoint; the answer of a preempted command."""
        if self.saved_step != self.step:
            self.save()
        log.warning("preempted at step %d; rerun the same command to resume", self.step)
        return {"preempted": self.step}

    def final_eval(self, preemption: PreemptionFlag) -> dict[str, Any] | None:
        """One pass over the whole validation split at the last step (--final_eval full); None otherwise or when
        preempted part-way."""
        if not (
            self.step == self.total_steps
            and self.has_eval
            and self.config.final_eval == FINAL_EVAL_FULL
            and not preemption.raised
        ):
            return None
        # A run stopped after its final evaluation but before its summary evaluates again, in one row.
        self.metrics.drop(lambda r: not evaluation.is_final_eval(r))
        periodic = self.metrics.at(self.step, "eval_loss")
        if periodic is not None and self.periodic_eval_reads_everything():
            log.info(
                "Final evaluation: the evaluation at step %d already read the whole validation split; "
                "not repeated.",
                self.step,
            )
            return periodic
        log.info("Final evaluation: one pass over the whole validation split.")
        record = self.evaluate(self.step, limit=None, stop=lambda: preemption.raised)
        if record is not None:
            check_eval(record)
        return record

    def periodic_eval_reads_everything(self) -> bool:
        """True when --eval_batches covers every set's validation split: a full pass reads the same batches."""
        return all(
            self.inputs.eval_batches(s, self.config.eval_batches)
            == self.inputs.eval_batches(s, None)
            for s in self.inputs.eval_sets
        )

    def summary(
        self, final_record: dict[str, Any] | None, run_config: dict[str, Any]
    ) -> dict[str, Any]:
        """run_summary.json: the last train loss, the reported evaluation, speed, and per-set progress."""
        if final_record is not None:
            log_eval(final_record, "final eval (whole validation split)")
            self.metrics.add(evaluation.final_eval_record(final_record))
        eval_record = final_record or self.metrics.last("eval_loss")
        last_train = self.metrics.last("loss") or {}
        trained, inputs = self.step - self.start_step, self.inputs
        tokens_per_step = inputs.global_batch * inputs.mixture.manifest.seq_len
        progress = inputs.set_progress(self.step)
        for shard_set, p in zip(inputs.mixture.sets, progress):
            if p.repeats:
                log.info(
                    "Shard set %s ran out and started over %d time(s) (%.2f passes).",
                    shard_set.name,
                    p.repeats,
                    p.passes,
                )
        return {
            "global_step": self.step,
            "train_loss": last_train.get("loss"),
            "eval_loss": eval_record and eval_record["eval_loss"],
            "eval_perplexity": eval_record and eval_record["eval_perplexity"],
            "eval_accuracy": eval_record and eval_record["eval_accuracy"],
            "eval_masked_tokens": eval_record and eval_record["eval_masked_tokens"],
            # global batches the reported evaluation read
            "eval_batches": eval_record and eval_record["eval_batches"],
            "final_eval": self.config.final_eval if final_record is not None else None,
            "sequences_per_second": trained * inputs.global_batch / self.train_time
            if trained
            else None,
            "tokens_per_second": trained * tokens_per_step / self.train_time if trained else None,
            "steps_this_run": trained,  # steps this command trained (after a resume, fewer than global_step)
            "global_batch": inputs.global_batch,
            "steps_per_epoch": inputs.steps_per_epoch,
            # Per shard set: its normalised weight, the sequences it gave, and how often it ran out and started over.
            "sets": {
                s.name: {
                    "path": s.path,
                    "weight": s.weight,
                    "train_records": s.manifest.split(TRAIN_SPLIT).records,
                    "eval_loss": eval_record and eval_record.get(f"eval_loss/{s.name}"),
                    **dataclasses.asdict(p),
                }
                for s, p in zip(inputs.mixture.sets, progress)
            },
            **self.topology.devices(),  # strategy (tpu | mirrored | cpu), replicas, device_kind
            "precision": self.topology.precision,
            "steps_per_execution": self.topology.steps_per_execution,
            "elapsed_s": time.monotonic()
            - self.started,  # this command's training and evaluation time
            "config": run_config,
        }


def train(config: TrainConfig, checked: Preflight | None = None) -> dict[str, Any]:
    """Trains (or resumes) the run in config.output. Returns the run summary, or {"preempted": step}.

    checked: preflight(config), when the caller has run it (the CLI does, before TensorFlow loads).
    A SIGTERM or SIGINT at any moment ends it at the next step boundary (lmshards.train.loop.preemption).
    """
    checked = checked or preflight(config)
    if checked.finished is not None:
        return checked.finished
    with PreemptionFlag.current() as preemption:
        run, model_config = RunDir(config.output), checked.model_config
        # A recipe the shards cannot take fails before any device is touched.
        masking = run_masking(config, checked.mixture, checked.tokenizer)

        # --- devices: the backend's strategy or mesh, and what `auto` precision and steps per call mean on them
        backend = load_backend(config.backend)
        topology = backend.connect(config)
        log_topology(config.backend, topology)
        # --init_from's weights: a transformers model's were read in preflight; a run's checkpoint is restored
        # on the host now, after connect (a TPU slice's hosts join, and TensorFlow meets its TPU, before any
        # array exists) and before the run's model is built.
        init_weights = None
        if checked.init is not None:
            init_weights = load_init_weights(checked.init, backend=config.backend)
            check_same_source(checked.previous_run, init_weights)
        check_precision_change(checked.previous_run, topology.precision)
        inputs = InputPlan.for_run(
            config,
            checked.mixture,
            masking=masking,
            family=model_config.family,
            replicas=topology.replicas,
            num_pipelines=topology.num_input_pipelines,
        )
        total_steps = inputs.total_steps(steps=config.steps, epochs=config.epochs)
        keep_tokenizer(run, checked.tokenizer)
        log.info(
            "global batch %d, %d steps per epoch, %d steps in all; precision %s, up to %d steps per host call.",
            inputs.global_batch,
            inputs.steps_per_epoch,
            total_steps,
            topology.precision,
            topology.steps_per_execution,
        )

        # --- model, optimizer and the newest checkpoint that restores; the schedule this command trains with
        schedule = first_schedule(config, total_steps, checked.previous_run)
        spec = BuildSpec.for_run(
            config,
            model_config,
            schedule=schedule,
            checkpoint_dir=run.checkpoints,
            packed=checked.mixture.manifest.packed,
        )
        restored = build_model(backend, spec, init_weights)
        if restored.step:  # a run continues exactly only on the same global batch and hosts
            inputs.check_resume((checked.previous_run or {}).get("resolved"))
        if restored.path:
            log.info("Resumed from %s at step %d.", restored.path, restored.step)
        elif init_weights is not None:
            log.info(
                "Starting from the weights of %s (%s, %s)%s.",
                config.init_from,
                init_weights.read_from,
                init_weights.fingerprint,
                "" if init_weights.has_head else "; the masked-LM head starts from random weights",
            )
        extended = continue_schedule(
            schedule,
            total_steps=total_steps,
            start_step=restored.step,
            extend=config.extend,
            new_peak=new_peak(config, checked.previous_run),
            warmup_steps=config.warmup_steps,
        )
        if extended is not schedule:
            schedule = extended
            backend.set_schedule(schedule)
            run.forget_summary()  # the run is no longer finished
        run_config = run_config_record(config, inputs, topology, model_config, schedule=schedule)
        if init_weights is not None and checked.init is not None:
            run_config["init_from"] = init_record(checked.init, init_weights)
        elif checked.previous_run and "init_from" in checked.previous_run:
            run_config["init_from"] = checked.previous_run["init_from"]
        run.write_config(run_config)

        # --- the loop
        metrics = run.metrics_log(resume_step=restored.step, sink=TensorBoardWriter(run.path).write)
        backend.start_training(inputs, restored.step)
        loop = Loop(
            config, backend, inputs, metrics, schedule, total_steps, restored.step, topology
        )
        loop.eval_at_start = config.init_from is not None
        loop.run(preemption)
        final_record = loop.final_eval(preemption)
        if preemption.raised:
            return loop.preempted()
        summary = loop.summary(final_record, run_config)
        run.write_summary(summary)
        return summary
