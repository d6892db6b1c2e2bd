"""Which kind of lmshards directory a path is, from its marker files, and what to run instead when a
command is given the wrong kind.

One place for every command that takes a directory (`inspect`, `train --shards`, `fill-mask`,
`tokenizer inspect`, `preprocess --tokenizer`): each says what it was given and what to run instead,
e.g. "a token store: `lmshards repack` it first", rather than "no manifest.json".
"""

from __future__ import annotations

from lmshards.plumbing import bounded, fs
from lmshards.plumbing.outputs import json_format
from lmshards.schemas.constants import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    MODEL_CONFIG_JSON,
    MODEL_WEIGHTS_FILES,
    RUN_CONFIG_JSON,
    TOKENIZER_INFO_JSON,
    TOKENIZER_JSON,
    TOKENS_FORMAT,
)
from lmshards.schemas.layouts import EXPORT_SUCCESS_JSON, STATS_JSON, TEMP_DIR_NAME

SHARD_SET = "shard set"
TOKEN_STORE = "token store"
UNFINISHED_OUTPUT = "unfinished preprocess output"
RUN_DIRECTORY = "run directory"
MODEL_EXPORT = "model export"
TOKENIZER = "tokenizer"
DATASET_EXPORT = "dataset export"
STATS = "stats"
OTHER = "other"  # a directory of no kind we know, or a path that is not a directory
KINDS = (
    SHARD_SET,
    TOKEN_STORE,
    UNFINISHED_OUTPUT,
    RUN_DIRECTORY,
    MODEL_EXPORT,
    TOKENIZER,
    DATASET_EXPORT,
    STATS,
)

# What each kind is, as a message names it.
WHAT = {
    SHARD_SET: "a shard set (written by `lmshards preprocess`)",
    TOKEN_STORE: "a token store (written by `lmshards preprocess --keep_tokens`)",
    UNFINISHED_OUTPUT: f"an unfinished `lmshards preprocess` output (no {MANIFEST_NAME} yet)",
    RUN_DIRECTORY: "a training run directory (written by `lmshards train`)",
    MODEL_EXPORT: "a model directory (written by `lmshards export`)",
    TOKENIZER: "a tokenizer directory",
    DATASET_EXPORT: "a dataset written by `lmshards dataset export`",
    STATS: "corpus statistics (written by `lmshards stats`)",
}
_SHORT = {kind: what.split(" (")[0] for kind, what in WHAT.items()}
# What to run instead, by (kind given, kind wanted); {path} is the path given.
_ITS_TOKENIZER = "its tokenizer is {path}/tokenizer: pass that"
_INSTEAD = {
    (TOKEN_STORE, SHARD_SET): (
        "`lmshards repack --tokens {path} --output NEW_DIR` it first and pass NEW_DIR"
    ),
    (UNFINISHED_OUTPUT, SHARD_SET): "run its `lmshards preprocess` again to completion",
    (RUN_DIRECTORY, SHARD_SET): (
        "pass the shard set it trains on (its run_config.json names it); "
        "`lmshards report {path}` shows the run"
    ),
    (MODEL_EXPORT, SHARD_SET): "pass a shard set; `lmshards fill-mask {path} TEXT` tries the model",
    (TOKENIZER, SHARD_SET): (
        "make a shard set with it first: "
        "`lmshards preprocess --tokenizer {path} --input CORPUS --output DIR`"
    ),
    (DATASET_EXPORT, SHARD_SET): "pass the shard set it was exported from",
    (STATS, SHARD_SET): "pass the shard set it describes (usually its parent directory)",
    (RUN_DIRECTORY, MODEL_EXPORT): (
        "`lmshards export {path} --output MODEL_DIR` it first and pass MODEL_DIR"
    ),
    (SHARD_SET, MODEL_EXPORT): (
        "train a model on it (`lmshards train --shards {path} --output RUN_DIR`), then "
        "`lmshards export RUN_DIR --output MODEL_DIR`"
    ),
    (TOKEN_STORE, MODEL_EXPORT): (
        "`lmshards repack` it into a shard set, train on that and `lmshards export` the run"
    ),
    (TOKENIZER, MODEL_EXPORT): (
        "a tokenizer has no model; `lmshards tokenizer inspect {path} --text TEXT` shows its tokens"
    ),
    (SHARD_SET, TOKENIZER): _ITS_TOKENIZER,
    (TOKEN_STORE, TOKENIZER): _ITS_TOKENIZER,
    (RUN_DIRECTORY, TOKENIZER): _ITS_TOKENIZER,
}
_DEFAULT_INSTEAD = {
    SHARD_SET: "pass the --output of `lmshards preprocess`",
    MODEL_EXPORT: "pass the --output of `lmshards export`",
    TOKENIZER: "pass a tokenizer.json or a directory holding one (e.g. from `lmshards tokenizer train`)",
}


def directory_kind(path: str) -> str:
    """The kind of lmshards directory at path (local or gs://), from its marker files; OTHER if none.

    A manifest.json says a shard set or a token store by its "format" (a damaged or unreadable one counts
    as a shard set: it can only be ours, and the shard set's reader names what is wrong with it); run_config.json a run directory; config.json beside model weights a model
    export; lmshards_tokenizer.json or a bare tokenizer.json a tokenizer.
    """
    if not fs.isdir(path):
        return OTHER
    manifest = fs.join(path, MANIFEST_NAME)
    if fs.exists(manifest):
        try:
            data = bounded.read_json(
                manifest, what="manifest", max_bytes=bounded.MAX_MANIFEST_BYTES
            )
        except (OSError, ValueError):  # UnicodeDecodeError and the read limits included
            return SHARD_SET
        found = data.get("format") if isinstance(data, dict) else None
        if found == MANIFEST_FORMAT:
            return SHARD_SET
        if found == TOKENS_FORMAT:
            return TOKEN_STORE
    if fs.exists(fs.join(path, TEMP_DIR_NAME)):
        return UNFINISHED_OUTPUT
    if fs.exists(fs.join(path, RUN_CONFIG_JSON)):
        return RUN_DIRECTORY
    if fs.exists(fs.join(path, MODEL_CONFIG_JSON)) and any(
        fs.exists(fs.join(path, name)) for name in MODEL_WEIGHTS_FILES
    ):
        return MODEL_EXPORT
    if fs.exists(fs.join(path, TOKENIZER_INFO_JSON)) or fs.exists(fs.join(path, TOKENIZER_JSON)):
        return TOKENIZER
    if fs.exists(fs.join(path, EXPORT_SUCCESS_JSON)):
        return DATASET_EXPORT
    if fs.exists(fs.join(path, STATS_JSON)):
        return STATS
    return OTHER


def is_token_store(path: str) -> bool:
    """Whether path is a token store itself (not a shard set, which may hold one inside)."""
    return directory_kind(path) == TOKEN_STORE


def wrong_kind_message(path: str, *, wanted: str, flag: str = "") -> str | None:
    """What path (given as `flag`, if any) is and what to run instead, when it is a known kind other
    than `wanted`; None when it is `wanted` or of no known kind (the caller's own message applies)."""
    kind = directory_kind(path)
    if kind in (wanted, OTHER):
        return None
    instead = _INSTEAD.get((kind, wanted), _DEFAULT_INSTEAD[wanted])
    given = f"{flag} {path!r}" if flag else repr(path)
    return (
        f"{given} is {WHAT[kind]}, not {_SHORT[wanted]}: {instead.format(path=path.rstrip('/'))}."
    )


def is_lmshards_output(directory: str) -> bool:
    """True when directory holds a preprocess output, complete (its manifest.json) or not (.lmshards-tmp).

    A manifest.json that is JSON of another format (a web app's, a dataset card's) is not ours; one that is
    not JSON at all counts as ours, so that the shards beside a damaged manifest are never read as text.
    """
    if fs.exists(fs.join(directory, TEMP_DIR_NAME)):
        return True
    manifest = fs.join(directory, MANIFEST_NAME)
    if not fs.exists(manifest):
        return False
    try:
        data = bounded.read_bytes(manifest, what="manifest", max_bytes=bounded.MAX_MANIFEST_BYTES)
        return json_format(data) == MANIFEST_FORMAT
    except ValueError:  # the read limits included
        return True
