"""Shard file names: `{split}-{index:05d}-of-{count:05d}-{records}.tfrecord` under `{output}/{split}/`.

The record count in the name lets readers size an epoch without reading, and the name still
matches the `-\\d+-(\\d+)\\.tfrecord` pattern Hugging Face's TPU run_mlm.py counts samples with.
"""

from __future__ import annotations

import re

SHARD_SUFFIX = ".tfrecord"
_SHARD_RE = re.compile(
    r"^(?P<split>[A-Za-z0-9_]+)-(?P<index>\d{5})-of-(?P<count>\d{5})-(?P<records>\d+)\.tfrecord$"
)


def shard_name(split: str, index: int, count: int, records: int) -> str:
    """The file name (no directory) of shard `index` of `count` holding `records` records."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} outside 0..{count - 1}")
    return f"{split}-{index:05d}-of-{count:05d}-{records}{SHARD_SUFFIX}"


def shard_relpath(split: str, index: int, count: int, records: int) -> str:
    """Path of a shard relative to the output directory: `{split}/{name}`."""
    return f"{split}/{shard_name(split, index, count, records)}"


def parse_shard_name(name: str) -> tuple[str, int, int, int]:
    """Inverse of shard_name: (split, index, count, records). Raises ValueError if not a shard name."""
    match = _SHARD_RE.match(name.rsplit("/", 1)[-1])
    if not match:
        raise ValueError(f"not a shard file name: {name!r}")
    return match["split"], int(match["index"]), int(match["count"]), int(match["records"])
