"""`lmshards repack`: a new shard set from a token store, without tokenizing again.

The store (see lmshards.preprocess.stages.tokens) holds every document's hash and ids and the input sizes its run
planned with; those are all the split, pack, shard and manifest stages use, so those same stages,
fed from the store instead of the tokenizer, write the shards and manifest `lmshards preprocess`
would write from the text with the same options (the manifest adds `repacked_from`). Every option
not given is the store's run's. Output rules are preprocess's: see lmshards.preprocess.launch.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import apache_beam as beam

from lmshards.plumbing import fs
from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.lease import STALE_AFTER_S
from lmshards.plumbing.outputs import check_no_overlap, check_replaceable
from lmshards.preprocess import runners
from lmshards.preprocess.launch import (
    PlannedShardSet,
    launch,
    manifest_header,
    ready_to_run,
    writer_lease,
)
from lmshards.preprocess.options import LAYOUT_OPTIONS, PreprocessConfig, default_remainder
from lmshards.preprocess.pipeline import add_shard_stages
from lmshards.preprocess.plan import check_packing_options, packing_groups, record_bytes_for
from lmshards.preprocess.sources import ReadStats
from lmshards.preprocess.sources.core.options import READING_FLAGS
from lmshards.preprocess.stages.tokens import (
    TokenStoreError,
    TokenStoreManifest,
    check_store_files,
    locate_store,
    read_store_manifest,
)
from lmshards.preprocess.transforms.tokens import ReadTokenStore
from lmshards.schemas.constants import TOKENIZER_DIR_NAME
from lmshards.schemas.layouts import OUTPUT_KINDS, PREPROCESS_OUTPUT
from lmshards.schemas.manifest import TOKENIZER_RELPATH, Manifest
from lmshards.schemas.tokenizer_info import TokenizerSource, fingerprint, locate_tokenizer

_LOG = logging.getLogger(__name__)
# The options repack may change; each defaults to the value the store's run used.
REPACK_OPTIONS = (*LAYOUT_OPTIONS, "packing_group_tokens", "packing")
# --num_shards 0: no fixed count, even where the store's run had one (--target_shard_mb decides).
SHARDS_BY_SIZE = 0


@dataclasses.dataclass(frozen=True)
class RepackConfig:
    """--tokens SRC --output NEW and the options to change (None: keep the store's run's).

    tokenizer: the tokenizer this run expects the store to have been made with (optional).
    """

    tokens: str
    output: str
    seq_len: int | None = None
    remainder: str | None = None
    validation_fraction: float | None = None
    seed: int | None = None
    target_shard_mb: float | None = None
    num_shards: int | None = None
    shard_multiple: int | None = None
    packing_group_tokens: int | None = None
    packing: str | None = None
    tokenizer: str | None = None
    overwrite: bool = False
    lease_stale_s: float = STALE_AFTER_S

    def changed(self) -> dict[str, Any]:
        """The options given; num_shards 0 clears the store run's count (shards sized by bytes)."""
        given = {k: getattr(self, k) for k in REPACK_OPTIONS if getattr(self, k) is not None}
        if given.get("num_shards") == SHARDS_BY_SIZE:
            given["num_shards"] = None
        return given


@dataclasses.dataclass(frozen=True)
class RepackPlan:
    config: PreprocessConfig  # the equivalent preprocess run's: what the shard stages read
    store: str
    store_manifest: TokenStoreManifest
    tokenizer_source: TokenizerSource  # the store's copy
    groups: dict[str, int]
    pad_id: int | None
    record_bytes: int
    header: Manifest


# ---------------------------------------------------------------- planning (before any work)


def effective_config(
    config: RepackConfig, store: str, manifest: TokenStoreManifest
) -> PreprocessConfig:
    """The PreprocessConfig of the preprocess run this repack is equal to: the store's run's options
    with the given ones changed. Raises PreprocessError on a bad value (as preprocess would)."""
    recorded = manifest.options
    # How the store's run read its text is fixed by the store, and recorded again in the new manifest.
    values = {k: recorded[k] for k in (*REPACK_OPTIONS, *READING_FLAGS) if k in recorded}
    changed = config.changed()
    if "packing" in changed and "remainder" not in changed:
        # The store's run's remainder went with its packing; a new packing takes its own default.
        changed["remainder"] = default_remainder(changed["packing"])
    return PreprocessConfig(
        inputs=tuple(f.path for f in manifest.inputs),
        tokenizer=fs.join(store, TOKENIZER_DIR_NAME),
        output=config.output,
        overwrite=config.overwrite,
        **{**values, **changed},
    )


def store_tokenizer(
    store: str, manifest: TokenStoreManifest, expected: str | None
) -> TokenizerSource:
    """The store's copy of its tokenizer, checked against the store's fingerprint and `expected`.

    Raises:
      TokenStoreError: the copy is missing or not the store's tokenizer, or `expected` is another tokenizer.
    """
    path = fs.join(store, TOKENIZER_DIR_NAME)
    try:
        source = locate_tokenizer(path)
    except LmshardsError as e:
        raise TokenStoreError(
            f"The token store's tokenizer copy {path!r} cannot be read ({e}); restore it, or "
            "re-run `lmshards preprocess --keep_tokens`."
        ) from e
    found, made_with = fingerprint(source.json_text), manifest.tokenizer.fingerprint
    if found != made_with:
        raise TokenStoreError(
            f"The tokenizer in {path!r} has fingerprint {found} but the token store was made with "
            f"{made_with}: its tokenizer/ was replaced; restore it."
        )
    if expected is not None:
        given = fingerprint(locate_tokenizer(expected).json_text)
        if given != made_with:
            raise TokenStoreError(
                f"--tokenizer {expected!r} has fingerprint {given} but the token store {store!r} was made "
                f"with {made_with}. Pass the tokenizer given to `lmshards preprocess`, or preprocess "
                "again with this one."
            )
    return source


def plan_repack(config: RepackConfig) -> RepackPlan:
    """Finds and checks the store (manifest, every part's presence and size, tokenizer), the options
    and the output. Reads no token and writes nothing.

    Raises:
      LmshardsError: a missing, incomplete or damaged store (naming the file), another tokenizer than
        --tokenizer, a bad option value, or an output that overlaps the store or is not empty.
    """
    store = locate_store(config.tokens)
    manifest = read_store_manifest(store)
    check_no_overlap([config.tokens, store], config.output, input_flag="--tokens")
    check_store_files(store, manifest)
    source = store_tokenizer(store, manifest, config.tokenizer)
    preprocess_config = effective_config(config, store, manifest)
    tokenizer = dataclasses.replace(manifest.tokenizer, path=TOKENIZER_RELPATH)
    pad_id = tokenizer.special_token_ids.get("pad")
    check_packing_options(
        preprocess_config, model_max_length=tokenizer.model_max_length, pad_id=pad_id
    )
    check_replaceable(
        config.output, kind=PREPROCESS_OUTPUT, overwrite=config.overwrite, others=OUTPUT_KINDS
    )
    header = manifest_header(
        preprocess_config,
        tokenizer=tokenizer,
        inputs=manifest.inputs,
        reading=manifest.reading,
        repacked_from=store,
    )
    return RepackPlan(
        config=preprocess_config,
        store=store,
        store_manifest=manifest,
        tokenizer_source=source,
        groups=packing_groups(
            manifest.input_bytes,
            preprocess_config.validation_fraction,
            preprocess_config.packing_group_tokens,
        ),
        pad_id=pad_id,
        record_bytes=record_bytes_for(preprocess_config, tokenizer.vocab_size),
        header=header,
    )


# ---------------------------------------------------------------- the stages, wired


def build_repack(pipeline: beam.Pipeline, plan: RepackPlan) -> beam.PCollection:
    """Adds the stages to `pipeline`; returns the PCollection holding the manifest path."""
    chunks = pipeline | "ReadTokens" >> ReadTokenStore(
        plan.store, plan.store_manifest.files
    )  # TokenizedChunk
    # Nothing is read from text: the manifest's reading counts are the store's (the plan's header).
    reading = pipeline | "NoReading" >> beam.Create([ReadStats()])  # ReadStats, one
    return add_shard_stages(
        chunks,
        config=plan.config,
        groups=plan.groups,
        pad_id=plan.pad_id,
        record_bytes=plan.record_bytes,
        header=plan.header,
        reading=reading,
    )


def run_repack(config: RepackConfig, beam_args: Sequence[str] = ()) -> Manifest | None:
    """Runs the repack and returns the manifest it wrote; None for a Dataflow --dry_run=True.

    Raises:
      LmshardsError: see plan_repack; another live process writing --output (LeaseHeldError); or,
        during the run, a damaged part file (named).
      RunFailure: the output could not be written during the run (full disk, lost permission).
    """
    options = runners.pipeline_options(beam_args)
    runners.check_worker_paths(options, worker_paths(config))  # before anything is read or built
    check_no_overlap([config.tokens], config.output, input_flag="--tokens")  # before the lease file
    # One writer per output: a second repack into --output stops here, before the plan reads anything.
    with writer_lease("repack", config, options):
        plan = plan_repack(config)
        store = plan.store_manifest
        pipeline = beam.Pipeline(options=options)
        build_repack(pipeline, plan)
        if not ready_to_run(pipeline, options, input_bytes=store.data_bytes):
            return None  # a dry run
        _LOG.info(
            "repack: %s documents, %s tokens in %d files from %s",
            f"{store.documents:,}",
            f"{store.tokens:,}",
            len(store.files),
            plan.store,
        )
        return launch(pipeline, options, shard_set(plan))


def worker_paths(config: RepackConfig) -> dict[str, tuple[str, ...]]:
    """Every path flag the workers read or write -> its paths."""
    return {
        "--tokens": (config.tokens,),
        "--output": (config.output,),
        "--tokenizer": (config.tokenizer,) if config.tokenizer else (),
    }


def shard_set(plan: RepackPlan) -> PlannedShardSet:
    """The plan as the launcher runs it."""
    return PlannedShardSet(config=plan.config, tokenizer=plan.tokenizer_source, header=plan.header)
