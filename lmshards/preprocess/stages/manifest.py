"""Stage 6, manifest: written last, once every shard is in place; the only sign the output is complete.

A complete output also holds the tokenizer it was made with (tokenizer/) and the records' TF
Metadata schema (schema.pbtxt). Both are known before the run, so the launcher writes them before
the pipeline starts (write_tokenizer_copy, write_schema_file), and the manifest, which lists them,
still comes last.
"""

from __future__ import annotations

import dataclasses
import datetime
import posixpath
from collections.abc import Iterable, Sequence

from lmshards.plumbing import fs
from lmshards.plumbing.errors import FailedRunError, OutputError
from lmshards.preprocess.sources import InputError, ReadStats, no_documents_message, sum_stats
from lmshards.preprocess.stages.pack import sum_totals
from lmshards.schemas.constants import (
    MANIFEST_NAME,
    SPLITS,
    TOKENIZER_CONFIG_JSON,
    TOKENIZER_DIR_NAME,
    TOKENIZER_INFO_JSON,
    TOKENIZER_JSON,
)
from lmshards.schemas.layouts import SPECIAL_TOKENS_MAP_JSON, TEMP_DIR_NAME
from lmshards.schemas.manifest import (
    CurationInfo,
    Manifest,
    ShardInfo,
    SplitInfo,
    SplitTotals,
    write_manifest,
)
from lmshards.schemas.tfmd import schema_for, write_schema
from lmshards.schemas.tokenizer_info import TokenizerSource

# Files copied from a tokenizer directory beside its tokenizer.json, when there: transformers' and lmshards'.
TOKENIZER_COMPANIONS = (TOKENIZER_CONFIG_JSON, SPECIAL_TOKENS_MAP_JSON, TOKENIZER_INFO_JSON)


# ---------------------------------------------------------------- logic: before the run (launcher)


def write_tokenizer_copy(source: TokenizerSource, output: str) -> None:
    """Writes the tokenizer into `{output}/tokenizer/`: the tokenizer.json text the run uses and, for a
    tokenizer directory, the TOKENIZER_COMPANIONS beside it.

    Only what the run read is copied: a tokenizer given as a file has no companions (its special
    tokens and model_max_length were taken from the file alone).
    """
    directory = fs.join(output, TOKENIZER_DIR_NAME)
    fs.write_text_atomic(fs.join(directory, TOKENIZER_JSON), source.json_text)
    if source.json_path == source.path:
        return
    for name in TOKENIZER_COMPANIONS:
        path = fs.join(source.path, name)
        if fs.exists(path):
            fs.write_bytes_atomic(fs.join(directory, name), fs.read_bytes(path))


def write_schema_file(output: str, header: Manifest) -> None:
    """Writes `{output}/schema.pbtxt`, the TF Metadata schema of the records header describes."""
    write_schema(output, schema_for(header.features(), vocab_size=header.tokenizer.vocab_size))


# ---------------------------------------------------------------- logic: the manifest


def utc_timestamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_documents_read(patterns: Sequence[str], reading: ReadStats) -> None:
    """Raises InputError, naming the inputs and what reading found instead, when no document was read."""
    if not reading.documents:
        raise InputError(no_documents_message(patterns, reading))


class NothingLeftError(FailedRunError):
    """Documents were read, but every one was removed before a record was written."""


# What each curation reason means, in the line that reports a run left with no record.
_REMOVED_AS = {
    "contaminated": "removed by --decontaminate",
    "exact": "exact duplicates (--dedup)",
    "near": "near duplicates (--dedup near)",
}


def removal_counts(manifest: Manifest) -> list[str]:
    """Each reason documents were left out of the records, with its count: skipped while reading,
    removed by curation, or too short to fill one record (their tokens dropped by --remainder drop)."""
    reasons = [
        f"{count:,} skipped as {name.removeprefix('documents_').replace('_', ' ')}"
        for name, count in sorted(manifest.reading.items())
        if name.startswith("documents_") and name != "documents_split" and count
    ]
    if manifest.curation is not None:
        reasons += [
            f"{counts['documents']:,} {_REMOVED_AS.get(reason, reason)}"
            for reason, counts in manifest.curation.removed.items()
            if counts["documents"]
        ]
    tokenized = sum(split.totals.documents for split in manifest.splits.values())
    dropped = sum(split.totals.tokens_dropped for split in manifest.splits.values())
    if tokenized:
        reasons.append(
            f"{tokenized:,} too short to fill one {manifest.seq_len}-token record (their {dropped:,} "
            "tokens dropped by --remainder drop)"
        )
    return reasons


def check_records_written(manifest: Manifest) -> None:
    """Raises NothingLeftError, naming what removed every document, when no split holds a record: an
    empty set would look complete and verify, and train on nothing.
    """
    if any(split.totals.records for split in manifest.splits.values()):
        return
    raise NothingLeftError(
        f"every document was removed, so no record was written and no manifest: "
        f"{'; '.join(removal_counts(manifest)) or 'no document reached the records'}. Pass a smaller "
        "--seq_len or --remainder pad for short documents, or check --dedup, --decontaminate and the inputs."
    )


def build_manifest(
    header: Manifest,
    *,
    shards: Iterable[tuple[str, ShardInfo]],
    totals: Iterable[tuple[str, SplitTotals]],
    reading: ReadStats,
    created_at: str,
    curation: CurationInfo | None = None,
) -> Manifest:
    """`header` (everything known before the run) completed with what the run found.

    shards: (split, ShardInfo) of every shard written; totals: (split, SplitTotals), any number per split;
    reading: what the readers counted, added to what planning counted (header.reading);
    curation: what curation removed, when it ran.
    """
    shards, totals = list(shards), list(totals)
    splits = {}
    for split in SPLITS:
        infos = tuple(
            sorted((info for s, info in shards if s == split), key=lambda info: info.path)
        )
        splits[split] = SplitInfo(
            shards=infos, totals=sum_totals(t for s, t in totals if s == split)
        )
    reading = sum_stats([ReadStats(**header.reading), reading])
    return dataclasses.replace(
        header,
        splits=splits,
        reading=reading.recorded(),
        created_at=created_at,
        curation=curation,
    )


def finish_output(output: str, manifest: Manifest) -> str:
    """Removes the shard writers' temporary directory, then writes the manifest. Returns its path.

    Raises:
      NothingLeftError: no split holds a record (check_records_written).
      OutputError: a file the manifest lists besides the shards (written before the run) is gone.
    """
    check_records_written(manifest)
    store_manifest = manifest.tokens and posixpath.join(manifest.tokens, MANIFEST_NAME)
    for relpath in (manifest.tokenizer.path, manifest.schema, store_manifest):
        if relpath and not fs.exists(fs.join(output, relpath)):
            raise OutputError(
                f"{fs.join(output, relpath)!r} was removed while the run wrote {output!r}; "
                "run the command again."
            )
    temp = fs.join(output, TEMP_DIR_NAME)
    if fs.exists(temp):
        filesystem, stripped = fs.filesystem(temp)
        filesystem.rm(stripped, recursive=True)
    return write_manifest(output, manifest)


def finish_shard_set(
    output: str,
    header: Manifest,
    *,
    patterns: Sequence[str],
    shards: Iterable[tuple[str, ShardInfo]],
    totals: Iterable[tuple[str, SplitTotals]],
    reading: ReadStats,
    curation: CurationInfo | None = None,
) -> str:
    """The run's last step on both preprocess paths: the manifest built (build_manifest), checked
    (check_documents_read, naming `patterns`) and written (finish_output). Returns its path."""
    manifest = build_manifest(
        header,
        shards=shards,
        totals=totals,
        reading=reading,
        created_at=utc_timestamp(),
        curation=curation,
    )
    check_documents_read(patterns, ReadStats(**manifest.reading))
    return finish_output(output, manifest)
