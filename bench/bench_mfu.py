"""Accelerator check: step time, tokens/s and MFU of the JAX backend's train step, on synthetic batches.

Usage: python bench/bench_mfu.py [--presets tiny base] [--steps 20] [--per_device_batch N] [--seq_len 128]
       [--vocab 30522] [--precision mixed_bfloat16] [--steps_per_execution 1]
Runs on whatever devices JAX sees (every one in a data-parallel mesh) and never imports TensorFlow:
it needs JAX, Keras and keras-hub only (bench/device_check.sh installs the last two on a bare GPU host).
The batches are made once on the host and placed on the devices before timing, so what is timed is
the compiled step alone; the first call (compilation) and --warmup calls are left out. Prints
`PRESET {json}` as each preset finishes and `RESULT {json}` as its last line.

Model FLOPs per token (training: forward + backward = 3 x the forward's 2 FLOPs per multiply-add),
from the config, with L layers, hidden h, intermediate i, sequence s, vocabulary V and P predicted
slots per sequence (the MLM head runs at those slots only, as lmshards computes it):
    6 * L * (4 h^2 + 2 h i)          the encoder's matmul weights (Q, K, V, output; the two FFN layers)
  + 12 * L * s * h                   attention scores and the weighted sum of values
  + 6 * (P / s) * (h^2 + h V)        the MLM head's dense layer and its vocabulary projection
Embedding look-ups, layer norms, biases and softmax are left out (< 1% for `base`). MFU = tokens/s x
FLOPs per token / (devices x the device's dense bf16 peak); null where the peak is not known (CPUs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

# Dense bf16 peak FLOP/s per device, by a fragment of JAX's device_kind (vendor data sheets); the first
# fragment found wins, so the longer of two similar names comes first.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989e12),
    ("H100", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10G", 125e12),
    ("TPU v6 lite", 918e12),
    ("TPU v5 lite", 197e12),
    ("TPU v5", 459e12),
    ("TPU v4", 275e12),
)
DEFAULT_BATCH = {"cpu": 8, "gpu": 256, "tpu": 256}  # sequences per device per step
DISTINCT_BATCHES = 4  # different synthetic batches, cycled
MLM_PROBABILITY = 0.15
FAMILY = "roberta"


def flops_per_token(
    *, layers: int, hidden: int, intermediate: int, seq_len: int, vocab: int, predictions: int
) -> float:
    """Training FLOPs per token of the encoder + MLM head (the formula in this module's docstring)."""
    encoder = 6 * layers * (4 * hidden**2 + 2 * hidden * intermediate)
    attention = 12 * layers * seq_len * hidden
    head = 6 * (predictions / seq_len) * (hidden**2 + hidden * vocab)
    return float(encoder + attention + head)


def peak_flops(device_kind: str) -> float | None:
    """The dense bf16 peak of one device of this kind, or None when it is not in PEAK_BF16_FLOPS."""
    return next((peak for key, peak in PEAK_BF16_FLOPS if key in device_kind), None)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--presets", nargs="+", default=["tiny", "base"])
    p.add_argument("--steps", type=int, default=20, help="timed steps per preset")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls after the compiling one")
    p.add_argument("--per_device_batch", type=int, help="default: 8 on CPUs, 256 on GPUs and TPUs")
    p.add_argument("--seq_len", type=int, default=128)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--precision", default="mixed_bfloat16")
    p.add_argument("--steps_per_execution", type=int, default=1)
    return p.parse_args(list(argv))


def bench_preset(preset: str, args: argparse.Namespace) -> dict[str, Any]:
    import jax
    import numpy as np

    from lmshards.train.backends import jax_step
    from lmshards.train.config import preset_config
    from lmshards.train.masking_recipes import max_predictions_for
    from lmshards.train.optim import WarmupDecay

    mesh = jax_step.Mesh.over()
    platform = jax.devices()[0].platform
    per_device = args.per_device_batch or DEFAULT_BATCH.get(platform, 8)
    batch = per_device * mesh.size
    predictions = max_predictions_for(args.seq_len, MLM_PROBABILITY)
    config = preset_config(preset, family=FAMILY, vocabulary_size=args.vocab)
    model, optimizer = jax_step.build(
        config,
        schedule=WarmupDecay(peak=1e-4, warmup_steps=10, total_steps=10_000),
        weight_decay=0.01,
        clip_norm=None,
        precision=args.precision,
        seed=0,
    )
    step_fn = jax_step.train_steps_fn(model, optimizer)
    state = jax_step.state_of(model, optimizer)
    rng = np.random.default_rng(0)
    k = args.steps_per_execution
    calls = []
    for _ in range(DISTINCT_BATCHES):
        one = [
            jax_step.synthetic_batch(
                rng,
                batch=batch // jax.process_count(),
                seq_len=args.seq_len,
                max_predictions=predictions,
                vocab_size=args.vocab,
                with_segment_ids=False,
            )
            for _ in range(k)
        ]
        calls.append(mesh.shard(jax_step.stack_batches(one), stacked=True))

    t0 = time.perf_counter()
    state, losses = step_fn(state, calls[0])
    losses.block_until_ready()
    compile_s = time.perf_counter() - t0
    for i in range(args.warmup):
        state, losses = step_fn(state, calls[i % DISTINCT_BATCHES])
    losses.block_until_ready()
    times = []
    for i in range(max(1, args.steps // k)):
        t0 = time.perf_counter()
        state, losses = step_fn(state, calls[i % DISTINCT_BATCHES])
        losses.block_until_ready()
        times.append((time.perf_counter() - t0) / k)

    step_s = statistics.median(times)
    tokens_per_s = batch * args.seq_len / step_s
    fpt = flops_per_token(
        layers=config.num_layers,
        hidden=config.hidden_dim,
        intermediate=config.intermediate_dim,
        seq_len=args.seq_len,
        vocab=args.vocab,
        predictions=predictions,
    )
    peak = peak_flops(jax.devices()[0].device_kind)
    return {
        "preset": preset,
        "params": int(model.count_params()),
        "global_batch": batch,
        "seq_len": args.seq_len,
        "predictions_per_sequence": predictions,
        "flops_per_token": fpt,
        "compile_s": round(compile_s, 3),
        "steps_timed": len(times) * k,
        "step_time_s": step_s,
        "tokens_per_s": tokens_per_s,
        "model_tflops_per_s": tokens_per_s * fpt / 1e12,
        "mfu": tokens_per_s * fpt / (peak * mesh.size) if peak else None,
        "last_loss": float(np.asarray(losses)[-1]),
    }


def main(argv: Sequence[str]) -> dict[str, Any]:
    # Keras reads its backend when it is first imported, so this comes before any lmshards or keras import.
    os.environ["KERAS_BACKEND"] = "jax"
    import jax
    import keras

    args = parse_args(argv)
    results = []
    for preset in args.presets:
        results.append(bench_preset(preset, args))
        # Each preset's line as soon as it is measured: a time limit that stops a later one keeps it.
        print("PRESET " + json.dumps(results[-1], sort_keys=True), flush=True)
    device = jax.devices()[0]
    report = {
        "bench": "mfu",
        "backend": keras.backend.backend(),
        "jax": jax.__version__,
        "keras": keras.__version__,
        "platform": device.platform,
        "device_kind": device.device_kind,
        "devices": jax.device_count(),
        "precision": args.precision,
        "steps_per_execution": args.steps_per_execution,
        "peak_bf16_flops_per_device": peak_flops(device.device_kind),
        "results": results,
        "tensorflow_imported": "tensorflow" in sys.modules,
    }
    print("RESULT " + json.dumps(report, sort_keys=True))
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
