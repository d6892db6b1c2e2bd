"""Read ranges: the pieces of a file read as units (one Dataflow work item each), and the shared
ways of planning them that formats choose from."""

from __future__ import annotations

import dataclasses

from lmshards.preprocess.sources.core.compression import is_compressed
from lmshards.preprocess.sources.core.options import ReadOptions
from lmshards.schemas.manifest import InputFileInfo

DEFAULT_RANGE_BYTES = 64 * 1024 * 1024
TO_END = -1  # ReadRange.end of a range that goes on to the end of its file


@dataclasses.dataclass(frozen=True)
class ReadRange:
    """A piece of one file read as a unit: bytes [start, end) of text and JSON Lines, row groups
    [start, end) of Parquet. end=-1 means to the end of the file."""

    path: str
    start: int
    end: int


def whole_file(info: InputFileInfo, options: ReadOptions, range_bytes: int) -> list[ReadRange]:
    """One range for the whole file: the plan of a format that cannot be split."""
    return [ReadRange(info.path, 0, TO_END)]


def byte_ranges(info: InputFileInfo, options: ReadOptions, range_bytes: int) -> list[ReadRange]:
    """Ranges of range_bytes bytes (the last one to the end); a compressed file, or one decoded from
    an encoding other than UTF-8 (options.encoding), is one range."""
    path, size = info.path, info.bytes
    if is_compressed(path) or not options.is_utf8 or size <= range_bytes:
        return whole_file(info, options, range_bytes)
    starts = range(0, size, range_bytes)
    return [
        ReadRange(path, s, s + range_bytes if s + range_bytes < size else TO_END) for s in starts
    ]
