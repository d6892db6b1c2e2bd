"""The tokenizer ceiling: the tokenizer alone over every non-empty line, batches of 1000, all cores (Rust threads).

Usage: python bench/reference_ceiling.py [--method fast|offsets] TOKENIZER_JSON FILE...
  fast     (default) Tokenizer.encode_batch_fast with special tokens: the call preprocess makes
           (lmshards.preprocess.stages.encode.encode_accepted), no character offsets computed;
  offsets  Tokenizer.encode_batch: the same ids, plus every token's offsets (about 1.6x the CPU).
Prints a human line, then one `RESULT {json}` line for bench_preprocess.py. The timed region starts after the
tokenizer is loaded and covers reading, line splitting and encoding.
"""

from __future__ import annotations

import json
import sys
import time

FAST, OFFSETS = "fast", "offsets"
METHODS = (FAST, OFFSETS)
BATCH_LINES = 1000


def encode(tokenizer, lines: list[str], method: str) -> list:
    """The Encodings of `lines` by `method`, special tokens added (the tokenizer's post-processor)."""
    if method == FAST:
        return tokenizer.encode_batch_fast(lines, add_special_tokens=True)
    return tokenizer.encode_batch(lines, add_special_tokens=True)


def count_tokens(tokenizer, files: list[str], method: str) -> tuple[int, int]:
    """(tokens, UTF-8 bytes) of every non-empty line of `files`, encoded BATCH_LINES at a time."""
    tokens = nbytes = 0
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            lines = [line for line in fh.read().splitlines() if line.strip()]
        nbytes += sum(len(line.encode()) for line in lines)
        for i in range(0, len(lines), BATCH_LINES):
            tokens += sum(len(e.ids) for e in encode(tokenizer, lines[i : i + BATCH_LINES], method))
    return tokens, nbytes


def main(argv: list[str]) -> int:
    method = FAST
    if argv[:1] == ["--method"]:
        method, argv = argv[1], argv[2:]
    if method not in METHODS or len(argv) < 2:
        print(f"usage: reference_ceiling.py [--method {'|'.join(METHODS)}] TOKENIZER_JSON FILE...")
        return 2
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(argv[0])
    t0 = time.perf_counter()
    n, nbytes = count_tokens(tokenizer, argv[1:], method)
    dt = time.perf_counter() - t0
    print(f"ceiling ({method}): {n} tokens, {nbytes / 1e6:.1f} MB in {dt:.1f} s = "
          f"{n / dt / 1e6:.2f} M tok/s, {nbytes / 1e6 / dt:.2f} MB/s")  # fmt: skip
    print("RESULT " + json.dumps({"tokens": n, "text_bytes": nbytes, "internal_s": dt}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
