"""`lmshards dataset export`: one text column of a Hugging Face dataset -> Parquet or JSON Lines shards."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from lmshards.corpus_tools.dataset import export as de
from lmshards.plumbing import stopping
from lmshards.plumbing.cli import (
    EXIT_OK,
    CommandParser,
    add_overwrite_flag,
    add_verbose_flag,
    one_line_errors,
    setup_logging,
)
from lmshards.plumbing.lease import add_lease_flag, output_lease
from lmshards.schemas.layouts import DATASET_EXPORT_OUTPUT

COMMAND = "dataset export"
LOG_PACKAGES = ("lmshards.corpus_tools", "lmshards.schemas")


def build_parser() -> CommandParser:
    parser = CommandParser(
        COMMAND,
        description="Write one text column of a dataset as shards that `lmshards preprocess` reads.",
    )
    parser.add_argument(
        "dataset",
        help="Hub name (needs network), a builder (json, csv, text, parquet) with "
        "--data_files, a directory of data files, or a save_to_disk directory",
    )
    parser.add_argument("--output", required=True, help="output directory (local or gs://)")
    add_overwrite_flag(parser, help="delete what a non-empty --output holds first")
    add_verbose_flag(parser)
    add_lease_flag(parser)
    parser.add_argument(
        "--data_files",
        action="append",
        default=[],
        metavar="PATH",
        help="local data files or globs for a builder (repeatable)",
    )
    parser.add_argument(
        "--split", default=de.DEFAULT_SPLIT, help="split to export; also the shard name prefix"
    )
    parser.add_argument("--config", default=None, help="dataset configuration (subset) name")
    parser.add_argument("--text_column", default=de.DEFAULT_COLUMN, help="column holding the text")
    parser.add_argument(
        "--output_column", default=de.DEFAULT_COLUMN, help="column name in the output files"
    )
    parser.add_argument(
        "--num_shards", type=de.NUM_SHARDS, default=de.DEFAULT_NUM_SHARDS, help="output files"
    )
    parser.add_argument(
        "--format", choices=de.FORMATS, default=de.DEFAULT_FORMAT, help="output file format"
    )
    parser.add_argument(
        "--streaming",
        action="store_true",
        help="read as an IterableDataset (datasets bigger than memory or disk); shards are "
        "filled round-robin",
    )
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    setup_logging(verbose=args.verbose, packages=LOG_PACKAGES)
    with one_line_errors(COMMAND) as failed, stopping.stop_signals():
        config = export_config(args)
        with output_lease(
            config.output,
            command=COMMAND,
            stale_after_s=args.lease_stale_s,
            partial_kind=DATASET_EXPORT_OUTPUT,
        ):
            summary = de.export(config)
        rows = [s["rows"] for s in summary["shards"]]
        print(
            f"Wrote {summary['rows_written']:,} rows ({summary['rows_without_text']:,} without text skipped) "
            f"to {len(rows)} {config.format} shards in {config.output} (rows per shard {min(rows):,}-{max(rows):,})"
        )
        return EXIT_OK
    return failed.code


def export_config(args: argparse.Namespace) -> de.ExportConfig:
    """The export's config from the command line (checked when it is built)."""
    return de.ExportConfig(
        dataset=args.dataset,
        output=args.output,
        data_files=tuple(args.data_files),
        split=args.split,
        config=args.config,
        text_column=args.text_column,
        output_column=args.output_column,
        num_shards=args.num_shards,
        format=args.format,
        streaming=args.streaming,
        overwrite=args.overwrite,
    )
