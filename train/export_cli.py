"""`lmshards export RUN_DIR --output DIR`: a training run -> Hugging Face transformers model directory."""

from __future__ import annotations

import argparse
import logging
import sys

from schemas.errors import LmshardsError


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="lmshards export",
        description="Write a RobertaForMaskedLM / BertForMaskedLM directory (config.json, model.safetensors, "
        "tokenizer files) from a training run, for transformers' pipeline('fill-mask') and from_pretrained.",
    )
    parser.add_argument("run_dir", help="the --output directory of `lmshards train` (local or gs://)")
    parser.add_argument("--output", required=True, help="new or empty local directory for the model")
    parser.add_argument("--checkpoint", help="checkpoint prefix, e.g. RUN_DIR/checkpoints/ckpt-3 (default: the latest)")
    parser.add_argument("--tokenizer", help="tokenizer.json or tokenizer directory (default: RUN_DIR/tokenizer)")
    parser.add_argument("--push_to_hub", metavar="REPO", help="also upload the export to this Hugging Face Hub repo")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from train.export import export_run, push_to_hub

    try:
        output = export_run(args.run_dir, output_dir=args.output, checkpoint=args.checkpoint, tokenizer=args.tokenizer)
        print(f"Exported {args.run_dir} to {output}")
        if args.push_to_hub:
            print(f"Pushed to {push_to_hub(output, args.push_to_hub)}")
    except LmshardsError as e:
        print(f"lmshards export: {e}", file=sys.stderr)
        return 2
    return 0
