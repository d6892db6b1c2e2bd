"""Corpus statistics of a shard set: tensorflow-transform analyzers on Beam, then plain arithmetic.

The pipeline reads the manifest's shards, decodes them with tfx-bsl's Example decoder against the
records' TF Metadata schema (lmshards/schemas/tfmd.py) and runs three `tft.count_per_key` analyzers through
`tft_beam.AnalyzeDataset`: occurrences of each non-padding token id, records per count of
non-padding tokens, and records per shard. The counts land as asset files of the transform
function; every figure of stats.json is derived from them by the plain functions below and
checked against the manifest. TensorFlow, tensorflow-transform and tfx-bsl are imported inside
functions, so `lmshards stats --help` and the pure helpers stay fast.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import posixpath
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

from lmshards.corpus_tools.stats.figures import (
    rank_frequency,
    rate,
    top_token_figures,
    vocabulary_figures,
)
from lmshards.corpus_tools.stats.page import stats_page
from lmshards.corpus_tools.stats.token_store import token_store_stats
from lmshards.plumbing import bounded, fs
from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.outputs import check_no_overlap, check_replaceable, prepare_output
from lmshards.preprocess.launch import ready_to_run
from lmshards.preprocess.runners import pipeline_options
from lmshards.schemas.constants import ATTENTION_MASK, INPUT_IDS
from lmshards.schemas.directory_kind import is_token_store
from lmshards.schemas.layouts import (
    OUTPUT_KINDS,
    STATS_DIR_NAME,
    STATS_HTML,
    STATS_JSON,
    STATS_OUTPUT,
)
from lmshards.schemas.manifest import Manifest, ShardInfo, read_manifest
from lmshards.schemas.shards import parse_shard_name
from lmshards.schemas.tfmd import schema_for
from lmshards.schemas.tokenizer_info import TokenizerSource, checked_tokenizer
from lmshards.schemas.version import __version__

if TYPE_CHECKING:
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tokenizers import Tokenizer

logger = logging.getLogger(__name__)

# default output: SHARDS_DIR/stats, which `preprocess --overwrite` counts as its own
DEFAULT_STATS_DIRNAME = STATS_DIR_NAME
TOKENIZER_DIRNAME = (
    "tokenizer"  # a tokenizer kept beside the shards: SHARDS_DIR/tokenizer/tokenizer.json
)
DEFAULT_TOP_K = 50
DECODE_BATCH_RECORDS = (
    1024  # records per decoded Arrow batch, i.e. per analyzer call (fewer at a bundle's end)
)

# Column the decoder adds beside the record features: the record's position in StatsPlan.shards.
SHARD_FEATURE = "shard_index"
# The analyzers' count files among the transform function's assets.
TOKEN_COUNTS = "token_counts"  # token id -> non-padding occurrences
RECORD_TOKEN_COUNTS = "record_token_counts"  # non-padding tokens in a record -> records
SHARD_RECORD_COUNTS = "shard_record_counts"  # shard index -> records
METRICS_NAMESPACE = "lmshards_stats"


class StatsError(LmshardsError):
    """A bad `lmshards stats` argument."""


@dataclasses.dataclass(frozen=True)
class StatsConfig:
    """What the user asked for; None/empty fields take the defaults named beside them."""

    shards_dir: str
    output: str | None = None  # SHARDS_DIR/stats
    splits: tuple[str, ...] = ()  # every split of the manifest
    top_k: int = DEFAULT_TOP_K
    tokenizer: str | None = None  # SHARDS_DIR/tokenizer when it exists, else ids only
    overwrite: bool = False  # replace an earlier stats output (only stats.json and stats.html)

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise StatsError(f"--top_k {self.top_k} must be at least 1.")


@dataclasses.dataclass(frozen=True)
class StatsPlan:
    """What the pipeline analyses, settled and checked before it is built."""

    shards_dir: str
    output: str
    manifest: Manifest
    splits: tuple[str, ...]
    shards: tuple[
        ShardInfo, ...
    ]  # the analysed shards in manifest order; SHARD_FEATURE indexes them
    top_k: int
    tokenizer: TokenizerSource | None  # names the top tokens; its fingerprint is the manifest's


@dataclasses.dataclass(frozen=True)
class AnalyzerCounts:
    """What the analyzers counted over the analysed shards."""

    tokens: dict[int, int]  # token id -> non-padding occurrences
    record_tokens: dict[int, int]  # non-padding tokens in a record -> records
    shard_records: dict[int, int]  # shard index -> records (shards without records are absent)


@dataclasses.dataclass(frozen=True)
class StatsReport:
    """The figures written to stats.json, and where the two files went."""

    stats: dict[str, Any]
    json_path: str
    html_path: str


# ---------------------------------------------------------------- plan


def stats_output(config: StatsConfig) -> str:
    """Where stats.json and stats.html go: --output, or SHARDS_DIR/stats.

    Raises:
      StatsError: a token store without --output (nothing but the store's own files goes in it).
    """
    if config.output:
        return config.output
    if is_token_store(config.shards_dir):
        raise StatsError(
            f"{config.shards_dir!r} is a token store, which holds only its own files; pass --output DIR "
            "for its stats.json and stats.html."
        )
    return fs.join(config.shards_dir.rstrip("/") or "/", DEFAULT_STATS_DIRNAME)


def check_stats_output(config: StatsConfig) -> str:
    """The output directory, once checked before any work: new, empty, or (with overwrite) an earlier
    stats output and nothing else; never the shard set or store itself, one holding it, or another
    lmshards output. SHARDS_DIR/stats, the default, is the one place inside a shard set it may write.

    Raises:
      LmshardsError: naming the directory, what it holds and the fix (OutputError), or as stats_output.
    """
    output = stats_output(config)
    if config.output:
        check_no_overlap([config.shards_dir], output, input_flag="SHARDS_DIR")
    check_replaceable(output, kind=STATS_OUTPUT, overwrite=config.overwrite, others=OUTPUT_KINDS)
    return output


def plan_stats(config: StatsConfig) -> StatsPlan:
    """Reads the manifest and checks splits, output and tokenizer before any pipeline is built.

    Raises:
      LmshardsError: no manifest, an unknown split, no shards, or a tokenizer that is missing or not
        the shards' own. (run_stats checks the output first: check_stats_output.)
    """
    shards_dir = config.shards_dir.rstrip("/") or "/"
    manifest = read_manifest(shards_dir)
    splits = tuple(dict.fromkeys(config.splits)) or tuple(
        manifest.splits
    )  # each split once, in the order given
    shards = tuple(shard for split in splits for shard in manifest.split(split).shards)
    if not shards:
        raise StatsError(
            f"Splits {list(splits)} of {shards_dir!r} hold no shards; nothing to analyse."
        )
    for shard in shards:  # a FIFO or a device would hang the pipeline's reads
        bounded.check_regular_file(fs.join(shards_dir, shard.path), "shard file")
    tokenizer = find_tokenizer(shards_dir, config.tokenizer, manifest)
    return StatsPlan(
        shards_dir=shards_dir,
        output=stats_output(config),
        manifest=manifest,
        splits=splits,
        shards=shards,
        top_k=config.top_k,
        tokenizer=tokenizer,
    )


def find_tokenizer(
    shards_dir: str, given: str | None, manifest: Manifest
) -> TokenizerSource | None:
    """The tokenizer that names top tokens: `given`, else SHARDS_DIR/tokenizer if there is one, else None.

    Raises:
      TokenizerError: `given` is not a tokenizer, or it is not the one the shards were made with.
    """
    path = given or fs.join(shards_dir, TOKENIZER_DIRNAME)
    if given is None and not fs.exists(path):
        return None
    return checked_tokenizer(
        path,
        expected=manifest.tokenizer.fingerprint,
        named="Tokenizer",
        reference="the shards were made with",
        fix="Pass that tokenizer with --tokenizer, or none for ids only.",
    )


# ---------------------------------------------------------------- pipeline


def shard_column(indices: Sequence[int]) -> pa.Array:
    """SHARD_FEATURE as tfx-bsl lays out a scalar int64 feature: one one-element list per record."""
    values = pa.array(indices, type=pa.int64())
    return pa.LargeListArray.from_arrays(
        pa.array(np.arange(len(values) + 1), type=pa.int64()), values
    )


def tensor_adapter_config(record_schema: schema_pb2.Schema):
    """tfx-bsl's description of the decoded batches (the records' features plus SHARD_FEATURE, a scalar
    int64): their Arrow schema and the tensors the analyzers get."""
    import tensorflow as tf
    from tensorflow_transform.tf_metadata import schema_utils
    from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder
    from tfx_bsl.tfxio import tensor_adapter, tensor_representation_util

    schema = type(record_schema)()
    schema.CopyFrom(record_schema)
    shard = schema_utils.schema_from_feature_spec(
        {SHARD_FEATURE: tf.io.FixedLenFeature([], tf.int64)}
    )
    schema.feature.extend(shard.feature)
    arrow_schema = ExamplesToRecordBatchDecoder(record_schema.SerializeToString()).ArrowSchema()
    return tensor_adapter.TensorAdapterConfig(
        arrow_schema.append(pa.field(SHARD_FEATURE, pa.large_list(pa.int64()))),
        tensor_representation_util.InferTensorRepresentationsFromSchema(schema),
    )


def _with_shard_index(
    path_record: tuple[str, bytes], index: Mapping[str, int]
) -> tuple[int, bytes]:
    # Shard file names hold their split, so a name alone identifies a shard of the set.
    path, record = path_record
    return index[posixpath.basename(path)], record


class ReadShardRecords(beam.PTransform):
    """Shard paths -> (shard index, serialized Example) for every record; a shard's index is its position."""

    def __init__(self, paths: Sequence[str]):
        super().__init__()
        self._paths = tuple(paths)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        index = {posixpath.basename(path): i for i, path in enumerate(self._paths)}
        return (
            pbegin
            | "Paths" >> beam.Create(self._paths)  # path
            | "Records"
            >> beam.io.ReadAllFromTFRecord(with_filename=True)  # (path, serialized Example)
            | "ShardIndex"
            >> beam.Map(_with_shard_index, index)  # (shard index, serialized Example)
        )


class DecodeRecords(beam.DoFn):
    """[(shard index, serialized Example)] -> one Arrow RecordBatch: the schema's features plus SHARD_FEATURE."""

    def __init__(self, record_schema: bytes):
        self._record_schema = record_schema
        self._records = Metrics.counter(METRICS_NAMESPACE, "records_decoded")

    def setup(self) -> None:
        from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

        self._decoder = ExamplesToRecordBatchDecoder(self._record_schema)

    def process(self, batch: list[tuple[int, bytes]]) -> Iterator[pa.RecordBatch]:
        decoded = self._decoder.DecodeBatch([record for _, record in batch])
        self._records.inc(len(batch))
        yield decoded.append_column(SHARD_FEATURE, shard_column([shard for shard, _ in batch]))


def preprocessing_fn(inputs: dict[str, Any]) -> dict[str, Any]:
    """The analyzers; tft traces this once, on the launcher. Their counts become asset files."""
    import tensorflow as tf
    import tensorflow_transform as tft

    real = tf.not_equal(inputs[ATTENTION_MASK], 0)  # [batch, seq_len]; padding is attention_mask 0
    tft.count_per_key(
        tf.ragged.boolean_mask(inputs[INPUT_IDS], real), key_vocabulary_filename=TOKEN_COUNTS
    )
    record_tokens = tf.reduce_sum(tf.cast(real, tf.int64), axis=1)  # [batch]
    tft.count_per_key(record_tokens, key_vocabulary_filename=RECORD_TOKEN_COUNTS)
    tft.count_per_key(inputs[SHARD_FEATURE], key_vocabulary_filename=SHARD_RECORD_COUNTS)
    return {RECORD_TOKEN_COUNTS: record_tokens}


def build_pipeline(
    pipeline: beam.Pipeline, plan: StatsPlan, *, temp_dir: str, counts_dir: str
) -> None:
    """Read -> Batch -> Decode -> Analyze -> the transform function (with the count files) in counts_dir."""
    import tensorflow_transform.beam as tft_beam

    record_schema = schema_for(
        plan.manifest.features(), vocab_size=plan.manifest.tokenizer.vocab_size
    )
    paths = [fs.join(plan.shards_dir, shard.path) for shard in plan.shards]
    with tft_beam.Context(temp_dir=temp_dir):
        records = pipeline | "Read" >> ReadShardRecords(paths)  # (shard index, serialized Example)
        batches = records | "Batch" >> beam.BatchElements(
            min_batch_size=DECODE_BATCH_RECORDS, max_batch_size=DECODE_BATCH_RECORDS
        )  # [(shard index, bytes)]
        decoded = batches | "Decode" >> beam.ParDo(
            DecodeRecords(record_schema.SerializeToString())
        )  # pa.RecordBatch
        dataset = (decoded, tensor_adapter_config(record_schema))
        analyzed = dataset | "Analyze" >> tft_beam.AnalyzeDataset(
            preprocessing_fn
        )  # (transform fn dir, metadata)
        _ = analyzed | "WriteCounts" >> tft_beam.WriteTransformFn(counts_dir)


def parse_counts(text: str) -> dict[int, int]:
    """A tft per-key count file ('COUNT KEY' per line) as key -> count."""
    counts = {}
    for line in text.splitlines():
        if line.strip():
            count, key = line.split()
            counts[int(key)] = int(count)
    return counts


def read_counts(counts_dir: str) -> AnalyzerCounts:
    """The analyzers' count files from the transform function written to counts_dir."""
    import tensorflow as tf
    import tensorflow_transform as tft

    output = tft.TFTransformOutput(counts_dir)

    def counts(name: str) -> dict[int, int]:
        path = output.vocabulary_file_by_name(name)
        if path is None:
            raise RuntimeError(f"the analysis wrote no {name!r} counts under {counts_dir!r}")
        with tf.io.gfile.GFile(path) as f:
            return parse_counts(f.read())

    return AnalyzerCounts(
        tokens=counts(TOKEN_COUNTS),
        record_tokens=counts(RECORD_TOKEN_COUNTS),
        shard_records=counts(SHARD_RECORD_COUNTS),
    )


# ---------------------------------------------------------------- figures


def corpus_stats(
    counts: AnalyzerCounts, *, plan: StatsPlan, tokenizer: Tokenizer | None
) -> dict[str, Any]:
    """Every figure of stats.json, from the analyzers' counts.

    tokenizer: the plan's tokenizer, loaded; it names the top tokens and finds the byte-fallback
    ids. Without one, top tokens are ids only and the byte-fallback figures are None. Rates are
    shares of the non-padding tokens counted; the unk figures are None when the manifest records
    no unknown token. Unused ids are those never seen among the non-padding tokens (special tokens
    such as the mask token among them).
    """
    manifest, shards = plan.manifest, plan.shards
    vocab_size, seq_len = manifest.tokenizer.vocab_size, manifest.seq_len
    tokens = sum(counts.tokens.values())
    records = sum(counts.shard_records.values())
    shard_records = [counts.shard_records.get(i, 0) for i in range(len(shards))]
    split_records = dict.fromkeys(plan.splits, 0)
    for shard, n in zip(shards, shard_records):
        split_records[parse_shard_name(shard.path)[0]] += n
    lengths = sorted(counts.record_tokens)
    stats = {
        "tool_version": __version__,
        "shards_dir": plan.shards_dir,
        "splits": list(plan.splits),
        "seq_len": seq_len,
        "vocab_size": vocab_size,
        "records": records,
        "tokens": tokens,
        "padding_tokens": records * seq_len - tokens,
        "padding_share": rate(records * seq_len - tokens, records * seq_len),
        **vocabulary_figures(
            counts.tokens,
            vocab_size=vocab_size,
            unk_id=manifest.tokenizer.special_token_ids.get("unk"),
            tokenizer=tokenizer,
        ),
        "tokens_per_record": {
            "mean": rate(tokens, records),
            "min": lengths[0] if lengths else 0,
            "max": lengths[-1] if lengths else 0,
            "histogram": [
                [n, counts.record_tokens[n]] for n in lengths
            ],  # [non-padding tokens, records]
        },
        "records_per_split": split_records,
        "records_per_shard": {
            "min": min(shard_records),
            "max": max(shard_records),
            "mean": rate(records, len(shards)),
            "shards": [
                {"path": shard.path, "records": n} for shard, n in zip(shards, shard_records)
            ],
        },
        **top_token_figures(
            counts.tokens,
            top_k=plan.top_k,
            tokenizer=tokenizer,
            tokenizer_path=plan.tokenizer.json_path if plan.tokenizer else None,
        ),
    }
    stats["manifest_mismatches"] = manifest_mismatches(stats, manifest=manifest, shards=shards)
    return stats


def manifest_mismatches(
    stats: Mapping[str, Any], *, manifest: Manifest, shards: Sequence[ShardInfo]
) -> list[str]:
    """Where the counted figures differ from what the manifest promises; empty for intact shards."""
    totals = [manifest.split(split).totals for split in stats["splits"]]
    problems = []
    written = sum(t.tokens_written for t in totals)
    if stats["tokens"] != written:
        problems.append(
            f"{stats['tokens']} non-padding tokens counted, manifest says {written} tokens_written"
        )
    padding = sum(t.padding_tokens for t in totals)
    if stats["padding_tokens"] != padding:
        problems.append(
            f"{stats['padding_tokens']} padding tokens counted, manifest says {padding}"
        )
    for shard, counted in zip(shards, stats["records_per_shard"]["shards"]):
        if counted["records"] != shard.records:
            problems.append(
                f"{shard.path}: {counted['records']} records counted, manifest says {shard.records}"
            )
    if stats["out_of_vocab_tokens"]:
        problems.append(
            f"{stats['out_of_vocab_tokens']} tokens have ids outside [0, {stats['vocab_size']})"
        )
    return problems


# ---------------------------------------------------------------- run


def analysis_dir(options: PipelineOptions) -> str:
    """A fresh directory for tft's temporary files and the transform function: under --temp_location
    when given (workers on other machines must reach it), else a local temporary directory."""
    temp_location = options.view_as(GoogleCloudOptions).temp_location
    if temp_location:
        return fs.join(temp_location, f"lmshards-stats-{uuid.uuid4().hex}")
    return tempfile.mkdtemp(prefix="lmshards-stats-")


def remove_tree(path: str) -> None:
    filesystem, stripped = fs.filesystem(path)
    if filesystem.exists(stripped):
        filesystem.rm(stripped, recursive=True)


def write_stats(
    output: str, stats: dict[str, Any], frequencies: Sequence[int], *, overwrite: bool = False
) -> StatsReport:
    """Writes stats.html (with the rank-frequency plot of `frequencies`) and then stats.json, each
    atomically, each manifest mismatch logged as a warning first. With overwrite, an earlier stats
    output there is deleted first, stats.json first, so that old and new files never stand together.

    Raises:
      OutputError: output holds anything but an earlier stats output (see check_stats_output).
    """
    for problem in stats["manifest_mismatches"]:
        logger.warning("stats: %s", problem)
    report = StatsReport(
        stats=stats, json_path=fs.join(output, STATS_JSON), html_path=fs.join(output, STATS_HTML)
    )
    prepare_output(output, kind=STATS_OUTPUT, overwrite=overwrite)
    fs.write_text_atomic(report.html_path, stats_page(stats, frequencies))
    fs.write_text_atomic(report.json_path, json.dumps(stats, indent=2, ensure_ascii=False) + "\n")
    return report


def run_stats(config: StatsConfig, beam_args: Sequence[str] = ()) -> StatsReport | None:
    """Runs the analysis and writes stats.json and stats.html to the output directory.

    Beam flags choose the runner as for `lmshards preprocess` (default: in-process). With
    `--dry_run=True` (DataflowRunner) the job is only built, nothing is written, and None is returned.

    Raises:
      LmshardsError: a bad argument, output or runner, found before the pipeline is built (see
        check_stats_output and plan_stats).
    """
    from tokenizers import Tokenizer

    output = check_stats_output(config)
    if is_token_store(config.shards_dir):
        stats, frequencies = token_store_stats(
            config.shards_dir, top_k=config.top_k, tokenizer=config.tokenizer
        )
        return write_stats(output, stats, frequencies, overwrite=config.overwrite)
    plan = plan_stats(config)
    options = pipeline_options(beam_args)
    work_dir = analysis_dir(options)
    counts_dir = fs.join(work_dir, "counts")
    try:
        pipeline = beam.Pipeline(options=options)
        build_pipeline(pipeline, plan, temp_dir=fs.join(work_dir, "tft"), counts_dir=counts_dir)
        # No cost estimate (the cost model is preprocess's); the workers run corpus_tools' analyzers
        # too, so not the worker-only distribution.
        if not ready_to_run(pipeline, options, input_bytes=None, worker_package=False):
            return None  # a Dataflow dry run
        logger.info(
            "stats: analysing %d shards of %s (%s)",
            len(plan.shards),
            plan.shards_dir,
            ", ".join(plan.splits),
        )
        pipeline.run().wait_until_finish()
        counts = read_counts(counts_dir)
    finally:
        remove_tree(work_dir)
    tokenizer = Tokenizer.from_str(plan.tokenizer.json_text) if plan.tokenizer else None
    stats = corpus_stats(counts, plan=plan, tokenizer=tokenizer)
    return write_stats(
        plan.output, stats, rank_frequency(counts.tokens), overwrite=config.overwrite
    )
