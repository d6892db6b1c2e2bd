"""The tf.data input pipeline: the TFRecord shards of one or more shard sets -> masked, batched model inputs.

Everything about sizes comes from the manifests (record counts per shard), so passes and epochs are
exact without reading data (lmshards.train.inputs.mixture plans them). Reads are deterministic for a given seed: each
pass over a set visits its files in an order drawn from (seed, pass) and shuffles records with a seed
derived from the same pair; in a mixture, the set each example comes from is drawn from (seed, block)
(mixture_choices). So a resumed run restarts every set at its (pass, record) and sees exactly the
batches an uninterrupted run would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from lmshards.plumbing.errors import LmshardsError
from lmshards.schemas.constants import ATTENTION_MASK, INPUT_IDS, POSITIONS, SEGMENT_IDS
from lmshards.schemas.manifest import Manifest
from lmshards.schemas.records import parse_spec
from lmshards.schemas.tokenizer_info import TokenizerSource
from lmshards.train.families.base import PACKED_POSITIONS_INPUT, PACKED_SEGMENTS_INPUT
from lmshards.train.inputs.masking import MaskingSpec, build_masking_spec, mask_batch
from lmshards.train.inputs.mixture import MIXTURE_BLOCK, SetStream, SplitFiles
from lmshards.train.inputs.word_starts import word_start_tables
from lmshards.train.masking_recipes import WORD_RECIPES

# The record features the model reads; of a packed set, also each token's segment and position.
READ_FEATURES = (INPUT_IDS, ATTENTION_MASK)
PACKED_READ_FEATURES = (*READ_FEATURES, SEGMENT_IDS, POSITIONS)
# Files read at once per set and input pipeline; more only adds memory, the reads are already parallel.
MAX_INTERLEAVE = 8
# Eval masking uses this seed whatever --seed is, so evaluations are comparable across runs.
EVAL_SEED = 1234
# The message of the assertion that every token id is below the manifest's vocab_size; the trainer
# recognises it and names the manifest and the fix.
ID_OUT_OF_VOCABULARY = (
    "lmshards: a token id in the shards is not below the vocab_size of the manifest"
)
# Stateless seeds are [2] int64: (run seed, counter). Counters of pipelines, and of batch vs pass
# draws, never coincide: counter = (index * _PIPELINE_STRIDE + pipeline_id) * 2 + (0 for batches, 1 for passes).
_PIPELINE_STRIDE = 1_000_003
# Folded into a block's batch-draw seed for the mixture's choice of sets (set i > 0 folds i into its pass seeds).
_CHOICE_FOLD = 0
_ENDLESS = 2**62
_MAXINT32 = 2**31 - 1


def masking_spec(
    manifest: Manifest, *, recipe: str, mlm_probability: float, tokenizer: TokenizerSource | None
) -> MaskingSpec:
    """The MaskingSpec of a recipe for the shards' tokenizer.

    tokenizer: the one the shards were made with (fingerprint already checked); the word recipes
    read where words start from it.

    Raises:
      LmshardsError: the tokenizer has no mask token; the recipe or mlm_probability is invalid; a word
        recipe has no tokenizer.
    """
    tok = manifest.tokenizer
    if "mask" not in tok.special_token_ids:
        raise LmshardsError(
            f"The manifest's tokenizer has no mask token (special tokens: {tok.special_token_ids}); "
            "train a tokenizer with <mask> or [MASK] and re-run `lmshards preprocess`."
        )
    word_starts = None
    if recipe in WORD_RECIPES:
        if tokenizer is None:
            raise LmshardsError(
                f"--masking {recipe} finds words with the tokenizer the shards were made with, and the shard set "
                "carries none: pass --tokenizer PATH (the tokenizer given to `lmshards preprocess`), or re-run "
                "preprocess, which now keeps a copy in SHARDS_DIR/tokenizer/."
            )
        word_starts = word_start_tables(tokenizer.json_text)
    return build_masking_spec(
        recipe=recipe,
        vocab_size=tok.vocab_size,
        mask_id=tok.special_token_ids["mask"],
        special_ids=list(tok.never_masked_ids),
        mlm_probability=mlm_probability,
        seq_len=manifest.seq_len,
        word_starts=word_starts,
    )


def train_dataset(
    streams: Sequence[SetStream],
    *,
    block_counts: Sequence[int],
    features: dict[str, dict],
    batch_size: int,
    shuffle_buffer: int,
    seed: int,
    start_step: int,
    masking: MaskingSpec,
    with_segment_ids: bool,
    pipeline_id: int = 0,
    replicas: int = 1,
) -> tf.data.Dataset:
    """Endless masked per-replica batches for one input pipeline, from those of global step `start_step`.

    streams: what this pipeline reads of each set (lmshards.train.inputs.mixture.pipeline_streams); block_counts: the
    mixture's examples per set in every MIXTURE_BLOCK (Mixture.block_counts). features: the records'
    features (Manifest.features()), from which the parse spec is built. replicas: the replicas this
    pipeline feeds; each step yields `replicas` batches of batch_size, in replica order.

    Step k's replicas * batch_size sequences are masked together, as one batch, with the stateless
    seed (seed, pipeline-unique k), wherever the stream was started. So the sequences and masks of a
    step depend only on the step and the pipeline's rows of the global batch, not on how the rows are
    split between replicas: a run resumed on another number of devices with the same global batch
    continues exactly (with one replica this is the masking runs have always had).
    """
    spec = parse_spec(features, names=read_features(features))
    rows = batch_size * replicas  # this pipeline's rows of each global batch
    start = start_step * rows  # examples this pipeline has yielded before
    with _tensor_seeds_allowed():  # the per-pass functions are traced here
        if len(streams) == 1:
            records = _set_records(
                streams[0],
                set_index=0,
                seed=seed,
                pipeline_id=pipeline_id,
                shuffle_buffer=shuffle_buffer,
                start_record=start,
            )
        else:
            read = examples_per_set(
                block_counts, seed=seed, pipeline_id=pipeline_id, examples=start
            )
            records = tf.data.Dataset.choose_from_datasets(
                [
                    _set_records(
                        stream,
                        set_index=i,
                        seed=seed,
                        pipeline_id=pipeline_id,
                        shuffle_buffer=shuffle_buffer,
                        start_record=read[i],
                    )
                    for i, stream in enumerate(streams)
                ],
                mixture_choices(
                    block_counts, seed=seed, pipeline_id=pipeline_id, start_example=start
                ),
            )
    # (step, serialized [rows])
    ds = tf.data.Dataset.zip(
        tf.data.Dataset.range(start_step, _ENDLESS), records.batch(rows, drop_remainder=True)
    )
    ds = ds.map(
        lambda step, serialized: _parse_and_mask(
            serialized,
            spec=spec,
            masking=masking,
            with_segment_ids=with_segment_ids,
            seed=_stream_seed(seed, step, pipeline_id, epoch_draw=False),
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return _per_replica(ds, replicas).prefetch(tf.data.AUTOTUNE)


def _per_replica(ds: tf.data.Dataset, replicas: int) -> tf.data.Dataset:
    """{name: [replicas * b, ...]} batches -> `replicas` consecutive {name: [b, ...]} batches, in row order."""
    if replicas == 1:
        return ds
    return ds.flat_map(
        lambda batch: tf.data.Dataset.from_tensor_slices(
            {
                name: tf.reshape(t, [replicas, t.shape[0] // replicas, *t.shape[1:]])
                for name, t in batch.items()
            }
        )
    )


def _set_records(
    stream: SetStream,
    *,
    set_index: int,
    seed: int,
    pipeline_id: int,
    shuffle_buffer: int,
    start_record,
) -> tf.data.Dataset:
    """One set's serialized records for one pipeline, pass after pass, from record `start_record` (int or int64 scalar)."""
    paths = tf.constant(stream.files.paths)

    def one_pass(index):  # index: int64 scalar -> that pass's records, reshuffled
        pass_seed = _pass_seed(seed, index, pipeline_id, set_index)
        order = tf.random.experimental.stateless_shuffle(paths, seed=pass_seed)
        records = tf.data.Dataset.from_tensor_slices(order).interleave(
            tf.data.TFRecordDataset,
            cycle_length=min(len(stream.files.paths), MAX_INTERLEAVE),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        shuffle_seed = tf.random.stateless_uniform([], pass_seed, maxval=2**62, dtype=tf.int64)
        records = records.shuffle(shuffle_buffer, seed=shuffle_seed)
        return records.take(stream.pass_records)

    start_pass, skip = start_record // stream.pass_records, start_record % stream.pass_records
    return tf.data.Dataset.range(start_pass, _ENDLESS).flat_map(one_pass).skip(skip)


def mixture_choices(
    block_counts: Sequence[int], *, seed: int, pipeline_id: int, start_example: int
) -> tf.data.Dataset:
    """int64 set index of each example of a pipeline, from example `start_example` on (see lmshards.train.inputs.mixture)."""
    start_block, offset = start_example // MIXTURE_BLOCK, start_example % MIXTURE_BLOCK
    blocks = tf.data.Dataset.range(start_block, _ENDLESS)
    return blocks.flat_map(
        lambda block: tf.data.Dataset.from_tensor_slices(
            _block_choices(block_counts, seed, pipeline_id, block)
        )
    ).skip(offset)


def examples_per_set(
    block_counts: Sequence[int], *, seed: int, pipeline_id: int, examples
) -> tf.Tensor:
    """int64 [sets]: how many of a pipeline's first `examples` examples each set gave (closed form, no reading)."""
    full_blocks, rest = examples // MIXTURE_BLOCK, examples % MIXTURE_BLOCK
    partial = tf.cast(_block_choices(block_counts, seed, pipeline_id, full_blocks)[:rest], tf.int32)
    in_partial = tf.math.bincount(
        partial, minlength=len(block_counts), maxlength=len(block_counts), dtype=tf.int64
    )
    return tf.cast(full_blocks, tf.int64) * tf.constant(block_counts, tf.int64) + in_partial


def sequences_read(
    block_counts: Sequence[int], *, seed: int, num_pipelines: int, examples_per_pipeline: int
) -> tuple[int, ...]:
    """Sequences each set gave to all input pipelines together once each has yielded examples_per_pipeline."""
    total = sum(
        examples_per_set(
            block_counts, seed=seed, pipeline_id=p, examples=examples_per_pipeline
        ).numpy()
        for p in range(num_pipelines)
    )
    return tuple(int(n) for n in total)


def _block_choices(block_counts: Sequence[int], seed: int, pipeline_id: int, block) -> tf.Tensor:
    """int64 [MIXTURE_BLOCK]: the set of each example of a block, block_counts[i] of set i.

    Set i's examples are spread over the block one per stretch of 1/block_counts[i] of it, each at a
    random point of its stretch (jittered strata), so every part of a block, not only the whole of it,
    holds the sets in close to their shares.
    """
    sets = np.repeat(np.arange(len(block_counts)), block_counts)
    strata = np.concatenate([np.arange(count) for count in block_counts])
    jitter = tf.random.stateless_uniform(
        [MIXTURE_BLOCK], seed=_choice_seed(seed, block, pipeline_id), dtype=tf.float64
    )
    points = (strata + jitter) / np.repeat(block_counts, block_counts)
    return tf.gather(tf.constant(sets, tf.int64), tf.argsort(points, stable=True))


def _stream_seed(seed: int, index, pipeline_id: int, *, epoch_draw: bool) -> tf.Tensor:
    counter = (index * _PIPELINE_STRIDE + pipeline_id) * 2 + int(epoch_draw)
    return tf.stack([tf.constant(seed, tf.int64), tf.cast(counter, tf.int64)])


def _pass_seed(seed: int, index, pipeline_id: int, set_index: int) -> tf.Tensor:
    pass_seed = _stream_seed(seed, index, pipeline_id, epoch_draw=True)
    # The first set keeps the seeds a one-set run has always used, so its order did not change with mixtures.
    return pass_seed if set_index == 0 else _fold(pass_seed, set_index)


def _choice_seed(seed: int, block, pipeline_id: int) -> tf.Tensor:
    return _fold(_stream_seed(seed, block, pipeline_id, epoch_draw=False), _CHOICE_FOLD)


def _fold(seed: tf.Tensor, data: int) -> tf.Tensor:
    return tf.cast(tf.random.experimental.stateless_fold_in(seed, data), tf.int64)


@contextlib.contextmanager
def _tensor_seeds_allowed():
    """Lifts a TF global seed of 0 (mod 2**31 - 1) while a pipeline is traced, then restores it.

    With such a global seed, TF's seed logic tests a tensor op seed (the per-pass shuffle seed) for
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


def eval_batch_count(
    records: int, *, batch_size: int, max_batches: int | None = None, replicas: int = 1
) -> int:
    """Steps of `replicas` batches of batch_size that eval_dataset gives for `records` records (at most max_batches)."""
    steps = -(-records // (batch_size * replicas))
    return steps if max_batches is None else min(steps, max_batches)


def eval_dataset(
    files: SplitFiles,
    *,
    features: dict[str, dict],
    batch_size: int,
    masking: MaskingSpec,
    with_segment_ids: bool,
    max_batches: int | None = None,
    replicas: int = 1,
) -> tf.data.Dataset:
    """One pass over the files in manifest order, masked with the fixed EVAL_SEED (same masks every eval).

    Per-replica batches of exactly batch_size rows, `replicas` of them (the replicas this pipeline
    feeds) for each of at most max_batches steps. A step's replicas * batch_size rows are masked
    together, as one batch, so masks do not depend on how they are split between replicas. The last
    step is filled with all-padding rows, which are never selected for prediction: shapes stay static
    (TPUs need that) and no record is left out. features: the manifest's record features, as for
    train_dataset.
    """
    rows = batch_size * replicas
    steps = eval_batch_count(
        files.total_records, batch_size=batch_size, max_batches=max_batches, replicas=replicas
    )
    spec = parse_spec(features, names=read_features(features))
    ds = tf.data.TFRecordDataset(
        list(files.paths), num_parallel_reads=min(len(files.paths), MAX_INTERLEAVE)
    )
    ds = ds.batch(rows).take(steps).map(lambda serialized: tf.io.parse_example(serialized, spec))
    # {name: int64 [rows, seq_len]}
    ds = ds.map(
        lambda f: {
            name: tf.ensure_shape(
                tf.pad(v, [[0, rows - tf.shape(v)[0]], [0, 0]]), [rows, *spec[name].shape]
            )
            for name, v in f.items()
        }
    )
    ds = ds.enumerate().map(
        lambda i, f: _mask(
            f,
            masking=masking,
            with_segment_ids=with_segment_ids,
            seed=tf.stack([tf.constant(EVAL_SEED, tf.int64), i]),
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return _per_replica(ds, replicas).prefetch(tf.data.AUTOTUNE)


def read_features(features: dict[str, dict]) -> tuple[str, ...]:
    """The features to parse from records with these features: PACKED_READ_FEATURES of a packed set."""
    return PACKED_READ_FEATURES if SEGMENT_IDS in features else READ_FEATURES


def _parse_and_mask(
    serialized, *, spec: dict, masking: MaskingSpec, with_segment_ids: bool, seed
) -> dict[str, tf.Tensor]:
    # One vectorized parse per batch: far cheaper than parse_single_example per record.
    return _mask(
        tf.io.parse_example(serialized, spec),
        masking=masking,
        with_segment_ids=with_segment_ids,
        seed=seed,
    )


def _mask(features, *, masking: MaskingSpec, with_segment_ids: bool, seed) -> dict[str, tf.Tensor]:
    segments = features.get(SEGMENT_IDS)
    batch = mask_batch(
        _checked_ids(features[INPUT_IDS], masking.vocab_size),
        features[ATTENTION_MASK],
        masking,
        seed,
        segment_ids=segments,
    )
    if (
        segments is not None
    ):  # a packed block: the packed backbone's inputs (lmshards.train.families.packed)
        batch[PACKED_SEGMENTS_INPUT] = tf.cast(segments, tf.int32)
        batch[PACKED_POSITIONS_INPUT] = tf.cast(features[POSITIONS], tf.int32)
    if with_segment_ids:
        batch["segment_ids"] = tf.zeros_like(batch["token_ids"])
    # Keep the static batch size (known after batch(drop_remainder=True) or eval padding) on every output.
    rows = features[INPUT_IDS].shape[0]
    return {name: tf.ensure_shape(t, [rows, *t.shape[1:]]) for name, t in batch.items()}


def _checked_ids(ids: tf.Tensor, vocab_size: int) -> tf.Tensor:
    """ids, once asserted below vocab_size: a larger id (shards of another tokenizer, or a wrong manifest) would
    index past the embedding table, which fails obscurely on CPUs and silently gives zeros on GPUs and TPUs."""
    check = tf.debugging.assert_less(
        tf.reduce_max(ids), tf.constant(vocab_size, ids.dtype), message=ID_OUT_OF_VOCABULARY
    )
    with tf.control_dependencies([check]):
        return tf.identity(ids)


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
