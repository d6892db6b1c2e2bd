"""The output directory of `lmshards tokenizer train`, local or gs://.

It holds tokenizer.json, a transformers tokenizer directory (tokenizer_config.json beside the same
tokenizer.json) and lmshards_tokenizer.json: written last, the sign of a complete output, with the
fingerprint the preprocess manifest records.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from tokenizers import Tokenizer

from lmshards.corpus_tools.tokenizer.config import (
    MODEL_MAX_LENGTH,
    SpecialTokens,
    TokenizerTrainingError,
)
from lmshards.corpus_tools.tokenizer.models import token_ids
from lmshards.plumbing import fs
from lmshards.plumbing.outputs import prepare_output
from lmshards.schemas.constants import SPECIAL_ROLES, TOKENIZER_INFO_JSON
from lmshards.schemas.hf_tokenizer import wrap_fast_tokenizer
from lmshards.schemas.layouts import TOKENIZER_OUTPUT
from lmshards.schemas.tokenizer_info import fingerprint, locate_tokenizer, special_token_ids
from lmshards.schemas.version import __version__

TOKENIZER_INFO_FORMAT = "lmshards.tokenizer"
TOKENIZER_INFO_FORMAT_VERSION = 1


def check_can_save() -> None:
    """Fails before any reading or training when the tokenizer could not be saved at the end.

    The directory includes transformers' files (tokenizer_config.json, special_tokens_map.json), written
    by transformers, which comes with the `data` extra.

    Raises:
      TokenizerTrainingError: transformers is not installed.
    """
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        raise TokenizerTrainingError(
            f"`tokenizer train` saves the tokenizer with transformers, which is not installed ({e}): "
            "pip install 'lmshards[data]'."
        ) from e


def save_tokenizer(
    tok: Tokenizer, output: str, *, preset: SpecialTokens, info: dict[str, Any], overwrite: bool
) -> dict[str, Any]:
    """Writes tokenizer.json, the transformers files and lmshards_tokenizer.json (last) to output.

    The files are first saved to a local temporary directory, then copied (local or gs://); with
    overwrite, what output held is deleted first. Returns the content of lmshards_tokenizer.json.

    Raises:
      OutputError: output is a file, or a non-empty directory without overwrite.
    """
    with tempfile.TemporaryDirectory(prefix="lmshards-tokenizer-") as staging:
        by_token = token_ids(tok, preset.by_role().values())
        ids = {role: by_token[token] for role, token in preset.by_role().items()}
        wrap_fast_tokenizer(
            tok, special_token_ids=ids, model_max_length=MODEL_MAX_LENGTH
        ).save_pretrained(staging)
        source = locate_tokenizer(staging)
        roles = special_token_ids(source)
        missing = [role for role in SPECIAL_ROLES if role not in roles]
        if missing:
            raise RuntimeError(
                f"saved tokenizer lacks special-token roles {missing}; found {roles}"
            )
        content = {
            "format": TOKENIZER_INFO_FORMAT,
            "format_version": TOKENIZER_INFO_FORMAT_VERSION,
            "tool_version": __version__,
            "fingerprint": fingerprint(source.json_text),
            "model": type(tok.model).__name__.lower(),
            "vocab_size": tok.get_vocab_size(),
            "special_tokens": preset.by_role(),
            "special_token_ids": roles,
            "model_max_length": MODEL_MAX_LENGTH,
            **info,
        }
        prepare_output(output, kind=TOKENIZER_OUTPUT, overwrite=overwrite)
        for name in sorted(os.listdir(staging)):
            with open(os.path.join(staging, name), "rb") as f:
                fs.write_bytes_atomic(fs.join(output, name), f.read())
    fs.write_text_atomic(
        fs.join(output, TOKENIZER_INFO_JSON), json.dumps(content, indent=2, sort_keys=True) + "\n"
    )
    return content
