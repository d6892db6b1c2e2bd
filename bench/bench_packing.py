"""Packing benchmark: `--packing best_fit` beside `--packing concat`, on the same tokens, side by side in one run.

For each --seq_lens value:
  1. padding  - `lmshards preprocess` of the corpus with each packing (one tokenizer, the same options
                otherwise); the manifests' padding share, segments per block and documents split;
  2. learning - `lmshards train --model_preset tiny` for the same --steps and batch on each set, then both
                models scored by the same code on the same held-out whole documents: the best_fit set's
                validation blocks, where each document attends only to itself (the concat run's weights in
                the packed backbone, which has the same variables), one fixed mask draw, masked-token
                cross-entropy in nats;
  3. speed    - train-step time of the packed backbone (the [batch, seq, seq] segment mask, explicit
                positions) beside the plain one (padding mask), the same model size, batch and tokens,
                alternated in one process; median ms/step over --timed_steps after warm-up.

Usage (from the repository root, with the venv active):
  python -m bench.bench_packing --json bench-packing.json                        # the bundled English sample
  python -m bench.bench_packing --corpus /tmp/benchcorpus/en --seq_lens 128,512 --steps 200
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    SAMPLE_CORPUS,
    child_env,
    lmshards_tokenizer,
    load_average,
    report_header,
    run_lmshards,
)

CODE_DIRS = ("train", "schemas", "preprocess", "bench")
PACKINGS = ("concat", "best_fit")
VALIDATION_FRACTION = 0.05
BATCH = 16
LEARNING_RATE = 1e-3
SPEED_PRESET_DIMS = dict(
    num_layers=4, num_heads=4, hidden_dim=256, intermediate_dim=1024
)  # `small`
WARMUP_STEPS = 3


def make_sets(
    corpus: Path, work: Path, seq_len: int, tokenizer: str, extra: list[str]
) -> dict[str, str]:
    """packing -> the shard set `lmshards preprocess` makes of the corpus with it (and the extra flags)."""
    sets = {}
    for packing in PACKINGS:
        out = work / f"{packing}-{seq_len}"
        run_lmshards(["preprocess", "--input", str(corpus), "--tokenizer", tokenizer, "--output", str(out),
                      "--seq_len", str(seq_len), "--validation_fraction", str(VALIDATION_FRACTION),
                      "--num_shards", "2", "--shard_multiple", "1", "--packing", packing, *extra],
                     env=child_env(), log_path=work / f"preprocess-{packing}-{seq_len}.log")  # fmt: skip
        sets[packing] = str(out)
    return sets


def padding_stats(shards: str) -> dict[str, Any]:
    """The train split's padding share, segments per block and documents split, from the manifest."""
    from lmshards.schemas.manifest import read_manifest

    manifest = read_manifest(shards)
    t = manifest.split("train").totals
    return {
        "records": t.records,
        "tokens_written": t.tokens_written,
        "padding_tokens": t.padding_tokens,
        "padding_share": round(t.padding_share(manifest.seq_len), 5),
        "segments_per_block": round(t.segments_per_block, 3) if manifest.packed else None,
        "documents_split": t.documents_split if manifest.packed else None,
    }


def train_run(shards: str, run: Path, *, steps: int) -> None:
    run_lmshards(["train", "--shards", shards, "--output", str(run), "--model_preset", "tiny", "--steps", str(steps),
                  "--per_replica_batch", str(BATCH), "--learning_rate", str(LEARNING_RATE), "--eval_every",
                  str(steps), "--eval_batches", "1", "--final_eval", "none", "--checkpoint_every", str(steps),
                  "--log_every", str(max(1, steps // 10)), "--strategy", "cpu"],
                 env=child_env(), log_path=run.with_suffix(".log"))  # fmt: skip


def whole_document_loss(run: Path, packed_set: str) -> float:
    """Masked-token cross-entropy of a run's model on the packed set's validation documents, each alone."""
    from lmshards.train.backends.tensorflow import masked_lm_sums
    from lmshards.train.backends.weights import load_model_from_run
    from lmshards.train.inputs import data, mixture
    from lmshards.train.network.model import build_masked_lm

    trained, model_config = load_model_from_run(str(run))
    model = build_masked_lm(model_config, packed=True)
    model.set_weights(trained.get_weights())
    mix = mixture.open_mixture([packed_set])
    masking = data.masking_spec(mix.manifest, recipe="token", mlm_probability=0.15, tokenizer=None)
    total, count = 0.0, 0.0
    for batch in data.eval_dataset(
        mix.sets[0].files("validation"),
        features=mix.manifest.features(),
        batch_size=BATCH,
        masking=masking,
        with_segment_ids=model_config.family == "bert",
    ):
        loss, weight, _ = masked_lm_sums(model, batch, training=False)
        total, count = total + float(loss), count + float(weight)
    return total / count


def step_times(seq_len: int, *, timed_steps: int) -> dict[str, float]:
    """Median ms per train step of the plain and the packed backbone, alternated, on the same batches."""
    import keras
    import tensorflow as tf

    from lmshards.train.config import ModelConfig
    from lmshards.train.families.base import PACKED_POSITIONS_INPUT, PACKED_SEGMENTS_INPUT
    from lmshards.train.network.model import build_masked_lm

    config = ModelConfig(vocabulary_size=8000, max_sequence_length=seq_len, **SPEED_PRESET_DIMS)
    rng = np.random.default_rng(0)
    predictions = max(1, int(seq_len * 0.15))
    # Blocks of four documents, so the mask is really block-diagonal.
    segments = np.repeat(np.arange(1, 5), seq_len // 4)[None].repeat(BATCH, 0).astype(np.int32)
    positions = np.tile(np.arange(seq_len // 4), 4)[None].repeat(BATCH, 0).astype(np.int32)
    batch = {
        "token_ids": rng.integers(5, 8000, (BATCH, seq_len)).astype(np.int32),
        "padding_mask": np.ones((BATCH, seq_len), np.int32),
        PACKED_SEGMENTS_INPUT: segments,
        PACKED_POSITIONS_INPUT: positions,
        "mask_positions": np.sort(rng.choice(seq_len, (BATCH, predictions)), axis=1).astype(
            np.int32
        ),
    }
    labels = tf.constant(rng.integers(5, 8000, (BATCH, predictions)).astype(np.int32))
    steps = {}
    for name, packed in (("plain", False), ("packed", True)):
        model = build_masked_lm(config, packed=packed)
        optimizer = keras.optimizers.AdamW(1e-4)
        inputs = {k: tf.constant(batch[k]) for k in model.input}

        @tf.function(jit_compile=False)
        def step(inputs=inputs, model=model, optimizer=optimizer):
            with tf.GradientTape() as tape:
                logits = model(inputs, training=True)
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
                )
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply(grads, model.trainable_variables)
            return loss

        steps[name] = step
    times: dict[str, list[float]] = {name: [] for name in steps}
    for i in range(WARMUP_STEPS + timed_steps):
        for name, step in steps.items():  # alternated: a load change hits both alike
            start = time.perf_counter()
            float(step())
            if i >= WARMUP_STEPS:
                times[name].append((time.perf_counter() - start) * 1000)
    result = {f"{name}_ms_per_step": round(statistics.median(t), 2) for name, t in times.items()}
    result["packed_over_plain"] = round(
        result["packed_ms_per_step"] / result["plain_ms_per_step"], 3
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus", default=str(SAMPLE_CORPUS), help="text files (a directory or glob)"
    )
    parser.add_argument(
        "--tokenizer", default=None, help="default: a BPE tokenizer trained on --corpus"
    )
    parser.add_argument("--seq_lens", default="128,512")
    parser.add_argument("--steps", type=int, default=200, help="train steps of each run")
    parser.add_argument("--timed_steps", type=int, default=10)
    parser.add_argument("--skip_learning", action="store_true", help="padding and speed only")
    parser.add_argument(
        "--preprocess_args",
        default="",
        help="more `lmshards preprocess` flags, e.g. '--doc_separator blank_line'",
    )
    parser.add_argument("--json", default=None, help="write the report here")
    args = parser.parse_args(argv)
    started = time.time()
    report = report_header("packing", started=started, argv=argv, code_dirs=CODE_DIRS)
    report["load_average_before"] = load_average()
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-packing-") as tmp:
        work = Path(tmp)
        tokenizer = args.tokenizer
        if tokenizer is None:
            tokenizer = str(work / "tokenizer")
            lmshards_tokenizer(
                args.corpus, Path(tokenizer), env=child_env(), log_path=work / "tokenizer.log"
            )
        for seq_len in (int(s) for s in args.seq_lens.split(",")):
            extra = shlex.split(args.preprocess_args)
            sets = make_sets(Path(args.corpus), work, seq_len, tokenizer, extra)
            entry: dict[str, Any] = {"padding": {p: padding_stats(s) for p, s in sets.items()}}
            if not args.skip_learning:
                losses = {}
                for packing, shards in sets.items():
                    run = work / f"run-{packing}-{seq_len}"
                    train_run(shards, run, steps=args.steps)
                    losses[packing] = round(whole_document_loss(run, sets["best_fit"]), 4)
                entry["whole_document_eval_loss"] = losses
            entry["step_time"] = step_times(seq_len, timed_steps=args.timed_steps)
            results[str(seq_len)] = entry
            print(json.dumps({seq_len: entry}, indent=2), flush=True)
    report["results"] = results
    report["load_average_after"] = load_average()
    report["elapsed_s"] = round(time.time() - started, 1)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
