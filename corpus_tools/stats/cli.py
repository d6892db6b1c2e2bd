"""`lmshards stats SHARDS_DIR`: token frequencies, unknown/byte-fallback rates, padding and shard balance.

Runs a Beam pipeline of tensorflow-transform analyzers over the shards (in-process by default;
any Beam runner with --runner ...) and writes stats.json and stats.html to --output.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from plumbing.cli import CommandParser, run_command, setup_logging, typo_hint
from plumbing.units import format_duration
from schemas.constants import SPLITS

if TYPE_CHECKING:
    from corpus_tools.stats.stats import StatsReport

COMMAND = "stats"
LOGGED_PACKAGES = ("corpus_tools", "schemas")


def _beam_flags() -> list[str]:
    from apache_beam.options.pipeline_options import PipelineOptions

    return [f"--{name}" for name in PipelineOptions([]).get_all_options()]


def build_parser() -> CommandParser:
    from corpus_tools.stats.stats import DEFAULT_STATS_DIRNAME, DEFAULT_TOP_K, TOKENIZER_DIRNAME

    parser = CommandParser(
        COMMAND,
        description=__doc__,
        extra_flags=_beam_flags(),
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
        "--top_k", type=int, default=DEFAULT_TOP_K, help="most frequent tokens to list"
    )
    parser.add_argument(
        "--tokenizer",
        default=None,
        help="the shards' tokenizer (tokenizer.json or its directory) to name the top tokens "
        f"(default SHARDS_DIR/{TOKENIZER_DIRNAME} if present, else ids only)",
    )
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    return parser


def parse_args(parser: CommandParser, argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Our flags, and the rest for Beam.

    A stray word, or a flag that no Beam option declares but that is close to one of ours
    (e.g. --top-k), is an error; other unknown flags pass through, since runners add their own.
    """
    args, rest = parser.parse_known_args(list(argv))
    ours = [
        flag
        for action in parser._actions
        for flag in action.option_strings
        if flag.startswith("--")
    ]
    for position, arg in enumerate(rest):
        previous = rest[position - 1] if position else ""
        is_value = previous.startswith("--") and "=" not in previous  # `--runner DataflowRunner`
        misspelt = arg.startswith("--") and typo_hint(arg, ours)
        if misspelt or not (arg.startswith("-") or is_value):
            parser.error(f"unrecognized arguments: {arg}")
    return args, rest


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, beam_args = parse_args(parser, sys.argv[1:] if argv is None else argv)
    setup_logging(verbose=args.verbose, packages=LOGGED_PACKAGES)
    return run_command(COMMAND, lambda: _stats(args, beam_args))


def _stats(args: argparse.Namespace, beam_args: list[str]) -> int:
    from corpus_tools.stats.stats import StatsConfig, run_stats

    config = StatsConfig(
        shards_dir=args.shards_dir,
        output=args.output,
        splits=tuple(args.split or ()),
        top_k=args.top_k,
        tokenizer=args.tokenizer,
    )
    started = time.monotonic()
    report = run_stats(config, beam_args)
    if report is None:
        print(f"lmshards {COMMAND}: dry run, nothing submitted or written")
        return 0
    print(summary(report, time.monotonic() - started))
    return 0


def summary(report: StatsReport, seconds: float) -> str:
    """A few lines on stdout: where the report went and the headline figures."""
    stats = report.stats
    unk = "n/a" if stats["unk_rate"] is None else f"{stats['unk_rate']:.4%}"
    fallback = (
        "n/a" if stats["byte_fallback_rate"] is None else f"{stats['byte_fallback_rate']:.4%}"
    )
    lines = [
        f"lmshards stats: {stats['shards_dir']} ({', '.join(stats['splits'])}) in {format_duration(seconds)}",
        f"  wrote {report.json_path} and {report.html_path}",
        f"  {stats['records']:,} records, {stats['tokens']:,} tokens "
        f"({stats['tokens_per_record']['mean']:.1f} per record), padding {stats['padding_share']:.2%}",
        f"  vocabulary {stats['vocab_size']:,}: {stats['vocab_unused_fraction']:.2%} never used; "
        f"unknown {unk}, byte fallback {fallback}",
    ]
    lines += [f"  MISMATCH {problem}" for problem in stats["manifest_mismatches"]]
    return "\n".join(lines)
