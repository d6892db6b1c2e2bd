"""The training loop: strategy, model, optimizer, resume, train/eval, logs, summary.

Read top to bottom: `train(config)` is the whole story; what can be checked without TensorFlow was
checked before it loaded (train.preflight). Everything a resumed run needs is a function of the
global step (data position, masking seeds, learning rate) or lives in the checkpoint (weights,
optimizer slots and iterations, dropout seed states), so rerunning the same command continues
exactly where the last checkpoint left off. The learning-rate schedule is fixed by the run's first
command and kept in run_config.json, with any --extend segments, so every later command rebuilds it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import keras
import tensorflow as tf

from plumbing import fs
from plumbing.errors import LmshardsError
from schemas.constants import TRAIN_SPLIT, VALIDATION_SPLIT
from schemas.manifest import Manifest, manifest_path
from schemas.version import __version__
from train import data, mixture
from train.checkpoint import RunCheckpoints
from train.config import (
    CHECKPOINTS_DIR,
    FINAL_EVAL_FULL,
    METRICS_JSONL,
    RUN_CONFIG_JSON,
    RUN_SUMMARY_JSON,
    ModelConfig,
    TrainConfig,
)
from train.devices import (
    MIXED_FLOAT16,
    STRATEGY_TPU,
    check_tpu_batch,
    detect_tpu_signals,
    steps_in_next_call,
)
from train.families import get_family
from train.model import build_masked_lm, checkpoint_root
from train.optim import WarmupDecay, make_optimizer, warmup_steps_for
from train.preflight import Preflight, preflight
from train.run_dir import forget_summary
from train.strategy import (
    device_defaults,
    make_strategy,
    num_input_pipelines,
    strategy_summary,
    uses_gpus,
)
from train.tensorboard import TensorBoardWriter

log = logging.getLogger(__name__)

# Seconds between progress lines of an evaluation.
EVAL_PROGRESS_SECONDS = 30.0
# Keys of the end-of-training pass over the whole validation split start with this (eval_loss -> final_eval_loss).
FINAL_EVAL_PREFIX = "final_"


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes derived from the manifest and the strategy before any compute."""

    replicas: int
    num_pipelines: int
    global_batch: int
    steps_per_epoch: int
    total_steps: int
    pass_records: tuple[int, ...]  # per shard set: its records in one pass, per input pipeline

    @property
    def replicas_per_pipeline(self) -> int:
        return self.replicas // self.num_pipelines


def plan_run(config: TrainConfig, mix: mixture.Mixture, strategy: tf.distribute.Strategy) -> Plan:
    """Sizes of the run; an epoch is one pass over every set's records, drawn by weight (train.mixture)."""
    replicas = strategy.num_replicas_in_sync
    num_pipelines = num_input_pipelines(strategy)
    unit = config.per_replica_batch * (
        replicas // num_pipelines
    )  # sequences per step per input pipeline
    passes = mixture.pass_records(mix, num_pipelines=num_pipelines, unit=unit)
    steps_per_epoch = mixture.steps_per_epoch(passes, unit=unit)
    if config.steps is not None:
        total = config.steps
    elif config.epochs is not None:
        total = math.ceil(config.epochs * steps_per_epoch)
    else:
        raise LmshardsError("Pass --steps N or --epochs E.")
    return Plan(
        replicas, num_pipelines, config.per_replica_batch * replicas, steps_per_epoch, total, passes
    )


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


def first_schedule(
    config: TrainConfig, plan: Plan, previous_run: dict[str, Any] | None
) -> WarmupDecay:
    """The run's learning-rate schedule: the one run_config.json keeps, or a new one for a new run."""
    kept = (previous_run or {}).get("schedule")
    if kept:
        return WarmupDecay.from_config(kept)
    return WarmupDecay(
        peak=config.learning_rate,
        warmup_steps=warmup_steps_for(plan.total_steps, config.warmup_steps),
        total_steps=plan.total_steps,
        decay=config.lr_schedule,
    )


def continue_schedule(
    schedule: WarmupDecay, *, total_steps: int, start_step: int, extend: bool
) -> WarmupDecay:
    """The schedule this command trains with: the run's, or with --extend the run's continued to total_steps.

    Raises:
      LmshardsError: total_steps differs from where the run's schedule ends and --extend is not given;
        with --extend, total_steps is not past that end, or the rate has already fallen to 0.
    """
    end = schedule.end_step
    if total_steps == end:
        return schedule
    if not extend:
        raise LmshardsError(
            f"This command trains {total_steps} steps in all but the run's schedule, fixed by its first command, ends "
            f"at step {end}. Rerun with the run's --steps/--epochs and --per_replica_batch, or pass --extend to "
            f"continue it to step {total_steps}."
        )
    if total_steps <= end:
        raise LmshardsError(
            f"--extend needs more steps than the run's schedule has ({end}); this command asks for {total_steps}."
        )
    if float(schedule(start_step)) <= 0.0:
        raise LmshardsError(
            f"--extend continues from the current learning rate, and at step {start_step} this run's rate has already "
            "fallen to 0: the added steps would not train. Extend a run before its schedule ends (stop it with "
            "SIGTERM or Ctrl-C, then rerun with --extend), or start a new run."
        )
    extended = schedule.extended(from_step=start_step, to_step=total_steps)
    log.info(
        "--extend: from step %d the learning rate falls linearly from %.3e to 0 at step %d.",
        start_step,
        float(schedule(start_step)),
        total_steps,
    )
    return extended


def write_run_config(
    config: TrainConfig,
    manifest: Manifest,
    model_config: ModelConfig,
    masking: data.MaskingSpec,
    *,
    schedule: WarmupDecay,
    resolved: dict[str, Any],
) -> dict:
    """Writes RUN_DIR/run_config.json: the options as given ("train"), what they resolved to on this machine
    ("resolved"), and the learning-rate schedule ("schedule") every later command of the run keeps."""
    run_config = {
        "tool_version": __version__,
        "train": config.to_dict(),
        "resolved": resolved,
        "schedule": schedule.get_config(),
        "model": model_config.to_dict(),
        "seq_len": manifest.seq_len,
        "special_token_ids": dict(manifest.tokenizer.special_token_ids),
        "all_special_ids": list(manifest.tokenizer.all_special_ids),
        "tokenizer_fingerprint": manifest.tokenizer.fingerprint,
        "max_predictions": masking.max_predictions,
    }
    fs.write_text_atomic(
        fs.join(config.output, RUN_CONFIG_JSON),
        json.dumps(run_config, indent=2, sort_keys=True) + "\n",
    )
    return run_config


@contextlib.contextmanager
def readable_input_errors(paths: Sequence[str], mix: mixture.Mixture) -> Iterator[None]:
    """Turns the input pipeline's failures into LmshardsError: a corrupt shard (found among paths and named),
    or a token id the manifests' vocabulary does not have."""
    try:
        yield
    except tf.errors.DataLossError as e:
        raise data.corrupt_shard_error(tuple(paths), e) from e
    except tf.errors.InvalidArgumentError as e:
        if data.ID_OUT_OF_VOCABULARY not in (e.message or ""):
            raise
        manifests = ", ".join(repr(manifest_path(s.path)) for s in mix.sets)
        raise LmshardsError(
            f"The shards hold token ids of {mix.manifest.tokenizer.vocab_size} or more, but {manifests} says the "
            f"tokenizer has vocab_size {mix.manifest.tokenizer.vocab_size}: the manifest does not describe these "
            "shards. Re-run `lmshards preprocess` (`lmshards inspect --verify` checks the ids against the manifest)."
        ) from e


def format_duration(seconds: float) -> str:
    """3725.2 -> '1:02:05'."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class Every:
    """due() is True at most once per `seconds`: paces progress lines of long work."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.last = time.monotonic()

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.last < self.seconds:
            return False
        self.last = now
        return True


def final_eval_record(record: dict[str, Any]) -> dict[str, Any]:
    """An evaluation record under the end-of-training names: eval_loss -> final_eval_loss, ..."""
    return {
        key if key == "step" else FINAL_EVAL_PREFIX + key: value for key, value in record.items()
    }


def masked_lm_sums(
    model: keras.Model, batch: dict[str, tf.Tensor], *, training: bool
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(summed cross-entropy over predicted positions, their count, correct predictions) for one replica batch."""
    inputs = {name: batch[name] for name in model.input}
    logits = tf.cast(model(inputs, training=training), tf.float32)
    weights = batch["mask_weights"]
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch["mask_ids"], logits=logits)
    correct = tf.cast(
        tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), batch["mask_ids"]), tf.float32
    )
    # where, not a product: a row of eval padding may give non-finite logits, and 0 * nan is nan.
    ce = tf.where(weights > 0, ce, 0.0)
    return tf.reduce_sum(ce * weights), tf.reduce_sum(weights), tf.reduce_sum(correct * weights)


class MetricsLog:
    """RUN_DIR/metrics.jsonl (one object per logging window and per eval) plus TensorBoard scalars."""

    def __init__(self, run_dir: str, *, resume_step: int):
        self.path = fs.join(run_dir, METRICS_JSONL)
        # Records past the restored step belong to work the checkpoint lost; that work is redone.
        records = self._read()
        self.records = [r for r in records if r["step"] <= resume_step]
        if len(self.records) < len(records):
            log.warning(
                "%s holds %d records past step %d, where training resumes; they are replaced as those steps "
                "are trained again.",
                self.path,
                len(records) - len(self.records),
                resume_step,
            )
        self.writer = TensorBoardWriter(run_dir)

    def _read(self) -> list[dict]:
        if not fs.exists(self.path):
            return []
        return [json.loads(line) for line in fs.read_text(self.path).splitlines() if line.strip()]

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        fs.write_text_atomic(
            self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records)
        )
        self.writer.write(record)

    def last(self, key: str) -> dict | None:
        return next((r for r in reversed(self.records) if key in r), None)


class PreemptionFlag:
    """Set by SIGTERM or SIGINT; the loop finishes the running steps, saves and returns. A second SIGINT stops at once."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.raised = False
        self._previous: dict[int, Any] = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def _handle(self, signum, frame):
        if self.raised and signum == signal.SIGINT:
            raise KeyboardInterrupt
        log.warning(
            "%s: finishing the current step, then saving a checkpoint (Ctrl-C again stops at once).",
            signal.Signals(signum).name,
        )
        self.raised = True

    def __exit__(self, *exc):
        for s, handler in self._previous.items():
            signal.signal(s, handler)


def train(config: TrainConfig, checked: Preflight | None = None) -> dict[str, Any]:
    """Trains (or resumes) the run in config.output. Returns the run summary, or {"preempted": step}.

    checked: preflight(config), when the caller has run it (the CLI does, before TensorFlow loads).
    """
    checked = checked or preflight(config)
    if checked.finished is not None:
        return checked.finished
    mix, tokenizer, model_config = checked.mixture, checked.tokenizer, checked.model_config
    manifest = mix.manifest
    masking = data.masking_spec(
        manifest, recipe=config.masking, mlm_probability=config.mlm_probability, tokenizer=tokenizer
    )
    eval_sets = [s for s in mix.sets if s.has_validation]
    has_eval = bool(eval_sets)

    # --- devices: the strategy, and what `auto` precision and steps per host call mean on them
    strategy = make_strategy(
        config.strategy, tpu=config.tpu, signals=detect_tpu_signals(tpu_flag=config.tpu)
    )
    devices = strategy_summary(strategy)
    log.info(
        "strategy %s, %d replicas, device kind %s",
        devices["strategy"],
        devices["replicas"],
        devices["device_kind"],
    )
    precision, steps_per_execution = device_defaults(
        strategy, precision=config.precision, steps_per_execution=config.steps_per_execution
    )
    check_precision_change(checked.previous_run, precision)
    plan = plan_run(config, mix, strategy)
    tpu_batch_warning = (
        check_tpu_batch(plan.global_batch, plan.replicas)
        if devices["strategy"] == STRATEGY_TPU
        else None
    )
    if tpu_batch_warning:
        log.warning("%s", tpu_batch_warning)
    if tokenizer is not None:
        mixture.copy_tokenizer(tokenizer, config.output)
    else:
        log.warning(
            "No tokenizer in the shard set and no --tokenizer: `lmshards export` will need --tokenizer."
        )
    log.info(
        "global batch %d, %d steps per epoch, %d steps in all; precision %s, up to %d steps per host call.",
        plan.global_batch,
        plan.steps_per_epoch,
        plan.total_steps,
        precision,
        steps_per_execution,
    )

    # --- model, optimizer and checkpoint, created under the strategy so variables are mirrored
    keras.utils.set_random_seed(config.seed)  # weight initialisation and dropout
    keras.mixed_precision.set_dtype_policy(precision)
    with strategy.scope():
        model = build_masked_lm(model_config)
        schedule = first_schedule(config, plan, checked.previous_run)
        optimizer = make_optimizer(
            schedule=schedule,
            weight_decay=config.weight_decay,
            clip_norm=config.clip_norm,
            loss_scaling=precision == MIXED_FLOAT16,
        )
        optimizer.build(model.trainable_variables)
        checkpoints = RunCheckpoints(
            checkpoint_root(model, optimizer=optimizer),
            fs.join(config.output, CHECKPOINTS_DIR),
            keep=config.keep,
        )
        restored = checkpoints.restore_latest()
    start_step = int(optimizer.iterations.numpy())
    if restored:
        log.info("Resumed from %s at step %d.", restored, start_step)
    extended = continue_schedule(
        schedule, total_steps=plan.total_steps, start_step=start_step, extend=config.extend
    )
    if extended is not schedule:
        schedule = optimizer.learning_rate = extended
        forget_summary(config.output)  # the run is no longer finished
    resolved = {
        **devices,
        "precision": precision,
        "steps_per_execution": steps_per_execution,
        "global_batch": plan.global_batch,
        "steps_per_epoch": plan.steps_per_epoch,
    }
    run_config = write_run_config(
        config, manifest, model_config, masking, schedule=schedule, resolved=resolved
    )

    # --- input pipelines: one per worker host, each over its own files of every set, starting where the checkpoint stopped
    train_paths = tuple(p for s in mix.sets for p in s.files(TRAIN_SPLIT).paths)
    block_counts = mix.block_counts()
    with_segments = get_family(model_config.family).uses_segment_ids

    def train_input(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        streams = mixture.pipeline_streams(
            mix,
            plan.pass_records,
            num_pipelines=ctx.num_input_pipelines,
            pipeline_id=ctx.input_pipeline_id,
        )
        return data.train_dataset(
            streams,
            block_counts=block_counts,
            features=manifest.features(),
            batch_size=config.per_replica_batch,
            shuffle_buffer=config.shuffle_buffer,
            seed=config.seed,
            start_step=start_step * plan.replicas_per_pipeline,
            masking=masking,
            with_segment_ids=with_segments,
            pipeline_id=ctx.input_pipeline_id,
        )

    def eval_input(shard_set: mixture.ShardSet, limit: int | None):
        """The input function of one set's validation split: its first `limit` global batches (None: all of them)."""

        def input_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
            files = mixture.pipeline_files(
                shard_set.files(VALIDATION_SPLIT),
                num_pipelines=ctx.num_input_pipelines,
                pipeline_id=ctx.input_pipeline_id,
            )
            max_batches = limit * plan.replicas_per_pipeline if limit else None
            return data.eval_dataset(
                files,
                features=manifest.features(),
                batch_size=config.per_replica_batch,
                masking=masking,
                with_segment_ids=with_segments,
                max_batches=max_batches,
                batches_multiple_of=plan.replicas_per_pipeline,
            )

        return input_fn

    def eval_batches(
        shard_set: mixture.ShardSet, limit: int | None
    ) -> int:  # global batches eval_input yields
        files = mixture.pipeline_files(
            shard_set.files(VALIDATION_SPLIT), num_pipelines=plan.num_pipelines, pipeline_id=0
        )
        rpp = plan.replicas_per_pipeline
        return (
            data.eval_batch_count(
                files.total_records,
                batch_size=config.per_replica_batch,
                max_batches=limit * rpp if limit else None,
                batches_multiple_of=rpp,
            )
            // rpp
        )

    def sequences_per_set(at_step: int) -> tuple[int, ...]:
        return data.sequences_read(
            block_counts,
            seed=config.seed,
            num_pipelines=plan.num_pipelines,
            examples_per_pipeline=at_step * plan.replicas_per_pipeline * config.per_replica_batch,
        )

    # --- step functions
    def replica_train_step(batch):
        with tf.GradientTape() as tape:
            loss_sum, weight_sum, _ = masked_lm_sums(model, batch, training=True)
            # Dividing by the global count makes the replicas' summed gradients the global mean.
            global_weight = tf.distribute.get_replica_context().all_reduce("sum", weight_sum)
            loss = loss_sum / tf.maximum(global_weight, 1.0)
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def replica_eval_step(batch):
        return masked_lm_sums(model, batch, training=False)

    if uses_gpus(strategy):  # TPUs compile every step with XLA anyway
        replica_train_step = tf.function(replica_train_step, jit_compile=True)

    @tf.function
    def train_steps(iterator, n):  # n steps in one call (--steps_per_execution) -> losses [n]
        losses = tf.TensorArray(tf.float32, size=n)
        for i in tf.range(n):
            per_replica = strategy.run(replica_train_step, args=(next(iterator),))
            losses = losses.write(i, strategy.reduce("sum", per_replica, axis=None))
        return losses.stack()

    @tf.function
    def eval_step(batch):
        sums = strategy.run(replica_eval_step, args=(batch,))
        return [strategy.reduce("sum", s, axis=None) for s in sums]

    def evaluate(
        step: int, *, limit: int | None, stop: Callable[[], bool] = lambda: False
    ) -> dict[str, Any] | None:
        """Each set's validation split (its first `limit` global batches; None: all), then their weighted mean.

        The same batches with the same masks every time, so the same weights give the same numbers.
        None when stop() turned True part-way.
        """
        expected, read, progress = (
            sum(eval_batches(s, limit) for s in eval_sets),
            0,
            Every(EVAL_PROGRESS_SECONDS),
        )
        sums = {}
        for shard_set in eval_sets:
            totals = [0.0, 0.0, 0.0]
            with readable_input_errors(shard_set.files(VALIDATION_SPLIT).paths, mix):
                for batch in strategy.distribute_datasets_from_function(
                    eval_input(shard_set, limit)
                ):
                    totals = [t + float(v) for t, v in zip(totals, eval_step(batch))]
                    read += 1
                    if stop():
                        return None
                    if progress.due():
                        log.info("eval at step %d: %d/%d batches read", step, read, expected)
            sums[shard_set.name] = mixture.EvalSums(*totals)
        return {**mixture.eval_record(step, sums, mix), "eval_batches": read}

    def log_eval(record: dict[str, Any], what: str) -> None:
        log.info(
            "%s at step %d (%d batches read): loss %.4f  perplexity %.2f  accuracy %.3f",
            what,
            record["step"],
            record["eval_batches"],
            record["eval_loss"],
            record["eval_perplexity"],
            record["eval_accuracy"],
        )

    def is_eval_step(at_step: int) -> bool:
        return has_eval and (at_step % config.eval_every == 0 or at_step == plan.total_steps)

    # --- the loop: host calls end on every logging, eval and checkpoint step
    metrics = MetricsLog(config.output, resume_step=start_step)
    iterator = iter(strategy.distribute_datasets_from_function(train_input))
    tokens_per_step = plan.global_batch * manifest.seq_len
    step, window_losses, window_start, window_time = start_step, [], start_step, 0.0
    train_time, saved_step, started = 0.0, start_step, time.monotonic()

    with PreemptionFlag() as preemption:
        # A run stopped between its checkpoint and its evaluation at that step evaluates first.
        if (
            start_step
            and is_eval_step(start_step)
            and not any(r["step"] == start_step and "eval_loss" in r for r in metrics.records)
        ):
            metrics.add(evaluate(start_step, limit=config.eval_batches))
            log_eval(metrics.records[-1], "eval")
        while step < plan.total_steps and not preemption.raised:
            n = steps_in_next_call(
                step,
                stop=plan.total_steps,
                steps_per_execution=steps_per_execution,
                every=(config.log_every, config.checkpoint_every, config.eval_every),
            )
            t0 = time.perf_counter()
            with readable_input_errors(train_paths, mix):
                losses = train_steps(iterator, tf.constant(n)).numpy()
            dt = time.perf_counter() - t0
            step += n
            train_time += dt
            window_losses.extend(float(x) for x in losses)
            window_time += dt
            if not all(math.isfinite(x) for x in losses):
                raise LmshardsError(
                    f"Training diverged at step {step} (loss {losses[-1]}); lower --learning_rate or set --clip_norm."
                )
            if step % config.log_every == 0 or step == plan.total_steps:
                steps_done = step - window_start
                metrics.add(
                    {
                        "step": step,
                        "loss": sum(window_losses) / len(window_losses),
                        "learning_rate": float(schedule(step)),
                        "sequences_per_second": steps_done * plan.global_batch / window_time,
                        "tokens_per_second": steps_done * tokens_per_step / window_time,
                        "step_time_s": window_time / steps_done,
                        **{
                            f"sequences/{s.name}": n
                            for s, n in zip(mix.sets, sequences_per_set(step))
                        },
                    }
                )
                r = metrics.records[-1]
                elapsed = time.monotonic() - started
                eta = elapsed / (step - start_step) * (plan.total_steps - step)
                log.info(
                    "step %d/%d  loss %.4f  lr %.2e  %.0f seq/s  %.1f ms/step  elapsed %s  eta %s",
                    step,
                    plan.total_steps,
                    r["loss"],
                    r["learning_rate"],
                    r["sequences_per_second"],
                    1000 * r["step_time_s"],
                    format_duration(elapsed),
                    format_duration(eta),
                )
                window_losses, window_start, window_time = [], step, 0.0
            if step % config.checkpoint_every == 0 or step == plan.total_steps or preemption.raised:
                checkpoints.save(step)
                saved_step = step
            if is_eval_step(step) and not preemption.raised:
                metrics.add(evaluate(step, limit=config.eval_batches))
                log_eval(metrics.records[-1], "eval")

        final_record = None
        if (
            step == plan.total_steps
            and has_eval
            and config.final_eval == FINAL_EVAL_FULL
            and not preemption.raised
        ):
            log.info("Final evaluation: one pass over the whole validation split.")
            final_record = evaluate(step, limit=None, stop=lambda: preemption.raised)
            # A run stopped after its final evaluation but before its summary evaluates again, in one row.
            metrics.records = [
                r for r in metrics.records if FINAL_EVAL_PREFIX + "eval_loss" not in r
            ]
    if preemption.raised:
        if saved_step != step:
            checkpoints.save(step)
        log.warning("preempted at step %d; rerun the same command to resume", step)
        return {"preempted": step}
    if final_record is not None:
        log_eval(final_record, "final eval (whole validation split)")
        metrics.add(final_eval_record(final_record))
    eval_record = final_record or metrics.last("eval_loss")
    last_train = metrics.last("loss") or {}
    trained = step - start_step
    progress = mixture.set_progress(
        sequences_per_set(step), plan.pass_records, num_pipelines=plan.num_pipelines
    )
    for shard_set, p in zip(mix.sets, progress):
        if p.repeats:
            log.info(
                "Shard set %s ran out and started over %d time(s) (%.2f passes).",
                shard_set.name,
                p.repeats,
                p.passes,
            )
    summary = {
        "global_step": step,
        "train_loss": last_train.get("loss"),
        "eval_loss": eval_record and eval_record["eval_loss"],
        "eval_perplexity": eval_record and eval_record["eval_perplexity"],
        "eval_accuracy": eval_record and eval_record["eval_accuracy"],
        "eval_masked_tokens": eval_record and eval_record["eval_masked_tokens"],
        "eval_batches": eval_record
        and eval_record["eval_batches"],  # global batches the reported evaluation read
        "final_eval": config.final_eval if final_record is not None else None,
        "sequences_per_second": trained * plan.global_batch / train_time if trained else None,
        "tokens_per_second": trained * tokens_per_step / train_time if trained else None,
        "steps_this_run": trained,  # steps this command trained (after a resume, fewer than global_step)
        "global_batch": plan.global_batch,
        "steps_per_epoch": plan.steps_per_epoch,
        # Per shard set: its normalised weight, the sequences it gave, and how often it ran out and started over.
        "sets": {
            s.name: {
                "path": s.path,
                "weight": s.weight,
                "train_records": s.manifest.split(TRAIN_SPLIT).records,
                "eval_loss": eval_record and eval_record.get(f"eval_loss/{s.name}"),
                **dataclasses.asdict(p),
            }
            for s, p in zip(mix.sets, progress)
        },
        **devices,  # strategy (tpu | mirrored | cpu), replicas, device_kind
        "precision": precision,
        "steps_per_execution": steps_per_execution,
        "elapsed_s": time.monotonic() - started,  # this command's training and evaluation time
        "config": run_config,
    }
    fs.write_text_atomic(
        fs.join(config.output, RUN_SUMMARY_JSON),
        json.dumps(summary, indent=2, sort_keys=True) + "\n",
    )
    return summary
