"""The preprocess pipeline: read -> tokenize/split -> pack -> shuffle into shards -> manifest.

Everything that can be wrong with the user's input is checked in `plan_preprocess`, before the
pipeline is built; the stages below are deterministic functions of the documents' texts, so the
output bytes do not depend on the runner, the worker count or the bundle sizes.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import logging
import os
import time
import uuid
from typing import Any, Iterable, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from preprocess.dataflow import dry_run_job_file, is_dry_run, prepare_staging, write_dry_run_job_file
from preprocess.inputs import ReadOptions, ReadStats, expand_inputs, is_compressed, sum_stats
from preprocess.options import PreprocessConfig, PreprocessError
from preprocess.packing import REMAINDER_PAD, num_groups, order_by_hash, pack_blocks
from preprocess.read import ReadDocuments
from preprocess.sharding import MB, num_shards_for, permute, shard_of
from schemas.records import encode_examples, frame_record, record_bytes_upper_bound
from preprocess.tokenize import METRICS_NAMESPACE, TokenizeDocuments, TokenizeSettings, concat_chunks
from schemas import fs
from schemas.constants import ATTENTION_MASK, FEATURE_NAMES, INPUT_IDS, SPLITS, TRAIN_SPLIT, VALIDATION_SPLIT
from schemas.errors import TokenizerError
from schemas.manifest import (
    InputFileInfo,
    Manifest,
    ShardInfo,
    SplitInfo,
    SplitTotals,
    TokenizerInfo,
    manifest_path,
    read_manifest,
    write_manifest,
)
from schemas.shards import shard_relpath
from schemas.tokenizer_info import all_special_ids, fingerprint, locate_tokenizer, model_max_length, special_token_ids
from schemas.version import __version__

_LOG = logging.getLogger(__name__)

TEMP_DIR_NAME = ".lmshards-tmp"  # under the output; removed before the manifest is written


@dataclasses.dataclass(frozen=True)
class PreprocessPlan:
    """A validated config plus everything learned from the inputs and tokenizer while building."""

    config: PreprocessConfig
    files: tuple[InputFileInfo, ...]
    tokenizer_json: str
    tokenizer: TokenizerInfo
    pad_id: int | None
    groups: dict[str, int]  # split -> packing groups
    record_bytes: int  # upper bound of one framed record, for the shard count


@dataclasses.dataclass(frozen=True)
class SplitLayout:
    """Where a split's blocks go: N records, S shards, and each packing group's first global index."""

    num_records: int
    num_shards: int
    group_offsets: dict[int, int]


# ---------------------------------------------------------------- planning (before any work)


def plan_preprocess(config: PreprocessConfig) -> PreprocessPlan:
    """Checks the tokenizer, inputs and output and sizes the packing groups.

    Raises:
      LmshardsError: a bad tokenizer, seq_len, input or output; the message names the value.
    """
    source = locate_tokenizer(config.tokenizer)
    tokenizer = _load_tokenizer(source.json_text, source.json_path)
    max_len = model_max_length(source)
    if max_len is not None and config.seq_len > max_len:
        raise PreprocessError(
            f"--seq_len {config.seq_len} exceeds the tokenizer's model_max_length {max_len} "
            f"({config.tokenizer!r}); use --seq_len {max_len} or less."
        )
    roles = special_token_ids(source)
    pad_id = roles.get("pad")
    if config.remainder == REMAINDER_PAD and pad_id is None:
        raise PreprocessError(
            f"--remainder pad needs a pad token, and tokenizer {config.tokenizer!r} has none; "
            "use --remainder drop or add a pad token."
        )
    info = TokenizerInfo(
        fingerprint=fingerprint(source.json_text),
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        special_token_ids=roles,
        all_special_ids=tuple(all_special_ids(source)),
        model_max_length=max_len,
    )
    read_options(config)  # checks the reading flags
    files = tuple(expand_inputs(config.inputs))
    check_output(config.output, overwrite=config.overwrite)
    total_bytes = sum(f.bytes for f in files)
    fraction = config.validation_fraction
    groups = {
        TRAIN_SPLIT: num_groups(total_bytes, 1.0 - fraction, config.packing_group_tokens),
        VALIDATION_SPLIT: num_groups(total_bytes, fraction, config.packing_group_tokens),
    }
    return PreprocessPlan(
        config=config, files=files, tokenizer_json=source.json_text, tokenizer=info, pad_id=pad_id,
        groups=groups, record_bytes=record_bytes_upper_bound(config.seq_len, info.vocab_size, FEATURE_NAMES),
    )


def _load_tokenizer(json_text: str, path: str):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(json_text)
    except Exception as e:  # the Rust side raises a bare Exception for any malformed tokenizer
        raise TokenizerError(f"Tokenizer file {path!r} cannot be loaded by `tokenizers`: {e}.") from e


def check_output(output: str, *, overwrite: bool) -> None:
    """Raises PreprocessError if output is a file, or a non-empty directory without --overwrite."""
    if not fs.exists(output):
        return
    if not fs.isdir(output):
        raise PreprocessError(f"--output {output!r} is a file; pass a directory path.")
    if fs.listdir(output) and not overwrite:
        raise PreprocessError(
            f"--output {output!r} is not empty; pass --overwrite to replace it, or choose a new directory."
        )


def clear_output(output: str) -> None:
    """Empties output for --overwrite: the manifest first, so a crash midway never leaves a stale one."""
    if not fs.exists(output):
        return
    filesystem, _ = fs.filesystem(output)
    manifest = manifest_path(output)
    if fs.exists(manifest):
        filesystem.rm(fs.filesystem(manifest)[1])
    for entry in fs.listdir(output):
        filesystem.rm(fs.filesystem(entry)[1], recursive=True)


# ---------------------------------------------------------------- stage 4: pack


class _PackGroupFn(beam.DoFn):
    """((split, group), [Chunk]) -> (split, group, PackedBlocks), plus (split, totals) on 'totals'."""

    def __init__(self, *, seq_len: int, remainder: str, pad_id: int | None):
        self._seq_len, self._remainder, self._pad_id = seq_len, remainder, pad_id
        self._blocks = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "blocks")
        self._dropped = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "tokens_dropped")
        self._padding = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "padding_tokens")

    def process(self, element):
        (split, group), chunks = element
        hashes, lengths, tokens = concat_chunks(list(chunks))
        packed = pack_blocks(order_by_hash(hashes, lengths, tokens), seq_len=self._seq_len,
                             remainder=self._remainder, pad_id=self._pad_id)
        self._blocks.inc(packed.num_blocks)
        self._dropped.inc(packed.tokens_dropped)
        self._padding.inc(packed.padding_tokens)
        yield split, group, packed
        yield beam.pvalue.TaggedOutput("totals", (split, SplitTotals(
            documents=int(hashes.size), tokens_in=packed.tokens_in, tokens_written=packed.tokens_written,
            tokens_dropped=packed.tokens_dropped, padding_tokens=packed.padding_tokens, records=packed.num_blocks,
        )))


class PackBlocks(beam.PTransform):
    """((split, group), Chunk) -> tagged outputs 'packed' (split, group, PackedBlocks) and 'totals'."""

    def __init__(self, *, seq_len: int, remainder: str, pad_id: int | None):
        super().__init__()
        self._fn = _PackGroupFn(seq_len=seq_len, remainder=remainder, pad_id=pad_id)

    def expand(self, chunks):
        return (
            chunks
            | "GroupByPackingGroup" >> beam.GroupByKey()  # ((split, group), [Chunk])
            | "Pack" >> beam.ParDo(self._fn).with_outputs("totals", main="packed")
        )


# ---------------------------------------------------------------- stage 5: shuffle and write shards


def layout_splits(block_counts: Iterable[tuple[str, int, int]], *, record_bytes: int, target_shard_bytes: float,
                  multiple: int, num_shards: int | None) -> dict[str, SplitLayout]:
    """(split, group, blocks) for every packing group -> each split's SplitLayout (all splits present)."""
    by_split: dict[str, dict[int, int]] = {split: {} for split in SPLITS}
    for split, group, count in block_counts:
        by_split[split][group] = count
    layouts = {}
    for split, counts in by_split.items():
        offsets, total = {}, 0
        for group in sorted(counts):
            offsets[group] = total
            total += counts[group]
        shards = num_shards_for(total * record_bytes, target_shard_bytes=target_shard_bytes, multiple=multiple,
                                num_shards=num_shards)
        layouts[split] = SplitLayout(num_records=total, num_shards=shards, group_offsets=offsets)
    return layouts


class _SerializeFn(beam.DoFn):
    """(split, group, PackedBlocks) -> ((split, shard), (positions, framed records)) per shard the group feeds.

    Records travel in per-shard batches, not one element each: Beam's cost is per element.
    """

    def __init__(self, seed: int):
        self._seed = seed
        self._records = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "records")

    def process(self, element, layouts: dict[str, SplitLayout]):
        split, group, packed = element
        layout = layouts[split]
        indices = np.arange(packed.num_blocks, dtype=np.int64) + layout.group_offsets[group]
        positions = permute(indices, layout.num_records, self._seed)
        shards = shard_of(positions, layout.num_records, layout.num_shards)
        records = encode_examples({INPUT_IDS: packed.ids, ATTENTION_MASK: packed.attention_masks()})
        self._records.inc(len(records))
        order = np.argsort(shards, kind="stable")
        keys, firsts = np.unique(shards[order], return_index=True)
        for shard, mine in zip(keys.tolist(), np.split(order, firsts[1:])):
            yield (split, shard), (positions[mine], [frame_record(records[i]) for i in mine.tolist()])


def _all_shard_keys(layouts: dict[str, SplitLayout]):
    """((split, shard), None) for every shard, so that shards without records are written too."""
    for split, layout in layouts.items():
        for shard in range(layout.num_shards):
            yield (split, shard), None


class _WriteShardFn(beam.DoFn):
    """((split, shard), [(positions, frames) | None]) -> (split, ShardInfo), the file complete under its name.

    Locally the shard is written under a temporary name, then renamed. On an object store it is
    written under its final name: an object only appears once its upload is finalized, and a rename
    there is a copy (gcsfs also first tries an API that emulators lack, with long retries).
    A retried writer rewrites the same bytes, so either way readers never see half a shard.
    """

    def __init__(self, output: str):
        self._output = output

    def process(self, element, layouts: dict[str, SplitLayout]):
        (split, shard), values = element
        batches = [v for v in values if v is not None]
        positions = np.concatenate([p for p, _ in batches]) if batches else np.zeros(0, dtype=np.int64)
        frames = [frame for _, batch in batches for frame in batch]
        relpath = shard_relpath(split, shard, layouts[split].num_shards, len(frames))
        final = fs.join(self._output, relpath)
        remote = fs.is_remote(final)
        target = final if remote else fs.join(self._output, TEMP_DIR_NAME, f"{split}-{shard:05d}-{uuid.uuid4().hex}")
        if not remote:
            fs.makedirs(fs.join(self._output, TEMP_DIR_NAME))
            fs.makedirs(fs.join(self._output, split))
        digest, size = hashlib.sha256(), 0
        with fs.open_file(target, "wb") as f:
            for i in np.argsort(positions, kind="stable").tolist():
                f.write(frames[i])
                digest.update(frames[i])
                size += len(frames[i])
        if not remote:
            os.replace(target, final)
        yield split, ShardInfo(path=relpath, records=len(frames), bytes=size, sha256=digest.hexdigest())


class WriteShards(beam.PTransform):
    """(split, group, PackedBlocks) -> (split, ShardInfo): a seeded global shuffle into balanced shards."""

    def __init__(self, *, output: str, seed: int, record_bytes: int, target_shard_bytes: float,
                 shard_multiple: int, num_shards: int | None):
        super().__init__()
        self._output, self._seed = output, seed
        self._layout_args = dict(record_bytes=record_bytes, target_shard_bytes=target_shard_bytes,
                                 multiple=shard_multiple, num_shards=num_shards)

    def expand(self, packed):
        layouts = (
            packed
            | "BlockCounts" >> beam.Map(lambda p: (p[0], p[1], p[2].num_blocks))  # (split, group, blocks)
            | "AllBlockCounts" >> beam.combiners.ToList()
            | "Layout" >> beam.Map(layout_splits, **self._layout_args)  # {split: SplitLayout}, one element
        )
        records = packed | "Serialize" >> beam.ParDo(
            _SerializeFn(self._seed), beam.pvalue.AsSingleton(layouts)
        )  # ((split, shard), (positions, frames))
        every_shard = layouts | "EveryShard" >> beam.FlatMap(_all_shard_keys)  # ((split, shard), None)
        return (
            (records, every_shard)
            | "WithEmptyShards" >> beam.Flatten()
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(_WriteShardFn(self._output), beam.pvalue.AsSingleton(layouts))
        )


# ---------------------------------------------------------------- stage 6: manifest


def sum_totals(totals: Iterable[SplitTotals]) -> SplitTotals:
    totals = list(totals)
    fields = [f.name for f in dataclasses.fields(SplitTotals)]
    return SplitTotals(**{name: sum(getattr(t, name) for t in totals) for name in fields})


def build_manifest(plan: PreprocessPlan, shard_infos: Sequence[tuple[str, ShardInfo]],
                   totals: Sequence[tuple[str, SplitTotals]], *, reading: dict[str, int], created_at: str) -> Manifest:
    splits = {}
    for split in SPLITS:
        shards = tuple(sorted((info for s, info in shard_infos if s == split), key=lambda info: info.path))
        splits[split] = SplitInfo(shards=shards, totals=sum_totals(t for s, t in totals if s == split))
    return Manifest(
        tool_version=__version__, seq_len=plan.config.seq_len, tokenizer=plan.tokenizer, splits=splits,
        inputs=plan.files, seed=plan.config.seed, options=plan.config.manifest_options(), created_at=created_at,
        reading=reading,
    )


class _WriteManifestFn(beam.DoFn):
    def __init__(self, plan: PreprocessPlan):
        self._plan = plan

    def process(self, results: list[Any]):
        shard_infos = [r for r in results if isinstance(r, tuple) and isinstance(r[1], ShardInfo)]
        totals = [r for r in results if isinstance(r, tuple) and isinstance(r[1], SplitTotals)]
        reading = sum_stats(r for r in results if isinstance(r, ReadStats)).as_dict()
        created_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        manifest = build_manifest(self._plan, shard_infos, totals, reading=reading, created_at=created_at)
        output = self._plan.config.output
        temp = fs.join(output, TEMP_DIR_NAME)
        if fs.exists(temp):
            filesystem, stripped = fs.filesystem(temp)
            filesystem.rm(stripped, recursive=True)
        yield write_manifest(output, manifest)


class WriteManifest(beam.PTransform):
    """(split, ShardInfo), (split, SplitTotals) and ReadStats -> the manifest path, written once every shard is in place."""

    def __init__(self, plan: PreprocessPlan):
        super().__init__()
        self._plan = plan

    def expand(self, pcolls):
        return (
            pcolls
            | "ShardsAndTotals" >> beam.Flatten()
            | "All" >> beam.combiners.ToList()
            | "Write" >> beam.ParDo(_WriteManifestFn(self._plan))
        )


# ---------------------------------------------------------------- the whole pipeline


def build_pipeline(pipeline: beam.Pipeline, plan: PreprocessPlan) -> beam.PCollection:
    """Adds every stage to `pipeline`; returns the PCollection holding the manifest path."""
    config = plan.config
    read = pipeline | "Read" >> ReadDocuments(
        list(plan.files), read_options(config), range_bytes=int(config.range_mb * MB),
        batch_size=config.batch_size, with_stats=True,
    )  # documents: list[str]; stats: one ReadStats
    documents = read.documents
    range_bytes = config.range_mb * MB
    if any(is_compressed(f.path) and f.bytes > range_bytes for f in plan.files):
        # A large .gz/.bz2 is one read range; without this its tokenizing would stay fused to the one
        # worker reading it. Only then is the raw text shuffled.
        documents = documents | "SpreadBatches" >> beam.Reshuffle()  # list[str]
    return process_batches(documents, plan, read_stats=read.stats)


def process_batches(batches: beam.PCollection, plan: PreprocessPlan, *,
                    read_stats: beam.PCollection | None = None) -> beam.PCollection:
    """Stages 2-6 on batches of documents (list[str]); returns the PCollection holding the manifest path.

    read_stats: the reader's one ReadStats, recorded in the manifest's `reading`.
    """
    config = plan.config
    chunks = batches | "Tokenize" >> TokenizeDocuments(TokenizeSettings(
        tokenizer_json=plan.tokenizer_json, threads=config.tokenizer_threads,
        validation_fraction=config.validation_fraction, groups=plan.groups,
    ))  # ((split, group), Chunk)
    packed = chunks | "Pack" >> PackBlocks(seq_len=config.seq_len, remainder=config.remainder, pad_id=plan.pad_id)
    shards = packed.packed | "Shard" >> WriteShards(
        output=config.output, seed=config.seed, record_bytes=plan.record_bytes,
        target_shard_bytes=config.target_shard_mb * MB, shard_multiple=config.shard_multiple,
        num_shards=config.num_shards,
    )  # (split, ShardInfo)
    results = (shards, packed.totals) if read_stats is None else (shards, packed.totals, read_stats)
    return results | "Manifest" >> WriteManifest(plan)


def read_options(config: PreprocessConfig) -> ReadOptions:
    """The reader's options from ours. Raises InputError on a bad value."""
    return ReadOptions(doc_separator=config.doc_separator, text_field=config.text_field,
                       text_column=config.text_column)


def default_beam_args(beam_args: Sequence[str]) -> list[str]:
    """Beam args plus our default runner: the FnApiRunner in-process.

    Naming the FnApiRunner skips the DirectRunner's attempt to download the Prism runner. In-process
    with the tokenizer's own threads on every core is as fast on one machine as one worker process
    per core, at a fraction of the memory (no per-process Beam harness, no cross-process shuffle).
    """
    args = list(beam_args)
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    if "--runner" not in given:
        args.append("--runner=FnApiRunner")
        if "--direct_running_mode" not in given:
            args.append("--direct_running_mode=in_memory")
    return args


def effective_tokenizer_threads(config: PreprocessConfig, options: PipelineOptions) -> int:
    """--tokenizer_threads, with 0 (auto) resolved: all cores for one in-process worker, else 1.

    On multi-process runners (multi_processing, Dataflow: one SDK process per vCPU) more threads
    per worker would only oversubscribe the cores.
    """
    if config.tokenizer_threads:
        return config.tokenizer_threads
    direct = options.view_as(DirectOptions)
    runner = options.view_as(StandardOptions).runner or ""
    in_process = runner in ("FnApiRunner", "DirectRunner", "") and direct.direct_running_mode == "in_memory"
    return (os.cpu_count() or 1) if in_process else 1


def run_pipeline(config: PreprocessConfig, beam_args: Sequence[str] = ()) -> Manifest | None:
    """Runs the whole preprocess and returns the manifest it wrote (local or gs:// output).

    With Beam's `--dry_run=True` (DataflowRunner) nothing runs and nothing is written or deleted:
    the built job goes to `--dataflow_job_file`, and None is returned.

    Raises:
      LmshardsError: a bad input, tokenizer or output, found before any work starts (and, with
        --overwrite, before the old output is touched).
    """
    options = PipelineOptions(default_beam_args(beam_args))
    config = dataclasses.replace(config, tokenizer_threads=effective_tokenizer_threads(config, options))
    plan = plan_preprocess(config)
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, plan)  # the reader checks every input file here
    prepare_staging(options)
    if is_dry_run(options):
        result = pipeline.run()
        job_file = dry_run_job_file(options)
        if job_file:
            write_dry_run_job_file(result, job_file)
        return None
    if config.overwrite:
        clear_output(config.output)
    started = time.monotonic()
    pipeline.run().wait_until_finish()
    _LOG.info("preprocess finished in %.1f s", time.monotonic() - started)
    return read_manifest(config.output)
