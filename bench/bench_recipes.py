"""Learning check of the masking recipes: one `lmshards train` run per recipe, the same steps, each scored on fixed masks.

In one run, on one machine:
  1. shards  - `lmshards tokenizer train` (byte-level BPE, vocabulary 2000: a tiny model gets past predicting word
               frequencies within a few hundred steps) and `lmshards preprocess` (128 tokens) on the bundled English
               sample (or --corpus DIR), as bench_learning makes them; or --shards DIR to reuse a shard set. The shard
               set carries its tokenizer, so no run is given --tokenizer.
  2. runs    - `lmshards train --model_preset tiny --masking R` for R in token, whole_word, span: the same steps, batch,
               learning rate, seed and --mlm_probability.
  3. scoring - each run's final weights on the validation split, masked once with the trainer's fixed evaluation
               seed: with its own recipe's masks and with token-level masks (the same masks for every model), as the
               mean cross-entropy over the predicted tokens (nats) and accuracy. Beside them, the context-free
               baseline on the same masks: every masked token predicted from the train split's token frequencies alone.
A recipe learned when its own-masks eval loss is at least FALL_NATS below its start (the mean train loss of its first
logging window, about log(vocabulary) for an untrained model) and at least CONTEXT_NATS below the context-free baseline
(the model uses the unmasked tokens around a masked one). Otherwise the bench exits 1 naming the broken recipe.

Usage (from the repository root, with the venv active):
  python -m bench.bench_recipes --json bench-recipes.json          # the default run, ~3 min on 2 idle cores
  python -m bench.bench_recipes --steps 200 --mlm_probability 0.3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    add_corpus_flag,
    add_run_output_flags,
    add_schedule_flags,
    child_env,
    load_average,
    logged_windows,
    make_shards,
    report_header,
    run_lmshards,
)
from lmshards.train.run_dir import RunDir

# The code a recipe run executes: an uncommitted change there makes the report's commit not the whole story.
CODE_DIRS = ("train", "schemas", "preprocess", "corpus_tools", "lmshards", "bench")
RECIPES = ("token", "whole_word", "span")
VOCAB_SIZE = 2000
PRESET = "tiny"
DEFAULT_STEPS = 400
DEFAULT_BATCH = 32
DEFAULT_LEARNING_RATE = 3e-3
DEFAULT_MLM_PROBABILITY = 0.15
WARMUP_FRACTION = 0.05
SEED = 0
LOG_EVERY = 10  # the first window's mean train loss is a recipe's start
EVAL_BATCH = 64
# A recipe is broken unless its own-masks eval loss ends this far below its start and the context-free baseline (nats).
FALL_NATS = 1.0
CONTEXT_NATS = 0.05
TOKEN_MASKS = "token"


@dataclasses.dataclass(frozen=True)
class Config:
    corpus: Path
    shards: str | None
    steps: int
    batch_size: int
    learning_rate: float
    mlm_probability: float
    work_dir: Path
    json_out: Path | None


@dataclasses.dataclass(frozen=True)
class Score:
    loss: float  # mean cross-entropy over the predicted tokens, nats
    accuracy: float
    masked_tokens: int


def train_args(config: Config, *, shards: str, recipe: str, run_dir: Path) -> list[str]:
    steps = str(config.steps)
    return ["train", "--shards", shards, "--output", str(run_dir), "--model_preset", PRESET, "--steps", steps,
            "--per_replica_batch", str(config.batch_size), "--learning_rate", str(config.learning_rate),
            "--warmup_steps", str(max(1, round(WARMUP_FRACTION * config.steps))), "--masking", recipe,
            "--mlm_probability", str(config.mlm_probability), "--seed", str(SEED), "--log_every", str(LOG_EVERY),
            "--eval_every", steps, "--checkpoint_every", steps]  # fmt: skip


def fixed_masks(shards: str, recipe: str, mlm_probability: float) -> list[dict[str, Any]]:
    """The validation split masked by `recipe` with the trainer's fixed evaluation seed: the same batches for every model."""
    from lmshards.train.inputs import data, mixture
    from lmshards.train.inputs.shard_set_tokenizer import run_tokenizer

    mix = mixture.open_mixture([shards])
    masking = data.masking_spec(
        mix.manifest,
        recipe=recipe,
        mlm_probability=mlm_probability,
        tokenizer=run_tokenizer(None, mix),
    )
    ds = data.eval_dataset(
        mix.sets[0].files("validation"),
        features=mix.manifest.features(),
        batch_size=EVAL_BATCH,
        masking=masking,
        with_segment_ids=False,
    )
    return list(ds)


def token_frequencies(shards: str) -> np.ndarray:
    """float64 [vocab]: each id's share of the train split's tokens, add-one smoothed."""
    import tensorflow as tf

    from lmshards.train.inputs import mixture

    mix = mixture.open_mixture([shards])
    spec = {"input_ids": tf.io.FixedLenFeature([mix.manifest.seq_len], tf.int64)}
    counts = np.ones(mix.manifest.tokenizer.vocab_size)
    records = tf.data.TFRecordDataset(list(mix.sets[0].files("train").paths)).batch(1024)
    for batch in records.map(lambda r: tf.io.parse_example(r, spec)).as_numpy_iterator():
        counts += np.bincount(batch["input_ids"].ravel(), minlength=len(counts))
    return counts / counts.sum()


def context_free_loss(frequencies: np.ndarray, batches: Sequence[dict[str, Any]]) -> float:
    """Mean cross-entropy of predicting every masked token by its train-split frequency alone."""
    labels = np.concatenate([b["mask_ids"].numpy()[b["mask_weights"].numpy() > 0] for b in batches])
    return float(-np.log(frequencies[labels]).mean())


def score(model: Any, batches: Sequence[dict[str, Any]]) -> Score:
    from lmshards.train.backends.tensorflow import masked_lm_sums

    loss = tokens = correct = 0.0
    for batch in batches:
        sums = [float(v) for v in masked_lm_sums(model, batch, training=False)]
        loss, tokens, correct = loss + sums[0], tokens + sums[1], correct + sums[2]
    return Score(loss=loss / tokens, accuracy=correct / tokens, masked_tokens=int(tokens))


def verdict(recipe: str, *, start: float, own: Score, context_free: float) -> str | None:
    """None when the recipe learned, else the line that says it is broken."""
    if start - own.loss < FALL_NATS:
        return (
            f"recipe {recipe} is broken: its eval loss on its own masks is {own.loss:.3f} nats, only "
            f"{start - own.loss:.3f} below its start ({start:.3f}); at least {FALL_NATS} expected"
        )
    if context_free - own.loss < CONTEXT_NATS:
        return (
            f"recipe {recipe} is broken: its eval loss on its own masks is {own.loss:.3f} nats, not {CONTEXT_NATS} "
            f"below predicting each masked token by its frequency ({context_free:.3f}): the model does not use context"
        )
    return None


def table(rows: Sequence[dict[str, Any]]) -> str:
    header = (
        "recipe",
        "start",
        "last train",
        "eval own masks",
        "context-free",
        "acc own",
        "eval token masks",
        "context-free",
        "acc token",
        "learned",
    )
    cells = [header] + [(
        r["recipe"], f"{r['start_loss']:.3f}", f"{r['last_train_loss']:.3f}", f"{r['own_masks']['loss']:.3f}",
        f"{r['own_masks']['context_free_loss']:.3f}", f"{r['own_masks']['accuracy']:.3f}",
        f"{r['token_masks']['loss']:.3f}", f"{r['token_masks']['context_free_loss']:.3f}",
        f"{r['token_masks']['accuracy']:.3f}", "yes" if r["learned"] else "NO",
    ) for r in rows]  # fmt: skip
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
        for row in cells
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> Config:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_corpus_flag(p)
    p.add_argument(
        "--shards", help="reuse this `lmshards preprocess` output (it must carry its tokenizer)"
    )
    add_schedule_flags(
        p,
        steps=DEFAULT_STEPS,
        batch_size=DEFAULT_BATCH,
        learning_rate=DEFAULT_LEARNING_RATE,
        of="every run",
    )
    p.add_argument(
        "--mlm_probability",
        type=float,
        default=DEFAULT_MLM_PROBABILITY,
        help="fraction of tokens every recipe selects (default: %(default)s)",
    )
    add_run_output_flags(p)
    a = p.parse_args(argv)
    if a.steps < 2 * LOG_EVERY:
        p.error(
            f"--steps must be at least {2 * LOG_EVERY}: the first {LOG_EVERY}-step window is the start"
        )
    return Config(corpus=a.corpus, shards=a.shards, steps=a.steps, batch_size=a.batch_size, learning_rate=a.learning_rate,
                  mlm_probability=a.mlm_probability, work_dir=a.work_dir or Path(tempfile.mkdtemp(prefix="bench_recipes_")),
                  json_out=a.json)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    work = config.work_dir
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    env = child_env()
    if config.shards:
        shards = config.shards
    else:
        print(f"making shards from {config.corpus} ...", flush=True)
        shards, _ = make_shards(config.corpus, work, env=env, vocab_size=VOCAB_SIZE)

    runs = {}
    for recipe in RECIPES:
        run_dir = work / f"run_{recipe}"
        args = train_args(config, shards=shards, recipe=recipe, run_dir=run_dir)
        print(f"{recipe}: $ lmshards {shlex.join(args)}", flush=True)
        t0 = time.perf_counter()
        run_lmshards(args, env=env, log_path=work / f"train_{recipe}.log")
        runs[recipe] = {
            "command": ["lmshards", *args],
            "wall_s": time.perf_counter() - t0,
            "windows": logged_windows(RunDir(str(run_dir)).metrics_path),
        }

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from lmshards.train.backends.weights import load_model_from_run

    masks = {name: fixed_masks(shards, name, config.mlm_probability) for name in RECIPES}
    frequencies = token_frequencies(shards)
    context_free = {
        name: context_free_loss(frequencies, batches) for name, batches in masks.items()
    }
    rows, broken = [], []
    for recipe in RECIPES:
        model, _ = load_model_from_run(str(work / f"run_{recipe}"))
        own, token = score(model, masks[recipe]), score(model, masks[TOKEN_MASKS])
        windows = runs[recipe]["windows"]
        start = windows[0]["loss"]
        problem = verdict(recipe, start=start, own=own, context_free=context_free[recipe])
        broken += [problem] if problem else []
        rows.append({"recipe": recipe, "start_loss": start, "last_train_loss": windows[-1]["loss"],
                     "own_masks": {**dataclasses.asdict(own), "context_free_loss": context_free[recipe]},
                     "token_masks": {**dataclasses.asdict(token), "context_free_loss": context_free[TOKEN_MASKS]},
                     "fell_by": start - own.loss, "learned": problem is None, "command": runs[recipe]["command"],
                     "wall_s": runs[recipe]["wall_s"],
                     "train_loss_windows": [(w["step"], w["loss"]) for w in windows]})  # fmt: skip
    print()
    print(table(rows))
    print()
    print(
        f"start: mean train loss of the first {LOG_EVERY} steps; eval: validation split, fixed masks "
        f"(mlm_probability {config.mlm_probability}), {rows[0]['token_masks']['masked_tokens']} token-level predictions; "
        "context-free: each masked token predicted by its train-split frequency"
    )
    print(
        "\n".join(broken)
        if broken
        else f"every recipe learned: its loss fell at least {FALL_NATS} nats below its start "
        f"and {CONTEXT_NATS} below the context-free baseline"
    )
    if config.json_out:
        report = {
            **report_header("recipes", started=started, argv=argv, code_dirs=CODE_DIRS),
            "shards": shards,
            "run": {"preset": PRESET, "steps": config.steps, "batch_size": config.batch_size,
                    "learning_rate": config.learning_rate, "mlm_probability": config.mlm_probability, "seed": SEED},
            "required": {"fall_below_start_nats": FALL_NATS, "below_context_free_nats": CONTEXT_NATS},
            "recipes": rows,
            "broken": broken,
            "wall_s": time.time() - started,
            "load_after": load_average(),
        }  # fmt: skip
        config.json_out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {config.json_out}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
