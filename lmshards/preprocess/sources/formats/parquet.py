"""Parquet (.parquet): the string or binary column ReadOptions.text_column, one document per row.

Ranges are runs of row groups. Binary values are decoded as UTF-8 with replacement; nulls count as
empty documents. pyarrow is imported only when a Parquet file is met.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import BinaryIO

from lmshards.plumbing import fs
from lmshards.preprocess.sources.core.compression import is_compressed
from lmshards.preprocess.sources.core.documents import (
    ReadStats,
    RecordNumbers,
    decode_utf8,
    text_document,
)
from lmshards.preprocess.sources.core.options import InputError, ReadOptions
from lmshards.preprocess.sources.core.ranges import TO_END, ReadRange, whole_file
from lmshards.preprocess.sources.formats.base import Format
from lmshards.schemas.manifest import InputFileInfo

PARQUET_BATCH_ROWS = 1024


def _plan_ranges(info: InputFileInfo, options: ReadOptions, range_bytes: int) -> list[ReadRange]:
    """Runs of row groups of about range_bytes (uncompressed) each; checks the text column.

    Raises:
      InputError: a compressed file, a file that is not Parquet, a missing or non-text column.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = info.path
    if is_compressed(path):
        raise InputError(
            f"{path!r}: compressed Parquet files are not supported (Parquet compresses its own "
            "pages); decompress it."
        )
    if not info.bytes:
        return whole_file(info, options, range_bytes)
    try:
        with fs.open_file(path, "rb") as f:
            parquet = pq.ParquetFile(f)
            schema, metadata = parquet.schema_arrow, parquet.metadata
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{path!r} is not a readable Parquet file: {e}") from e
    column = options.text_column
    index = schema.get_field_index(column)
    if index < 0:
        raise InputError(
            f"{path!r} has no column {column!r}; it has {schema.names}. Pass --text_column NAME."
        )
    kind = schema.field(index).type
    if not (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_string_view(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    ):
        raise InputError(
            f"{path!r}: column {column!r} holds {kind}, not text. Pass --text_column NAME."
        )
    ranges, first, group_bytes = [], 0, 0
    for i in range(metadata.num_row_groups - 1):
        group_bytes += metadata.row_group(i).total_byte_size
        if group_bytes >= range_bytes:
            ranges.append(ReadRange(path, first, i + 1))
            first, group_bytes = i + 1, 0
    ranges.append(ReadRange(path, first, TO_END))
    return ranges


def _read_range(
    f: BinaryIO,
    r: ReadRange,
    options: ReadOptions,
    stats: ReadStats,
    numbers: RecordNumbers | None = None,
) -> Iterator[str]:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if f.seek(0, io.SEEK_END) == 0:
        stats.files_empty += 1
        return
    f.seek(0)
    parquet = pq.ParquetFile(f)
    if r.start == 0 and parquet.metadata.num_rows == 0:
        stats.files_empty += 1
    groups = list(range(r.start, parquet.num_row_groups if r.end < 0 else r.end))
    if not groups:
        return
    for batch in parquet.iter_batches(
        batch_size=PARQUET_BATCH_ROWS, row_groups=groups, columns=[options.text_column]
    ):
        column = batch.column(0)
        stats.bytes_read += pc.sum(pc.binary_length(column)).as_py() or 0
        is_binary = pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)
        for value in column.to_pylist():
            text, invalid_utf8 = (
                decode_utf8(value) if is_binary and value is not None else (value or "", False)
            )
            documents = text_document(text, options, stats, invalid_utf8=invalid_utf8)
            if numbers is not None:
                numbers.add(len(documents))
            yield from documents


FORMAT = Format(
    name="parquet",
    extensions=(".parquet",),
    plan_ranges=_plan_ranges,
    read_range=_read_range,
    raw_records=True,
)
