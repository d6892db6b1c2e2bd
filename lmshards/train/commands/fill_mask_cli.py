"""`lmshards fill-mask DIR TEXT`: top-k predictions for the masked token(s) of an exported model.

Runs transformers' fill-mask pipeline on the CPU, offline-safe (DIR is a local directory).
Either mask spelling works with either model family: `<mask>` and `[MASK]` are both replaced
by the tokenizer's own mask token.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import warnings
from collections.abc import Sequence
from typing import Any

from lmshards.plumbing import bounded, stopping
from lmshards.plumbing.cli import (
    EXIT_OK,
    CommandParser,
    add_verbose_flag,
    one_line_errors,
    setup_logging,
)
from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.flag_types import whole
from lmshards.plumbing.quiet import hide_third_party_progress_bars
from lmshards.schemas.constants import (
    MODEL_CONFIG_JSON,
    MODEL_WEIGHTS_FILES,
    ROLE_SPELLINGS,
    TOKENIZER_JSON,
)
from lmshards.schemas.directory_kind import MODEL_EXPORT, wrong_kind_message

COMMAND = "fill-mask"
DEFAULT_TOP_K = 5
MAX_TOP_K = 1000
TOKENIZER_CONFIG = "tokenizer_config.json"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = CommandParser(COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", help="directory written by `lmshards export`")
    parser.add_argument(
        "text", help='text with one or more mask tokens, e.g. "The capital of France is <mask>."'
    )
    parser.add_argument(
        "--top_k", type=whole(1, MAX_TOP_K), default=DEFAULT_TOP_K, help="predictions per mask"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the predictions as JSON (one list per mask)"
    )
    add_verbose_flag(parser)
    args = parser.parse_args(list(argv))
    return args


def with_mask_token(text: str, mask_token: str) -> str:
    """text with every known mask spelling replaced by mask_token.

    Raises:
      LmshardsError: the text holds no mask token in any spelling.
    """
    for spelling in ROLE_SPELLINGS["mask"]:
        text = text.replace(spelling, mask_token)
    if mask_token not in text:
        spellings = " or ".join(dict.fromkeys((mask_token, *ROLE_SPELLINGS["mask"])))
        raise LmshardsError(
            f"No mask token in {text!r}: put {spellings} where the model should fill in a token."
        )
    return text


def saved_mask_token(model_dir: str) -> str | None:
    """The mask token that model_dir's tokenizer_config.json names, read without loading anything."""
    try:
        config = bounded.read_json(
            os.path.join(model_dir, TOKENIZER_CONFIG), what="tokenizer config"
        )
        token = config.get("mask_token")
    except (OSError, ValueError, AttributeError):  # ValueError: not JSON, or over a read limit
        return None
    # Older tokenizer configs write an AddedToken as {"content": "<mask>", ...}.
    return token.get("content") if isinstance(token, dict) else token


def check_export_files(model_dir: str) -> None:
    """Checks the export's files before transformers opens them: each a regular file within the read limits.

    Raises:
      LmshardsError: a file is a FIFO, a device or a directory, too large, or its JSON is over a limit.
    """
    for name in (MODEL_CONFIG_JSON, TOKENIZER_CONFIG):
        path = os.path.join(model_dir, name)
        if os.path.lexists(path):
            # Not JSON: the model load says what is wrong with it.
            with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError):
                bounded.read_json(path, what=name)
    if os.path.lexists(path := os.path.join(model_dir, TOKENIZER_JSON)):
        bounded.check_regular_file(path, "tokenizer file", bounded.MAX_TOKENIZER_JSON_BYTES)
    for name in MODEL_WEIGHTS_FILES:
        if os.path.lexists(path := os.path.join(model_dir, name)):
            bounded.check_regular_file(path, "weights file", bounded.MAX_WEIGHTS_BYTES)


def check_has_mask(text: str, model_dir: str) -> None:
    """Fails fast, before the model loads, on text with no mask token in any spelling.

    Raises:
      LmshardsError: the text holds none of the known mask spellings nor the model's own.
    """
    with_mask_token(text, saved_mask_token(model_dir) or ROLE_SPELLINGS["mask"][0])


def check_text_fits(model_dir: str, text: str) -> None:
    """Refuses a text longer than the model's positions, from the exported tokenizer alone (no torch).

    Refused, not truncated: cutting the text could cut away the mask itself. A directory without an
    exported tokenizer (tokenizer.json and tokenizer_config.json's model_max_length) is left to the
    model load, which reports it.

    Raises:
      LmshardsError: the text, with its special tokens, holds more tokens than model_max_length.
    """
    exported = _exported_tokenizer(model_dir)
    if exported is None:
        return
    tokenizer, limit, mask_token = exported
    tokens = len(tokenizer.encode(with_mask_token(text, mask_token)).ids)
    if tokens > limit:
        raise LmshardsError(
            f"The text is {tokens} tokens (with special tokens) but the model in {model_dir!r} takes at most "
            f"{limit}; shorten it to the sentence(s) around the mask."
        )


def _exported_tokenizer(model_dir: str) -> tuple[Any, int, str] | None:
    """(tokenizers.Tokenizer, model_max_length, mask token) of an export; None when it has none readable."""
    config_path = os.path.join(model_dir, TOKENIZER_CONFIG)
    tokenizer_path = os.path.join(model_dir, TOKENIZER_JSON)
    mask_token = saved_mask_token(model_dir)
    if mask_token is None or not os.path.isfile(tokenizer_path):
        return None
    from tokenizers import Tokenizer

    try:
        limit = int(bounded.read_json(config_path, what="tokenizer config")["model_max_length"])
        return Tokenizer.from_file(tokenizer_path), limit, mask_token
    except Exception:  # noqa: BLE001  (not an lmshards export's tokenizer: the model load says what is wrong)
        return None


def fill_mask(
    model_dir: str, text: str, *, top_k: int = DEFAULT_TOP_K
) -> list[list[dict[str, Any]]]:
    """Predictions for each mask in text, in order: [{score, token, token_str, sequence}, ...] per mask."""
    if not os.path.isdir(model_dir):
        raise LmshardsError(
            f"Model directory {model_dir!r} does not exist; pass the --output of `lmshards export`."
        )
    wrong = wrong_kind_message(model_dir, wanted=MODEL_EXPORT)
    if wrong:
        raise LmshardsError(wrong)
    check_export_files(model_dir)
    check_has_mask(text, model_dir)
    check_text_fits(model_dir, text)  # before torch and the model load (seconds)
    try:
        from transformers import pipeline
    except ImportError as e:
        raise LmshardsError(
            f"fill-mask needs transformers and torch ({e}). Install: pip install 'lmshards[export]'."
        ) from e
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", module="torch"
            )  # torch's notes on unpickling; the errors below say more
            fill = pipeline("fill-mask", model=model_dir, device="cpu")
    except pickle.UnpicklingError as e:
        # torch loads pickled weights (pytorch_model.bin) with weights_only=True and refuses anything else.
        raise LmshardsError(
            f"{model_dir!r} holds a pickled weights file that torch refuses to load, as unpickling it could run code. "
            "Use a model directory written by `lmshards export` (model.safetensors), or convert the weights to "
            "safetensors where they came from."
        ) from e
    except (OSError, ValueError, RuntimeError) as e:
        raise LmshardsError(
            f"{model_dir!r} is not a loadable transformers model directory ({_first_line(e)})."
        ) from e
    tokenizer = fill.tokenizer
    assert tokenizer is not None, "a fill-mask pipeline always has its tokenizer"
    prepend_only_at_the_start(tokenizer.backend_tokenizer)
    predictions = fill(with_mask_token(text, tokenizer.mask_token), top_k=top_k)
    # One mask gives a flat list, several give a list per mask.
    per_mask = predictions if isinstance(predictions[0], list) else [predictions]
    hidden = [t for t in tokenizer.all_special_tokens if t != tokenizer.mask_token]
    return [[{**p, "sequence": without(p["sequence"], hidden)} for p in ps] for ps in per_mask]


def prepend_only_at_the_start(backend: Any) -> None:
    """Makes a Metaspace pre-tokenizer (SentencePiece-style, as the default Unigram tokenizer has) mark
    a word start only at the start of the text, not again after each special token.

    Training documents hold no special tokens, so with `prepend_scheme: always` or `first` they read
    the same; but in "... is <mask>." `always` puts a word-start piece before the ".", a word the
    text does not have, and the model then fills the mask for the wrong context. backend: the
    tokenizers.Tokenizer of the pipeline's tokenizer (changed in memory only).
    """
    from tokenizers import Tokenizer

    state = json.loads(backend.to_str())
    changed = False
    for step in _pre_tokenizer_steps(state.get("pre_tokenizer")):
        if step.get("type") == "Metaspace" and step.get("prepend_scheme") == "always":
            step["prepend_scheme"] = "first"
            changed = True
    if changed:
        backend.pre_tokenizer = Tokenizer.from_str(json.dumps(state)).pre_tokenizer


def _pre_tokenizer_steps(pre_tokenizer: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not pre_tokenizer:
        return []
    return pre_tokenizer.get("pretokenizers") or [pre_tokenizer]


def without(text: str, tokens: Sequence[str]) -> str:
    """text with every occurrence of tokens (the specials a multi-mask sequence keeps, <s> and </s>) removed."""
    for token in tokens:
        text = text.replace(token, "")
    return text.strip()


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def format_predictions(per_mask: list[list[dict[str, Any]]]) -> str:
    """One line per prediction (score, token id, token string, filled-in sequence), a header per mask."""
    lines = []
    for index, predictions in enumerate(per_mask):
        if len(per_mask) > 1:
            lines.append(f"mask {index + 1} of {len(per_mask)}:")
        lines.append(f"{'score':>7}  {'token':>6}  {'token_str':<16}  sequence")
        lines += [
            f"{p['score']:7.4f}  {p['token']:>6}  {p['token_str']!r:<16}  {escape_line_breaks(p['sequence'])}"
            for p in predictions
        ]
    return "\n".join(lines)


def escape_line_breaks(text: str) -> str:
    """text with its line breaks written as \\n and \\r, so each prediction stays on its own line."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def main(argv: Sequence[str]) -> int:
    with one_line_errors(COMMAND) as failed, stopping.stop_signals():
        args = parse_args(argv)
        setup_logging(verbose=args.verbose, packages=["lmshards.train"])
        if not args.verbose:
            hide_third_party_progress_bars()
        per_mask = fill_mask(args.model_dir, args.text, top_k=args.top_k)
        print(
            json.dumps(per_mask, ensure_ascii=False, indent=2)
            if args.json
            else format_predictions(per_mask)
        )
        return EXIT_OK
    return failed.code
