"""ModernBERT train step on the CPU: lmshards' Keras model (TensorFlow backend) against transformers'
ModernBertForMaskedLM (PyTorch) with the same dimensions, predicted positions and batch, and against lmshards'
own RoBERTa preset of the same name (how each family's step scales with the context).

Usage: python bench/bench_modernbert.py [--preset tiny] [--seq_lens 128 1024] [--threads 1 2] [--batch 8]
       [--steps 12] [--sides keras torch roberta] [--tokens_per_step 8192]
Sides: keras (lmshards' ModernBERT), torch (transformers' ModernBERT), roberta (lmshards' RoBERTa preset, its
position table widened to the longest --seq_lens). Each (side, seq_len, threads) runs in its own process, pinned
to that many threads, the sides alternating: random tokens, 30% of the positions predicted, AdamW; the median
step time after 2 warm-up steps, the wall and process CPU time per token, the process's resident memory before
the first step and its peak (the runtime's own included). --tokens_per_step sizes the batch as tokens_per_step / seq_len, so every
seq_len does the same tokens per step. Prints a table and `RESULT {json}`.
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
SIDES = ("keras", "torch", "roberta")


def batch_arrays(*, batch: int, seq_len: int, seed: int = 0):
    """(token ids [batch, seq], predicted positions [batch, n], their labels [batch, n]) as numpy."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = int(seq_len * MASK_RATE)
    ids = rng.integers(10, VOCAB, (batch, seq_len)).astype("int32")
    positions = np.sort(np.stack([rng.choice(seq_len, n, replace=False) for _ in range(batch)]), 1)
    return ids, positions.astype("int32"), np.take_along_axis(ids, positions, 1)


def resident_mb() -> float:
    """This process's resident memory now, MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def keras_steps(config, *, batch: int, seq_len: int, steps: int):
    """(step times, resident MB before the first) of lmshards' TensorFlow train step (the CPU's head on
    predictions only)."""
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


def torch_steps(config, *, batch: int, seq_len: int, steps: int):
    """(step times, resident MB before the first) of transformers' ModernBertForMaskedLM, its head on the
    predicted positions only."""
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


def _timed(step, steps: int) -> tuple[list[tuple[float, float]], float]:
    """((wall s, process CPU s) of each step after the warm-up ones, resident MB before the first)."""
    before = resident_mb()
    times = []
    for _ in range(WARMUP_STEPS + steps):
        start, cpu = time.perf_counter(), time.process_time()
        step()
        times.append((time.perf_counter() - start, time.process_time() - cpu))
    return times[WARMUP_STEPS:], before


def run_one(side: str, *, preset: str, seq_len: int, batch: int, steps: int) -> dict:
    """One measurement in this process (its threads already pinned by the environment)."""
    import dataclasses

    from lmshards.train.config import preset_config

    family = "roberta" if side == "roberta" else "modernbert"
    config = preset_config(preset, family=family, vocabulary_size=VOCAB)
    # RoBERTa's learned position table is as long as the longest sequence it is given.
    config = dataclasses.replace(
        config, max_sequence_length=max(config.max_sequence_length, seq_len)
    )
    measure = torch_steps if side == "torch" else keras_steps
    times, before_mb = measure(config, batch=batch, seq_len=seq_len, steps=steps)
    median = statistics.median(wall for wall, _ in times)
    # CPU seconds (all threads) hold better than wall time on a machine that other jobs load.
    cpu = statistics.median(cpu for _, cpu in times)
    return {
        "side": side,
        "seq_len": seq_len,
        "batch": batch,
        "median_step_s": round(median, 4),
        "us_per_token": round(1e6 * median / (batch * seq_len), 2),
        "cpu_us_per_token": round(1e6 * cpu / (batch * seq_len), 2),
        "rss_before_steps_mb": round(before_mb, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "load1": round(os.getloadavg()[0], 1),  # the machine's, others' jobs included
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
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=["keras", "torch"])
    parser.add_argument(
        "--tokens_per_step", type=int, help="batch = this / seq_len (in place of --batch)"
    )
    parser.add_argument("--one", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    uneven = [n for n in args.seq_lens if args.tokens_per_step and args.tokens_per_step % n]
    if uneven:
        parser.error(
            f"--tokens_per_step {args.tokens_per_step} is not a multiple of --seq_lens {uneven}; "
            "give a multiple of the longest"
        )
    if args.one:
        if args.one == "torch":  # only there: torch's own memory would count in a Keras side's peak
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
            batch = args.tokens_per_step // seq_len if args.tokens_per_step else args.batch
            for side in args.sides:
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
                cmd += ["--batch", str(batch), "--steps", str(args.steps)]
                done = subprocess.run(
                    cmd, env=pinned_env(threads), capture_output=True, text=True, check=True
                )
                row = {"threads": threads, **json.loads(done.stdout.strip().splitlines()[-1])}
                print(row, flush=True)
                results.append(row)
    print("RESULT " + json.dumps({"preset": args.preset, "results": results}))


if __name__ == "__main__":
    main()
