"""Exporting one text column of a Hugging Face dataset to Parquet or JSON Lines shards.

The source is a Hub dataset name (when the network allows), a builder with local files
(`json`/`csv`/`text`/`parquet` + data_files), a directory of data files, or a `save_to_disk`
directory. Rows are streamed in batches, so neither mode materializes the dataset in memory: a
map-style Dataset is memory-mapped Arrow on disk, and `streaming=True` reads an IterableDataset
(for datasets bigger than the local disk too).

Output: `{split}-{i:05d}-of-{n:05d}.{parquet|jsonl}` holding one string column (`text` by default),
which `lmshards preprocess --input DIR --text_column text` reads, and `_SUCCESS.json` (written last:
the only sign the export is complete; the leading "_" keeps readers of the directory from reading it).
Map-style datasets are cut into contiguous shards; streamed ones are dealt round-robin, since their
length is not known up front.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from lmshards.plumbing import bounded, fs
from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.flag_types import whole
from lmshards.plumbing.outputs import check_replaceable, prepare_output
from lmshards.schemas.layouts import DATASET_EXPORT_OUTPUT, EXPORT_SUCCESS_JSON, OUTPUT_KINDS
from lmshards.schemas.version import __version__

logger = logging.getLogger(__name__)

PARQUET, JSONL = "parquet", "jsonl"
FORMATS = (PARQUET, JSONL)
DEFAULT_FORMAT = PARQUET
DEFAULT_SPLIT = "train"
DEFAULT_NUM_SHARDS = 1
NUM_SHARDS = whole(1, 10_000)
DEFAULT_COLUMN = "text"
# Rows per Parquet row group and per read batch: big enough for fast Arrow I/O, small enough that a
# batch of long documents stays well under a GB.
BATCH_ROWS = 10_000
_LOG_EVERY_BATCHES = 100
EXPORT_FORMAT = "lmshards.dataset_export"
# Files `save_to_disk` leaves in a Dataset / DatasetDict directory.
_SAVED_DATASET_FILES = ("state.json", "dataset_dict.json")


class DatasetExportError(LmshardsError):
    """A dataset that cannot be loaded or exported as asked."""


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """Everything `lmshards dataset export` was asked to do; echoed in _SUCCESS.json."""

    dataset: str
    output: str
    data_files: tuple[str, ...] = ()
    split: str = DEFAULT_SPLIT
    config: str | None = None
    text_column: str = DEFAULT_COLUMN
    output_column: str = DEFAULT_COLUMN
    num_shards: int = DEFAULT_NUM_SHARDS
    format: str = DEFAULT_FORMAT
    streaming: bool = False
    overwrite: bool = False


@dataclasses.dataclass(frozen=True)
class ShardSummary:
    path: str  # relative to the output directory
    rows: int
    bytes: int


def shard_name(split: str, index: int, count: int, fmt: str) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.{fmt}"


def shard_of(row: int, *, num_shards: int, total: int | None) -> int:
    """The shard of row `row`: contiguous runs when the total is known, round-robin otherwise."""
    return row * num_shards // total if total else row % num_shards


def validate(config: ExportConfig) -> None:
    if config.format not in FORMATS:
        raise DatasetExportError(
            f"--format {config.format!r} is not supported; use one of {', '.join(FORMATS)}."
        )
    NUM_SHARDS.check("--num_shards", config.num_shards)
    if not config.output_column:
        raise DatasetExportError(
            "--output_column is empty; give the column name to write (default 'text')."
        )


def load_split(config: ExportConfig) -> Any:
    """The requested split as a datasets Dataset (memory-mapped) or IterableDataset (streaming).

    Raises:
      DatasetExportError: the Hub cannot be reached, the dataset/split/config does not exist, or
        the text column is missing or not text.
    """
    import datasets

    source = config.dataset
    try:
        if _is_saved_dataset(source):
            loaded = datasets.load_from_disk(source)
            if isinstance(loaded, datasets.DatasetDict):
                loaded = _pick_split(loaded, config.split, source)
            elif config.split != DEFAULT_SPLIT:
                logger.info(
                    "%s holds a single split; --split %s is only a name for the output",
                    source,
                    config.split,
                )
            dataset = loaded.to_iterable_dataset() if config.streaming else loaded
        else:
            kwargs: dict[str, Any] = {"name": config.config, "streaming": config.streaming}
            if config.data_files:
                kwargs["data_files"] = list(config.data_files)
            loaded = datasets.load_dataset(source, **kwargs)
            dataset = _pick_split(loaded, config.split, source)
    except ConnectionError as e:
        raise DatasetExportError(
            f"Cannot reach the Hugging Face Hub for dataset {source!r} (the network is unreachable, or "
            f"HF_HUB_OFFLINE is set): {e}. Pass local files instead, e.g. `lmshards dataset export json "
            "--data_files 'data/*.jsonl'`, or a directory written by `Dataset.save_to_disk`."
        ) from e
    except (FileNotFoundError, ValueError) as e:
        raise DatasetExportError(f"Cannot load dataset {source!r}: {e}") from e
    _check_column(dataset, config.text_column, source)
    return dataset


def _is_saved_dataset(source: str) -> bool:
    return os.path.isdir(source) and any(
        os.path.exists(os.path.join(source, f)) for f in _SAVED_DATASET_FILES
    )


def _pick_split(loaded: Any, split: str, source: str) -> Any:
    if split not in loaded:
        raise DatasetExportError(
            f"Dataset {source!r} has no split {split!r}; it has {sorted(loaded)}. Pass --split."
        )
    return loaded[split]


def _check_column(dataset: Any, column: str, source: str) -> None:
    features = dataset.features
    if features is None:  # a streamed dataset whose schema is only known once read
        return
    if column not in features:
        raise DatasetExportError(
            f"Dataset {source!r} has no column {column!r}; it has {sorted(features)}. Pass --text_column NAME."
        )
    dtype = getattr(features[column], "dtype", None)
    if dtype not in ("string", "large_string"):
        raise DatasetExportError(
            f"Column {column!r} of {source!r} holds {features[column]}, not text. Pass --text_column NAME."
        )


def iter_text_batches(dataset: Any, column: str) -> Iterator[list[str | None]]:
    """The column's values in dataset order, BATCH_ROWS at a time (None where a row has no text)."""
    for batch in dataset.select_columns([column]).iter(batch_size=BATCH_ROWS):
        if column not in batch:
            raise DatasetExportError(
                f"Streamed rows have no column {column!r}; they have {sorted(batch)}."
            )
        yield batch[column]


class _ShardWriter:
    """Writes one shard to `path`: one string column, as Parquet row groups or JSON Lines."""

    def __init__(self, path: str, *, fmt: str, column: str):
        self.path = path
        self._column = column
        filesystem, stripped = fs.filesystem(path)
        self._file = filesystem.open(stripped, "wb")
        self._parquet = None
        self.rows = 0
        if fmt == PARQUET:
            import pyarrow as pa
            import pyarrow.parquet as pq

            self._schema = pa.schema([(column, pa.string())])
            self._parquet = pq.ParquetWriter(self._file, self._schema)

    def write(self, texts: list[str]) -> None:
        if not texts:
            return
        self.rows += len(texts)
        if self._parquet is not None:
            import pyarrow as pa

            self._parquet.write_table(
                pa.table({self._column: pa.array(texts, pa.string())}, schema=self._schema)
            )
        else:
            lines = "".join(json.dumps({self._column: t}, ensure_ascii=False) + "\n" for t in texts)
            self._file.write(lines.encode("utf-8"))

    def close(self) -> int:
        """Finishes the file; returns its size in bytes."""
        if self._parquet is not None:
            self._parquet.close()
        self._file.close()
        return fs.size(self.path)


def _staging_path(stack: contextlib.ExitStack, final: str) -> str:
    """Where a shard is written: locally a temporary sibling, renamed to `final` when the stack closes
    without an error; on an object store `final` itself (an object appears only once it is closed)."""
    return final if fs.is_remote(final) else stack.enter_context(fs.atomic_local_path(final))


def export(config: ExportConfig) -> dict[str, Any]:
    """Loads the dataset and writes its shards and then _SUCCESS.json; returns the summary written.

    Raises:
      DatasetExportError / OutputError: bad options, a dataset that cannot be loaded as asked, or a
        non-empty output without overwrite (checked before loading; emptied only once the dataset loaded).
    """
    validate(config)
    check_replaceable(
        config.output, kind=DATASET_EXPORT_OUTPUT, overwrite=config.overwrite, others=OUTPUT_KINDS
    )
    start = time.monotonic()
    dataset = load_split(config)
    prepare_output(config.output, kind=DATASET_EXPORT_OUTPUT, overwrite=config.overwrite)
    total = None if config.streaming else len(dataset)
    n = config.num_shards
    names = [shard_name(config.split, i, n, config.format) for i in range(n)]
    rows_in = rows_none = 0
    with contextlib.ExitStack() as stack:
        writers = [
            _ShardWriter(
                _staging_path(stack, fs.join(config.output, name)),
                fmt=config.format,
                column=config.output_column,
            )
            for name in names
        ]
        for batch_number, texts in enumerate(iter_text_batches(dataset, config.text_column), 1):
            # (shard, text) for the batch's rows, grouped so each writer gets one list per batch
            by_shard: dict[int, list[str]] = {}
            for text in texts:
                row, rows_in = rows_in, rows_in + 1
                if text is None:
                    rows_none += 1
                    continue
                by_shard.setdefault(shard_of(row, num_shards=n, total=total), []).append(text)
            for index, shard_texts in by_shard.items():
                writers[index].write(shard_texts)
            if batch_number % _LOG_EVERY_BATCHES == 0:
                logger.info("Exported %d rows", rows_in)
        shards = [
            ShardSummary(path=name, rows=w.rows, bytes=w.close()) for name, w in zip(names, writers)
        ]
    summary = {
        "format": EXPORT_FORMAT,
        "tool_version": __version__,
        "options": dataclasses.asdict(config),
        "rows_read": rows_in,
        "rows_written": sum(s.rows for s in shards),
        "rows_without_text": rows_none,
        "column": config.output_column,
        "shards": [dataclasses.asdict(s) for s in shards],
        "seconds": round(time.monotonic() - start, 3),
    }
    text = json.dumps(summary, indent=2, sort_keys=True) + "\n"
    fs.write_text_atomic(fs.join(config.output, EXPORT_SUCCESS_JSON), text)
    return json.loads(text)


def read_summary(output: str) -> dict[str, Any]:
    """The _SUCCESS.json of a finished export. Raises DatasetExportError if the export is not complete."""
    path = fs.join(output, EXPORT_SUCCESS_JSON)
    if not fs.exists(path):
        raise DatasetExportError(
            f"No {EXPORT_SUCCESS_JSON} in {output!r}: the export did not finish; run it again."
        )
    return bounded.read_json(path, what="export summary")
