"""The reference for bench_dedup.py: datatrove's MinHash deduplication, its four stages, on one JSON Lines file.

Runs under datatrove's own Python (its own virtual environment; it is not a dependency of lmshards):
signatures, buckets, clusters, filter, each a LocalPipelineExecutor of one task, with the given n-gram
size, bands (datatrove's num_buckets) and rows (hashes_per_bucket). Prints one RESULT line: the ids of
the documents it removed, and each stage's wall time.

Usage: PYTHON reference_datatrove_minhash.py CORPUS.jsonl WORK_DIR NGRAM BANDS ROWS
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (
    MinhashConfig,
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
    MinhashDedupSignature,
)
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter

RESULT_PREFIX = "RESULT "


def main(corpus: str, work: str, ngram: int, bands: int, rows: int) -> None:
    root = Path(work)
    config = MinhashConfig(n_grams=ngram, num_buckets=bands, hashes_per_bucket=rows)
    corpus_path = Path(corpus)

    def reader():
        return JsonlReader(str(corpus_path.parent), glob_pattern=corpus_path.name, id_key="id")

    stages = {
        "signatures": [reader(), MinhashDedupSignature(str(root / "sigs"), config=config)],
        "buckets": [MinhashDedupBuckets(str(root / "sigs"), str(root / "buckets"), config=config)],
        "clusters": [
            MinhashDedupCluster(str(root / "buckets"), str(root / "remove"), config=config)
        ],
        "filter": [
            reader(),
            MinhashDedupFilter(
                str(root / "remove"),
                exclusion_writer=JsonlWriter(str(root / "removed"), compression=None),
            ),
            JsonlWriter(str(root / "kept"), compression=None),
        ],
    }
    seconds = {}
    for name, pipeline in stages.items():
        start = time.perf_counter()
        tasks = bands if name == "buckets" else 1
        LocalPipelineExecutor(
            pipeline=pipeline, tasks=tasks, workers=1, logging_dir=str(root / "logs" / name)
        ).run()
        seconds[name] = time.perf_counter() - start
    removed = [
        json.loads(line)["id"]
        for path in sorted((root / "removed").glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    print(RESULT_PREFIX + json.dumps({"removed": removed, "seconds": seconds}))


if __name__ == "__main__":
    corpus_arg, work_arg, *numbers = sys.argv[1:]
    main(corpus_arg, work_arg, *(int(n) for n in numbers))
