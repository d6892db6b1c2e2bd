"""Launching a Beam command: build its pipeline, dry-run or run it under the output rules, report the end.

A command is its plan and its wiring; everything around them is here, once, as plain calls its
`run_*` function makes in order (lease, plan, build, ready, launch):

- `writer_lease`: the one-writer lease on a shard set's --output (none for a dry run).
- `ready_to_run`: a wired pipeline with the worker package staged for Dataflow, or only dry-run with
  Dataflow's `--dry_run=True` (preprocess, repack, stats).
- `launch`: --output checked writable, --overwrite's clearing, the files known before the run (tokenizer
  copy, schema.pbtxt), the run, and a failure reported in one line with the partial output removed
  (preprocess, repack), for a `PlannedShardSet`.
- `run_failures`, `dry_run_line`: the command's tail: exit 1 and one line for a RunFailure, and the
  line a dry run ends with on stdout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from lmshards.plumbing import fs
from lmshards.plumbing.cli import EXIT_FAILURE, Failure, print_error
from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.lease import output_lease
from lmshards.plumbing.outputs import check_writable, clear_owned_output
from lmshards.preprocess.failures import RunFailure, run_failure
from lmshards.preprocess.options import PreprocessConfig
from lmshards.preprocess.stages import metrics
from lmshards.preprocess.stages.manifest import write_schema_file, write_tokenizer_copy
from lmshards.schemas.constants import (
    PACKED_MANIFEST_FORMAT_VERSION,
    PACKING_CONCAT,
    SCHEMA_NAME,
    TOKENS_DIR_NAME,
)
from lmshards.schemas.layouts import PREPROCESS_OUTPUT
from lmshards.schemas.manifest import InputFileInfo, Manifest, TokenizerInfo, read_manifest
from lmshards.schemas.tokenizer_info import TokenizerSource
from lmshards.schemas.version import __version__

if TYPE_CHECKING:  # Beam's modules load only where a Beam pipeline runs (not the default path)
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PlannedShardSet:
    """A planned shard-set command (preprocess, repack): what its output holds before the run.

    config: the equivalent preprocess run's config (output, --overwrite, --keep_tokens).
    tokenizer: copied into the output (and into its token store with --keep_tokens) before the run.
    header: the manifest as known before the run; schema.pbtxt is written from it.
    """

    config: PreprocessConfig
    tokenizer: TokenizerSource
    header: Manifest


# ---------------------------------------------------------------- the manifest's header


def packing_fields(config: PreprocessConfig) -> dict:
    """The manifest fields a packed set adds (its packing, format version 3); none for concat."""
    if config.packing == PACKING_CONCAT:
        return {}
    return {"packing": config.packing, "format_version": PACKED_MANIFEST_FORMAT_VERSION}


def manifest_header(
    config: PreprocessConfig,
    *,
    tokenizer: TokenizerInfo,
    inputs: tuple[InputFileInfo, ...],
    reading: dict[str, int],
    repacked_from: str | None = None,
) -> Manifest:
    """The manifest's fields known before the run; the manifest stage fills in the rest.

    reading: what reading the text counted (a repack's are its store's); repacked_from: the token store
    a repack read, None for preprocess.
    """
    return Manifest(
        tool_version=__version__,
        seq_len=config.seq_len,
        tokenizer=tokenizer,
        splits={},
        inputs=inputs,
        seed=config.seed,
        options=config.manifest_options(),
        reading=reading,
        schema=SCHEMA_NAME,
        tokens=TOKENS_DIR_NAME if config.keep_tokens else None,
        repacked_from=repacked_from,
        **packing_fields(config),
    )


# ---------------------------------------------------------------- dry run


def ready_to_run(
    pipeline: beam.Pipeline,
    options: PipelineOptions,
    *,
    input_bytes: int | None,
    worker_package: bool = True,
) -> bool:
    """Readies a wired pipeline: with --setup_file, stages the worker-only distribution (preprocess and
    schemas; worker_package=False for a pipeline whose workers run other packages' code); False after a
    Dataflow `--dry_run=True`, which builds the job offline, writes it to --dataflow_job_file and prints
    its estimated cost (see runners.dry_run), so there is nothing to run.

    input_bytes: what the dry run's cost estimate is for; None: no estimate (the cost model was
    measured on preprocess's pipeline only).
    """
    from lmshards.preprocess import runners

    if worker_package:
        runners.prepare_staging(pipeline.options)  # the pipeline stages from its own copy of them
    if runners.is_dry_run(options):
        runners.dry_run(pipeline, options, input_bytes=input_bytes)
        return False
    return True


# ---------------------------------------------------------------- shard sets: lease, files, run


class WritesOutput(Protocol):
    """A command's settings as the launcher reads them: where it writes, and when its lease goes stale."""

    @property
    def output(self) -> str: ...

    @property
    def lease_stale_s(self) -> float: ...


def writer_lease(
    command: str, settings: WritesOutput, options: PipelineOptions | None = None
) -> contextlib.AbstractContextManager:
    """The one-writer lease on settings.output while the block runs (a dry run writes nothing: none).

    A second command into the same --output stops here, naming the first, before its plan reads or
    deletes anything; a stop inside the block removes the partial shard set with the lease. The caller
    has checked, without I/O, that settings.output overlaps no input (the lease file goes into it).
    options: the Beam options of a Beam run; None for the default path, which never dry-runs.
    """
    if options is not None:
        from lmshards.preprocess import runners

        if runners.is_dry_run(options):
            return contextlib.nullcontext()
    return output_lease(
        settings.output,
        command=command,
        stale_after_s=settings.lease_stale_s,
        partial_kind=PREPROCESS_OUTPUT,
    )


def launch(
    pipeline: beam.Pipeline, options: PipelineOptions, shard_set: PlannedShardSet
) -> Manifest:
    """Runs a built Beam pipeline under the output rules preprocess and repack share; returns its manifest."""
    check_temp_location(options)
    started = time.monotonic()
    with output_rules(shard_set):
        pipeline.run().wait_until_finish()
    return finished_manifest(shard_set.config.output, started)


@contextlib.contextmanager
def output_rules(shard_set: PlannedShardSet) -> Iterator[None]:
    """The output rules around the block that runs a shard-set job (a Beam pipeline, or the default
    path's one step without Beam).

    Checks the output is writable, clears an earlier output with --overwrite (refusing before deleting
    anything that is not ours) and writes the files known before the run; a failure in the block removes
    the partial output locally and is reported in one line.
    """
    config = shard_set.config
    check_writable(config.output)
    if config.overwrite:
        with _reported_failures(config.output, remove_partial=False):
            removed = clear_owned_output(
                config.output, kind=PREPROCESS_OUTPUT
            )  # refuses before deleting anything
        _LOG.info("--overwrite: removed %s from %s", ", ".join(removed) or "nothing", config.output)
    with _reported_failures(config.output, remove_partial=not fs.is_remote(config.output)):
        write_known_files(shard_set)
        yield


def finished_manifest(output: str, started: float) -> Manifest:
    """The manifest a finished run wrote, its closing line logged (started: time.monotonic() before it)."""
    manifest = read_manifest(output)
    _LOG.info("%s", metrics.finished_line(manifest, time.monotonic() - started))
    return manifest


def write_known_files(shard_set: PlannedShardSet) -> None:
    """Writes the output's files that are known before the run: the tokenizer's copy and schema.pbtxt.

    Here in the launcher, not in a pipeline stage: they need no data. The manifest stage checks that
    they are there.
    """
    output = shard_set.config.output
    write_tokenizer_copy(shard_set.tokenizer, output)
    if shard_set.config.keep_tokens:  # the store carries its own copy, so that it stands alone
        write_tokenizer_copy(shard_set.tokenizer, fs.join(output, TOKENS_DIR_NAME))
    write_schema_file(output, shard_set.header)


def check_temp_location(options: PipelineOptions) -> None:
    """Checks, before any work, that Dataflow can write its gs:// --temp_location.

    Raises:
      OutputError: it is not writable; the message says why.
    """
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    from lmshards.preprocess import runners

    temp_location = options.view_as(GoogleCloudOptions).temp_location
    if (
        runners.runner_path(options) == runners.DATAFLOW_RUNNER
        and temp_location
        and fs.is_remote(temp_location)
    ):
        check_writable(temp_location, flag="--temp_location")


@contextlib.contextmanager
def _reported_failures(output: str, *, remove_partial: bool) -> Iterator[None]:
    """Turns a failure into the error it reports (see lmshards.preprocess.failures), first removing the partial
    output if asked (locally: cheap, and a rerun then starts clean; on gs:// it has no manifest either)."""
    try:
        yield
    except Exception as e:
        if remove_partial:
            remove_failed_run_output(output)
        failure = run_failure(e, output)
        if failure is None:
            raise
        raise failure from e


def remove_failed_run_output(output: str) -> None:
    """Deletes what a failed run wrote to output (it held nothing else when the run began); logs what is left."""
    try:
        clear_owned_output(output, kind=PREPROCESS_OUTPUT)
    except (OSError, LmshardsError) as e:
        _LOG.warning(
            "The failed run's partial output in %s was left as it is (%s); it has no manifest.",
            output,
            e,
        )


# ---------------------------------------------------------------- the command's tail


@contextlib.contextmanager
def run_failures(command: str) -> Iterator[Failure]:
    """Ends the block that runs a Beam command on a RunFailure (full disk, lost permission) with its
    one error line, and records exit 1 in the Failure it yields.

    A user error propagates (lmshards.plumbing.cli.one_line_errors: exit 2), and so does a bug.
    """
    failed = Failure()
    try:
        yield failed
    except RunFailure as e:
        print_error(command, str(e))
        failed.code = EXIT_FAILURE


def dry_run_line(command: str, job_file: str | None) -> str:
    """The line a dry run ends with on stdout; job_file: the --dataflow_job_file it wrote, if any."""
    return f"lmshards {command}: dry run, nothing submitted or written" + (
        f"; Dataflow job written to {job_file}" if job_file else ""
    )
