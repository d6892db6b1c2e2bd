"""`lmshards stats SHARDS_DIR`: token frequencies, unknown/byte-fallback rates, padding and shard balance.

Runs a Beam pipeline of tensorflow-transform analyzers over the shards (in-process by default;
any Beam runner with --runner ...) and writes stats.json and stats.html to --output.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lmshards.plumbing import stopping
from lmshards.plumbing.cli import (
    EXIT_OK,
    CommandParser,
    add_overwrite_flag,
    add_verbose_flag,
    one_line_errors,
    setup_logging,
)
from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.flag_types import whole
from lmshards.plumbing.lease import add_lease_flag, output_lease
from lmshards.plumbing.quiet import load_tensorflow_quietly
from lmshards.plumbing.units import format_duration
from lmshards.schemas.constants import SPLITS
from lmshards.schemas.layouts import STATS_OUTPUT

if TYPE_CHECKING:
    from lmshards.corpus_tools.stats.stats import StatsConfig, StatsReport

COMMAND = "stats"
LOGGED_PACKAGES = ("lmshards.corpus_tools", "lmshards.schemas")
# Imported up front with their start-up lines (CUDA, oneDNN, CPU features) kept off stderr; tfx-bsl
# loads a second copy of TensorFlow's C++ logging that prints them again.
TENSORFLOW_MODULES = (
    "tensorflow",
    "tensorflow_transform",
    "tensorflow_transform.beam",
    "tfx_bsl.coders.example_coder",
)
log = logging.getLogger(__name__)


MAX_TOP_K = 10**6


def build_parser() -> CommandParser:
    from lmshards.corpus_tools.stats.stats import (
        DEFAULT_STATS_DIRNAME,
        DEFAULT_TOP_K,
        TOKENIZER_DIRNAME,
    )
    from lmshards.preprocess.runners import beam_flags

    parser = CommandParser(
        COMMAND,
        description=__doc__,
        extra_flags=beam_flags(),
        epilog="Every other flag is a Beam pipeline option (--runner, --temp_location, --direct_num_workers, ...).",
    )
    parser.add_argument(
        "shards_dir", metavar="SHARDS_DIR", help="a preprocess output directory, local or gs://"
    )
    parser.add_argument(
        "--output",
        default=None,
        help=f"directory for stats.json and stats.html (default SHARDS_DIR/{DEFAULT_STATS_DIRNAME})",
    )
    parser.add_argument(
        "--split",
        action="append",
        choices=SPLITS,
        default=None,
        help="split to analyse; repeatable (default: every split of the manifest)",
    )
    parser.add_argument(
        "--top_k",
        type=whole(1, MAX_TOP_K),
        default=DEFAULT_TOP_K,
        help="most frequent tokens to list",
    )
    parser.add_argument(
        "--tokenizer",
        default=None,
        help="the shards' tokenizer (tokenizer.json or its directory) to name the top tokens "
        f"(default SHARDS_DIR/{TOKENIZER_DIRNAME} if present, else ids only)",
    )
    add_overwrite_flag(
        parser, help="replace an earlier stats.json and stats.html in --output (nothing else there)"
    )
    add_verbose_flag(parser)
    add_lease_flag(parser)
    return parser


def parse_args(parser: CommandParser, argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Our flags, and the rest for Beam.

    A word that neither our flags nor a Beam option declares (e.g. --top-k, a stray path) exits 2
    with a hint over both; Beam's own options (a runner's too, once --runner names it) pass through.
    """
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    from lmshards.preprocess import runners
    from lmshards.preprocess.cli import check_other_beam_command_flags

    args, rest = parser.parse_known_args(list(argv))
    try:
        runners.resolve_runner(
            PipelineOptions(rest).view_as(StandardOptions).runner or runners.FNAPI_RUNNER
        )  # imports the runner's module, which declares its own flags (Dask's)
    except LmshardsError as e:
        parser.error(str(e))
    check_other_beam_command_flags(parser, rest)
    return args, rest


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, beam_args = parse_args(parser, sys.argv[1:] if argv is None else argv)
    setup_logging(verbose=args.verbose, packages=LOGGED_PACKAGES)
    with one_line_errors(COMMAND) as failed, stopping.stop_signals():
        log.info("stats: loading TensorFlow and tensorflow-transform")
        load_tensorflow_quietly(verbose=args.verbose, modules=TENSORFLOW_MODULES)
        from lmshards.corpus_tools.stats.stats import run_stats, stats_output
        from lmshards.preprocess.launch import dry_run_line, run_failures

        config = stats_config(args)
        started = time.monotonic()
        with run_failures(COMMAND) as failed_run:
            # The lease first: a second writer stops here, naming the first; then run_stats checks
            # the output.
            with output_lease(
                stats_output(config),
                command=COMMAND,
                stale_after_s=args.lease_stale_s,
                partial_kind=STATS_OUTPUT,
            ):
                report = run_stats(config, beam_args)
            if report is None:
                print(dry_run_line(COMMAND, None))
                return EXIT_OK
            print(summary(report, time.monotonic() - started))
            return EXIT_OK
        return failed_run.code
    return failed.code


def stats_config(args: argparse.Namespace) -> StatsConfig:
    """The analysis' config from the command line."""
    from lmshards.corpus_tools.stats.stats import StatsConfig

    return StatsConfig(
        shards_dir=args.shards_dir,
        output=args.output,
        splits=tuple(args.split or ()),
        top_k=args.top_k,
        tokenizer=args.tokenizer,
        overwrite=args.overwrite,
    )


def summary(report: StatsReport, seconds: float) -> str:
    """A few lines on stdout: where the report went and the headline figures."""
    stats = report.stats
    unk = "n/a" if stats["unk_rate"] is None else f"{stats['unk_rate']:.4%}"
    fallback = (
        "n/a" if stats["byte_fallback_rate"] is None else f"{stats['byte_fallback_rate']:.4%}"
    )
    if stats.get("kind") == "token_store":
        per_doc = stats["tokens_per_document"]
        what = "token store"
        counts = (
            f"  {stats['documents']:,} documents, {stats['tokens']:,} tokens "
            f"({per_doc['mean']:.1f} per document, longest {per_doc['max']:,})"
        )
    else:
        what = ", ".join(stats["splits"])
        counts = (
            f"  {stats['records']:,} records, {stats['tokens']:,} tokens "
            f"({stats['tokens_per_record']['mean']:.1f} per record), padding {stats['padding_share']:.2%}"
        )
    lines = [
        f"lmshards stats: {stats['shards_dir']} ({what}) in {format_duration(seconds)}",
        f"  wrote {report.json_path} and {report.html_path}",
        counts,
        f"  vocabulary {stats['vocab_size']:,}: {stats['vocab_unused_fraction']:.2%} never used; "
        f"unknown {unk}, byte fallback {fallback}",
    ]
    lines += [f"  MISMATCH {problem}" for problem in stats["manifest_mismatches"]]
    return "\n".join(lines)
