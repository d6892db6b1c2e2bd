"""The preprocess pipeline: read -> encode -> split -> pack -> shard -> manifest.

Everything that can be wrong with the user's input is checked in `plan_preprocess`, before the
pipeline is built; the stages (one module each) are deterministic functions of the documents'
texts, so the output bytes do not depend on the runner, the worker count or the bundle sizes.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Sequence

import apache_beam as beam

from preprocess import runners
from preprocess.encode import EncodeDocuments, EncodeSettings
from preprocess.manifest import ManifestInputs, WriteManifest
from preprocess.options import PreprocessConfig, PreprocessError
from preprocess.pack import REMAINDER_PAD, PackGroups, num_groups
from preprocess.read import ReadDocuments
from preprocess.shard import MB, WriteShards
from preprocess.sources import expand_inputs, is_compressed, read_options_from
from preprocess.split import FLUSH_TOKENS, SplitDocuments, SplitSettings
from schemas import fs
from schemas.constants import FEATURE_NAMES, TRAIN_SPLIT, VALIDATION_SPLIT
from schemas.errors import TokenizerError
from schemas.manifest import InputFileInfo, Manifest, TokenizerInfo, manifest_path, read_manifest
from schemas.records import record_bytes_upper_bound
from schemas.tokenizer_info import all_special_ids, fingerprint, locate_tokenizer, model_max_length, special_token_ids
from schemas.version import __version__

_LOG = logging.getLogger(__name__)


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

    def manifest_header(self) -> Manifest:
        """The manifest's fields known before the run; the manifest stage fills in the rest."""
        config = self.config
        return Manifest(tool_version=__version__, seq_len=config.seq_len, tokenizer=self.tokenizer, splits={},
                        inputs=self.files, seed=config.seed, options=config.manifest_options())


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
    read_options_from(config)  # checks the reading flags
    files = tuple(expand_inputs(config.inputs))
    fs.check_output_dir(config.output, overwrite=config.overwrite)
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


# ---------------------------------------------------------------- the stages, wired


def build_pipeline(pipeline: beam.Pipeline, plan: PreprocessPlan) -> beam.PCollection:
    """Adds every stage to `pipeline`; returns the PCollection holding the manifest path."""
    config = plan.config
    range_bytes = config.range_mb * MB
    read = pipeline | "Read" >> ReadDocuments(
        list(plan.files), read_options_from(config), range_bytes=int(range_bytes), batch_size=config.batch_size,
    )  # documents: list[str]; stats: ReadStats, one
    documents = read.documents
    if any(is_compressed(f.path) and f.bytes > range_bytes for f in plan.files):
        # A large .gz/.bz2 is one read range; without this its tokenizing would stay fused to the one
        # worker reading it. Only then is the raw text shuffled.
        documents = documents | "SpreadBatches" >> beam.Reshuffle()  # list[str]
    chunks = (
        documents
        | "Tokenize" >> EncodeDocuments(EncodeSettings(tokenizer_json=plan.tokenizer_json,
                                                       threads=config.tokenizer_threads))  # TokenizedChunk
        | "Split" >> SplitDocuments(SplitSettings(
            validation_fraction=config.validation_fraction, groups=plan.groups,
            flush_tokens=FLUSH_TOKENS if runners.keeps_finish_bundle_output(pipeline.options) else 0,
        ))  # (GroupKey, TokenizedChunk)
    )
    packed = chunks | "Pack" >> PackGroups(
        seq_len=config.seq_len, remainder=config.remainder, pad_id=plan.pad_id,
    )  # groups: PackedGroup; totals: (split, SplitTotals)
    shards = packed.groups | "Shard" >> WriteShards(
        output=config.output, seed=config.seed, record_bytes=plan.record_bytes,
        target_shard_bytes=config.target_shard_mb * MB, shard_multiple=config.shard_multiple,
        num_shards=config.num_shards,
    )  # (split, ShardInfo)
    return (
        ManifestInputs(shards=shards, totals=packed.totals, reading=read.stats)
        | "Manifest" >> WriteManifest(plan.manifest_header(), config.output)
    )  # str: the manifest's path


# ---------------------------------------------------------------- running


def run_pipeline(config: PreprocessConfig, beam_args: Sequence[str] = ()) -> Manifest | None:
    """Runs the whole preprocess and returns the manifest it wrote (local or gs:// output).

    beam_args: Beam's pipeline options (--runner, ...); see preprocess.runners for the defaults.
    With Beam's `--dry_run=True` (DataflowRunner) nothing runs and nothing is written or deleted:
    the built job goes to `--dataflow_job_file`, and None is returned.

    Raises:
      LmshardsError: a bad runner, input, tokenizer or output, found before any work starts (and, with
        --overwrite, before the old output is touched).
    """
    options = runners.pipeline_options(beam_args)
    config = dataclasses.replace(config, tokenizer_threads=runners.tokenizer_threads(config.tokenizer_threads, options))
    plan = plan_preprocess(config)
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, plan)  # the reader checks every input file here
    runners.prepare_staging(options)
    if runners.is_dry_run(options):
        runners.dry_run(pipeline, options)
        return None
    if config.overwrite:
        clear_output(config.output)
    started = time.monotonic()
    pipeline.run().wait_until_finish()
    _LOG.info("preprocess finished in %.1f s", time.monotonic() - started)
    return read_manifest(config.output)
