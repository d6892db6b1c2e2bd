"""`lmshards preview SHARDS_DIR`: what a masking recipe does to the first training sequences.

Runs the trainer's own input plan (lmshards.train.inputs.input_plan.InputPlan: one input pipeline from step 0, as on
one host) with the given recipe, seed, batch size and shuffle buffer, and shows the first N sequences it
yields: the decoded text with the tokens selected for prediction in [[...]], or with --json one object per
line and sequence: `input_ids` (before masking), `masked_input_ids` (what the model sees) and `selected`
(1 where the model predicts the token). Several shard sets are blended as `lmshards train` blends them.
Give the run's --masking, --mlm_probability, --per_replica_batch, --shuffle_buffer and --seed to see its masks.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Sequence

import numpy as np

from lmshards.plumbing import stopping
from lmshards.plumbing.cli import (
    EXIT_OK,
    CommandParser,
    add_verbose_flag,
    one_line_errors,
    setup_logging,
)
from lmshards.plumbing.flag_types import whole
from lmshards.plumbing.quiet import load_tensorflow_quietly
from lmshards.train.commands.input_flags import add_input_flags
from lmshards.train.config import TrainConfig
from lmshards.train.inputs import mixture
from lmshards.train.inputs.shard_set_tokenizer import run_tokenizer
from lmshards.train.masking_recipes import check_recipe

COMMAND = "preview"
DEFAULT_N = 5
MAX_PREVIEW_SEQUENCES = 10_000
SELECTED_OPEN, SELECTED_CLOSE = "[[", "]]"
# The options preview shares with `lmshards train`, with its defaults.
_TRAIN_DEFAULTS = TrainConfig(shards=(), output="")


def build_parser() -> CommandParser:
    d = _TRAIN_DEFAULTS
    p = CommandParser(COMMAND, description=__doc__.split("\n\n", 1)[1])
    p.add_argument(
        "shards",
        nargs="+",
        metavar="SHARDS_DIR",
        help="preprocess output (local or gs://), as PATH or PATH:WEIGHT like `lmshards train --shards`",
    )
    add_input_flags(p, d)
    p.add_argument(
        "--n", type=whole(1, MAX_PREVIEW_SEQUENCES), default=DEFAULT_N, help="sequences to show"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per sequence and line instead of text",
    )
    p.add_argument(
        "--tokenizer",
        help="tokenizer to decode with and find words by (default: the shard set's copy)",
    )
    add_verbose_flag(p)
    return p


@dataclasses.dataclass(frozen=True)
class PreviewRow:
    """One training sequence as the pipeline yields it. Arrays are int [seq_len]."""

    set_name: str
    input_ids: np.ndarray  # before masking
    masked_input_ids: np.ndarray  # the model's token_ids
    selected: np.ndarray  # 1 where the token is to be predicted
    padding_mask: np.ndarray


def unmasked_rows(batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids before masking, selected 0/1) of a masked batch: its labels put back at their positions."""
    ids = batch["token_ids"].copy()
    selected = np.zeros_like(ids)
    rows, slots = np.nonzero(batch["mask_weights"] > 0)
    positions = batch["mask_positions"][rows, slots]
    ids[rows, positions] = batch["mask_ids"][rows, slots]
    selected[rows, positions] = 1
    return ids, selected


def preview_rows(
    args: argparse.Namespace,
) -> tuple[list[PreviewRow], int, Callable[[Sequence[int]], str]]:
    """(the first --n rows, the mask id, a decoder of ids to text) for the parsed options."""
    sources = [mixture.parse_shards_flag(text) for text in args.shards]
    mix = mixture.open_mixture([s.path for s in sources], mixture.source_weights(sources))
    tokenizer = run_tokenizer(args.tokenizer, mix)
    unit = args.per_replica_batch
    from lmshards.train.inputs.input_plan import (
        InputPlan,
        masking_for,
    )  # TensorFlow loads only once the options are checked

    masking = masking_for(
        mix, recipe=args.masking, mlm_probability=args.mlm_probability, tokenizer=tokenizer
    )
    inputs = InputPlan.create(
        mix,
        masking=masking,
        per_replica_batch=unit,
        seed=args.seed,
        shuffle_buffer=args.shuffle_buffer,
    )
    batches = -(-args.n // unit)
    set_names = inputs.drawn_sets(batches * unit)
    rows: list[PreviewRow] = []
    dataset = inputs.train_dataset(pipeline_id=0, start_step=0).take(batches)
    for batch in inputs.numpy_batches(dataset):
        ids, selected = unmasked_rows(batch)
        rows += [
            PreviewRow(
                set_names[len(rows) + i],
                ids[i],
                batch["token_ids"][i],
                selected[i],
                batch["padding_mask"][i],
            )
            for i in range(len(ids))
        ]
    return rows[: args.n], masking.mask_id, _decoder(tokenizer.json_text if tokenizer else None)


def _decoder(tokenizer_json: str | None) -> Callable[[Sequence[int]], str]:
    """ids -> text with the tokenizer (special tokens kept), or the ids themselves without one."""
    if tokenizer_json is None:
        return lambda ids: " ".join(str(i) for i in ids)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    return lambda ids: tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)


def marked_text(
    ids: Sequence[int], selected: Sequence[int], decode: Callable[[Sequence[int]], str]
) -> str:
    """The decoded ids with every run of selected tokens wrapped in [[...]].

    Each run's text is the difference of the decoded prefixes around it, so spaces between words decode
    as in the whole sequence; where a decoder rewrites earlier text, the run is decoded alone.
    """
    bounds = [0, *(k for k in range(1, len(ids)) if selected[k] != selected[k - 1]), len(ids)]
    parts, before = [], ""
    for start, end in zip(bounds, bounds[1:]):
        upto = decode(ids[:end])
        text = upto[len(before) :] if upto.startswith(before) else decode(ids[start:end])
        parts.append(f"{SELECTED_OPEN}{text}{SELECTED_CLOSE}" if selected[start] else text)
        before = upto
    return "".join(parts)


def describe(
    index: int, row: PreviewRow, *, mask_id: int, decode: Callable[[Sequence[int]], str]
) -> str:
    """A header (set, selected count, how they were replaced) and the marked text, padding left out."""
    real = int(np.nonzero(row.padding_mask)[0].max() + 1) if row.padding_mask.any() else 0
    chosen = row.selected[:real] > 0
    new, old = row.masked_input_ids[:real][chosen], row.input_ids[:real][chosen]
    masked, kept = int((new == mask_id).sum()), int(((new == old) & (new != mask_id)).sum())
    header = (
        f"sequence {index} (set {row.set_name}): {int(chosen.sum())} of {real} tokens selected "
        f"({masked} masked, {len(new) - masked - kept} random, {kept} kept)"
    )
    text = marked_text(row.input_ids[:real].tolist(), row.selected[:real].tolist(), decode)
    return f"{header}\n{text}\n"


def _preview(argv: Sequence[str]) -> None:
    args = build_parser().parse_args(list(argv))
    setup_logging(packages=["lmshards.train"])
    check_recipe(args.masking, args.mlm_probability)
    load_tensorflow_quietly(verbose=args.verbose)
    rows, mask_id, decode = preview_rows(args)
    for index, row in enumerate(rows):
        if args.json:
            print(
                json.dumps(
                    {
                        "index": index,
                        "set": row.set_name,
                        "input_ids": row.input_ids.tolist(),
                        "masked_input_ids": row.masked_input_ids.tolist(),
                        "selected": row.selected.tolist(),
                    }
                )
            )
        else:
            print(describe(index, row, mask_id=mask_id, decode=decode))


def main(argv: Sequence[str]) -> int:
    with one_line_errors(COMMAND) as failed, stopping.stop_signals():
        _preview(argv)
        return EXIT_OK
    return failed.code
