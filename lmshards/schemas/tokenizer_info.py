"""Locating a tokenizer, its fingerprint and its special tokens.

A tokenizer is given as a `tokenizer.json` file or as a directory holding one (a transformers
tokenizer directory, or the output of `lmshards tokenizer train`), local or gs://.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from typing import Any

from lmshards.plumbing import bounded, fs
from lmshards.plumbing.errors import TokenizerError
from lmshards.schemas.constants import (
    FINGERPRINT_PREFIX,
    ROLE_SPELLINGS,
    SPECIAL_ROLES,
    TOKENIZER_CONFIG_JSON,
    TOKENIZER_JSON,
)
from lmshards.schemas.directory_kind import TOKENIZER, wrong_kind_message

# transformers writes this when a tokenizer has no maximum length.
_UNBOUNDED_MAX_LENGTH = 10**29


@dataclasses.dataclass(frozen=True)
class TokenizerSource:
    """The tokenizer's JSON text and, for a directory, its transformers config."""

    path: str
    json_path: str
    json_text: str
    config: dict[str, Any]


def locate_tokenizer(path: str) -> TokenizerSource:
    """Reads the tokenizer at path (file or directory, local or gs://).

    Raises:
      TokenizerError: nothing there, no tokenizer.json in the directory, or not valid JSON.
    """
    if not fs.exists(path):
        raise TokenizerError(
            f"Tokenizer not found: {path!r}. Pass a tokenizer.json file or a directory holding one "
            "(e.g. the output of `lmshards tokenizer train`)."
        )
    config: dict[str, Any] = {}
    json_path = path
    if fs.isdir(path):
        json_path = fs.join(path, TOKENIZER_JSON)
        if not fs.exists(json_path):
            wrong = wrong_kind_message(path, wanted=TOKENIZER)
            if wrong:
                raise TokenizerError(wrong)
            raise TokenizerError(
                f"No {TOKENIZER_JSON} in tokenizer directory {path!r}. Only fast (Rust) tokenizers "
                "are supported: save one with `tokenizer.save_pretrained(DIR)` or `lmshards tokenizer train`."
            )
        config_path = fs.join(path, TOKENIZER_CONFIG_JSON)
        if fs.exists(config_path):
            config = _parse_json(config_path, max_bytes=bounded.MAX_JSON_BYTES)[1]
    text, parsed = _parse_json(json_path, max_bytes=bounded.MAX_TOKENIZER_JSON_BYTES)
    if "model" not in parsed:
        raise TokenizerError(
            f"{json_path!r} is JSON but not a Hugging Face tokenizers file (no 'model' key)."
        )
    return TokenizerSource(path=path, json_path=json_path, json_text=text, config=config)


def _parse_json(path: str, *, max_bytes: int) -> tuple[str, dict[str, Any]]:
    """The text of a tokenizer's JSON file and the object it holds, read within the bounded limits."""
    try:
        text = bounded.read_text(path, what="tokenizer file", max_bytes=max_bytes)
        parsed = bounded.load_json(text, what=f"Tokenizer file {path!r}", max_bytes=max_bytes)
    except bounded.ReadLimitError as e:
        raise TokenizerError(str(e)) from e
    except UnicodeDecodeError as e:
        raise TokenizerError(f"Tokenizer file {path!r} is not UTF-8 JSON ({e}).") from e
    except json.JSONDecodeError as e:
        raise TokenizerError(
            f"Tokenizer file {path!r} is corrupt: {e}. Re-save it or retrain the tokenizer."
        ) from e
    if not isinstance(parsed, dict):
        raise TokenizerError(
            f"Tokenizer file {path!r} holds JSON {type(parsed).__name__}, not an object."
        )
    return text, parsed


@functools.lru_cache(maxsize=2)
def _parsed(json_text: str) -> dict[str, Any]:
    """The tokenizer JSON, parsed once for the fingerprint and the special tokens (read, never changed):
    a planning parsed the megabytes of a large vocabulary four times, about 0.25 CPU s."""
    return bounded.load_json(
        json_text, what="tokenizer JSON", max_bytes=bounded.MAX_TOKENIZER_JSON_BYTES
    )


def fingerprint(json_text: str) -> str:
    """SHA-256 of the tokenizer's canonical JSON (sorted keys, no whitespace), as 'sha256:HEX'.

    Canonical, so re-saving the same tokenizer with other formatting keeps the fingerprint.
    """
    parsed = _parsed(json_text)
    canonical = json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return FINGERPRINT_PREFIX + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def checked_tokenizer(
    path: str, *, expected: str, named: str, reference: str, fix: str
) -> TokenizerSource:
    """The tokenizer at path (locate_tokenizer), checked to be the one whose fingerprint is `expected`.

    named: how the message names it (e.g. "--tokenizer"); reference: what it must be the tokenizer
    of (e.g. "the shards were made with"); fix: what to do instead.
    Raises:
      TokenizerError: path is not a tokenizer, or its fingerprint is another one.
    """
    source = locate_tokenizer(path)
    actual = fingerprint(source.json_text)
    if actual != expected:
        raise TokenizerError(
            f"{named} {path!r} has fingerprint {actual}: it is not the one {reference} ({expected}). {fix}"
        )
    return source


def special_token_ids(source: TokenizerSource) -> dict[str, int]:
    """Role ('pad', 'mask', ...) -> id of the tokenizer's special tokens that fill a role.

    A transformers config (mask_token etc.) wins; otherwise the BERT/RoBERTa spellings are matched
    against the tokenizer's added special tokens and then its vocabulary.
    """
    parsed = _parsed(source.json_text)
    ids_by_token = {t["content"]: int(t["id"]) for t in parsed.get("added_tokens", [])}
    vocab = parsed.get("model", {}).get("vocab")
    if isinstance(vocab, dict):
        lookup = {**vocab, **ids_by_token}
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        lookup = {piece[0]: i for i, piece in enumerate(vocab)}
        lookup.update(ids_by_token)
    else:
        lookup = dict(ids_by_token)
    roles: dict[str, int] = {}
    for role in SPECIAL_ROLES:
        configured = _config_token(source.config.get(f"{role}_token"))
        candidates = (configured,) if configured else ROLE_SPELLINGS[role]
        for token in candidates:
            if token in lookup:
                roles[role] = int(lookup[token])
                break
    return roles


def all_special_ids(source: TokenizerSource) -> list[int]:
    """Ids of every token the tokenizer marks special, plus the role tokens, sorted."""
    parsed = _parsed(source.json_text)
    ids = {int(t["id"]) for t in parsed.get("added_tokens", []) if t.get("special")}
    ids.update(special_token_ids(source).values())
    return sorted(ids)


def model_max_length(source: TokenizerSource) -> int | None:
    """The tokenizer's model_max_length from its transformers config, or None if unbounded/unknown."""
    value = source.config.get("model_max_length")
    if isinstance(value, (int, float)) and 0 < value < _UNBOUNDED_MAX_LENGTH:
        return int(value)
    return None


def _config_token(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None
