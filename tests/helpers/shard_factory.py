"""Real preprocess-style outputs for trainer tests and benchmarks: TFRecord shards plus a manifest.

Writes exactly what the contract in schemas/ promises (shard names, features, sha256, balanced
token accounting), from either the sample corpus tokenized with a real tokenizer or random ids.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lmshards.schemas import manifest as mf
from lmshards.schemas import tokenizer_info
from lmshards.schemas.constants import (
    ATTENTION_MASK,
    INPUT_IDS,
    PACKED_MANIFEST_FORMAT_VERSION,
    PACKING_BEST_FIT,
    SEGMENT_IDS,
    TRAIN_SPLIT,
    VALIDATION_SPLIT,
)
from lmshards.schemas.manifest import TOKENIZER_RELPATH
from lmshards.schemas.records import encode_examples, frame_record
from lmshards.schemas.shards import shard_relpath
from lmshards.schemas.version import __version__

# Every VALIDATION_EVERY-th block goes to the validation split.
VALIDATION_EVERY = 20


def tokenizer_info_for(tokenizer_path: str) -> mf.TokenizerInfo:
    from tokenizers import Tokenizer

    source = tokenizer_info.locate_tokenizer(str(tokenizer_path))
    return mf.TokenizerInfo(
        fingerprint=tokenizer_info.fingerprint(source.json_text),
        vocab_size=Tokenizer.from_str(source.json_text).get_vocab_size(),
        special_token_ids=tokenizer_info.special_token_ids(source),
        all_special_ids=tuple(tokenizer_info.all_special_ids(source)),
    )


def pack_blocks(
    token_ids: np.ndarray, *, seq_len: int, pad_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """Splits a token stream into [n, seq_len] blocks; the last one padded (attention_mask 0)."""
    n = -(-len(token_ids) // seq_len)
    ids = np.full(n * seq_len, pad_id, np.int64)
    ids[: len(token_ids)] = token_ids
    mask = np.zeros(n * seq_len, np.int64)
    mask[: len(token_ids)] = 1
    return ids.reshape(n, seq_len), mask.reshape(n, seq_len)


def write_sample_shards(
    out_dir: str | Path,
    tokenizer_path: str | Path,
    files: Sequence[Path],
    *,
    seq_len: int = 64,
    train_shards: int = 8,
    validation_shards: int = 2,
    max_lines_per_file: int | None = None,
) -> mf.Manifest:
    """Tokenizes the files (one document per line), packs them into blocks and writes both splits."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    info = tokenizer_info_for(str(tokenizer_path))
    lines = []
    for f in files:
        text = [line for line in Path(f).read_text(encoding="utf-8").splitlines() if line.strip()]
        lines += text[:max_lines_per_file]
    stream = np.fromiter((i for enc in tok.encode_batch(lines) for i in enc.ids), np.int64)
    ids, mask = pack_blocks(stream, seq_len=seq_len, pad_id=info.special_token_ids["pad"])
    is_val = np.arange(len(ids)) % VALIDATION_EVERY == VALIDATION_EVERY - 1
    splits = {
        TRAIN_SPLIT: (ids[~is_val], mask[~is_val], train_shards),
        VALIDATION_SPLIT: (ids[is_val], mask[is_val], validation_shards),
    }
    return write_shards(out_dir, splits, seq_len=seq_len, tokenizer=info, inputs=files)


def write_random_shards(
    out_dir: str | Path,
    *,
    records: int,
    seq_len: int,
    tokenizer: mf.TokenizerInfo,
    num_shards: int = 8,
    seed: int = 0,
) -> mf.Manifest:
    """Random non-special ids, the last 1/8 of each record padded: for benchmarks (train split only)."""
    rng = np.random.default_rng(seed)
    low = max(tokenizer.all_special_ids) + 1
    ids = rng.integers(low, tokenizer.vocab_size, size=(records, seq_len), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[:, seq_len - seq_len // 8 :] = 0
    ids[mask == 0] = tokenizer.special_token_ids["pad"]
    return write_shards(
        out_dir,
        {TRAIN_SPLIT: (ids, mask, num_shards)},
        seq_len=seq_len,
        tokenizer=tokenizer,
        inputs=(),
    )


def write_shards(
    out_dir: str | Path,
    splits: dict[str, tuple[np.ndarray, np.ndarray, int]],
    *,
    seq_len: int,
    tokenizer: mf.TokenizerInfo,
    inputs: Sequence[Path],
) -> mf.Manifest:
    """Writes split -> (ids, attention_mask, num_shards) as balanced shards, then the manifest (last)."""
    import tensorflow as tf

    out_dir = str(out_dir)
    split_infos = {}
    for split, (ids, mask, num_shards) in splits.items():
        shards = []
        for index, rows in enumerate(np.array_split(np.arange(len(ids)), num_shards)):
            rel = shard_relpath(split, index, num_shards, len(rows))
            path = os.path.join(out_dir, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with tf.io.TFRecordWriter(path) as writer:
                for r in rows:
                    writer.write(_example(ids[r], mask[r]))
            data = Path(path).read_bytes()
            shards.append(
                mf.ShardInfo(
                    path=rel,
                    records=len(rows),
                    bytes=len(data),
                    sha256=hashlib.sha256(data).hexdigest(),
                )
            )
        real = int(mask.sum())
        totals = mf.SplitTotals(
            documents=len(ids),
            tokens_in=real,
            tokens_written=real,
            padding_tokens=int(mask.size - real),
            records=len(ids),
        )
        split_infos[split] = mf.SplitInfo(shards=tuple(shards), totals=totals)
    manifest = mf.Manifest(
        tool_version=__version__,
        seq_len=seq_len,
        tokenizer=tokenizer,
        splits=split_infos,
        inputs=tuple(mf.InputFileInfo(path=str(p), bytes=Path(p).stat().st_size) for p in inputs),
        seed=0,
        options={"remainder": "pad", "written_by": "tests.helpers.shard_factory"},
    )
    mf.write_manifest(out_dir, manifest)
    return manifest


def write_packed_shards(
    out_dir: str | Path,
    features: dict[str, np.ndarray],
    *,
    seq_len: int,
    tokenizer: mf.TokenizerInfo,
    num_shards: int = 2,
    format_version: int = PACKED_MANIFEST_FORMAT_VERSION,
    documents_split: int = 0,
) -> mf.Manifest:
    """A best_fit packed set (train split only) of these records, as given: feature name -> int
    [records, seq_len], rows split evenly between num_shards shards; the manifest (last) counts a
    token real where its segment id is not 0. Writes bad records as faithfully as good ones."""
    out_dir = str(out_dir)
    rows = np.array_split(np.arange(len(features[INPUT_IDS])), num_shards)
    shards = []
    for index, mine in enumerate(rows):
        rel = shard_relpath(TRAIN_SPLIT, index, num_shards, mine.size)
        records = encode_examples({name: values[mine] for name, values in features.items()})
        data = b"".join(map(frame_record, records))
        os.makedirs(os.path.join(out_dir, TRAIN_SPLIT), exist_ok=True)
        Path(out_dir, rel).write_bytes(data)
        shards.append(
            mf.ShardInfo(
                path=rel,
                records=mine.size,
                bytes=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
            )
        )
    segments = features[SEGMENT_IDS]
    real = int((segments > 0).sum())
    totals = mf.SplitTotals(
        documents=int(segments.max(axis=1).sum()) - documents_split,
        tokens_in=real,
        tokens_written=real,
        padding_tokens=int(segments.size - real),
        records=len(segments),
        documents_split=documents_split,
        segments=int(segments.max(axis=1).sum()),
    )
    manifest = mf.Manifest(
        tool_version=__version__,
        seq_len=seq_len,
        tokenizer=tokenizer,
        splits={TRAIN_SPLIT: mf.SplitInfo(shards=tuple(shards), totals=totals)},
        inputs=(),
        seed=0,
        options={"packing": PACKING_BEST_FIT, "remainder": "pad", "written_by": __name__},
        format_version=format_version,
        packing=PACKING_BEST_FIT,
    )
    mf.write_manifest(out_dir, manifest)
    return manifest


def carry_tokenizer(out_dir: str | Path, tokenizer_path: str | Path) -> mf.Manifest:
    """Makes a written shard set carry its tokenizer as `lmshards preprocess` does: the tokenizer.json copied
    to OUT/tokenizer/ and its path recorded in the manifest (rewritten)."""
    target = Path(out_dir) / TOKENIZER_RELPATH
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tokenizer_path, target)
    manifest = mf.read_manifest(str(out_dir))
    manifest = dataclasses.replace(
        manifest, tokenizer=dataclasses.replace(manifest.tokenizer, path=TOKENIZER_RELPATH)
    )
    mf.write_manifest(str(out_dir), manifest)
    return manifest


def _example(ids: np.ndarray, mask: np.ndarray) -> bytes:
    import tensorflow as tf

    feature = {
        INPUT_IDS: tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
        ATTENTION_MASK: tf.train.Feature(int64_list=tf.train.Int64List(value=mask)),
    }
    # deterministic: the feature map's order, so a set's bytes (and the digest a run records of it) are the
    # same in every process.
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)
