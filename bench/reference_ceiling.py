"""The tokenizer ceiling: Tokenizer.encode_batch over every non-empty line, batches of 1000, all cores (Rust threads).

Usage: python bench/reference_ceiling.py TOKENIZER_JSON FILE...
Prints a human line, then one `RESULT {json}` line for bench_preprocess.py. The timed region starts after the
tokenizer is loaded and covers reading, line splitting and encoding.
"""

import json
import sys
import time

from tokenizers import Tokenizer

t = Tokenizer.from_file(sys.argv[1])
t0 = time.perf_counter()
n = 0
nbytes = 0
for f in sys.argv[2:]:
    lines = [
        l for l in open(f, encoding="utf-8", errors="replace").read().splitlines() if l.strip()
    ]
    nbytes += sum(len(l.encode()) for l in lines)
    for i in range(0, len(lines), 1000):
        n += sum(len(e.ids) for e in t.encode_batch(lines[i : i + 1000]))
dt = time.perf_counter() - t0
print(
    f"ceiling: {n} tokens, {nbytes / 1e6:.1f} MB in {dt:.1f} s = {n / dt / 1e6:.2f} M tok/s, {nbytes / 1e6 / dt:.2f} MB/s"
)
print("RESULT " + json.dumps({"tokens": n, "text_bytes": nbytes, "internal_s": dt}))
