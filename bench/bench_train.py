"""Training-speed benchmark: steps/s and tokens/s of the real trainer loop for the `tiny` and `small` presets.

Usage: python bench/bench_train.py [--steps 60] [--per_replica_batch 32] [--seq_len 128] [--presets tiny small]
       [--steps_per_execution 1] [--precision float32] [--workdir DIR]
Writes random 128-token shards (25k vocabulary) once, trains each preset from scratch through
lmshards.train.loop.trainer.train, and reads the speed from its metrics.jsonl, leaving out the first logging window
(tracing and start-up). With a GPU it also reports MFU: model FLOPs per token ~ 6 x parameters +
12 x layers x hidden x seq_len (attention), against the chip's dense bf16 peak. Prints `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402

import lmshards.train  # noqa: E402,F401  (chooses Keras's backend, which importing TensorFlow already reads)
from bench.common import GENERATED_TOKENIZER  # noqa: E402
from lmshards.plumbing import fs  # noqa: E402
from lmshards.schemas.manifest import manifest_path  # noqa: E402
from lmshards.train.commands.cli import parse_config  # noqa: E402
from lmshards.train.config import preset_config  # noqa: E402
from lmshards.train.families import DEFAULT_FAMILY  # noqa: E402
from lmshards.train.loop.trainer import train  # noqa: E402,F811  (the package import above only chose the backend)
from lmshards.train.network.model import build_masked_lm  # noqa: E402
from lmshards.train.run_dir import RunDir  # noqa: E402

RECORDS = 20_000
WINDOWS = 5
# Dense bf16 peak FLOP/s by device-name fragment (vendor data sheets).
PEAK_BF16_FLOPS = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "L4": 121e12,
    "A10G": 125e12,
    "V100": 125e12,
}


def model_flops_per_token(preset: str, *, vocab: int, seq_len: int) -> tuple[int, float]:
    config = preset_config(preset, family=DEFAULT_FAMILY, vocabulary_size=vocab)
    params = build_masked_lm(config).count_params()
    return params, 6.0 * params + 12.0 * config.num_layers * config.hidden_dim * seq_len


def gpu_peak() -> tuple[str, float] | None:
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "")
    peak = next((flops for key, flops in PEAK_BF16_FLOPS.items() if key in name), None)
    return (name, peak * len(gpus)) if peak else None


def bench_preset(preset: str, *, shards: str, run_dir: str, args) -> dict:
    log_every = max(1, args.steps // WINDOWS)
    train(
        parse_config(
            [
                "--shards",
                shards,
                "--output",
                run_dir,
                "--model_preset",
                preset,
                "--steps",
                str(args.steps),
                "--per_replica_batch",
                str(args.per_replica_batch),
                "--steps_per_execution",
                str(args.steps_per_execution),
                "--precision",
                args.precision,
                "--log_every",
                str(log_every),
                "--eval_every",
                str(10 * args.steps),
                "--checkpoint_every",
                str(10 * args.steps),
            ]
        )
    )
    records = RunDir(run_dir).read_metrics()
    windows = [r for r in records if "loss" in r][1:]
    steps = sum(log_every for _ in windows)
    seconds = sum(r["step_time_s"] * log_every for r in windows)
    tokens_per_s = (
        steps
        * args.per_replica_batch
        * tf.distribute.get_strategy().num_replicas_in_sync
        * args.seq_len
        / seconds
    )
    params, flops_per_token = model_flops_per_token(
        preset, vocab=GENERATED_TOKENIZER.vocab_size, seq_len=args.seq_len
    )
    result = {
        "preset": preset,
        "params": params,
        "steps_per_s": steps / seconds,
        "tokens_per_s": tokens_per_s,
    }
    peak = gpu_peak()
    if peak:
        result["mfu"] = tokens_per_s * flops_per_token / peak[1]
        result["device"] = peak[0]
    print(
        f"{preset}: {params:,} params, {result['steps_per_s']:.2f} steps/s, {tokens_per_s:,.0f} tokens/s"
        + (f", MFU {result['mfu']:.1%}" if "mfu" in result else "")
    )
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--per_replica_batch", type=int, default=32)
    p.add_argument("--seq_len", type=int, default=128)
    p.add_argument("--presets", nargs="+", default=["tiny", "small"])
    p.add_argument("--steps_per_execution", type=int, default=1)
    p.add_argument("--precision", default="float32")
    p.add_argument(
        "--workdir",
        help="keeps the generated shards here between runs (default: a temporary directory)",
    )
    args = p.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench_train_")
    shards = os.path.join(workdir, f"shards_{args.seq_len}")
    if not fs.exists(manifest_path(shards)):
        from tests.helpers.shard_factory import write_random_shards

        write_random_shards(
            shards, records=RECORDS, seq_len=args.seq_len, tokenizer=GENERATED_TOKENIZER
        )
    results = [
        bench_preset(
            preset,
            shards=shards,
            run_dir=tempfile.mkdtemp(dir=workdir, prefix=f"run_{preset}_"),
            args=args,
        )
        for preset in args.presets
    ]
    print("RESULT " + json.dumps({"results": results, "args": vars(args), "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
