"""`lmshards preprocess`: flags -> PreprocessConfig -> run_pipeline (lease, plan, build, run) -> a short summary."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Sequence

from lmshards.plumbing import stopping
from lmshards.plumbing.cli import (
    EXIT_OK,
    CommandParser,
    normalize_switches,
    one_line_errors,
    setup_logging,
)
from lmshards.plumbing.memory import frozen_imports
from lmshards.plumbing.units import format_duration
from lmshards.preprocess.corpus_warnings import corpus_warnings
from lmshards.preprocess.failures import is_reported_failure
from lmshards.preprocess.options import (
    RENAMED_FLAGS,
    REQUIRED_FLAGS,
    SUGGESTED_RUNNERS,
    PreprocessConfig,
    add_preprocess_arguments,
    check_dependent_flags,
    config_from_flags,
    preprocess_flags,
)
from lmshards.preprocess.stages.metrics import skipped_line
from lmshards.schemas.manifest import CurationInfo, Manifest

COMMAND = "preprocess"
log = logging.getLogger(__name__)
DESCRIPTION = (
    "Text corpus -> tokenized, packed, shuffled, balanced TFRecord shards + manifest.json.\n\n"
    "Any Apache Beam pipeline option (--runner, --project, --region, --temp_location, --direct_num_workers, ...) "
    f"passes through to the runner. --runner: {', '.join(SUGGESTED_RUNNERS)} or a runner's class path; "
    "without it, Beam's FnApiRunner in this process (without any Beam flag and with a local --output, the same "
    "one step without Beam)."
)
# multi_processing workers' log lines (our progress lines among them) reach the launcher through this logger.
WORKER_LOGGER = "apache_beam.runners.portability.local_job_service"
_WORKER_MESSAGE = re.compile(r'message: "(.*?)" (?:instruction_id|transform_id|log_location):')


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # Beam parses argv again (here and on every worker): it gets `--overwrite`, never `--overwrite=true`.
    argv = normalize_switches(argv, parser.switches(), command=COMMAND)
    args, others = parser.parse_known_args(
        argv
    )  # --help, missing required flags, bad values of ours
    # Writing schema.pbtxt imports TensorFlow here; its C++ INFO lines (CPU features, ...) are not for users.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    setup_preprocess_logging(verbose=args.verbose)
    with one_line_errors(COMMAND) as failed, stopping.stop_signals():
        config = checked_config(parser, argv, args, others)
        if config.curate_sample:  # what the steps would remove, instead of the run
            print(curation_sample(config))
            return EXIT_OK
        started = time.monotonic()
        with frozen_imports():  # the run's modules, after the cheap checks
            from lmshards.preprocess.launch import dry_run_line, run_failures
            from lmshards.preprocess.local import run_local, runs_without_beam
        # the machine's side (a full disk, a lost permission): one line, exit 1
        with run_failures(COMMAND) as failed_run:
            manifest: Manifest | None
            if runs_without_beam(config, others):
                manifest = run_local(config)  # the lease, the plan, the one step
            else:
                with frozen_imports():
                    from lmshards.preprocess.pipeline import run_pipeline
                manifest = run_pipeline(config, argv)  # the lease, the plan, the build, the run
            if manifest is None:
                print(dry_run_line(COMMAND, dataflow_job_file(argv)))
                return EXIT_OK
            for warning in corpus_warnings(manifest, config):
                log.warning("%s", warning)
            print(summary(manifest, config.output, time.monotonic() - started))
            return EXIT_OK
        return failed_run.code
    return failed.code


def dataflow_job_file(argv: list[str]) -> str | None:
    """The --dataflow_job_file a dry run wrote, if any."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from lmshards.preprocess import runners

    return runners.dry_run_job_file(PipelineOptions(argv))


def curation_sample(config: PreprocessConfig) -> str:
    """--curate_sample: the document steps run on a sample of the inputs (nothing written), as lines.

    Raises:
      InputError: an input that is missing or empty.
    """
    from lmshards.preprocess.curation.sample import curate_sample
    from lmshards.preprocess.curation_plan import planned_steps
    from lmshards.preprocess.sources import check_not_empty, discover_inputs, read_options_from

    discovery = discover_inputs(config.inputs)
    check_not_empty(discovery.files)
    options = read_options_from(config)
    return "\n".join(
        curate_sample(planned_steps(config), discovery.files, options, config.curate_sample)
    )


def setup_preprocess_logging(*, verbose: bool = False) -> None:
    """Our progress lines, workers' included; a failure reported in one line is not also Beam's traceback."""
    setup_logging(verbose=verbose, packages=["lmshards.preprocess"])
    for handler in logging.getLogger().handlers:
        handler.addFilter(lambda record: not is_reported_failure(record))
    worker_logs = logging.getLogger(WORKER_LOGGER)
    worker_logs.setLevel(logging.INFO)
    worker_logs.addFilter(_from_preprocess_or_error)


def checked_config(
    parser: CommandParser, argv: list[str], args: argparse.Namespace, others: list[str]
) -> PreprocessConfig:
    """The run's config from the command line; exits 2 on a flag no one declares.

    Without a Beam flag (every word of argv was ours) nothing of Beam's is imported: the flags are
    ours as parsed, and the runner is the default.

    Raises:
      LmshardsError: an unknown runner, or a flag's value wrong alone or with another flag.
    """
    if others:
        from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

        from lmshards.preprocess import runners
        from lmshards.preprocess.pipeline_options import config_from_options

        # The runner first: resolving it imports its module, which declares its own flags (Dask's).
        runners.resolve_runner(
            PipelineOptions(argv).view_as(StandardOptions).runner or runners.FNAPI_RUNNER
        )
        check_flags(parser, others)
        config = config_from_options(PipelineOptions(argv))
    else:
        config = config_from_flags(args)
    check_dependent_flags(config)
    return config


def build_parser() -> CommandParser:
    """Our flags, for --help and their checks; typo hints also draw on every Beam flag (check_flags adds
    them when a word is not ours)."""
    parser = CommandParser(
        COMMAND,
        renamed=RENAMED_FLAGS,
        description=DESCRIPTION,
        allow_abbrev=False,
    )
    add_preprocess_arguments(parser)
    for action in parser._actions:
        if set(action.option_strings) & set(REQUIRED_FLAGS):
            action.required = True
    return parser


def check_flags(parser: CommandParser, others: Sequence[str]) -> None:
    """Exits 2 on any word that neither our flags nor a Beam option declares (--max_seq_length, --runer),
    with a hint drawn from both; Beam's own options pass through to the runner."""
    from lmshards.preprocess import runners

    parser.extra_flags = tuple(
        runners.beam_flags()
    )  # now with the flags of the runner's own options
    parser.reject_unknown(runners.unknown_beam_args(others))


def check_other_beam_command_flags(parser: CommandParser, others: Sequence[str]) -> None:
    """check_flags for a Beam command other than preprocess (stats, repack): a preprocess flag it does not
    declare itself (--num_shards to stats, --text_field to repack) exits 2 naming the command that takes it,
    where Beam's parser would take it and the command ignore it."""
    from lmshards.preprocess import runners

    own = {opt for action in parser._actions for opt in action.option_strings}
    foreign = preprocess_flags() - own
    for arg in others:
        flag = arg.split("=", 1)[0]
        if flag in foreign:
            parser.error(
                f"{flag} is a flag of `lmshards {COMMAND}`; `{parser.prog}` does not take it"
            )
    parser.extra_flags = tuple(flag for flag in runners.beam_flags() if flag not in foreign)
    parser.reject_unknown(runners.unknown_beam_args(others))


def _from_preprocess_or_error(record: logging.LogRecord) -> bool:
    """Keeps worker lines logged by our code (progress, bad-file warnings) and errors not reported in one line
    at the end (see lmshards.preprocess.failures); drops Beam's chatter.

    Kept lines of ours are shortened to their message ("worker: read 1200 documents, ...").
    """
    if is_reported_failure(record):  # judged on the whole text, before it is shortened
        return False
    text = record.getMessage()
    if "/preprocess/" in text:
        match = _WORKER_MESSAGE.search(text)
        if match:
            record.msg, record.args = f"worker: {match[1]}", ()
        return True
    return record.levelno >= logging.ERROR


def summary(manifest: Manifest, output: str, seconds: float, *, command: str = COMMAND) -> str:
    lines = [
        f"lmshards {command}: wrote {output} in {format_duration(seconds)} (seq_len {manifest.seq_len})"
    ]
    for name, split in manifest.splits.items():
        t = split.totals
        lines.append(
            f"  {name:<10} {t.records:>10,} records in {len(split.shards)} shards | documents {t.documents:,} | "
            f"tokens in {t.tokens_in:,}, written {t.tokens_written:,}, dropped {t.tokens_dropped:,}, "
            f"padding {t.padding_tokens:,} ({t.padding_share(manifest.seq_len):.2%})"
            + (f", {t.segments_per_block:.2f} segments per block" if manifest.packed else "")
        )
    skipped = skipped_line(manifest.reading)
    if skipped:
        lines.append(f"  {skipped}")
    if manifest.curation is not None and manifest.curation.steps:
        lines.append(f"  {funnel_line(manifest.curation)}")
    return "\n".join(lines)


def funnel_line(curation: CurationInfo) -> str:
    """'curation: 1,000 read -> language 900 -> gopher_quality 700 (documents; `lmshards inspect`)'"""
    steps = " -> ".join(f"{row['name']} {row['documents_out']:,}" for row in curation.steps)
    return f"curation: {curation.documents_in:,} read -> {steps} (documents; `lmshards inspect` for more)"
