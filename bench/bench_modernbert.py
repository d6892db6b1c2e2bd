"""ModernBERT train step on the CPU: lmshards' Keras model (TensorFlow backend) against transformers'
ModernBertForMaskedLM (PyTorch) with the same dimensions, predicted positions and batch.

Usage: python bench/bench_modernbert.py [--preset tiny] [--seq_lens 128 1024] [--threads 1 2] [--batch 8]
       [--steps 12]
Each (side, seq_len, threads) runs in its own process, pinned to that many threads: random tokens, 30% of the
positions predicted, AdamW; the median step time after 2 warm-up steps, the time per token, and the process's
peak resident memory (the runtime's own included). Prints a table and `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARMUP_STEPS = 2
MASK_RATE = 0.3
VOCAB = 50368  # ModernBERT-base's vocabulary


def batch_arrays(*, batch: int, seq_len: int, seed: int = 0):
    """(token ids [batch, seq], predicted positions [batch, n], their labels [batch, n]) as numpy."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = int(seq_len * MASK_RATE)
    ids = rng.integers(10, VOCAB, (batch, seq_len)).astype("int32")
    positions = np.sort(np.stack([rng.choice(seq_len, n, replace=False) for _ in range(batch)]), 1)
    return ids, positions.astype("int32"), np.take_along_axis(ids, positions, 1)


def keras_steps(config, *, batch: int, seq_len: int, steps: int) -> list[float]:
    """Step times of lmshards' TensorFlow train step (the CPU's head on predictions only)."""
    import tensorflow as tf

    from lmshards.train.backends.tensorflow import masked_lm_sums
    from lmshards.train.network.model import build_masked_lm
    from lmshards.train.optim import WarmupDecay, make_optimizer

    model = build_masked_lm(config)
    optimizer = make_optimizer(
        schedule=WarmupDecay(peak=1e-4, warmup_steps=1, total_steps=10**6),
        weight_decay=0.01,
        clip_norm=None,
        loss_scaling=False,
    )
    ids, positions, labels = batch_arrays(batch=batch, seq_len=seq_len)
    data = {
        "token_ids": tf.constant(ids),
        "padding_mask": tf.ones_like(ids),
        "mask_positions": tf.constant(positions),
        "mask_ids": tf.constant(labels),
        "mask_weights": tf.ones(positions.shape, tf.float32),
    }

    @tf.function
    def step(batch):
        with tf.GradientTape() as tape:
            loss_sum, weight_sum, _ = masked_lm_sums(model, batch, training=True, compact=True)
            loss = loss_sum / weight_sum
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return _timed(lambda: float(step(data)), steps)


def torch_steps(config, *, batch: int, seq_len: int, steps: int) -> list[float]:
    """Step times of transformers' ModernBertForMaskedLM, its head on the predicted positions only."""
    import torch
    import transformers

    hf = transformers.ModernBertConfig(
        vocab_size=config.vocabulary_size,
        hidden_size=config.hidden_dim,
        intermediate_size=config.intermediate_dim,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        max_position_embeddings=config.max_sequence_length,
        local_attention=config.local_window,
        sparse_prediction=True,
        pad_token_id=0,
    )
    model = transformers.ModernBertForMaskedLM(hf).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-6)
    ids, positions, labels = batch_arrays(batch=batch, seq_len=seq_len)
    targets = torch.full(ids.shape, -100, dtype=torch.long)
    targets.scatter_(
        1, torch.tensor(positions, dtype=torch.long), torch.tensor(labels, dtype=torch.long)
    )
    inputs = torch.tensor(ids, dtype=torch.long)

    def step() -> float:
        optimizer.zero_grad()
        loss = model(input_ids=inputs, labels=targets).loss
        loss.backward()
        optimizer.step()
        return float(loss)

    return _timed(step, steps)


def _timed(step, steps: int) -> list[float]:
    times = []
    for _ in range(WARMUP_STEPS + steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times[WARMUP_STEPS:]


def run_one(side: str, *, preset: str, seq_len: int, batch: int, steps: int) -> dict:
    """One measurement in this process (its threads already pinned by the environment)."""
    from lmshards.train.config import preset_config

    config = preset_config(preset, family="modernbert", vocabulary_size=VOCAB)
    measure = keras_steps if side == "keras" else torch_steps
    times = measure(config, batch=batch, seq_len=seq_len, steps=steps)
    median = statistics.median(times)
    return {
        "side": side,
        "seq_len": seq_len,
        "median_step_s": round(median, 4),
        "us_per_token": round(1e6 * median / (batch * seq_len), 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def pinned_env(threads: int) -> dict[str, str]:
    """Every runtime's thread pools at `threads` (TensorFlow, oneDNN/OpenMP, PyTorch)."""
    return {
        **os.environ,
        "PYTHONPATH": REPO,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "TF_NUM_INTRAOP_THREADS": str(threads),
        "TF_NUM_INTEROP_THREADS": "1",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--seq_lens", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--one", choices=("keras", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        result = run_one(
            args.one,
            preset=args.preset,
            seq_len=args.seq_lens[0],
            batch=args.batch,
            steps=args.steps,
        )
        print(json.dumps(result))
        return
    results = []
    for threads in args.threads:
        for seq_len in args.seq_lens:
            for side in ("keras", "torch"):
                cmd = [
                    sys.executable,
                    __file__,
                    "--one",
                    side,
                    "--preset",
                    args.preset,
                    "--seq_lens",
                    str(seq_len),
                ]
                cmd += ["--batch", str(args.batch), "--steps", str(args.steps)]
                done = subprocess.run(
                    cmd, env=pinned_env(threads), capture_output=True, text=True, check=True
                )
                row = {"threads": threads, **json.loads(done.stdout.strip().splitlines()[-1])}
                print(row, flush=True)
                results.append(row)
    print("RESULT " + json.dumps({"preset": args.preset, "batch": args.batch, "results": results}))


if __name__ == "__main__":
    main()
