"""The training loop: manifest checks, strategy, model, optimizer, resume, train/eval, logs, summary.

Read top to bottom: `train(config)` is the whole story. Everything a resumed run needs is a
function of the global step (data position, masking seeds, learning rate) or lives in the
checkpoint (weights, optimizer slots and iterations, dropout seed states), so rerunning the same
command continues exactly where the last checkpoint left off.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import signal
import threading
import time
from typing import Any

import keras
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from schemas import fs
from schemas.constants import TRAIN_SPLIT, VALIDATION_SPLIT
from schemas.errors import LmshardsError
from schemas.manifest import Manifest, read_manifest
from schemas.tokenizer_info import fingerprint, locate_tokenizer
from schemas.version import __version__
from train import data
from train.checkpoint import RunCheckpoints
from train.config import (
    CHECKPOINTS_DIR,
    METRICS_JSONL,
    RUN_CONFIG_JSON,
    RUN_SUMMARY_JSON,
    TENSORBOARD_DIR,
    TOKENIZER_DIR,
    ModelConfig,
    TrainConfig,
    preset_config,
    read_model_config,
)
from train.families import get_family
from train.model import build_masked_lm, checkpoint_root
from train.optim import WarmupDecay, make_optimizer, warmup_steps_for
from train.strategy import make_strategy, num_input_pipelines, uses_gpus

log = logging.getLogger(__name__)

# What tf.summary.scalar writes, without needing the tensorboard package installed to write it.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))


# Options that, with the global step, fix which batches and masks come next.
_DATA_POSITION_OPTIONS = ("shards", "per_replica_batch", "seed", "shuffle_buffer", "mlm_probability")


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes derived from the manifest and the strategy before any compute."""

    replicas: int
    num_pipelines: int
    global_batch: int
    steps_per_epoch: int
    total_steps: int

    @property
    def replicas_per_pipeline(self) -> int:
        return self.replicas // self.num_pipelines


def resolve_model_config(config: TrainConfig, manifest: Manifest) -> ModelConfig:
    """The model config from --model_config or the preset, checked against the manifest.

    Raises:
      LmshardsError: vocabulary size or sequence length do not fit the shards.
    """
    vocab = manifest.tokenizer.vocab_size
    if config.model_config:
        model_config = read_model_config(config.model_config)
        if model_config.vocabulary_size == 0:
            model_config = dataclasses.replace(model_config, vocabulary_size=vocab)
        elif model_config.vocabulary_size != vocab:
            raise LmshardsError(
                f"--model_config {config.model_config!r} has vocabulary_size {model_config.vocabulary_size} but the "
                f"shards' tokenizer has {vocab} tokens. Set vocabulary_size to {vocab} (or 0 to take it from the manifest)."
            )
    else:
        model_config = preset_config(config.model_preset, family=config.model_family, vocabulary_size=vocab)
    if manifest.seq_len > model_config.max_sequence_length:
        raise LmshardsError(
            f"The shards hold sequences of {manifest.seq_len} tokens but the {model_config.family} model takes at most "
            f"{model_config.max_sequence_length} (max_sequence_length). Raise "
            "max_sequence_length in --model_config, or re-run `lmshards preprocess` with a smaller --seq_len."
        )
    return model_config


def check_tokenizer(config: TrainConfig, manifest: Manifest) -> None:
    """With --tokenizer, its fingerprint must equal the one the shards were made with."""
    if not config.tokenizer:
        return
    given = fingerprint(locate_tokenizer(config.tokenizer).json_text)
    if given != manifest.tokenizer.fingerprint:
        raise LmshardsError(
            f"--tokenizer {config.tokenizer!r} has fingerprint {given} but the shards in {config.shards!r} were made "
            f"with {manifest.tokenizer.fingerprint}. Pass the tokenizer given to `lmshards preprocess`, or re-run "
            "preprocess with this one."
        )


def plan_run(config: TrainConfig, manifest: Manifest, strategy: tf.distribute.Strategy) -> Plan:
    replicas = strategy.num_replicas_in_sync
    num_pipelines = num_input_pipelines(strategy)
    files = data.split_files(manifest, config.shards, TRAIN_SPLIT)
    per_pipeline_batches = data.steps_per_epoch(files, num_pipelines=num_pipelines, per_pipeline_batch=config.per_replica_batch)
    steps_per_epoch = per_pipeline_batches // (replicas // num_pipelines)
    if steps_per_epoch == 0:
        raise LmshardsError(
            f"The train split ({files.total_records} records) is smaller than one global batch of "
            f"{config.per_replica_batch} x {replicas} replicas; lower --per_replica_batch."
        )
    if config.steps is not None:
        total = config.steps
    elif config.epochs is not None:
        total = math.ceil(config.epochs * steps_per_epoch)
    else:
        raise LmshardsError("Pass --steps N or --epochs E.")
    return Plan(replicas, num_pipelines, config.per_replica_batch * replicas, steps_per_epoch, total)


def write_run_config(config: TrainConfig, manifest: Manifest, model_config: ModelConfig, masking: data.MaskingSpec) -> dict:
    """Writes RUN_DIR/run_config.json; on a rerun the model must be the one already being trained."""
    path = fs.join(config.output, RUN_CONFIG_JSON)
    if fs.exists(path):
        previous = json.loads(fs.read_text(path))
        if previous["model"] != model_config.to_dict():
            raise LmshardsError(
                f"{config.output!r} holds a run of another model ({previous['model']}); this command builds "
                f"{model_config.to_dict()}. Use a new --output, or the same model options to resume."
            )
        changed = [k for k in _DATA_POSITION_OPTIONS if previous["train"].get(k) != getattr(config, k)]
        if changed:
            log.warning("Resuming with other %s than before: the data order and masks will not continue the "
                        "earlier run's sequence.", ", ".join(f"--{k}" for k in changed))
    run_config = {
        "tool_version": __version__,
        "train": config.to_dict(),
        "model": model_config.to_dict(),
        "seq_len": manifest.seq_len,
        "special_token_ids": dict(manifest.tokenizer.special_token_ids),
        "all_special_ids": list(manifest.tokenizer.all_special_ids),
        "tokenizer_fingerprint": manifest.tokenizer.fingerprint,
        "max_predictions": masking.max_predictions,
    }
    fs.write_text_atomic(path, json.dumps(run_config, indent=2, sort_keys=True) + "\n")
    return run_config


def copy_tokenizer(config: TrainConfig) -> None:
    """Copies the --tokenizer file(s) to RUN_DIR/tokenizer/, so a run can be exported on its own."""
    if not config.tokenizer:
        return
    source = locate_tokenizer(config.tokenizer)
    files = [p for p in fs.listdir(config.tokenizer) if not fs.isdir(p)] if fs.isdir(config.tokenizer) else [source.json_path]
    for path in files:
        name = path.rstrip("/").rsplit("/", 1)[-1]
        fs.write_bytes_atomic(fs.join(config.output, TOKENIZER_DIR, name), fs.read_bytes(path))


def masked_lm_sums(model: keras.Model, batch: dict[str, tf.Tensor], *, training: bool) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(summed cross-entropy over predicted positions, their count, correct predictions) for one replica batch."""
    inputs = {name: batch[name] for name in model.input}
    logits = tf.cast(model(inputs, training=training), tf.float32)
    weights = batch["mask_weights"]
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch["mask_ids"], logits=logits)
    correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), batch["mask_ids"]), tf.float32)
    # where, not a product: a row of eval padding may give non-finite logits, and 0 * nan is nan.
    ce = tf.where(weights > 0, ce, 0.0)
    return tf.reduce_sum(ce * weights), tf.reduce_sum(weights), tf.reduce_sum(correct * weights)


class MetricsLog:
    """RUN_DIR/metrics.jsonl (one object per logging window and per eval) plus TensorBoard scalars."""

    def __init__(self, run_dir: str, *, resume_step: int):
        self.path = fs.join(run_dir, METRICS_JSONL)
        # Records past the restored step belong to work the checkpoint lost; that work is redone.
        self.records = [r for r in self._read() if r["step"] <= resume_step]
        self.writer = tf.summary.create_file_writer(fs.join(run_dir, TENSORBOARD_DIR))

    def _read(self) -> list[dict]:
        if not fs.exists(self.path):
            return []
        return [json.loads(line) for line in fs.read_text(self.path).splitlines() if line.strip()]

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        fs.write_text_atomic(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records))
        with self.writer.as_default(step=record["step"]):
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    tf.summary.write(key, tf.constant(value, tf.float32), metadata=_SCALAR_METADATA)
        self.writer.flush()

    def last(self, key: str) -> dict | None:
        return next((r for r in reversed(self.records) if key in r), None)


class PreemptionFlag:
    """Set by SIGTERM; the loop finishes the running steps, saves and returns."""

    def __init__(self):
        self.raised = False
        self._previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame):
        log.warning("SIGTERM: finishing the current step, then saving a checkpoint.")
        self.raised = True

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def train(config: TrainConfig) -> dict[str, Any]:
    """Trains (or resumes) the run in config.output. Returns the run summary, or {"preempted": step}."""
    # --- checks before any compute: the manifest, the tokenizer, the model against the shards
    manifest = read_manifest(config.shards)
    check_tokenizer(config, manifest)
    model_config = resolve_model_config(config, manifest)
    masking = data.masking_spec(manifest, config.mlm_probability)
    has_eval = VALIDATION_SPLIT in manifest.splits and manifest.splits[VALIDATION_SPLIT].records > 0
    for split in (TRAIN_SPLIT, VALIDATION_SPLIT) if has_eval else (TRAIN_SPLIT,):
        data.check_shard_sizes(manifest, config.shards, split)

    strategy = make_strategy(config.strategy, tpu=config.tpu)
    plan = plan_run(config, manifest, strategy)
    fs.makedirs(config.output)
    run_config = write_run_config(config, manifest, model_config, masking)
    copy_tokenizer(config)
    log.info("%d replicas, global batch %d, %d steps per epoch, %d steps in all.",
             plan.replicas, plan.global_batch, plan.steps_per_epoch, plan.total_steps)

    # --- model, optimizer and checkpoint, created under the strategy so variables are mirrored
    keras.utils.set_random_seed(config.seed)  # weight initialisation and dropout
    keras.mixed_precision.set_dtype_policy(config.precision)
    with strategy.scope():
        model = build_masked_lm(model_config)
        schedule = WarmupDecay(
            peak=config.learning_rate,
            warmup_steps=warmup_steps_for(plan.total_steps, config.warmup_steps),
            total_steps=plan.total_steps,
            decay=config.lr_schedule,
        )
        optimizer = make_optimizer(
            schedule=schedule, weight_decay=config.weight_decay, clip_norm=config.clip_norm,
            loss_scaling=config.precision == "mixed_float16",
        )
        optimizer.build(model.trainable_variables)
        checkpoints = RunCheckpoints(
            checkpoint_root(model, optimizer=optimizer), fs.join(config.output, CHECKPOINTS_DIR), keep=config.keep
        )
        restored = checkpoints.restore_latest()
    start_step = int(optimizer.iterations.numpy())
    if restored:
        log.info("Resumed from %s at step %d.", restored, start_step)

    # --- input pipelines: one per worker host, each over its own files, starting where the checkpoint stopped
    train_files = data.split_files(manifest, config.shards, TRAIN_SPLIT)
    with_segments = get_family(model_config.family).uses_segment_ids

    def train_input(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        files = data.pipeline_files(train_files, num_pipelines=ctx.num_input_pipelines, pipeline_id=ctx.input_pipeline_id)
        return data.train_dataset(
            files, features=manifest.features(), batch_size=config.per_replica_batch,
            steps_per_epoch=plan.steps_per_epoch * plan.replicas_per_pipeline, shuffle_buffer=config.shuffle_buffer,
            seed=config.seed, start_step=start_step * plan.replicas_per_pipeline, masking=masking,
            with_segment_ids=with_segments, pipeline_id=ctx.input_pipeline_id,
        )

    def eval_input(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        files = data.split_files(manifest, config.shards, VALIDATION_SPLIT)
        files = data.pipeline_files(files, num_pipelines=ctx.num_input_pipelines, pipeline_id=ctx.input_pipeline_id)
        max_batches = config.eval_steps * plan.replicas_per_pipeline if config.eval_steps else None
        return data.eval_dataset(files, features=manifest.features(), batch_size=config.per_replica_batch,
                                 masking=masking, with_segment_ids=with_segments, max_batches=max_batches,
                                 batches_multiple_of=plan.replicas_per_pipeline)

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

    def evaluate(step: int) -> dict[str, Any]:
        totals = [0.0, 0.0, 0.0]
        try:
            for batch in strategy.distribute_datasets_from_function(eval_input):
                totals = [t + float(v) for t, v in zip(totals, eval_step(batch))]
        except tf.errors.DataLossError as e:
            raise data.corrupt_shard_error(data.split_files(manifest, config.shards, VALIDATION_SPLIT).paths, e) from e
        loss_sum, count, correct = totals
        mean = loss_sum / max(count, 1.0)
        return {"step": step, "eval_loss": mean, "eval_perplexity": math.exp(min(mean, 700.0)),
                "eval_accuracy": correct / max(count, 1.0), "eval_masked_tokens": int(count)}

    # --- the loop: chunks end on every logging, eval and checkpoint boundary
    metrics = MetricsLog(config.output, resume_step=start_step)
    iterator = iter(strategy.distribute_datasets_from_function(train_input))
    tokens_per_step = plan.global_batch * manifest.seq_len
    step, window_losses, window_start, window_time = start_step, [], start_step, 0.0
    train_time, eval_record = 0.0, None

    with PreemptionFlag() as preemption:
        while step < plan.total_steps and not preemption.raised:
            n = min(config.steps_per_execution, plan.total_steps - step,
                    *(every - step % every for every in (config.log_every, config.checkpoint_every, config.eval_every)))
            t0 = time.perf_counter()
            try:
                losses = train_steps(iterator, tf.constant(n)).numpy()
            except tf.errors.DataLossError as e:
                raise data.corrupt_shard_error(train_files.paths, e) from e
            dt = time.perf_counter() - t0
            step += n
            train_time += dt
            window_losses.extend(float(x) for x in losses)
            window_time += dt
            if not all(math.isfinite(x) for x in losses):
                raise LmshardsError(f"Training diverged at step {step} (loss {losses[-1]}); lower --learning_rate or set --clip_norm.")
            if step % config.log_every == 0 or step == plan.total_steps:
                steps_done = step - window_start
                metrics.add({
                    "step": step, "loss": sum(window_losses) / len(window_losses), "learning_rate": float(schedule(step)),
                    "sequences_per_second": steps_done * plan.global_batch / window_time,
                    "tokens_per_second": steps_done * tokens_per_step / window_time,
                    "step_time_s": window_time / steps_done,
                })
                r = metrics.records[-1]
                log.info("step %d/%d  loss %.4f  lr %.2e  %.0f seq/s  %.1f ms/step", step, plan.total_steps, r["loss"],
                         r["learning_rate"], r["sequences_per_second"], 1000 * r["step_time_s"])
                window_losses, window_start, window_time = [], step, 0.0
            if step % config.checkpoint_every == 0 or step == plan.total_steps or preemption.raised:
                checkpoints.save(step)
            if has_eval and not preemption.raised and (step % config.eval_every == 0 or step == plan.total_steps):
                eval_record = evaluate(step)
                metrics.add(eval_record)
                log.info("eval at step %d: loss %.4f  perplexity %.2f  accuracy %.3f", step,
                         eval_record["eval_loss"], eval_record["eval_perplexity"], eval_record["eval_accuracy"])

    if step < plan.total_steps:
        log.warning("Preempted: saved step %d of %d. Rerun the same command to resume.", step, plan.total_steps)
        return {"preempted": step}
    if eval_record is None and has_eval:
        eval_record = metrics.last("eval_loss") or evaluate(step)
    last_train = metrics.last("loss") or {}
    trained = step - start_step
    summary = {
        "global_step": step,
        "train_loss": last_train.get("loss"),
        "eval_loss": eval_record and eval_record["eval_loss"],
        "eval_perplexity": eval_record and eval_record["eval_perplexity"],
        "eval_accuracy": eval_record and eval_record["eval_accuracy"],
        "sequences_per_second": trained * plan.global_batch / train_time if trained else None,
        "tokens_per_second": trained * tokens_per_step / train_time if trained else None,
        "steps_this_run": trained,  # steps this command trained (after a resume, fewer than global_step)
        "replicas": plan.replicas,
        "global_batch": plan.global_batch,
        "steps_per_epoch": plan.steps_per_epoch,
        "strategy": type(strategy).__name__,
        "config": run_config,
    }
    fs.write_text_atomic(fs.join(config.output, RUN_SUMMARY_JSON), json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary
