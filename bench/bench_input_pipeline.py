"""Input-pipeline benchmark: lmshards' input plan (read + parse + mask + batch) beside the reference.

Usage: python bench/bench_input_pipeline.py SHARDS_DIR [--generate RECORDS] [--batch 256] [--epochs 2]
With --generate and no manifest in SHARDS_DIR, first writes RECORDS random records of 128 tokens
(8 shards + manifest). Reports sequences/s of our pipeline, the reference's vectorized and hf_style
pipelines (bench/reference_input_baseline.py) in the same run, and masking alone: our stateless
TF ops vs keras_hub.layers.MaskedLMMaskGenerator. Prints one `RESULT {json}` line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402

import lmshards.train  # noqa: E402,F401  (chooses Keras's backend, which importing TensorFlow already reads)
from bench.common import GENERATED_TOKENIZER  # noqa: E402
from bench.reference_input_baseline import run_all as run_reference  # noqa: E402
from lmshards.plumbing import fs  # noqa: E402
from lmshards.schemas.manifest import manifest_path  # noqa: E402
from lmshards.train.inputs import mixture  # noqa: E402
from lmshards.train.inputs.input_plan import InputPlan, masking_for  # noqa: E402
from lmshards.train.inputs.masking import mask_batch  # noqa: E402

MASKING_BATCHES = 200


def token_inputs(shards_dir: str, *, batch: int) -> InputPlan:
    """The trainer's input plan for one host and the token recipe (mlm_probability 0.15, seed 0)."""
    mix = mixture.open_mixture([shards_dir])
    masking = masking_for(mix, recipe="token", mlm_probability=0.15, tokenizer=None)
    return InputPlan.create(
        mix, masking=masking, per_replica_batch=batch, seed=0, shuffle_buffer=10_000
    )


def our_pipeline(shards_dir: str, *, batch: int, epochs: int) -> tuple[float, float]:
    """(sequences/s, sequences per CPU-second) over `epochs` epochs of the trainer's input plan on one host."""
    inputs = token_inputs(shards_dir, batch=batch)
    ds = inputs.train_dataset(pipeline_id=0, start_step=0)
    n, t, c = 0, time.perf_counter(), time.process_time()
    for _ in ds.take(inputs.steps_per_epoch * epochs):
        n += batch
    dt, dc = time.perf_counter() - t, time.process_time() - c
    print(
        f"lmshards train_dataset: {n} seq in {dt:.1f}s = {n / dt:,.0f} seq/s ({n / dc:,.0f} seq per CPU-second)"
    )
    return n / dt, n / dc


def masking_alone(shards_dir: str, *, batch: int) -> dict[str, float]:
    """Sequences/s of each masker on the same in-memory batch (no reading or parsing)."""
    import keras_hub

    inputs = token_inputs(shards_dir, batch=batch)
    spec = inputs.masking
    ds = inputs.train_dataset(pipeline_id=0, start_step=0)
    first = next(iter(ds))
    ids = first["token_ids"]  # already masked once; the content does not matter for speed
    attention = first["padding_mask"]
    generator = keras_hub.layers.MaskedLMMaskGenerator(
        vocabulary_size=spec.vocab_size,
        mask_selection_rate=spec.mlm_probability,
        mask_token_id=spec.mask_id,
        mask_selection_length=spec.max_predictions,
        unselectable_token_ids=list(spec.special_ids),
    )
    candidates = {
        "stateless_tf_ops": lambda i: mask_batch(
            ids, attention, spec, tf.stack([tf.constant(0, tf.int64), i])
        ),
        "keras_hub_MaskedLMMaskGenerator": lambda i: generator(ids),
    }
    results = {}
    for name, fn in candidates.items():
        stream = tf.data.Dataset.range(MASKING_BATCHES).map(fn, num_parallel_calls=tf.data.AUTOTUNE)
        t = time.perf_counter()
        for _ in stream:
            pass
        results[name] = MASKING_BATCHES * batch / (time.perf_counter() - t)
        print(f"masking only, {name}: {results[name]:,.0f} seq/s")
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("shards")
    p.add_argument(
        "--generate",
        type=int,
        help="write this many random 128-token records first if there is no manifest",
    )
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    if args.generate and not fs.exists(manifest_path(args.shards)):
        from tests.helpers.shard_factory import write_random_shards

        t = time.perf_counter()
        write_random_shards(
            args.shards, records=args.generate, seq_len=128, tokenizer=GENERATED_TOKENIZER
        )
        print(f"generated {args.generate} records in {time.perf_counter() - t:.1f}s")
    ours, ours_cpu = our_pipeline(args.shards, batch=args.batch, epochs=args.epochs)
    reference = run_reference(args.shards)
    masking = masking_alone(args.shards, batch=args.batch)
    hf_style = next(r for r in reference if r[0] == "hf_style")
    print(
        f"lmshards / hf_style = {ours / hf_style[1]:.1f}x wall, {ours_cpu / hf_style[2]:.1f}x per CPU-second"
    )
    print(
        "RESULT "
        + json.dumps(
            {
                "lmshards_seq_per_s": ours,
                "lmshards_seq_per_cpu_s": ours_cpu,
                "reference": reference,
                "masking_seq_per_s": masking,
                "speedup_vs_hf_style": ours / hf_style[1],
                "speedup_vs_hf_style_per_cpu_s": ours_cpu / hf_style[2],
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
