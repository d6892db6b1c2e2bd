"""`lmshards repack --tokens SRC --output NEW`: another shard set from a token store, no tokenizer run."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from lmshards.plumbing import stopping
from lmshards.plumbing.cli import (
    EXIT_OK,
    CommandParser,
    add_overwrite_flag,
    add_verbose_flag,
    one_line_errors,
)
from lmshards.plumbing.flag_types import whole
from lmshards.plumbing.lease import add_lease_flag
from lmshards.plumbing.units import size_flag
from lmshards.preprocess import runners
from lmshards.preprocess.cli import (
    check_other_beam_command_flags,
    setup_preprocess_logging,
    summary,
)
from lmshards.preprocess.options import CURATION_FLAGS, MAX_NUM_SHARDS, PREPROCESS_RANGES
from lmshards.preprocess.stages.pack import REMAINDER_CHOICES
from lmshards.schemas.constants import PACKING_CHOICES

COMMAND = "repack"
DESCRIPTION = (
    "A token store (the OUTPUT/tokens/ of `lmshards preprocess --keep_tokens`, or that OUTPUT) -> a new "
    "self-contained shard set with another seq_len, shard count, split or seed, without tokenizing again. "
    "Its shards and manifest are those `lmshards preprocess` writes from the text with the same options; "
    "every option not given keeps the value the store's run used.\n\n"
    "Any Apache Beam pipeline option (--runner, --direct_num_workers, ...) passes through to the runner, "
    "as for `lmshards preprocess`."
)
KEEP = "(default: the store's run's)"

# 0 (repack.SHARDS_BY_SIZE): sized by --target_shard_mb, even where the store's run fixed a count.
NUM_SHARDS_OR_BY_SIZE = whole(0, MAX_NUM_SHARDS)


def build_parser() -> CommandParser:
    parser = CommandParser(
        COMMAND, extra_flags=runners.beam_flags(), description=DESCRIPTION, allow_abbrev=False
    )
    parser.add_argument(
        "--tokens",
        required=True,
        help="a token store, or a preprocess output holding one (local or gs://)",
    )
    parser.add_argument("--output", required=True, help="the new shard set's directory")
    parser.add_argument(
        "--seq_len",
        type=PREPROCESS_RANGES["seq_len"],
        default=None,
        help=f"tokens per record {KEEP}",
    )
    parser.add_argument(
        "--remainder", choices=REMAINDER_CHOICES, default=None, help=f"final partial block {KEEP}"
    )
    parser.add_argument(
        "--validation_fraction",
        type=PREPROCESS_RANGES["validation_fraction"],
        default=None,
        help=f"share of documents held out {KEEP}",
    )
    parser.add_argument(
        "--seed", type=PREPROCESS_RANGES["seed"], default=None, help=f"seed of the shuffle {KEEP}"
    )
    parser.add_argument(
        "--target_shard_mb",
        type=size_flag("MiB"),
        default=None,
        help=f"target shard size in MiB {KEEP}",
    )
    parser.add_argument(
        "--num_shards",
        type=NUM_SHARDS_OR_BY_SIZE,
        default=None,
        help=f"shards per split; 0: sized by --target_shard_mb {KEEP}",
    )
    parser.add_argument(
        "--shard_multiple",
        type=PREPROCESS_RANGES["shard_multiple"],
        default=None,
        help=f"round each split's shard count up to a multiple of this {KEEP}",
    )
    parser.add_argument(
        "--packing_group_tokens",
        type=PREPROCESS_RANGES["packing_group_tokens"],
        default=None,
        help=f"approximate tokens per packing group {KEEP}",
    )
    parser.add_argument(
        "--packing",
        choices=PACKING_CHOICES,
        default=None,
        help=f"concat or best_fit (see `lmshards preprocess --help`) {KEEP}",
    )
    parser.add_argument(
        "--tokenizer",
        default=None,
        help="the tokenizer this run expects; refused if the store was made with another",
    )
    add_overwrite_flag(
        parser, help="replace an earlier lmshards output in --output (as preprocess --overwrite)"
    )
    add_verbose_flag(parser)
    add_lease_flag(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, others = parser.parse_known_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    setup_preprocess_logging(verbose=args.verbose)
    with one_line_errors(COMMAND) as failed, stopping.stop_signals():
        runners.resolve_runner(
            PipelineOptions(others).view_as(StandardOptions).runner or runners.FNAPI_RUNNER
        )
        refuse_curation_flags(parser, others)
        check_other_beam_command_flags(parser, others)
        # Beam graph code, after the cheap checks
        from lmshards.preprocess.launch import dry_run_line, run_failures
        from lmshards.preprocess.repack import RepackConfig, run_repack

        config = RepackConfig(**{k: v for k, v in vars(args).items() if k != "verbose"})
        started = time.monotonic()
        with run_failures(COMMAND) as failed_run:
            manifest = run_repack(config, others)  # the lease, the plan, the build, the run
            if manifest is None:
                print(dry_run_line(COMMAND, None))
                return EXIT_OK
            seconds = time.monotonic() - started
            print(summary(manifest, config.output, seconds, command=COMMAND))
            return EXIT_OK
        return failed_run.code
    return failed.code


def refuse_curation_flags(parser: CommandParser, beam_args: Sequence[str]) -> None:
    """Exits 2 on a preprocess curation flag (--dedup, --decontaminate, ...): a token store holds the
    documents preprocess kept, so it is curated already."""
    for arg in beam_args:
        flag = arg.split("=", 1)[0]
        if flag in CURATION_FLAGS:
            parser.error(
                f"{flag} is not a repack flag: a token store holds only the documents its preprocess "
                f"kept; curate in `lmshards preprocess {flag} ... --keep_tokens`, then repack its store."
            )
