"""The preprocess pipeline: read -> [curate] -> encode -> split -> pack -> shard -> manifest.

The curation stage (lmshards.preprocess.curation) is there only with --dedup exact|near or --decontaminate; without
them the pipeline is exactly what it was.

Everything that can be wrong with the user's input is checked in `plan_preprocess`, before the
pipeline is built; the stages (one module each) are deterministic functions of the documents'
texts, so the output bytes do not depend on the runner, the worker count or the bundle sizes.

The user's data is never at risk: an output that overlaps an input (or the tokenizer) is refused
before anything is read, --overwrite deletes only what an earlier preprocess wrote, and the output
is checked to be writable before any work. A run that fails leaves no manifest, and locally none
of its partial files. Those output rules are the launcher's (lmshards.preprocess.launch), shared with repack.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from lmshards.plumbing import fs
from lmshards.plumbing.units import MIB
from lmshards.preprocess import runners
from lmshards.preprocess.curation.stage import CurateDocuments, CurationOutputs
from lmshards.preprocess.in_process import InProcessJob, run_in_process
from lmshards.preprocess.launch import (
    launch,
    ready_to_run,
    writer_lease,
)
from lmshards.preprocess.options import PreprocessConfig
from lmshards.preprocess.plan import (
    PreprocessPlan,
    check_locations,
    in_process_job,
    plan_preprocess,
    shard_set,
    worker_paths,
)
from lmshards.preprocess.sources import (
    is_compressed,
    read_options_from,
    sum_stats,
)
from lmshards.preprocess.stages.encode import text_sha256
from lmshards.preprocess.stages.shard import narrow_dtype, rows_in_files
from lmshards.preprocess.transforms.encode import CountRejected, EncodeDocuments, EncodeSettings
from lmshards.preprocess.transforms.manifest import ManifestInputs, WriteManifest
from lmshards.preprocess.transforms.pack import PackGroups
from lmshards.preprocess.transforms.read import ReadDocuments
from lmshards.preprocess.transforms.shard import WriteShards
from lmshards.preprocess.transforms.split import SplitDocuments, SplitSettings
from lmshards.preprocess.transforms.tokens import WriteTokenStore
from lmshards.schemas.constants import TOKENS_DIR_NAME
from lmshards.schemas.layouts import TEMP_DIR_NAME
from lmshards.schemas.manifest import Manifest

# ---------------------------------------------------------------- planning (before any work)


# ---------------------------------------------------------------- the stages, wired


def build_pipeline(pipeline: beam.Pipeline, plan: PreprocessPlan) -> beam.PCollection:
    """Adds every stage to `pipeline`; returns the PCollection holding the manifest path."""
    config = plan.config
    range_bytes = config.range_mb * MIB
    if in_process_applies(plan, pipeline.options):
        return pipeline | "Preprocess" >> PreprocessInProcess(in_process_job(plan))  # str
    read = pipeline | "Read" >> ReadDocuments(
        list(plan.files),
        read_options_from(config),
        range_bytes=int(range_bytes),
        batch_size=config.documents_per_tokenizer_call,
        numbered=plan.curation is not None,
    )  # documents: list[str] (NumberedBatch when curating); stats: ReadStats, one
    documents = read.documents
    curated = None
    if plan.curation is not None:  # the documents are shuffled by the curation's joins
        curated = read | "Curate" >> CurateDocuments(plan.curation, config.output)
        documents = curated.batches  # list[str], the kept documents
    elif any(is_compressed(f.path) and f.bytes > range_bytes for f in plan.files):
        # A large .gz/.bz2 is one read range; without this its tokenizing would stay fused to the one
        # worker reading it. Only then is the raw text shuffled.
        documents = documents | "SpreadBatches" >> beam.Reshuffle()  # list[str]
    chunks = documents | "Tokenize" >> EncodeDocuments(
        EncodeSettings(
            tokenizer_path=plan.tokenizer_source.json_path,
            tokenizer_sha256=text_sha256(plan.tokenizer_source.json_text),
            threads=config.tokenizer_threads,
        )
    )  # TokenizedChunk
    rejected = chunks | "TokenizerErrors" >> CountRejected()  # ReadStats, one
    reading = (
        (read.stats, rejected)
        | "ReadingAndRejected" >> beam.Flatten()  # ReadStats, two
        | "Reading" >> beam.CombineGlobally(sum_stats)  # ReadStats, one
    )
    store = None
    if config.keep_tokens:
        store = chunks | "KeepTokens" >> WriteTokenStore(
            plan.store_header(), fs.join(config.output, TOKENS_DIR_NAME), reading=reading
        )  # str: the token store manifest's path
    return add_shard_stages(
        chunks,
        config=config,
        groups=plan.groups,
        pad_id=plan.pad_id,
        record_bytes=plan.record_bytes,
        header=plan.manifest_header(),
        reading=reading,
        before=store,
        curation=curated,
    )


class PreprocessInProcess(beam.PTransform):
    """PBegin -> the manifest's path (one element): the whole job as one step (lmshards.preprocess.in_process),
    for a Beam run on the default runner (a Beam flag given); without one, lmshards.preprocess.local calls
    the step without Beam."""

    def __init__(self, job: InProcessJob):
        super().__init__()
        self._job = job

    def expand(self, pbegin):
        return (
            pbegin
            | "Once" >> beam.Create([self._job])  # one element, the job: it runs once
            | "Run" >> beam.Map(run_in_process)  # str: the manifest's path
        )


def in_process_applies(plan: PreprocessPlan, options: PipelineOptions | None) -> bool:
    """The default runner and a local output: the whole job runs as one step (see
    lmshards.preprocess.in_process, and curation/local.py for curation); the shard bytes are the same
    either way."""
    return (
        options is not None
        and runners.is_default_runner(options)
        and not fs.is_remote(plan.config.output)
    )


def add_shard_stages(
    chunks: beam.PCollection,
    *,
    config: PreprocessConfig,
    groups: dict[str, int],
    pad_id: int | None,
    record_bytes: int,
    header: Manifest,
    reading: beam.PCollection,
    before: beam.PCollection | None = None,
    curation: CurationOutputs | None = None,
) -> beam.PCollection:
    """Tokenized documents -> split, pack, shard and manifest stages (shared by preprocess and repack).

    chunks: TokenizedChunk; reading: ReadStats, one; before: paths written before the manifest;
    curation: the curation stage's outputs, when it ran (its info goes into the manifest).
    Returns the PCollection holding the manifest path.
    """
    local = rows_in_files(config.output)  # the chunks and the shard rows wait in local files
    routed = chunks | "Split" >> SplitDocuments(
        SplitSettings(
            validation_fraction=config.validation_fraction,
            groups=groups,
            directory=fs.join(config.output, TEMP_DIR_NAME) if local else None,
        )
    )  # (GroupKey, ChunkPiece), or (GroupKey, TokenizedChunk) for a remote output
    packed = routed | "Pack" >> PackGroups(
        seq_len=config.seq_len,
        remainder=config.remainder,
        pad_id=pad_id,
        packing=config.packing,
    )  # groups: PackedGroup; totals: (split, SplitTotals)
    shards = packed.groups | "Shard" >> WriteShards(
        output=config.output,
        seed=config.seed,
        dtype=narrow_dtype(header.tokenizer.vocab_size, config.seq_len),
        record_bytes=record_bytes,
        target_shard_bytes=config.target_shard_mb * MIB,
        shard_multiple=config.shard_multiple,
        num_shards=config.num_shards,
    )  # (split, ShardInfo)
    inputs = ManifestInputs(shards=shards, totals=packed.totals, reading=reading)
    if curation is not None:  # the manifest also waits for the audit files
        audit = curation.audit | "AuditPaths" >> beam.Map(lambda entry: entry["path"])  # str
        before = audit if before is None else (before, audit) | "Before" >> beam.Flatten()
    return inputs | (
        "Manifest"
        >> WriteManifest(
            header,
            config.output,
            patterns=config.inputs,
            before=before,
            curation=curation.info if curation is not None else None,
        )
    )  # str: the manifest's path


# ---------------------------------------------------------------- running


def run_pipeline(config: PreprocessConfig, beam_args: Sequence[str] = ()) -> Manifest | None:
    """Runs the whole preprocess and returns the manifest it wrote (local or gs:// output).

    beam_args: Beam's pipeline options (--runner, ...); see lmshards.preprocess.runners for the defaults.
    With Beam's `--dry_run=True` (DataflowRunner) nothing runs and nothing is written or deleted:
    the built job goes to `--dataflow_job_file`, and None is returned. Output rules: lmshards.preprocess.launch.

    Raises:
      LmshardsError: a bad runner, input, tokenizer or output, found before any work starts (and, with
        --overwrite, before the old output is touched); or, during the run, an input that turns out
        unreadable or gives no document (raised on a worker, reported here with its own message).
      RunFailure: the output could not be written during the run (full disk, lost permission).
    """
    options = runners.pipeline_options(beam_args)
    runners.check_worker_paths(options, worker_paths(config))  # before anything is read or built
    config = dataclasses.replace(
        config, tokenizer_threads=runners.tokenizer_threads(config.tokenizer_threads, options)
    )
    check_locations(config)  # before the lease file is written into --output
    with writer_lease("preprocess", config, options):
        plan = plan_preprocess(config)
        pipeline = beam.Pipeline(options=options)
        build_pipeline(pipeline, plan)
        if not ready_to_run(pipeline, options, input_bytes=sum(f.bytes for f in plan.files)):
            return None  # a dry run
        return launch(pipeline, options, shard_set(plan))
