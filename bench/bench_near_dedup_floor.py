"""Near dedup of short documents: how many near removals are true copies, at each `--minhash_min_words` floor.

A document of a few words has a handful of 5-word shingles, so a one-word change is a large share of them and
near dedup removes short texts that are not copies. This measures it on a real corpus (text files or a folder
of them, e.g. the benchmark corpus), split into documents by lines and by blank-line paragraphs (as
`--doc_separator line` / `blank_line` read them), with lmshards' own shingles, signatures, band keys and keep
order (5-word shingles, 14 bands x 8 rows), clusters from the band buckets as union-find in memory.

Per split and floor F (documents under F words take part in exact dedup only, as in preprocess): the near
removals, and how many of them are true copies of their kept document: the exact Jaccard similarity of their
5-gram sets is at least the LSH threshold (0.72), or the texts are equal ignoring whitespace, case and digits.
The rest are distinct texts removed. `--slice_mb` reads only the first MB of each file (at a line end), so a
run on a loaded machine stays short and the slice is the same every time.

Usage (from the repository root, with the venv active):
  python -m bench.bench_near_dedup_floor /tmp/bench-corpus/en --slice_mb 1 --json floor.json
(the benchmark corpus: bench/README.md says how to build a comparable one)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lmshards.preprocess.curation.minhash import (
    DEFAULT_BANDS,
    DEFAULT_NGRAM,
    DEFAULT_ROWS,
    band_keys,
    hash_family,
    signature,
    threshold,
)
from lmshards.preprocess.curation.records import CurationDoc, node_key
from lmshards.preprocess.curation.text import shingles, words

FLOORS = (0, 5, 10, 20, 50)
SPLITS = ("line", "paragraph")
SHORT_BYTES = 20  # the removals the floor is about: "signal", "sigignore" procfs field descriptions
_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_LOOSE = re.compile(r"[\s\d]+")


def read_slice(path: Path, slice_mb: float | None) -> str:
    """The file's text, or its first slice_mb MB cut at a line end."""
    data = path.read_bytes()
    if slice_mb is not None and len(data) > slice_mb * 1e6:
        data = data[: data.rfind(b"\n", 0, int(slice_mb * 1e6)) + 1]
    return data.decode("utf-8", "replace")


def split_documents(text: str, split: str) -> Iterator[str]:
    """The non-blank documents of text: its lines, or its blank-line paragraphs."""
    parts = text.split("\n") if split == "line" else _PARAGRAPH.split(text)
    return (p for p in parts if p.strip())


def loose_form(text: str) -> str:
    """text lower-cased with whitespace and digits removed: equal loose forms are copies."""
    return _LOOSE.sub("", text.lower())


def exact_jaccard(a: str, b: str, ngram: int) -> float:
    sa, sb = set(shingles(a, ngram).tolist()), set(shingles(b, ngram).tolist())
    return len(sa & sb) / len(sa | sb)


def word_count(text: str) -> int:
    return len(words(text))


class _Roots:
    """Union-find over document numbers whose root is the smallest (the document kept)."""

    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def measure_split(texts: Sequence[str], *, floors: Sequence[int]) -> list[dict[str, Any]]:
    """Per floor: near removals, true copies among them, distinct texts removed, of those under SHORT_BYTES."""
    docs = [CurationDoc("corpus", i, t, i) for i, t in enumerate(texts)]
    order = sorted(range(len(docs)), key=lambda i: node_key(docs[i]))  # the keep order
    docs = [
        docs[i] for i in order
    ]  # document number = rank in the keep order: the root is the smallest
    digests = [node_key(d).digest for d in docs]
    counts = [word_count(d.text) for d in docs]
    offsets = hash_family(DEFAULT_BANDS * DEFAULT_ROWS)
    sigs: dict[bytes, np.ndarray] = {}
    keys: dict[bytes, list] = {}
    for doc, dig in zip(docs, digests, strict=True):
        if dig not in sigs:  # exact copies share a signature
            sigs[dig] = signature(shingles(doc.text, DEFAULT_NGRAM), offsets)
            keys[dig] = band_keys(sigs[dig], bands=DEFAULT_BANDS, rows=DEFAULT_ROWS)
    limit = threshold(bands=DEFAULT_BANDS, rows=DEFAULT_ROWS)
    rows = []
    for floor in floors:
        roots = _Roots(len(docs))
        first_of: dict[Any, int] = {}
        for i, dig in enumerate(digests):
            if counts[i] < floor:  # exact dedup only: joined to the first exact copy
                roots.union(i, first_of.setdefault(("exact", dig), i))
                continue
            for key in keys[dig]:
                roots.union(i, first_of.setdefault(key, i))
        near = true = distinct = distinct_short = true_bytes = distinct_bytes = 0
        for i, doc in enumerate(docs):
            root = roots.find(i)
            if root == i or digests[root] == digests[i]:
                continue  # kept, or an exact removal
            near += 1
            kept = docs[root].text
            copy = exact_jaccard(doc.text, kept, DEFAULT_NGRAM) >= limit or loose_form(
                doc.text
            ) == loose_form(kept)
            size = len(doc.text.encode("utf-8"))
            true, true_bytes = true + copy, true_bytes + size * copy
            if not copy:
                distinct, distinct_bytes = distinct + 1, distinct_bytes + size
                distinct_short += size < SHORT_BYTES
        rows.append(
            {
                "floor": floor,
                "near_removals": near,
                "true_copies": true,
                "true_copy_bytes": true_bytes,
                "distinct_removed": distinct,
                "distinct_removed_bytes": distinct_bytes,
                f"distinct_removed_under_{SHORT_BYTES}_bytes": distinct_short,
            }
        )
    return rows


def corpus_files(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.glob("*.txt")) if p.is_dir() else [p])
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="+", help="text files or folders of *.txt")
    parser.add_argument("--slice_mb", type=float, default=None, help="MB read from each file")
    parser.add_argument("--json", default=None, help="write the table here too")
    args = parser.parse_args(argv)
    files = corpus_files(args.corpus)
    text = "".join(read_slice(f, args.slice_mb) + "\n\n" for f in files)
    result: dict[str, Any] = {"files": [f.name for f in files], "mb": round(len(text) / 1e6, 1)}
    print(f"{len(files)} files, {result['mb']} MB", file=sys.stderr)
    for split in SPLITS:
        start = time.perf_counter()
        texts = list(split_documents(text, split))
        rows = measure_split(texts, floors=FLOORS)
        result[split] = {"documents": len(texts), "rows": rows}
        print(
            f"{split}: {len(texts):,} documents, {time.perf_counter() - start:.0f} s",
            file=sys.stderr,
        )
        for row in rows:
            print(split, json.dumps(row))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
