"""A split of a shard set read into numpy arrays, with no TensorFlow: for code that scores beside PyTorch.

The demo's scorer, `lmshards report`'s baseline and the benchmarks' PyTorch references read shards this way,
so that a process that runs PyTorch never loads TensorFlow; the trainer reads them through tf.data instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator, Sequence

import numpy as np

from lmshards.plumbing import bounded, fs
from lmshards.schemas.constants import FEATURE_NAMES
from lmshards.schemas.manifest import Manifest
from lmshards.schemas.records import decode_examples, read_records


def split_records(manifest: Manifest, shards_dir: str, split: str) -> Generator[bytes, None, None]:
    """The serialized tf.train.Examples of a split, shard by shard in manifest order."""
    for path in manifest.shard_paths(shards_dir, split):
        bounded.check_regular_file(path, "shard file")
        with fs.open_file(path, "rb") as f:
            yield from read_records(f)


def read_split(
    manifest: Manifest,
    shards_dir: str,
    split: str,
    *,
    names: Sequence[str] = FEATURE_NAMES,
    max_records: int | None = None,
) -> dict[str, np.ndarray]:
    """{name: int64 [records, seq_len]} for each of `names`, a split's records in manifest order.

    max_records: stop after this many (None: the whole split); no shard past the last one needed is opened.
    """
    records = split_records(manifest, shards_dir, split)
    try:
        taken = list(itertools.islice(records, max_records))
    finally:
        records.close()  # closes the shard being read when max_records stopped inside it
    return decode_examples(taken, names)
