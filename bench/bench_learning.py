"""Learning benchmark: lmshards' `tiny` model, on each backend, beside a PyTorch RobertaForMaskedLM of its size,
same shards and steps.

In one run, on one machine:
  1. shards    - `lmshards tokenizer train` (byte-level BPE, vocabulary 8000) and `lmshards preprocess` on the
                 bundled English sample (or --corpus DIR); or --shards DIR --tokenizer PATH to reuse shards;
  2. lmshards  - `lmshards train --model_preset tiny --backend B` in a subprocess for each of --backends
                 (tensorflow, jax), then `lmshards export` of each to a transformers directory;
  3. reference - transformers' RobertaForMaskedLM built from that export's config.json (so every dimension,
                 dropout and epsilon match; fresh weights), trained in this process on the same train records
                 with the Hugging Face TPU example's recipe: 15% masking 80/10/10, AdamW (beta2 0.98, eps 1e-6),
                 weight decay 0.01 except LayerNorm weights and biases, 5% linear warmup, linear decay to 0;
                 the LM head applied at the masked positions only, as lmshards does (the same work per step);
  4. every model evaluated by the same PyTorch code on the same masked validation sequences (one fixed mask
     draw: same positions, same replacement tokens), masked-token cross-entropy in nats.
--families roberta modernbert also trains lmshards' `tiny` ModernBERT on each backend (the same shards, steps,
batch, schedule and 15% masking: the same tokens seen and predicted) and scores its export beside the others.
Step time is the median over 10-step windows of the mean ms/step, leaving out the first 10 steps (tracing,
warm-up): lmshards' windows are its own metrics.jsonl records, the reference's are timed the same way here.
--threads N gives each system N compute threads and N cores (the first N this process may use): whatever
other threads a runtime starts run on those cores too. On a machine others are loading, --threads 1 compares the
work per step (CPU ms/step) of both.

Usage (from the repository root, with the venv active):
  python -m bench.bench_learning --json bench-learning.json                 # the default run
  python -m bench.bench_learning --steps 60 --lmshards-args '--steps_per_execution 10'
  python -m bench.bench_learning --shards DIR --tokenizer DIR --threads 1
  python -m bench.bench_learning --backends tensorflow --families roberta modernbert
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch
import transformers
from transformers import RobertaConfig, RobertaForMaskedLM

from bench.common import (
    REPO_ROOT,
    RUN_TIMEOUT_S,
    add_corpus_flag,
    add_run_output_flags,
    add_schedule_flags,
    child_env,
    lmshards_argv,
    load_average,
    log_tail,
    logged_windows,
    make_shards,
    report_header,
    run_lmshards,
)
from lmshards.schemas.constants import ATTENTION_MASK, INPUT_IDS, TRAIN_SPLIT, VALIDATION_SPLIT
from lmshards.schemas.manifest import Manifest, read_manifest, require_concatenated
from lmshards.schemas.reading import read_split
from lmshards.train.config import TrainConfig
from lmshards.train.run_dir import RunDir

# The code a learning run executes: an uncommitted change there makes the report's commit not the whole story.
CODE_DIRS = ("train", "schemas", "preprocess", "corpus_tools", "lmshards", "bench")

# The run both systems make.
PRESET = "tiny"
DEFAULT_STEPS = 300
DEFAULT_BATCH = 32
DEFAULT_LEARNING_RATE = 5e-4
SEED = 0

# The Hugging Face TPU example's recipe (examples/tensorflow/language-modeling-tpu), as the reference trains it.
MLM_PROBABILITY = 0.15
MASK_FRACTION = (
    0.8  # of the selected tokens: <mask>; half of the rest a random token, the other half unchanged
)
RANDOM_FRACTION = 0.1
ADAM_BETAS = (0.9, 0.98)
ADAM_EPSILON = 1e-6
WEIGHT_DECAY = 0.01
WARMUP_FRACTION = 0.05
# Parameter-name fragments left out of weight decay: every bias, and the LayerNorm weights (transformers'
# RoBERTa names them `LayerNorm` in the encoder and `layer_norm` in the masked-LM head).
NO_DECAY_FRAGMENTS = ("bias", "LayerNorm.weight", "layer_norm.weight")
IGNORE_INDEX = -100  # transformers' label for "not predicted"

# Measurement.
# Steps per timing window: lmshards' --log_every, and the reference's window. lmshards' own default, so that
# `--steps_per_execution auto` groups steps as it does for a user.
TIMING_WINDOW = TrainConfig.log_every
WARMUP_STEPS_EXCLUDED = 10  # windows that start before this step are left out of the step time
EVAL_SEED = 1234
EVAL_BATCH = 64
POLL_INTERVAL_S = 0.1

# Targets: lmshards learns as well as the reference and steps at least as fast.
TARGET_LOSS_MARGIN_NATS = 0.02  # lmshards eval loss <= reference eval loss + this
TARGET_STEP_TIME_RATIO = 1.0  # lmshards ms/step / reference ms/step <= this
TARGET_DEFAULT_WALL_RATIO = (
    1.1  # the default backend's wall to its last step / the reference's <= this
)

REFERENCE = "reference"
BACKENDS = ("tensorflow", "jax")  # lmshards' backends, each trained and scored beside the reference
# lmshards' model families trained; the reference is built from the RoBERTa export's config, so it comes first.
FAMILIES = ("roberta", "modernbert")


def system_name(backend: str, family: str = FAMILIES[0]) -> str:
    """The name of an lmshards run in the report: lmshards-tensorflow, lmshards-jax (RoBERTa), and
    lmshards-tensorflow-modernbert for another family."""
    return f"lmshards-{backend}" + ("" if family == FAMILIES[0] else f"-{family}")


@dataclasses.dataclass(frozen=True)
class Config:
    corpus: Path
    shards: str | None
    tokenizer: str | None
    steps: int
    batch_size: int
    learning_rate: float
    window: int
    work_dir: Path
    json_out: Path | None
    lmshards_args: tuple[str, ...]
    lmshards_env: dict[str, str]
    threads: int | None  # compute threads of both runtimes; None: each runtime's default
    backends: tuple[str, ...] = BACKENDS
    families: tuple[str, ...] = FAMILIES[:1]


@dataclasses.dataclass(frozen=True)
class MaskingSpec:
    """What masking needs from the manifest's tokenizer."""

    vocab_size: int
    mask_id: int
    special_ids: tuple[int, ...]  # never selected, never drawn as random replacements
    mlm_probability: float = MLM_PROBABILITY

    @functools.cached_property
    def regular_ids(self) -> torch.Tensor:
        """int64 ids that random replacements are drawn from: every id but the special ones."""
        special = set(self.special_ids)
        return torch.tensor(
            [i for i in range(self.vocab_size) if i not in special], dtype=torch.int64
        )

    @classmethod
    def from_manifest(cls, manifest: Manifest) -> MaskingSpec:
        tok = manifest.tokenizer
        return cls(
            vocab_size=tok.vocab_size,
            mask_id=tok.special_token_ids["mask"],
            special_ids=tok.never_masked_ids,
        )


@dataclasses.dataclass(frozen=True)
class MaskedBatch:
    """Model inputs with their labels: int64 [batch, seq_len] each; labels IGNORE_INDEX where nothing is predicted."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor


@dataclasses.dataclass(frozen=True)
class StepTimes:
    """Step time of one system: windows of `window` steps after the first WARMUP_STEPS_EXCLUDED."""

    window_ms: tuple[float, ...]  # mean ms/step of each kept window, in order
    window: int
    cpu_ms_per_step: float | None  # process CPU (all threads) per step over the kept windows
    mean_load1: float

    @property
    def median_ms(self) -> float:
        return statistics.median(self.window_ms)

    @property
    def steps_per_s(self) -> float:
        return 1000.0 / self.median_ms


@dataclasses.dataclass(frozen=True)
class EvalResult:
    loss: float  # mean masked-token cross-entropy, nats
    accuracy: float
    masked_tokens: int


# ---------------------------------------------------------------- the reference's recipe


def warmup_steps_for(total_steps: int) -> int:
    """5% of the steps, at least one (what both systems are given)."""
    return max(1, math.ceil(WARMUP_FRACTION * total_steps))


def lr_factor(step: int, *, warmup_steps: int, total_steps: int) -> float:
    """Learning rate / peak before optimizer update `step` (0-based): linear warmup from 0, then linear decay to 0."""
    if step < warmup_steps:
        return step / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def decays(name: str) -> bool:
    """Whether weight decay applies to a parameter: not to biases and LayerNorm weights."""
    return not any(fragment in name for fragment in NO_DECAY_FRAGMENTS)


def param_groups(model: torch.nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW parameter groups: [decayed, not decayed]. Tied weights (embeddings = LM decoder) appear once."""
    named = list(model.named_parameters())
    return [
        {"params": [p for n, p in named if decays(n)], "weight_decay": weight_decay},
        {"params": [p for n, p in named if not decays(n)], "weight_decay": 0.0},
    ]


def mask_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor, spec: MaskingSpec,
                generator: torch.Generator) -> MaskedBatch:  # fmt: skip
    """transformers' DataCollatorForLanguageModeling masking, in torch.

    Each non-special, non-padding token is selected with probability mlm_probability; a selected token
    becomes <mask> (80%), a random token (10%) or stays (10%). Unlike the collator, random tokens are
    drawn from the non-special ids: a drawn padding id would shift RoBERTa's position ids.
    """
    ids = input_ids.clone()
    special = torch.isin(ids, torch.tensor(spec.special_ids, dtype=ids.dtype))
    candidate = attention_mask.bool() & ~special
    selected = (torch.rand(ids.shape, generator=generator) < spec.mlm_probability) & candidate
    labels = torch.where(selected, ids, torch.full_like(ids, IGNORE_INDEX))
    kind = torch.rand(ids.shape, generator=generator)
    random_ids = spec.regular_ids[
        torch.randint(len(spec.regular_ids), ids.shape, generator=generator)
    ]
    ids = torch.where(selected & (kind < MASK_FRACTION), torch.full_like(ids, spec.mask_id), ids)
    ids = torch.where(
        selected & (kind >= MASK_FRACTION) & (kind < MASK_FRACTION + RANDOM_FRACTION),
        random_ids,
        ids,
    )
    return MaskedBatch(input_ids=ids, attention_mask=attention_mask.clone(), labels=labels)


def batch_rows(num_records: int, *, batch_size: int, steps: int, seed: int) -> Iterator[np.ndarray]:
    """Record indices of each step's batch: epochs of a fresh permutation, full batches only (as lmshards)."""
    per_epoch = num_records // batch_size
    if per_epoch == 0:
        raise ValueError(f"{num_records} train records are fewer than one batch of {batch_size}")
    rng = np.random.default_rng(seed)
    step = 0
    while True:
        order = rng.permutation(num_records)
        for b in range(per_epoch):
            if step == steps:
                return
            yield order[b * batch_size : (b + 1) * batch_size]
            step += 1


def build_reference(hf_config: Mapping[str, Any], *, seed: int) -> RobertaForMaskedLM:
    """A freshly initialised RobertaForMaskedLM with every hyperparameter of the exported lmshards model."""
    torch.manual_seed(seed)
    return RobertaForMaskedLM(RobertaConfig.from_dict(dict(hf_config)))


@dataclasses.dataclass(frozen=True)
class ReferenceRun:
    model: RobertaForMaskedLM
    times: StepTimes
    window_losses: tuple[float, ...]  # mean train loss of every window, first included


def train_reference(model: RobertaForMaskedLM, train: Mapping[str, np.ndarray], spec: MaskingSpec, *, steps: int,
                    batch_size: int, learning_rate: float, window: int, seed: int) -> ReferenceRun:  # fmt: skip
    """Trains `model` for `steps` steps; a step is timed from taking its batch to the loss on the host."""
    warmup = warmup_steps_for(steps)
    optimizer = torch.optim.AdamW(param_groups(model, weight_decay=WEIGHT_DECAY), lr=learning_rate,
                                  betas=ADAM_BETAS, eps=ADAM_EPSILON)  # fmt: skip
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, warmup_steps=warmup, total_steps=steps)
    )
    generator = torch.Generator().manual_seed(seed)
    input_ids, attention_mask = (
        torch.from_numpy(train[INPUT_IDS]),
        torch.from_numpy(train[ATTENTION_MASK]),
    )
    model.train()
    walls, cpus, losses, loads = [], [], [], []
    for step, rows in enumerate(
        batch_rows(len(input_ids), batch_size=batch_size, steps=steps, seed=seed)
    ):
        t0, c0 = time.perf_counter(), time.process_time()
        index = torch.from_numpy(rows)
        batch = mask_tokens(input_ids[index], attention_mask[index], spec, generator)
        logits, labels = masked_logits(model, batch)
        loss = torch.nn.functional.cross_entropy(logits.float(), labels)
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        if (step + 1) % window == 0:
            loads.append(os.getloadavg()[0])
            print(
                f"  reference step {step + 1}/{steps}  loss {np.mean(losses[-window:]):.4f}  "
                f"{1000 * np.mean(walls[-window:]):.1f} ms/step",
                flush=True,
            )
    kept = kept_windows(len(walls), window=window)
    times = StepTimes(
        window_ms=tuple(1000 * float(np.mean(walls[s : s + window])) for s in kept),
        window=window,
        cpu_ms_per_step=1000 * float(np.mean([c for s in kept for c in cpus[s : s + window]])),
        mean_load1=float(np.mean(loads)) if loads else os.getloadavg()[0],
    )
    window_losses = tuple(
        float(np.mean(losses[s : s + window])) for s in range(0, len(losses), window)
    )
    return ReferenceRun(model=model, times=times, window_losses=window_losses)


def masked_logits(
    model: RobertaForMaskedLM, batch: MaskedBatch
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [predicted tokens, vocab], their labels): the LM head applied at the predicted positions only.

    What lmshards computes (keras-hub's head gathers mask_positions first); RobertaForMaskedLM's own
    forward projects every position onto the vocabulary, ~7x the head's work at 15% masking.
    """
    hidden = model.roberta(input_ids=batch.input_ids, attention_mask=batch.attention_mask)[0]
    where = batch.labels != IGNORE_INDEX
    return model.lm_head(hidden[where]), batch.labels[where]


def kept_windows(steps: int, *, window: int) -> list[int]:
    """First step (0-based) of every full timing window that starts at or after WARMUP_STEPS_EXCLUDED."""
    first = math.ceil(WARMUP_STEPS_EXCLUDED / window) * window
    return list(range(first, steps - window + 1, window))


# ---------------------------------------------------------------- evaluation, identical for both models


def eval_batches(validation: Mapping[str, np.ndarray], spec: MaskingSpec, *, seed: int = EVAL_SEED,
                 batch_size: int = EVAL_BATCH) -> list[MaskedBatch]:  # fmt: skip
    """The validation records masked once with a fixed seed: the one set of inputs every model is scored on."""
    generator = torch.Generator().manual_seed(seed)
    ids, mask = (
        torch.from_numpy(validation[INPUT_IDS]),
        torch.from_numpy(validation[ATTENTION_MASK]),
    )
    return [mask_tokens(ids[s:s + batch_size], mask[s:s + batch_size], spec, generator)
            for s in range(0, len(ids), batch_size)]  # fmt: skip


@torch.no_grad()
def token_losses(
    model: torch.nn.Module, batches: Sequence[MaskedBatch]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cross-entropy in nats, correct) of every predicted token, in batch order; model in eval mode (no dropout)."""
    model.eval()
    losses, correct = [], []
    for batch in batches:
        logits = model(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask
        ).logits.float()
        where = batch.labels != IGNORE_INDEX
        picked, labels = logits[where], batch.labels[where]
        losses.append(torch.nn.functional.cross_entropy(picked, labels, reduction="none"))
        correct.append(picked.argmax(-1) == labels)
    return torch.cat(losses), torch.cat(correct)


def evaluate_side_by_side(
    models: Mapping[str, torch.nn.Module],
    batches: Sequence[MaskedBatch],
    *,
    pairs: Sequence[tuple[str, str]],
) -> dict[str, Any]:
    """Every model's EvalResult on the same batches, and the paired difference a - b (nats) of each pair.

    Pairing per token removes the spread that comes from which tokens were masked: `stderr` is the
    standard error of the mean per-token difference.
    """
    scored = {name: token_losses(model, batches) for name, model in models.items()}
    results = {
        name: EvalResult(
            loss=float(losses.mean()),
            accuracy=float(correct.float().mean()),
            masked_tokens=int(losses.numel()),
        )
        for name, (losses, correct) in scored.items()
    }
    differences = {}
    for a, b in pairs:
        diff = (scored[a][0] - scored[b][0]).double()
        differences[pair_name(a, b)] = {
            "diff": float(diff.mean()),
            "stderr": float(diff.std() / math.sqrt(diff.numel())),
        }
    return {"results": results, "pairs": differences}


def pair_name(a: str, b: str) -> str:
    return f"{a} - {b}"


def compared_pairs(systems: Sequence[str]) -> list[tuple[str, str]]:
    """Each lmshards backend against the reference, and every later backend against the first."""
    pairs = [(s, REFERENCE) for s in systems]
    return pairs + [(s, systems[0]) for s in systems[1:]]


def load_export(hf_dir: str) -> torch.nn.Module:
    """The exported lmshards model (its family's transformers class). Raises RuntimeError if any weight was
    missing (it would be random)."""
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(
        hf_dir, output_loading_info=True
    )
    problems = {
        k: v
        for k, v in info.items()
        if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")
    }
    if problems:
        raise RuntimeError(f"the export in {hf_dir} did not load cleanly: {problems}")
    return model


# ---------------------------------------------------------------- lmshards through its command line


def thread_env(threads: int | None) -> dict[str, str]:
    """The environment that gives TensorFlow and XLA `threads` compute threads (empty: their default, one per core).

    XLA's CPU backend (JAX) has no thread-count switch: at 1 its Eigen thread pool is turned off.
    """
    if threads is None:
        return {}
    env = {"TF_NUM_INTRAOP_THREADS": str(threads), "TF_NUM_INTEROP_THREADS": str(threads)}
    if threads == 1:
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
    return env


def pin_to_cores(threads: int | None) -> list[int]:
    """Restricts this process, and every process it starts after, to `threads` of the cores it may run on
    (the first ones), and returns the cores it runs on.

    Thread settings alone do not make the runs equal: a runtime also starts threads besides its compute threads
    (XLA's CPU runtime and the JAX backend's tf.data pipeline used a second core at --threads 1, 1.8 CPU seconds
    per second of step), so each system gets the same cores. No pinning when `threads` is None or not fewer than
    the cores at hand.
    """
    allowed = sorted(os.sched_getaffinity(0))
    if threads is not None and threads < len(allowed):
        os.sched_setaffinity(0, allowed[:threads])
    return sorted(os.sched_getaffinity(0))


def cold_import_s(env: Mapping[str, str]) -> float:
    """Seconds a fresh interpreter takes to import torch and transformers' RobertaForMaskedLM (the reference's
    start-up, which this process paid long before it trains)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch; from transformers import RobertaForMaskedLM"],
                   env=dict(env), cwd=REPO_ROOT, check=True)  # fmt: skip
    return time.perf_counter() - t0


def train_args(config: Config, *, shards: str, tokenizer: str, run_dir: Path,
               backend: str = BACKENDS[0], family: str = FAMILIES[0]) -> list[str]:  # fmt: skip
    """`lmshards train` arguments of the compared run: the same steps, batch, peak rate, warmup and masking rate
    as the reference, whatever the family."""
    steps = str(config.steps)
    return ["train", "--backend", backend, "--shards", shards, "--output", str(run_dir), "--tokenizer", tokenizer,
            "--model_preset", PRESET, "--model_family", family, "--steps", steps, "--per_replica_batch", str(config.batch_size),
            "--learning_rate", str(config.learning_rate), "--warmup_steps", str(warmup_steps_for(config.steps)),
            "--lr_schedule", "linear", "--weight_decay", str(WEIGHT_DECAY), "--mlm_probability", str(MLM_PROBABILITY),
            "--seed", str(SEED), "--log_every", str(config.window), "--eval_every", steps,
            "--checkpoint_every", steps, *config.lmshards_args]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class LmshardsRun:
    times: StepTimes
    window_losses: tuple[float, ...]
    wall_s: float  # the whole `lmshards train` process, start-up and final evaluation included
    first_window_s: (
        float  # from the process start until its first window was logged: start-up + tracing
    )
    summary: dict[str, Any]
    # From the process start until its last window was logged: start-up and training, no evaluation.
    trained_s: float = float("nan")


def train_lmshards(args: Sequence[str], *, env: Mapping[str, str], run_dir: Path, window: int,
                   log_path: Path) -> LmshardsRun:  # fmt: skip
    """Runs `lmshards train`, noting the process's CPU seconds whenever a new window reaches metrics.jsonl.

    Window times are the trainer's own (metrics.jsonl step_time_s: wall time of the step calls, input
    waits included, logging excluded). CPU per step is the process's CPU time (every thread) between
    the first kept window and the last one, as polled here every POLL_INTERVAL_S.
    """
    metrics = RunDir(str(run_dir)).metrics_path
    marks: dict[int, float] = {}  # window end step -> process CPU seconds when it appeared
    seen_s: dict[
        int, float
    ] = {}  # window end step -> seconds after the process start when it appeared
    loads = []
    start = time.perf_counter()
    first_window_s = float("nan")
    with open(log_path, "w") as log:
        proc = psutil.Popen(
            lmshards_argv(*args), stdout=log, stderr=subprocess.STDOUT, env=dict(env), cwd=REPO_ROOT
        )
        while proc.poll() is None:
            try:
                cpu = sum(proc.cpu_times()[:2])
                windows = logged_windows(metrics)
            except psutil.NoSuchProcess:
                windows = []
            if windows and windows[-1]["step"] not in marks:
                marks[windows[-1]["step"]] = cpu
                seen_s[windows[-1]["step"]] = time.perf_counter() - start
                loads.append(os.getloadavg()[0])
                if len(marks) == 1:
                    first_window_s = time.perf_counter() - start
            if time.perf_counter() - start > RUN_TIMEOUT_S:
                proc.kill()
            time.sleep(POLL_INTERVAL_S)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(
            f"lmshards train exited {proc.returncode}; its output ends:\n{log_tail(log_path)}"
        )
    records = logged_windows(metrics)
    kept = [
        r
        for r in records
        if r["step"] - window >= WARMUP_STEPS_EXCLUDED and r["step"] % window == 0
    ]
    cpu_ms = None
    if kept:
        # CPU between the end of the last window left out and the end of the last kept one.
        before = kept[0]["step"] - window
        if before in marks and kept[-1]["step"] in marks and kept[-1]["step"] > before:
            cpu_ms = 1000 * (marks[kept[-1]["step"]] - marks[before]) / (kept[-1]["step"] - before)
    times = StepTimes(window_ms=tuple(1000 * r["step_time_s"] for r in kept), window=window, cpu_ms_per_step=cpu_ms,
                      mean_load1=float(np.mean(loads)) if loads else os.getloadavg()[0])  # fmt: skip
    summary = json.loads((run_dir / "run_summary.json").read_text())
    trained_s = seen_s.get(records[-1]["step"], float("nan")) if records else float("nan")
    return LmshardsRun(times=times, window_losses=tuple(r["loss"] for r in records), wall_s=wall,
                       first_window_s=first_window_s, summary=summary, trained_s=trained_s)  # fmt: skip


# ---------------------------------------------------------------- report


def verdicts(evaluation: Mapping[str, Any], times: Mapping[str, StepTimes],
             walls: Mapping[str, float]) -> dict[str, Any]:  # fmt: skip
    """The targets, with the figures they were judged on: every eval-loss pair within the margin, at least
    one lmshards backend stepping no slower than the reference, and the default backend's wall time to its
    last step (start-up included) at most TARGET_DEFAULT_WALL_RATIO of the reference's."""
    losses = {
        name: {
            **pair,
            "target_max": TARGET_LOSS_MARGIN_NATS,
            "met": pair["diff"] <= TARGET_LOSS_MARGIN_NATS,
        }
        for name, pair in evaluation["pairs"].items()
    }
    ref = times[REFERENCE]
    steps = {
        name: {"over_reference": t.median_ms / ref.median_ms,
               "wall_over_reference": walls[name] / walls[REFERENCE],
               "cpu_ms_over_reference": (t.cpu_ms_per_step / ref.cpu_ms_per_step
                                         if t.cpu_ms_per_step and ref.cpu_ms_per_step else None)}
        for name, t in times.items() if name != REFERENCE
    }  # fmt: skip
    fastest = min(steps, key=lambda name: steps[name]["over_reference"])
    default = system_name(TrainConfig.backend)
    wall = {
        "default_backend": default,
        "target_max": TARGET_DEFAULT_WALL_RATIO,
        "over_reference": steps[default]["wall_over_reference"] if default in steps else None,
    }
    wall["met"] = (
        wall["over_reference"] is not None and wall["over_reference"] <= TARGET_DEFAULT_WALL_RATIO
    )
    return {
        "eval_loss": {"pairs": losses, "met": all(p["met"] for p in losses.values())},
        "step_time": {"systems": steps, "target_max": TARGET_STEP_TIME_RATIO, "fastest": fastest,
                      "met": steps[fastest]["over_reference"] <= TARGET_STEP_TIME_RATIO},
        "default_wall": wall,
    }  # fmt: skip


def table(
    evaluation: Mapping[str, Any],
    times: Mapping[str, StepTimes],
    losses: Mapping[str, Sequence[float]],
    walls: Mapping[str, float],
) -> str:
    """One column per system (the lmshards backends, then the reference), then each backend over the reference."""
    results, systems = evaluation["results"], list(times)
    backends = [s for s in systems if s != REFERENCE]

    def cell(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    def row(
        label: str, fmt: str, values: Mapping[str, float | None], ratio: bool
    ) -> tuple[str, ...]:
        ratios = [cell(values[s] / values[REFERENCE] if ratio and values[s] and values[REFERENCE] else None,
                       ".2f") if ratio else "" for s in backends]  # fmt: skip
        return (label, *(cell(values[s], fmt) for s in systems), *ratios)

    loss_diffs = [evaluation["pairs"][pair_name(s, REFERENCE)] for s in backends]
    rows = [
        ("", *systems, *(f"{s}/reference" for s in backends)),
        (*row("eval loss (nats)", ".4f", {s: results[s].loss for s in systems}, False)[:-len(backends)],
         *(f"{d['diff']:+.4f} +- {d['stderr']:.4f}" for d in loss_diffs)),
        row("eval accuracy", ".4f", {s: results[s].accuracy for s in systems}, False),
        row("last window train loss", ".4f", {s: losses[s][-1] for s in systems}, False),
        row("wall to last step, s", ".1f", dict(walls), True),
        row("median ms/step", ".1f", {s: times[s].median_ms for s in systems}, True),
        row("steps/s", ".2f", {s: times[s].steps_per_s for s in systems}, True),
        row("CPU ms/step", ".1f", {s: times[s].cpu_ms_per_step for s in systems}, True),
        row("mean load (1 min)", ".1f", {s: times[s].mean_load1 for s in systems}, False),
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def verdict_lines(v: Mapping[str, Any]) -> list[str]:
    lines = [
        f"eval loss {name}: {p['diff']:+.4f} nats (paired stderr {p['stderr']:.4f}; target <= "
        f"+{p['target_max']}: {'met' if p['met'] else 'NOT met'})"
        for name, p in v["eval_loss"]["pairs"].items()
    ]
    step = v["step_time"]
    lines += [
        f"step time {name} / reference: {t['over_reference']:.2f}"
        for name, t in step["systems"].items()
    ]
    lines.append(
        f"fastest backend {step['fastest']}: target <= {step['target_max']} with at least one backend: "
        f"{'met' if step['met'] else 'NOT met'}"
    )
    wall = v["default_wall"]
    if wall["over_reference"] is not None:
        lines.append(
            f"wall to the last step (start-up included), default backend {wall['default_backend']} / reference: "
            f"{wall['over_reference']:.2f} (target <= {wall['target_max']}: {'met' if wall['met'] else 'NOT met'})"
        )
    return lines


def parse_args(argv: Sequence[str] | None) -> Config:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_corpus_flag(p)
    p.add_argument(
        "--shards", help="reuse this `lmshards preprocess` output instead (needs --tokenizer)"
    )
    p.add_argument(
        "--tokenizer", help="the tokenizer --shards were made with (for `lmshards export`)"
    )
    add_schedule_flags(
        p,
        steps=DEFAULT_STEPS,
        batch_size=DEFAULT_BATCH,
        learning_rate=DEFAULT_LEARNING_RATE,
        of="both systems",
    )
    p.add_argument(
        "--window",
        type=int,
        default=TIMING_WINDOW,
        help="steps per timing window, lmshards' --log_every: also the most --steps_per_execution can "
        "group (default: %(default)s)",
    )
    add_run_output_flags(p)
    p.add_argument(
        "--lmshards-args",
        default="",
        help="extra `lmshards train` flags, e.g. '--steps_per_execution 10'",
    )
    p.add_argument(
        "--lmshards-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment of `lmshards train` (repeatable), e.g. TF_NUM_INTEROP_THREADS=1",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="compute threads of both systems (PyTorch's intra-op threads; TensorFlow's intra- and "
        "inter-op threads), each run on that many cores: 1 compares work per step on a machine others are "
        "loading (default: each runtime's own, on every core)",
    )
    p.add_argument(
        "--backends",
        nargs="+",
        choices=BACKENDS,
        default=list(BACKENDS),
        help="lmshards backends to train and compare (default: %(default)s)",
    )
    p.add_argument(
        "--families",
        nargs="+",
        choices=FAMILIES,
        default=list(FAMILIES[:1]),
        help="lmshards model families to train on each backend; roberta is always among them, as the "
        "reference is built from its export (default: %(default)s)",
    )
    a = p.parse_args(argv)
    if FAMILIES[0] not in a.families:
        p.error(
            f"--families {' '.join(a.families)} leaves out {FAMILIES[0]}, which the reference is built from; "
            f"add it: --families {FAMILIES[0]} {' '.join(a.families)}"
        )
    if (a.shards is None) != (a.tokenizer is None):
        p.error(
            "--shards and --tokenizer go together: the export needs the tokenizer the shards were made with"
        )
    if a.window < 1 or a.steps < WARMUP_STEPS_EXCLUDED + 2 * a.window:
        p.error(
            f"--steps must leave at least two {a.window}-step windows after the first "
            f"{WARMUP_STEPS_EXCLUDED} steps (e.g. --steps {WARMUP_STEPS_EXCLUDED + 20 * a.window})"
        )
    if a.threads is not None and a.threads < 1:
        p.error(f"--threads must be >= 1, got {a.threads}")
    bad_env = [kv for kv in a.lmshards_env if "=" not in kv]
    if bad_env:
        p.error(f"--lmshards-env takes KEY=VALUE, got {bad_env}")
    work = a.work_dir or Path(tempfile.mkdtemp(prefix="bench_learning_"))
    return Config(corpus=a.corpus, shards=a.shards, tokenizer=a.tokenizer, steps=a.steps, batch_size=a.batch_size,
                  learning_rate=a.learning_rate, window=a.window, work_dir=work, json_out=a.json,
                  lmshards_args=tuple(shlex.split(a.lmshards_args)),
                  lmshards_env=dict(kv.split("=", 1) for kv in a.lmshards_env), threads=a.threads,
                  backends=tuple(a.backends), families=tuple(dict.fromkeys(a.families)))  # fmt: skip


def train_and_export(config: Config, backend: str, family: str, *, shards: str, tokenizer: str,
                     env: Mapping[str, str]) -> tuple[LmshardsRun, Path, list[str]]:  # fmt: skip
    """Trains lmshards' `family` on `backend` and exports it: (the run, its transformers directory, the train
    command)."""
    work, name = config.work_dir, system_name(backend, family)
    run_dir = work / f"{name}_run"
    args = train_args(config, shards=shards, tokenizer=tokenizer, run_dir=run_dir, backend=backend,
                      family=family)  # fmt: skip
    print(f"{name}: $ lmshards {shlex.join(args)}", flush=True)
    lm = train_lmshards(args, env=env, run_dir=run_dir, window=config.window,
                        log_path=work / f"{name}_train.log")  # fmt: skip
    print(
        f"  {lm.wall_s:.0f} s in all, first window after {lm.first_window_s:.0f} s; "
        f"median {lm.times.median_ms:.1f} ms/step",
        flush=True,
    )
    hf_dir = work / f"{name}_export"
    run_lmshards(
        ["export", str(run_dir), "--output", str(hf_dir), "--overwrite"],
        env=env,
        log_path=work / f"{name}_export.log",
    )
    return lm, hf_dir, args


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    transformers.logging.set_verbosity_error()
    work = config.work_dir
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    env = child_env()
    if config.shards:
        shards, tokenizer = config.shards, config.tokenizer
    else:
        print(f"making shards from {config.corpus} ...", flush=True)
        shards, tokenizer = make_shards(config.corpus, work, env=env)
    manifest = read_manifest(shards)
    spec = MaskingSpec.from_manifest(manifest)
    print(
        f"shards: {shards} ({manifest.split(TRAIN_SPLIT).records} train, "
        f"{manifest.split(VALIDATION_SPLIT).records} validation records of {manifest.seq_len} tokens)"
    )

    # After the shards are made (not timed), before anything that is.
    cores = pin_to_cores(config.threads)
    print(f"both systems run on cores {cores} of {os.cpu_count()}", flush=True)
    train_env = {**thread_env(config.threads), **config.lmshards_env}
    runs, exports, commands = {}, {}, {}
    for family in config.families:
        for backend in config.backends:
            name = system_name(backend, family)
            runs[name], exports[name], commands[name] = train_and_export(
                config,
                backend,
                family,
                shards=shards,
                tokenizer=tokenizer,
                env={**env, **train_env},
            )
    hf_config = json.loads((exports[system_name(config.backends[0])] / "config.json").read_text())

    require_concatenated(
        manifest,
        shards,
        reader="the reference (input_ids and attention_mask only)",
        fix="pass a set made with --packing concat.",
    )

    # The reference's wall to its last step: a fresh interpreter's import of torch and transformers, then
    # reading its records, building the model and training, as lmshards' process does before its last step.
    import_s = cold_import_s(env)
    reference_start = time.perf_counter()
    train = read_split(manifest, shards, TRAIN_SPLIT, max_records=config.steps * config.batch_size)
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    print(
        f"reference: RobertaForMaskedLM from that export's config.json, torch {torch.__version__} "
        f"({torch.get_num_threads()} compute threads), LM head at the masked positions only",
        flush=True,
    )
    ref = train_reference(build_reference(hf_config, seed=SEED), train, spec, steps=config.steps,
                          batch_size=config.batch_size, learning_rate=config.learning_rate, window=config.window,
                          seed=SEED)  # fmt: skip
    reference_s = import_s + time.perf_counter() - reference_start

    batches = eval_batches(read_split(manifest, shards, VALIDATION_SPLIT), spec)
    systems = list(runs)
    models = {**{name: load_export(str(hf)) for name, hf in exports.items()}, REFERENCE: ref.model}
    evaluation = evaluate_side_by_side(models, batches, pairs=compared_pairs(systems))
    times = {**{name: lm.times for name, lm in runs.items()}, REFERENCE: ref.times}
    losses = {**{name: lm.window_losses for name, lm in runs.items()}, REFERENCE: ref.window_losses}
    walls = {**{name: lm.trained_s for name, lm in runs.items()}, REFERENCE: reference_s}
    v = verdicts(evaluation, times, walls)
    print()
    print(table(evaluation, times, losses, walls))
    print()
    print("\n".join(verdict_lines(v)))
    for name, lm in runs.items():
        print(f"{name}'s own final eval (its own masks): {lm.summary.get('eval_loss')} nats")
    print("The table scores every model with the same code and masks.")
    parameters = {
        name: sum(p.numel() for p in model.parameters()) for name, model in models.items()
    }
    print("parameters: " + ", ".join(f"{name} {n:,}" for name, n in parameters.items()))
    print(
        f"load average now: {' '.join(f'{x:.2f}' for x in load_average())} on {os.cpu_count()} cores"
    )
    if config.json_out:
        params = sum(p.numel() for p in ref.model.parameters())
        report = {
            **report_header("learning", started=started, argv=argv, code_dirs=CODE_DIRS, torch=torch.__version__,
                            torch_threads=torch.get_num_threads(), transformers=transformers.__version__,
                            cores=cores),
            "shards": {"dir": shards, "tokenizer": tokenizer, "seq_len": manifest.seq_len,
                       "train_records": manifest.split(TRAIN_SPLIT).records,
                       "validation_records": manifest.split(VALIDATION_SPLIT).records},
            "parameters_by_system": parameters,
            "model": {"preset": PRESET, "parameters": params, **{k: hf_config[k] for k in (
                "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "vocab_size")}},
            "run": {"steps": config.steps, "batch_size": config.batch_size, "learning_rate": config.learning_rate,
                    "warmup_steps": warmup_steps_for(config.steps), "weight_decay": WEIGHT_DECAY,
                    "adam_betas": ADAM_BETAS, "adam_epsilon": ADAM_EPSILON, "mlm_probability": MLM_PROBABILITY},
            "lmshards_commands": {name: ["lmshards", *args] for name, args in commands.items()},
            "lmshards_env": train_env,
            "threads": config.threads,
            "reference_head": "masked positions only (as lmshards)",
            "step_time_method": f"median over {config.window}-step windows of the mean ms/step, windows starting "
                                f"before step {WARMUP_STEPS_EXCLUDED} left out; lmshards: its metrics.jsonl "
                                "step_time_s (step calls incl. input waits); reference: batch, masking, forward, "
                                "LM head at the masked positions, backward, optimizer step, loss on the host",
            "eval": {"sequences": sum(len(b.labels) for b in batches), "seed": EVAL_SEED,
                     **{s: dataclasses.asdict(r) for s, r in evaluation["results"].items()},
                     "pairs": evaluation["pairs"],
                     "own_eval_loss": {name: lm.summary.get("eval_loss") for name, lm in runs.items()}},
            "step_time": {s: {**dataclasses.asdict(t), "median_ms": t.median_ms, "steps_per_s": t.steps_per_s}
                          for s, t in times.items()},
            "train_loss_windows": {s: list(window) for s, window in losses.items()},
            "wall_to_last_step_s": walls,
            "reference_import_s": import_s,
            "lmshards_processes": {name: {"wall_s": lm.wall_s, "first_window_s": lm.first_window_s,
                                          "strategy": lm.summary.get("strategy")} for name, lm in runs.items()},
            "targets": v,
            "load_after": load_average(),
        }  # fmt: skip
        config.json_out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {config.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
