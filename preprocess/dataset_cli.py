"""`lmshards dataset export`: one text column of a Hugging Face dataset -> Parquet or JSON Lines shards."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from preprocess import dataset_export as de
from schemas.errors import LmshardsError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lmshards dataset", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser(
        "export", help="write a dataset's text column as Parquet/JSONL shards",
        description="Write one text column of a dataset as shards that `lmshards preprocess` reads.",
    )
    export.add_argument("dataset", help="Hub name (needs network), a builder (json, csv, text, parquet) with "
                                        "--data_files, a directory of data files, or a save_to_disk directory")
    export.add_argument("--output", required=True, help="output directory (local or gs://)")
    export.add_argument("--data_files", action="append", default=[], metavar="PATH",
                        help="local data files or globs for a builder (repeatable)")
    export.add_argument("--split", default=de.DEFAULT_SPLIT)
    export.add_argument("--config", default=None, help="dataset configuration (subset) name")
    export.add_argument("--text_column", default=de.DEFAULT_COLUMN, help="column holding the text")
    export.add_argument("--output_column", default=de.DEFAULT_COLUMN, help="column name in the output files")
    export.add_argument("--num_shards", type=int, default=de.DEFAULT_NUM_SHARDS)
    export.add_argument("--format", choices=de.FORMATS, default=de.DEFAULT_FORMAT)
    export.add_argument("--streaming", action="store_true",
                        help="read as an IterableDataset (datasets bigger than memory or disk); shards are "
                             "filled round-robin")
    export.add_argument("--overwrite", action="store_true", help="delete what --output holds first")
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config = de.ExportConfig(
        dataset=args.dataset, output=args.output, data_files=tuple(args.data_files), split=args.split,
        config=args.config, text_column=args.text_column, output_column=args.output_column,
        num_shards=args.num_shards, format=args.format, streaming=args.streaming, overwrite=args.overwrite,
    )
    try:
        summary = de.export(config)
    except LmshardsError as e:
        print(f"lmshards dataset export: {e}", file=sys.stderr)
        return 2
    rows = [s["rows"] for s in summary["shards"]]
    print(f"Wrote {summary['rows_written']:,} rows ({summary['rows_without_text']:,} without text skipped) "
          f"to {len(rows)} {config.format} shards in {config.output} (rows per shard {min(rows):,}-{max(rows):,})")
    return 0
