"""Reference baseline: the algorithm of the Hugging Face TPU example's shard preparation, re-expressed.
datasets "text" loader -> tokenizer(text) via map(batched, num_proc) -> concatenate each 1000-row batch and cut
fixed blocks (remainder dropped) -> serial TFRecordWriter with hand-built tf.train.Example, fixed records per shard.
Usage: python bench/reference_hf_style.py TOKENIZER_JSON OUT_DIR SEQ_LEN NUM_PROC FILE...
Prints a human line, then one `RESULT {json}` line for bench_preprocess.py. The timed region starts after the
imports. Set HF_DATASETS_CACHE to a fresh directory, or datasets serves a repeated run from its cache.
"""

import json
import os
import sys
import time

import datasets
import tensorflow as tf
from transformers import PreTrainedTokenizerFast

tok_json, out_dir, seq_len, num_proc, files = (
    sys.argv[1],
    sys.argv[2],
    int(sys.argv[3]),
    int(sys.argv[4]),
    sys.argv[5:],
)
t0 = time.perf_counter()
tok = PreTrainedTokenizerFast(tokenizer_file=tok_json)
ds = datasets.load_dataset("text", data_files=files, split="train")
ds = ds.filter(lambda b: [bool(x.strip()) for x in b["text"]], batched=True, num_proc=num_proc)
ds = ds.map(lambda b: tok(b["text"]), batched=True, num_proc=num_proc, remove_columns=["text"])


def group(b):
    cat = {k: sum(b[k], []) for k in b}
    n = (len(cat["input_ids"]) // seq_len) * seq_len
    return {k: [v[i : i + seq_len] for i in range(0, n, seq_len)] for k, v in cat.items()}


ds = ds.map(group, batched=True, batch_size=1000, num_proc=num_proc)
os.makedirs(out_dir, exist_ok=True)
shard_size, total, written_tokens = 5000, len(ds), 0
for s, start in enumerate(range(0, total, shard_size)):
    chunk = ds[start : start + shard_size]
    with tf.io.TFRecordWriter(
        os.path.join(out_dir, f"dataset-{s}-{len(chunk['input_ids'])}.tfrecord")
    ) as w:
        for ids, am in zip(chunk["input_ids"], chunk["attention_mask"]):
            f = {
                "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
                "attention_mask": tf.train.Feature(int64_list=tf.train.Int64List(value=am)),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())
            written_tokens += len(ids)
dt = time.perf_counter() - t0
print(f"baseline: {total} records, {written_tokens} tokens, {dt:.1f} s")
print("RESULT " + json.dumps({"records": total, "tokens": written_tokens, "internal_s": dt}))
