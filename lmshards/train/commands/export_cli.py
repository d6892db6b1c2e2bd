"""`lmshards export RUN_DIR --output DIR`: a training run -> Hugging Face transformers model directory."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Sequence

from lmshards.plumbing import fs, stopping
from lmshards.plumbing.cli import (
    EXIT_OK,
    CommandParser,
    add_overwrite_flag,
    add_verbose_flag,
    disk_errors,
    one_line_errors,
    setup_logging,
)
from lmshards.plumbing.known_names import name_hints
from lmshards.plumbing.lease import add_lease_flag, output_lease, sibling_lease_path
from lmshards.plumbing.outputs import check_no_overlap
from lmshards.plumbing.quiet import hide_third_party_progress_bars, load_tensorflow_quietly
from lmshards.train.export.hf_export import check_export_output, export_run, push_to_hub
from lmshards.train.families import FAMILIES
from lmshards.train.run_dir import RunDir

COMMAND = "export"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    architectures = " / ".join(family.hf_masked_lm_class for family in FAMILIES.values())
    parser = CommandParser(
        COMMAND,
        renamed=name_hints(COMMAND),
        description=f"Write a {architectures} directory (config.json, model.safetensors, "
        "tokenizer files) from a training run, for transformers' pipeline('fill-mask') and from_pretrained.",
    )
    parser.add_argument(
        "run_dir", help="the --output directory of `lmshards train` (local or gs://)"
    )
    parser.add_argument(
        "--output", required=True, help="new or empty local directory for the model"
    )
    add_overwrite_flag(
        parser, help="replace a non-empty --output (once the new export is complete)"
    )
    parser.add_argument(
        "--checkpoint",
        help="checkpoint prefix, e.g. RUN_DIR/checkpoints/ckpt-3 (default: the latest)",
    )
    parser.add_argument(
        "--tokenizer", help="tokenizer.json or tokenizer directory (default: RUN_DIR/tokenizer)"
    )
    parser.add_argument(
        "--push_to_hub", metavar="REPO", help="also upload the export to this Hugging Face Hub repo"
    )
    add_verbose_flag(parser)
    add_lease_flag(parser)
    return parser.parse_args(list(argv))


def _lease(args: argparse.Namespace) -> contextlib.AbstractContextManager[object]:
    """The lease on --output: beside it, as the export is built there and renamed into place.

    (A gs:// --output takes none: check_export_output refuses it.)
    """
    if fs.is_remote(args.output):
        return contextlib.nullcontext()
    return output_lease(
        args.output,
        command=COMMAND,
        path=sibling_lease_path(args.output),
        stale_after_s=args.lease_stale_s,
    )


def check_output(args: argparse.Namespace) -> None:
    """Refuses, before TensorFlow loads, an --output that an export may not replace (see
    check_export_output: the run, a folder holding it, a folder inside any lmshards output, ...), a
    RUN_DIR that is not a run, and an --output that is, holds or lies inside the --tokenizer.

    Raises:
      LmshardsError: naming the bad path, what it holds and the fix.
    """
    check_export_output(args.output, overwrite=args.overwrite)
    RunDir(args.run_dir).read_config()
    check_no_overlap([args.tokenizer or ""], args.output, input_flag="--tokenizer")


def _write(args: argparse.Namespace) -> None:
    output = export_run(
        args.run_dir,
        output_dir=args.output,
        checkpoint=args.checkpoint,
        tokenizer=args.tokenizer,
        overwrite=args.overwrite,
    )
    print(f"Exported {args.run_dir} to {output}")


def main(argv: Sequence[str]) -> int:
    with one_line_errors(COMMAND) as failed, stopping.stop_signals():
        args = parse_args(argv)
        setup_logging(verbose=args.verbose, packages=["lmshards.train"])
        with _lease(args):  # first: a second export into --output stops here, naming the first
            check_output(args)
            load_tensorflow_quietly(verbose=args.verbose)
            if not args.verbose:
                hide_third_party_progress_bars()
            with disk_errors(COMMAND, args.output) as failed_writing:
                _write(args)
        if failed_writing.code != EXIT_OK:
            return failed_writing.code
        if args.push_to_hub:  # after the lease: the upload reads a finished export
            print(f"Pushed to {push_to_hub(args.output, args.push_to_hub)}")
        return EXIT_OK
    return failed.code
