"""What a running preprocess job shows: Beam counters and progress lines.

Counters live in one namespace, so the Dataflow monitoring page (Job metrics > Custom counters)
lists them together, under the names the progress lines use: bytes_read, input_bytes_read,
documents_read, groups_packed, shards_written, records_written. Progress lines are logged by each
worker for its own share of the work (on the default runner: the whole job's), at most every
PROGRESS_EVERY_S seconds, and once more when a stage's work in that worker ends.
"""

from __future__ import annotations

import logging
import sys

from lmshards.plumbing.progress import PROGRESS_EVERY_S, Pacer
from lmshards.plumbing.units import format_duration, megabytes
from lmshards.schemas.manifest import Manifest

logger = logging.getLogger(__name__)

METRICS_NAMESPACE = "lmshards"
# The reading counters (ReadStats fields, the manifest's `reading`) of what was skipped, never fatal,
# with what the closing summary calls each.
SKIPPED_COUNTERS = {
    "documents_empty": "empty",
    "documents_invalid_json": "invalid JSON",
    "documents_missing_field": "without the text field",
    "documents_non_string_text": "text not a string",
    "documents_json_too_long": "JSON line too long",
    "documents_json_too_deep": "JSON nested too deep",
    "documents_lone_surrogate": "lone surrogate",
    "documents_tokenizer_error": "tokenizer error",
    "files_skipped_binary": "binary files",
    "files_skipped_lmshards_output": "files inside lmshards outputs",
    "warc_records_malformed": "malformed WARC records",
    "warc_files_truncated": "truncated WARC files",
    "documents_html_too_large": "web pages over --max_html_bytes",
    "documents_undecodable": "web pages in no charset",
    "documents_extract_failed": "web pages the extractor failed on",
}


# The counters of the stages after reading (reading's are the ReadStats fields), counted alike on both
# preprocess paths: the staged Beam pipeline and the default runner's one step (in_process).
DOCUMENTS_TOKENIZED = "documents_tokenized"
TOKENS = "tokens"
DOCUMENTS_TOKENIZER_ERROR = "documents_tokenizer_error"
DOCUMENTS_READ = "documents_read"  # documents read from a token store (repack)
TOKEN_PARTS_WRITTEN = "token_parts_written"
GROUPS_PACKED = "groups_packed"
BLOCKS = "blocks"
TOKENS_DROPPED = "tokens_dropped"
PADDING_TOKENS = "padding_tokens"
SHARDS_WRITTEN = "shards_written"
RECORDS_WRITTEN = "records_written"


class _Uncounted:
    """A counter of a process that never loaded Beam (the default runner's path): no step collects it."""

    def inc(self, n: int = 1) -> None:
        pass


_UNCOUNTED = _Uncounted()


def counter(name: str):
    """The Beam counter `name` in METRICS_NAMESPACE (create it in a DoFn's __init__, increment it in process).

    Where Beam was never imported no Beam step runs, so nothing would read a counter: importing Beam
    for one would cost the default path a second of start-up and ~200 MB.
    """
    if "apache_beam" not in sys.modules:
        return _UNCOUNTED
    from apache_beam.metrics import Metrics

    return Metrics.counter(METRICS_NAMESPACE, name)


class PackCounters:
    """The pack stage's counters and its "packed k groups" line, for one worker (or the whole job)."""

    def __init__(self) -> None:
        self._groups, self._blocks = counter(GROUPS_PACKED), counter(BLOCKS)
        self._dropped, self._padding = counter(TOKENS_DROPPED), counter(PADDING_TOKENS)
        self._progress: StageProgress | None = None  # made where it runs: loggers do not pickle

    def add(self, *, blocks: int, tokens_dropped: int, padding_tokens: int) -> None:
        """One packing group packed into `blocks` blocks."""
        self._groups.inc()
        self._blocks.inc(blocks)
        self._dropped.inc(tokens_dropped)
        self._padding.inc(padding_tokens)
        self._progress = self._progress or StageProgress("packed", "groups")
        self._progress.add(blocks)

    def flush(self) -> None:
        """Logs the count not logged yet (at the end of a bundle, or of the stage)."""
        if self._progress is not None:
            self._progress.flush()


class ShardCounters:
    """The shard stage's counters and its "wrote k of N shards" line."""

    def __init__(self) -> None:
        self._shards, self._records = counter(SHARDS_WRITTEN), counter(RECORDS_WRITTEN)
        self._progress: StageProgress | None = None

    def add(self, records: int, *, total: int) -> None:
        """One shard of `records` records written, of `total` shards in all."""
        self._shards.inc()
        self._records.inc(records)
        self._progress = self._progress or StageProgress("wrote", "shards")
        self._progress.add(records, total=total)

    def flush(self) -> None:
        if self._progress is not None:
            self._progress.flush()


class StageProgress:
    """One worker's count of a stage's finished items, logged as "<verb> k [of N] <items>, R records".

    add() logs at most every `every_s` seconds, and always when k reaches the total; flush() (from
    finish_bundle) logs a count not logged yet. On the default runner a stage is one bundle, so its
    last line is the stage's result.
    """

    def __init__(self, verb: str, items: str, every_s: float = PROGRESS_EVERY_S):
        self._verb, self._items = verb, items
        self._pacer = Pacer(every_s)
        self._done = self._records = 0
        self._total: int | None = None
        self._logged = True

    def add(self, records: int, *, total: int | None = None) -> None:
        """One item finished, holding `records` records; total: the stage's item count, when known."""
        self._done += 1
        self._records += records
        self._total = total
        self._logged = False
        if self._pacer.due() or self._done == total:
            self._log()

    def flush(self) -> None:
        if not self._logged:
            self._log()

    def line(self) -> str:
        of = f" of {self._total:,}" if self._total is not None else ""
        return f"{self._verb} {self._done:,}{of} {self._items}, {self._records:,} records"

    def _log(self) -> None:
        self._logged = True
        logger.info("%s", self.line())


def skipped_line(reading: dict[str, int]) -> str | None:
    """ "skipped: 2 invalid JSON, 1 tokenizer error" from the manifest's reading counters, each
    SKIPPED_COUNTERS reason that counted any; None when none did."""
    found = [
        f"{reading[name]:,} {what}" for name, what in SKIPPED_COUNTERS.items() if reading.get(name)
    ]
    return f"skipped: {', '.join(found)}" if found else None


def finished_line(manifest: Manifest, seconds: float) -> str:
    """The launcher's closing line: the input read, its rate, and what was written."""
    input_bytes = sum(info.bytes for info in manifest.inputs)
    shards = sum(len(split.shards) for split in manifest.splits.values())
    records = sum(split.totals.records for split in manifest.splits.values())
    rate = megabytes(input_bytes) / seconds if seconds > 0 else 0.0
    return (
        f"preprocess finished in {format_duration(seconds)}: read {megabytes(input_bytes):.1f} MB "
        f"({rate:.2f} MB/s), {manifest.reading.get('documents', 0):,} documents; "
        f"wrote {shards:,} shards, {records:,} records"
    )
