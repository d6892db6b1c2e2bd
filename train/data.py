"""The tf.data input pipeline: manifest-listed TFRecord shards -> masked, batched model inputs.

Everything about sizes comes from the manifest (record counts per shard), so steps per epoch are
exact without reading data. Reads are deterministic for a given seed: each epoch visits the files
in an order drawn from (seed, epoch) and shuffles records with a seed derived from the same pair,
so a resumed run restarts at (epoch, batch) and sees exactly the batches an uninterrupted run would.
"""

from __future__ import annotations

import contextlib
import dataclasses

import tensorflow as tf

from schemas import fs
from schemas.constants import ATTENTION_MASK, INPUT_IDS
from schemas.errors import LmshardsError
from schemas.manifest import Manifest
from schemas.records import parse_spec
from train.masking import MaskingSpec, mask_batch, max_predictions_for

# The record features the model reads.
READ_FEATURES = (INPUT_IDS, ATTENTION_MASK)
# Files read at once per input pipeline; more only adds memory, the reads are already parallel.
MAX_INTERLEAVE = 8
# Eval masking uses this seed whatever --seed is, so evaluations are comparable across runs.
EVAL_SEED = 1234
# Stateless seeds are [2] int64: (run seed, counter). Counters of pipelines, and of epoch vs batch
# draws, never coincide: counter = (index * _PIPELINE_STRIDE + pipeline_id) * 2 + (0 for batches, 1 for epochs).
_PIPELINE_STRIDE = 1_000_003
_MAXINT32 = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class SplitFiles:
    """A split's shard paths (manifest order) and their record counts."""

    paths: tuple[str, ...]
    records: tuple[int, ...]

    @property
    def total_records(self) -> int:
        return sum(self.records)


def split_files(manifest: Manifest, shards_dir: str, split: str) -> SplitFiles:
    return SplitFiles(
        paths=tuple(manifest.shard_paths(shards_dir, split)),
        records=tuple(s.records for s in manifest.split(split).shards),
    )


def check_shard_sizes(manifest: Manifest, shards_dir: str, split: str) -> None:
    """Raises LmshardsError naming the first shard that is missing or whose size differs from the manifest.

    A shard truncated at a record boundary reads without error, so sizes are checked up front.
    """
    for shard, path in zip(manifest.split(split).shards, manifest.shard_paths(shards_dir, split)):
        if not fs.exists(path):
            raise LmshardsError(f"Shard {path!r} listed in the manifest is missing; re-run `lmshards preprocess`.")
        actual = fs.size(path)
        if actual != shard.bytes:
            raise LmshardsError(
                f"Shard {path!r} is {actual} bytes but the manifest says {shard.bytes}: truncated or replaced. "
                "Re-run `lmshards preprocess` (or `lmshards inspect --verify` to check every shard)."
            )


def pipeline_files(files: SplitFiles, *, num_pipelines: int, pipeline_id: int) -> SplitFiles:
    """The files input pipeline `pipeline_id` of `num_pipelines` reads (every num_pipelines-th file).

    Raises:
      LmshardsError: the files do not divide evenly, so pipelines would see unequal data.
    """
    if len(files.paths) % num_pipelines:
        raise LmshardsError(
            f"{len(files.paths)} shard files do not divide evenly between {num_pipelines} input pipelines "
            f"(one per worker host). Re-run `lmshards preprocess` with a shard count that is a multiple of {num_pipelines}."
        )
    return SplitFiles(paths=files.paths[pipeline_id::num_pipelines], records=files.records[pipeline_id::num_pipelines])


def steps_per_epoch(files: SplitFiles, *, num_pipelines: int, per_pipeline_batch: int) -> int:
    """Full batches per epoch that every input pipeline can deliver (the smallest pipeline decides)."""
    smallest = min(
        pipeline_files(files, num_pipelines=num_pipelines, pipeline_id=i).total_records for i in range(num_pipelines)
    )
    return smallest // per_pipeline_batch


def masking_spec(manifest: Manifest, mlm_probability: float) -> MaskingSpec:
    tok = manifest.tokenizer
    if "mask" not in tok.special_token_ids:
        raise LmshardsError(
            f"The manifest's tokenizer has no mask token (special tokens: {tok.special_token_ids}); "
            "train a tokenizer with <mask> or [MASK] and re-run `lmshards preprocess`."
        )
    if not 0.0 < mlm_probability < 1.0:
        raise LmshardsError(f"--mlm_probability {mlm_probability} must be between 0 and 1 (e.g. 0.15).")
    return MaskingSpec(
        vocab_size=tok.vocab_size,
        mask_id=tok.special_token_ids["mask"],
        special_ids=tuple(sorted(set(tok.all_special_ids) | set(tok.special_token_ids.values()))),
        mlm_probability=mlm_probability,
        max_predictions=max_predictions_for(manifest.seq_len, mlm_probability),
    )


def train_dataset(
    files: SplitFiles,
    *,
    features: dict[str, dict],
    batch_size: int,
    steps_per_epoch: int,
    shuffle_buffer: int,
    seed: int,
    start_step: int,
    masking: MaskingSpec,
    with_segment_ids: bool,
    pipeline_id: int = 0,
) -> tf.data.Dataset:
    """Endless masked batches for one input pipeline, starting at global step `start_step`.

    features: the manifest's record features (Manifest.features()), from which the parse spec is built.
    Each epoch yields exactly `steps_per_epoch` batches of `batch_size`; batch k of the stream is
    masked with the stateless seed (seed, pipeline-unique k), wherever the stream was started.
    """
    spec = parse_spec(features, names=READ_FEATURES)
    paths = tf.constant(files.paths)

    def epoch_batches(epoch):  # epoch: int64 scalar -> serialized [batch_size] strings
        epoch_seed = _stream_seed(seed, epoch, pipeline_id, epoch_draw=True)
        order = tf.random.experimental.stateless_shuffle(paths, seed=epoch_seed)
        records = tf.data.Dataset.from_tensor_slices(order).interleave(
            tf.data.TFRecordDataset,
            cycle_length=min(len(files.paths), MAX_INTERLEAVE),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        records = records.shuffle(shuffle_buffer, seed=tf.random.stateless_uniform([], epoch_seed, maxval=2**62, dtype=tf.int64))
        return records.batch(batch_size, drop_remainder=True).take(steps_per_epoch)

    start_epoch, skip = divmod(start_step, steps_per_epoch)
    with _tensor_seeds_allowed():  # epoch_batches is traced here
        batches = tf.data.Dataset.range(start_epoch, 2**62).flat_map(epoch_batches).skip(skip)
    # (step, serialized [batch_size])
    steps = tf.data.Dataset.range(start_step, 2**62)
    ds = tf.data.Dataset.zip(steps, batches)
    ds = ds.map(
        lambda step, serialized: _parse_and_mask(
            serialized, spec=spec, masking=masking, with_segment_ids=with_segment_ids,
            seed=_stream_seed(seed, step, pipeline_id, epoch_draw=False),
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return ds.prefetch(tf.data.AUTOTUNE)


def _stream_seed(seed: int, index, pipeline_id: int, *, epoch_draw: bool) -> tf.Tensor:
    counter = (index * _PIPELINE_STRIDE + pipeline_id) * 2 + int(epoch_draw)
    return tf.stack([tf.constant(seed, tf.int64), counter])


@contextlib.contextmanager
def _tensor_seeds_allowed():
    """Lifts a TF global seed of 0 (mod 2**31 - 1) while a pipeline is traced, then restores it.

    With such a global seed, TF's seed logic tests a tensor op seed (the per-epoch shuffle seed) for
    truth, which fails while tracing. keras.utils.set_random_seed(0) sets exactly that global seed.
    """
    global_seed, _ = tf.compat.v1.get_seed(None)
    clash = global_seed is not None and global_seed % _MAXINT32 == 0
    if clash:
        tf.random.set_seed(None)
    try:
        yield
    finally:
        if clash:
            tf.random.set_seed(global_seed)


def eval_dataset(
    files: SplitFiles,
    *,
    features: dict[str, dict],
    batch_size: int,
    masking: MaskingSpec,
    with_segment_ids: bool,
    max_batches: int | None = None,
    batches_multiple_of: int = 1,
) -> tf.data.Dataset:
    """One pass over the files in manifest order, masked with the fixed EVAL_SEED (same masks every eval).

    Every batch has exactly batch_size rows and the batch count is a multiple of batches_multiple_of
    (the replicas fed by this pipeline): the last batch is filled, and whole batches added, with
    all-padding rows, which are never selected for prediction. Shapes stay static (TPUs need that)
    and no record is left out. features: the manifest's record features, as for train_dataset.
    """
    batches = -(-files.total_records // batch_size)
    if max_batches is not None:
        batches = min(batches, max_batches)
    spec = parse_spec(features, names=READ_FEATURES)
    ds = tf.data.TFRecordDataset(list(files.paths), num_parallel_reads=min(len(files.paths), MAX_INTERLEAVE))
    ds = ds.batch(batch_size).take(batches).map(lambda serialized: tf.io.parse_example(serialized, spec))
    padding = {name: tf.zeros([0, *feature.shape], feature.dtype) for name, feature in spec.items()}
    ds = ds.concatenate(tf.data.Dataset.from_tensors(padding).repeat(-batches % batches_multiple_of))
    # {name: int64 [batch_size, seq_len]}
    ds = ds.map(lambda f: {
        name: tf.ensure_shape(tf.pad(v, [[0, batch_size - tf.shape(v)[0]], [0, 0]]), [batch_size, *spec[name].shape])
        for name, v in f.items()
    })
    ds = ds.enumerate().map(
        lambda i, f: _mask(f, masking=masking, with_segment_ids=with_segment_ids,
                           seed=tf.stack([tf.constant(EVAL_SEED, tf.int64), i])),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return ds.prefetch(tf.data.AUTOTUNE)


def _parse_and_mask(serialized, *, spec: dict, masking: MaskingSpec, with_segment_ids: bool, seed) -> dict[str, tf.Tensor]:
    # One vectorized parse per batch: far cheaper than parse_single_example per record.
    return _mask(tf.io.parse_example(serialized, spec), masking=masking, with_segment_ids=with_segment_ids, seed=seed)


def _mask(features, *, masking: MaskingSpec, with_segment_ids: bool, seed) -> dict[str, tf.Tensor]:
    batch = mask_batch(features[INPUT_IDS], features[ATTENTION_MASK], masking, seed)
    if with_segment_ids:
        batch["segment_ids"] = tf.zeros_like(batch["token_ids"])
    # Keep the static batch size (known after batch(drop_remainder=True) or eval padding) on every output.
    rows = features[INPUT_IDS].shape[0]
    return {name: tf.ensure_shape(t, [rows, *t.shape[1:]]) for name, t in batch.items()}


def corrupt_shard_error(paths: tuple[str, ...], cause: Exception) -> LmshardsError:
    """After a DataLossError (which names no file): re-reads each file alone to find the bad one."""
    for path in paths:
        try:
            tf.data.TFRecordDataset(path).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)
        except tf.errors.DataLossError as e:
            return LmshardsError(
                f"Shard {path!r} is corrupt ({e.message.splitlines()[0]}). Re-run `lmshards preprocess` "
                "or restore the file; `lmshards inspect --verify` checks every shard's sha256."
            )
    return LmshardsError(f"A shard failed to read but re-reading each one alone succeeded: {cause}")
