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
from lmshards.plumbing.errors import TokenizerError
from lmshards.plumbing.outputs import check_no_overlap, check_replaceable
from lmshards.plumbing.units import MIB
from lmshards.preprocess import runners
from lmshards.preprocess.curation.stage import CurateDocuments, CurationOutputs, CurationSettings
from lmshards.preprocess.curation_plan import plan_curation
from lmshards.preprocess.in_process import InProcessJob, PreprocessInProcess
from lmshards.preprocess.launch import (
    PlannedShardSet,
    launch,
    manifest_header,
    ready_to_run,
    writer_lease,
)
from lmshards.preprocess.options import PreprocessConfig, PreprocessError
from lmshards.preprocess.sources import (
    ReadStats,
    check_not_empty,
    discover_inputs,
    is_compressed,
    read_options_from,
    skip_binary_files,
    sum_stats,
)
from lmshards.preprocess.stages.encode import (
    CountRejected,
    EncodeDocuments,
    EncodeSettings,
    text_sha256,
)
from lmshards.preprocess.stages.manifest import (
    ManifestInputs,
    WriteManifest,
)
from lmshards.preprocess.stages.pack import REMAINDER_PAD, PackGroups, num_groups
from lmshards.preprocess.stages.read import ReadDocuments, plan_sized_ranges
from lmshards.preprocess.stages.shard import WriteShards, narrow_dtype, rows_in_files
from lmshards.preprocess.stages.split import SplitDocuments, SplitSettings
from lmshards.preprocess.stages.tokens import TokenStoreManifest, WriteTokenStore, id_dtype_for
from lmshards.schemas.constants import (
    PACKING_BEST_FIT,
    PACKING_CONCAT,
    TOKENS_DIR_NAME,
    TRAIN_SPLIT,
    VALIDATION_SPLIT,
)
from lmshards.schemas.layouts import OUTPUT_KINDS, PREPROCESS_OUTPUT, TEMP_DIR_NAME
from lmshards.schemas.manifest import (
    TOKENIZER_RELPATH,
    InputFileInfo,
    Manifest,
    TokenizerInfo,
)
from lmshards.schemas.records import feature_names, record_bytes_upper_bound
from lmshards.schemas.tokenizer_info import (
    TokenizerSource,
    all_special_ids,
    fingerprint,
    locate_tokenizer,
    model_max_length,
    special_token_ids,
)
from lmshards.schemas.version import __version__


@dataclasses.dataclass(frozen=True)
class PreprocessPlan:
    """A validated config plus everything learned from the inputs and tokenizer while building."""

    config: PreprocessConfig
    files: tuple[InputFileInfo, ...]
    tokenizer_source: TokenizerSource
    tokenizer: TokenizerInfo
    pad_id: int | None
    groups: dict[str, int]  # split -> packing groups
    record_bytes: int  # upper bound of one framed record, for the shard count
    reading: ReadStats  # what finding the inputs counted (files left out inside lmshards outputs)
    curation: CurationSettings | None = None  # --dedup / --decontaminate; None: no curation stage

    def manifest_header(self) -> Manifest:
        """The manifest's fields known before the run; the manifest stage fills in the rest."""
        return manifest_header(
            self.config,
            tokenizer=self.tokenizer,
            inputs=self.files,
            reading=self.reading.recorded(),
        )

    def store_header(self) -> TokenStoreManifest:
        """The token store's manifest as known before the run (preprocess --keep_tokens)."""
        tokenizer = self.tokenizer
        return TokenStoreManifest(
            tool_version=__version__,
            tokenizer=tokenizer,
            id_dtype=id_dtype_for(tokenizer.vocab_size),
            documents=0,
            tokens=0,
            files=(),
            inputs=self.files,
            reading=self.reading.recorded(),
            options=self.config.manifest_options(),
        )


# ---------------------------------------------------------------- planning (before any work)


def check_locations(config: PreprocessConfig) -> None:
    """Refuses an --output that overlaps an input or the tokenizer (no I/O).

    Raises:
      OutputError: the overlap, named.
    """
    check_no_overlap(config.inputs, config.output)
    # The tokenizer is copied into the output after --overwrite clears it: it must not live there.
    check_no_overlap([config.tokenizer], config.output, input_flag="--tokenizer")
    if config.decontaminate:
        check_no_overlap(config.decontaminate, config.output, input_flag="--decontaminate")


def plan_preprocess(config: PreprocessConfig) -> PreprocessPlan:
    """Checks the locations, tokenizer, inputs and output and sizes the packing groups.

    Reads nothing but the tokenizer and the input listing, and writes nothing.

    Raises:
      LmshardsError: an output overlapping an input or the tokenizer, a bad tokenizer, seq_len,
        input or output; the message names the value.
    """
    check_locations(config)
    source = locate_tokenizer(config.tokenizer)
    tokenizer = _load_tokenizer(source.json_text, source.json_path)
    max_len = model_max_length(source)
    roles = special_token_ids(source)
    pad_id = roles.get("pad")
    check_packing_options(config, model_max_length=max_len, pad_id=pad_id)
    info = TokenizerInfo(
        fingerprint=fingerprint(source.json_text),
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        special_token_ids=roles,
        all_special_ids=tuple(all_special_ids(source)),
        model_max_length=max_len,
        path=TOKENIZER_RELPATH,
    )
    read_options_from(config)  # checks the reading flags
    discovery = discover_inputs(config.inputs)
    check_not_empty(discovery.files)
    files, binary = (
        skip_binary_files(discovery.files, read_options_from(config))
        if config.skip_binary
        else (list(discovery.files), 0)
    )
    curation = plan_curation(
        config,
        batch_size=config.documents_per_tokenizer_call,
        range_bytes=int(config.range_mb * MIB),
    )  # reads the eval sets, to check them
    check_replaceable(
        config.output, kind=PREPROCESS_OUTPUT, overwrite=config.overwrite, others=OUTPUT_KINDS
    )
    total_bytes = sum(f.bytes for f in files)
    groups = packing_groups(total_bytes, config.validation_fraction, config.packing_group_tokens)
    return PreprocessPlan(
        config=config,
        files=tuple(files),
        tokenizer_source=source,
        tokenizer=info,
        pad_id=pad_id,
        groups=groups,
        record_bytes=record_bytes_for(config, info.vocab_size),
        reading=ReadStats(**discovery.counts(), files_skipped_binary=binary),
        curation=curation,
    )


def record_bytes_for(config: PreprocessConfig, vocab_size: int) -> int:
    """The upper bound of one framed record of this run's features."""
    names = feature_names(config.packing != PACKING_CONCAT)
    return record_bytes_upper_bound(config.seq_len, vocab_size, names)


def check_packing_options(
    config: PreprocessConfig, *, model_max_length: int | None, pad_id: int | None
) -> None:
    """Raises PreprocessError when seq_len exceeds the tokenizer's model_max_length, or --remainder pad
    or --packing best_fit is asked of a tokenizer without a pad token."""
    if model_max_length is not None and config.seq_len > model_max_length:
        raise PreprocessError(
            f"--seq_len {config.seq_len} exceeds the tokenizer's model_max_length {model_max_length} "
            f"({config.tokenizer!r}); use --seq_len {model_max_length} or less."
        )
    if config.packing == PACKING_BEST_FIT and pad_id is None:
        raise PreprocessError(
            f"--packing best_fit pads blocks with the pad token, and tokenizer {config.tokenizer!r} has "
            "none; use --packing concat or add a pad token."
        )
    if config.remainder == REMAINDER_PAD and pad_id is None:
        raise PreprocessError(
            f"--remainder pad needs a pad token, and tokenizer {config.tokenizer!r} has none; "
            "use --remainder drop or add a pad token."
        )


def _load_tokenizer(json_text: str, path: str):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(json_text)
    except Exception as e:  # the Rust side raises a bare Exception for any malformed tokenizer
        raise TokenizerError(
            f"Tokenizer file {path!r} cannot be loaded by `tokenizers`: {e}. Re-save it with "
            "`tokenizer.save(PATH)` (tokenizers) or `save_pretrained(DIR)` (transformers), or retrain it."
        ) from e


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


def in_process_applies(plan: PreprocessPlan, options: PipelineOptions | None) -> bool:
    """The default runner and a local output: the whole job runs as one step (see
    lmshards.preprocess.in_process, and curation/local.py for curation); the shard bytes are the same
    either way."""
    return (
        options is not None
        and runners.is_default_runner(options)
        and not fs.is_remote(plan.config.output)
    )


def in_process_job(plan: PreprocessPlan) -> InProcessJob:
    config = plan.config
    files, ranges = plan_sized_ranges(
        list(plan.files), read_options_from(config), range_bytes=int(config.range_mb * MIB)
    )  # checks every input file, as the reader does
    return InProcessJob(
        config=config,
        ranges=tuple(ranges),
        read_options=read_options_from(config),
        total_bytes=sum(f.bytes for f in files),
        tokenizer_path=plan.tokenizer_source.json_path,
        tokenizer_sha256=text_sha256(plan.tokenizer_source.json_text),
        vocab_size=plan.tokenizer.vocab_size,
        groups=plan.groups,
        pad_id=plan.pad_id,
        record_bytes=plan.record_bytes,
        header=plan.manifest_header(),
        store_header=plan.store_header() if config.keep_tokens else None,
        curation=plan.curation,
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


def packing_groups(
    total_bytes: int, validation_fraction: float, group_tokens: int
) -> dict[str, int]:
    """split -> packing groups, sized from the input's bytes (known before tokenizing)."""
    return {
        TRAIN_SPLIT: num_groups(total_bytes, 1.0 - validation_fraction, group_tokens),
        VALIDATION_SPLIT: num_groups(total_bytes, validation_fraction, group_tokens),
    }


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


def worker_paths(config: PreprocessConfig) -> dict[str, tuple[str, ...]]:
    """Every path flag the workers read or write -> its paths."""
    return {
        "--input": config.inputs,
        "--output": (config.output,),
        "--tokenizer": (config.tokenizer,),
        "--decontaminate": config.decontaminate,
    }


def shard_set(plan: PreprocessPlan) -> PlannedShardSet:
    """The plan as the launcher runs it."""
    return PlannedShardSet(
        config=plan.config, tokenizer=plan.tokenizer_source, header=plan.manifest_header()
    )
