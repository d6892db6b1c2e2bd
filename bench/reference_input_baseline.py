"""Input-pipeline reference: batched parse_example + vectorized masking vs per-record parse (HF TPU example style).

Usage: python bench/reference_input_baseline.py SHARDS_DIR   (a preprocess output: manifest.json + *.tfrecord)
The algorithm is the reference's, unchanged; only its assumptions (mask id 4, specials < 5, vocab 25000,
records of 128 tokens) now come from the shards' manifest. bench_input_pipeline.py imports `run_all`.
"""

import glob
import os
import sys
import time

import tensorflow as tf

from lmshards.schemas.manifest import read_manifest


def make_pipelines(shards_dir):
    manifest = read_manifest(shards_dir)
    tok = manifest.tokenizer
    files = sorted(glob.glob(os.path.join(shards_dir, "**", "*.tfrecord"), recursive=True))
    L = manifest.seq_len
    V = tok.vocab_size
    MASK = tok.special_token_ids["mask"]
    FIRST_REGULAR = max(tok.all_special_ids) + 1  # reference: 4 and 5
    spec = {
        "input_ids": tf.io.FixedLenFeature((L,), tf.int64),
        "attention_mask": tf.io.FixedLenFeature((L,), tf.int64),
    }

    def mask(b):
        ids = b["input_ids"]
        shape = tf.shape(ids)
        special = (ids < FIRST_REGULAR) | (b["attention_mask"] == 0)
        sel = (tf.random.uniform(shape) < 0.15) & ~special
        r = tf.random.uniform(shape)
        rep = sel & (r < 0.8)
        rnd = sel & (r >= 0.8) & (r < 0.9)
        new = tf.where(rep, tf.constant(MASK, tf.int64), ids)
        new = tf.where(rnd, tf.random.uniform(shape, FIRST_REGULAR, V, tf.int64), new)
        labels = tf.where(sel, ids, -100)
        return {"input_ids": new, "attention_mask": b["attention_mask"]}, labels

    def vectorized():
        ds = tf.data.Dataset.from_tensor_slices(files).interleave(
            tf.data.TFRecordDataset,
            cycle_length=4,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=False,
        )
        ds = (
            ds.batch(256, drop_remainder=True)
            .map(lambda x: tf.io.parse_example(x, spec), num_parallel_calls=tf.data.AUTOTUNE)
            .map(mask, num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(tf.data.AUTOTUNE)
        )
        return ds

    def hf_style():
        ds = tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)
        ds = (
            ds.map(
                lambda x: tf.io.parse_single_example(x, spec), num_parallel_calls=tf.data.AUTOTUNE
            )
            .batch(256, drop_remainder=True)
            .map(mask, num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(tf.data.AUTOTUNE)
        )
        return ds

    return {"vectorized": vectorized, "hf_style": hf_style}


def run_all(shards_dir):
    """Runs the reference's sequence (vectorized, hf_style, vectorized); returns [(name, seq/s, seq/CPU-s)].

    seq per CPU-second (all threads of this process) is added: on a shared machine it moves far less than wall time.
    """
    pipelines = make_pipelines(shards_dir)
    results = []
    for name in ("vectorized", "hf_style", "vectorized"):
        n = 0
        t = time.perf_counter()
        c = time.process_time()
        for x, y in pipelines[name]():
            n += 256
        dt = time.perf_counter() - t
        dc = time.process_time() - c
        print(
            f"{name}: {n} seq in {dt:.1f}s = {n / dt:,.0f} seq/s ({n / dc:,.0f} seq per CPU-second)"
        )
        results.append((name, n / dt, n / dc))
    return results


if __name__ == "__main__":
    run_all(sys.argv[1])
