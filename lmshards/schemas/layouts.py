"""Which entries each kind of lmshards output owns in its directory: their names and their layouts.

The names are the contract's: a command writes them, another recognises, reads or replaces them
(`inspect`, `report`, `--overwrite`, `train --restart`). lmshards.plumbing.outputs applies a layout (what may be
replaced, what an interrupted run leaves); it knows no names itself.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

from lmshards.plumbing.outputs import OutputKind
from lmshards.schemas.constants import (
    CURATION_DIR_NAME,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    MODEL_CONFIG_JSON,
    MODEL_PYTORCH_BIN,
    MODEL_SAFETENSORS,
    MODEL_WEIGHTS_FILES,
    RUN_CONFIG_JSON,
    SCHEMA_NAME,
    SPLITS,
    TOKENIZER_CONFIG_JSON,
    TOKENIZER_DIR_NAME,
    TOKENIZER_INFO_JSON,
    TOKENIZER_JSON,
    TOKENS_DIR_NAME,
    TOKENS_FORMAT,
)
from lmshards.schemas.shards import parse_shard_name

# Under a preprocess output (and its token store) while it is written; removed before the manifest is written.
TEMP_DIR_NAME = ".lmshards-tmp"
# Under TEMP_DIR_NAME: a default-runner preprocess's local spill files (one directory per run).
SPILL_DIR_PREFIX = "spill-"
# Written by transformers releases before 5 beside tokenizer_config.json.
SPECIAL_TOKENS_MAP_JSON = "special_tokens_map.json"
# The tokenizer files a transformers tokenizer directory may hold (`save_pretrained` writes some of them;
# `lmshards export` copies a run's transformers tokenizer directory as it is).
HF_TOKENIZER_FILES = (
    TOKENIZER_JSON,
    TOKENIZER_CONFIG_JSON,
    SPECIAL_TOKENS_MAP_JSON,
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
    "chat_template.jinja",
)
# Written last by `lmshards dataset export`: the sign of a complete export.
EXPORT_SUCCESS_JSON = "_SUCCESS.json"
# `{split}-{index:05d}-of-{count:05d}.{parquet|jsonl}`, the shards of `lmshards dataset export`.
EXPORT_SHARD_RE = re.compile(r"^.+-\d{5,}-of-\d{5,}\.(?:parquet|jsonl)$")
# `lmshards stats` writes these into SHARDS_DIR/stats by default: part of the shard set's output, so
# `preprocess --overwrite` replaces them with the shards they describe.
STATS_DIR_NAME = "stats"
STATS_JSON = "stats.json"
STATS_HTML = "stats.html"

# A token store's part files: `part-{uuid4 hex}.parquet` (their rows: lmshards.preprocess.stages.tokens).
_TOKEN_PART_PREFIX, _TOKEN_PART_SUFFIX = "part-", ".parquet"
_TOKEN_PART_RE = re.compile(
    rf"^{re.escape(_TOKEN_PART_PREFIX)}[0-9a-f]{{32}}{re.escape(_TOKEN_PART_SUFFIX)}$"
)

# A training run directory (`lmshards train --output`), marked by RUN_CONFIG_JSON; its tokenizer copy is
# in TOKENIZER_DIR_NAME.
RUN_SUMMARY_JSON = "run_summary.json"  # written when the run finishes
METRICS_JSONL = "metrics.jsonl"
CHECKPOINTS_DIR = "checkpoints"
TENSORBOARD_DIR = "tensorboard"
REPORT_HTML = "report.html"  # `lmshards report`'s page, by default in the run directory
# What both backends save under RUN_DIR/checkpoints (lmshards.train.backends.tensorflow_checkpoint, lmshards.train.backends.jax_checkpoint), half-written
# saves included: TensorFlow's state file and PREFIX_temp/ shards, ckpt-N.index/.data-*, JAX's ckpt-N.npz(.tmp-*).
_CHECKPOINT_FILE_RE = re.compile(
    r"^(?:checkpoint(?:\.tmp[0-9a-f]*|\.unreadable)?"
    r"|ckpt-\d+(?:\.index|\.data-\d+-of-\d+|\.npz(?:\.tmp-[0-9a-f]+)?|_temp/.+))$"
)
# TensorBoard's event files, under one directory per writer (train/, eval/).
_EVENTS_FILE_RE = re.compile(r"^(?:[\w.-]+/)*events\.out\.tfevents\.[^/]+$")


def new_token_part_name() -> str:
    """A fresh part file name: unique, so that retried and parallel writers never collide."""
    return f"{_TOKEN_PART_PREFIX}{uuid.uuid4().hex}{_TOKEN_PART_SUFFIX}"


def is_token_part_name(name: str) -> bool:
    """Whether `name` (no directory) is a part file name of a token store."""
    return bool(_TOKEN_PART_RE.match(name))


def _shard_split(name: str) -> str | None:
    try:
        return parse_shard_name(name)[0]
    except ValueError:
        return None


def _manifest_shards(manifest: Any) -> Iterator[str]:
    """The shard paths a shard set's manifest.json lists (raw JSON: read before it is checked)."""
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            yield shard["path"]


TOKENIZER_OUTPUT = OutputKind(
    "tokenizer",
    marker=TOKENIZER_INFO_JSON,
    files=frozenset({TOKENIZER_JSON, TOKENIZER_CONFIG_JSON, SPECIAL_TOKENS_MAP_JSON}),
    what="a tokenizer (written by `lmshards tokenizer train`)",
)
STATS_OUTPUT = OutputKind(
    "stats",
    marker=STATS_JSON,
    files=frozenset({STATS_HTML}),
    what="corpus statistics (written by `lmshards stats`)",
    signs=(STATS_JSON, STATS_HTML),
)
TOKENS_OUTPUT = OutputKind(
    "tokens",
    marker=MANIFEST_NAME,
    marker_format=TOKENS_FORMAT,
    file_pattern=_TOKEN_PART_RE,
    scratch_dirs=frozenset({TEMP_DIR_NAME}),
    nested=((TOKENIZER_DIR_NAME, TOKENIZER_OUTPUT),),
    what="a token store (written by `lmshards preprocess --keep_tokens`)",
)
PREPROCESS_OUTPUT = OutputKind(
    "preprocess",
    marker=MANIFEST_NAME,
    marker_format=MANIFEST_FORMAT,
    files=frozenset({SCHEMA_NAME}),
    # curation/ holds only the audit files a curated run writes.
    scratch_dirs=frozenset({TEMP_DIR_NAME, CURATION_DIR_NAME}),
    shard_dirs=frozenset(SPLITS),
    shard_split=_shard_split,
    listed_shards=_manifest_shards,
    nested=(
        (TOKENIZER_DIR_NAME, TOKENIZER_OUTPUT),
        (STATS_DIR_NAME, STATS_OUTPUT),
        (TOKENS_DIR_NAME, TOKENS_OUTPUT),
    ),
    what="a shard set (written by `lmshards preprocess` or `lmshards repack`)",
    # An unfinished one has no manifest yet, only its temporary directory.
    signs=(MANIFEST_NAME, TEMP_DIR_NAME),
    open_dirs=frozenset({STATS_DIR_NAME}),
)
DATASET_EXPORT_OUTPUT = OutputKind(
    "dataset_export",
    marker=EXPORT_SUCCESS_JSON,
    file_pattern=EXPORT_SHARD_RE,
    what="a dataset export (written by `lmshards dataset export`)",
)
# Everything a training command (and `lmshards report`) writes in a run directory, and nothing else: what
# `--restart` may delete, and what a run directory may hold (anything else there is the user's, and refused).
TRAIN_RUN_OUTPUT = OutputKind(
    "train_run",
    marker=RUN_SUMMARY_JSON,
    files=frozenset({RUN_CONFIG_JSON, METRICS_JSONL, REPORT_HTML}),
    scratch_dirs=frozenset(
        {TOKENIZER_DIR_NAME}
    ),  # the copy of the run's tokenizer, every file of it
    pattern_dirs=((CHECKPOINTS_DIR, _CHECKPOINT_FILE_RE), (TENSORBOARD_DIR, _EVENTS_FILE_RE)),
    what="a training run (written by `lmshards train`)",
    signs=(RUN_CONFIG_JSON, RUN_SUMMARY_JSON),
)
# `lmshards export`'s model directory: transformers' config and weights beside the tokenizer files, copied
# from the run's transformers tokenizer directory or written by save_pretrained. Built elsewhere and renamed
# into place, so it needs no marker of completion; its weights go first when it is replaced.
MODEL_EXPORT_OUTPUT = OutputKind(
    "export",
    marker=MODEL_SAFETENSORS,
    files=frozenset(
        {MODEL_CONFIG_JSON, MODEL_PYTORCH_BIN, TOKENIZER_INFO_JSON, *HF_TOKENIZER_FILES}
    ),
    what="a model export (written by `lmshards export`)",
    signs=MODEL_WEIGHTS_FILES,
)
# `lmshards demo --output DIR`: each step's output in its own directory, which that step's command writes.
DEMO_MARKER = ".lmshards_demo"  # written first: the demo's directory, which a rerun may clear
DEMO_SUMMARY_JSON = "demo_summary.json"
DEMO_LOGS_DIR = "logs"  # one log file per step
DEMO_TOKENIZER_DIR, DEMO_SHARDS_DIR, DEMO_RUN_DIR, DEMO_MODEL_DIR = (
    "tokenizer",
    "shards",
    "run",
    "hf_model",
)
DEMO_OUTPUT = OutputKind(
    "demo",
    marker=DEMO_MARKER,
    files=frozenset({DEMO_SUMMARY_JSON, REPORT_HTML}),
    scratch_dirs=frozenset({DEMO_LOGS_DIR}),
    nested=(
        (DEMO_TOKENIZER_DIR, TOKENIZER_OUTPUT),
        (DEMO_SHARDS_DIR, PREPROCESS_OUTPUT),
        (DEMO_RUN_DIR, TRAIN_RUN_OUTPUT),
        (DEMO_MODEL_DIR, MODEL_EXPORT_OUTPUT),
    ),
    what="the demo's output (written by `lmshards demo`)",
    open_dirs=frozenset({DEMO_TOKENIZER_DIR, DEMO_SHARDS_DIR, DEMO_RUN_DIR, DEMO_MODEL_DIR}),
)
# Every kind, in the order a directory is told apart by its signs (a model export may hold a tokenizer's
# files, so it comes before the tokenizer): what a command's --output may not be, unless it is its own.
OUTPUT_KINDS = (
    PREPROCESS_OUTPUT,
    TOKENS_OUTPUT,
    TRAIN_RUN_OUTPUT,
    MODEL_EXPORT_OUTPUT,
    DATASET_EXPORT_OUTPUT,
    TOKENIZER_OUTPUT,
    STATS_OUTPUT,
    DEMO_OUTPUT,
)
