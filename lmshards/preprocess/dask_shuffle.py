"""A GroupByKey for the Dask runner that moves the grouped data through files, not worker memory.

Dask's task shuffle (what Beam's DaskRunner plans for a GroupByKey) keeps every shuffled element in the
workers' memory until its group is consumed, so a worker's peak grows with the corpus: the packing and
shard shuffles carry every token of it. Here, as in MapReduce's and Spark's shuffle files, each input
partition (one bundle's output) is written at once to one file, its elements in one section per reduce
partition that gets any (by a hash of the key's deterministic encoding), and each reduce partition reads
its section of every file that has one and groups what it read. Between the two, only the sections'
offsets stay in memory; a worker holds one partition's elements at a time, except a key's large
values in a section of few keys (a Blob), read only as they are iterated. The directory must be one
every worker can read (a local disk for a local cluster; a shared or gs:// path otherwise), and it
needs free space for what the job shuffles (about the size of the tokens, twice, for a plain
preprocess).

The groups are the same as the task shuffle's: the same keys with the same values; within a group the
values come in input-partition order (the task shuffle's order is not defined either).
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, BinaryIO

from lmshards.plumbing import fs

SHUFFLE_FILE_PREFIX = "shuffle-"
_PARTITION_HASH_BYTES = 8
# A section of at most this many keys may write a key's values apart (a Blob), read as iterated.
LAZY_KEYS_MAX = 64
# A key's pickled values of at least this many bytes, in such a section, become a Blob.
BLOB_BYTES = 64 << 10


@dataclasses.dataclass(frozen=True)
class ShuffleFile:
    """One input partition's elements: reduce partition j's section is bytes [start, end) = sections[j].

    Only the partitions that get elements have a section: what the reduce side holds of a shuffle grows
    with the (input partition, reduce partition) pairs that carry data, not with their product (a
    combine's partial results all go to one partition; a range's documents to a few packing groups).
    """

    path: str
    sections: dict[int, tuple[int, int]]


@dataclasses.dataclass(frozen=True)
class Blob:
    """One key's values of one section, written apart: read each time they are iterated, never held by
    the reduce side."""

    path: str
    start: int
    end: int
    count: int

    def load(self) -> list[Any]:
        return pickle.loads(_read(self.path, self.start, self.end))


# A key, and its values: a list, their pickled bytes, or where they are (a Blob).
SectionEntry = tuple[Any, list[Any] | bytes | Blob]


class GroupValues:
    """A key's values, in the files' order: those read with their sections, and Blobs read as iterated.

    Iterable more than once (each pass reads the Blobs again) and picklable (a Blob is its place)."""

    def __init__(self) -> None:
        self._parts: list[list[Any] | Blob] = []

    def extend(self, values: list[Any]) -> None:
        if self._parts and isinstance(self._parts[-1], list):
            self._parts[-1].extend(values)
        else:
            self._parts.append(list(values))

    def add_blob(self, blob: Blob) -> None:
        self._parts.append(blob)

    def __iter__(self) -> Iterator[Any]:
        for part in self._parts:
            yield from (part.load() if isinstance(part, Blob) else part)

    def __len__(self) -> int:
        return sum(part.count if isinstance(part, Blob) else len(part) for part in self._parts)


def reduce_partition(encoded_key: bytes, partitions: int) -> int:
    """The reduce partition of a key, from its deterministic encoding: the same on every worker process
    (Python's own hash of a str differs between processes)."""
    digest = hashlib.blake2b(encoded_key, digest_size=_PARTITION_HASH_BYTES).digest()
    return int.from_bytes(digest, "little") % partitions


def _by_partition(
    items: Iterable[tuple[Any, Any]], partitions: int, encode_key: Callable[[Any], bytes]
) -> dict[int, dict[bytes, tuple[Any, list[Any]]]]:
    """Items -> reduce partition -> the key's encoding -> (key, its values in item order)."""
    by_partition: dict[int, dict[bytes, tuple[Any, list[Any]]]] = {}
    for key, value in items:
        encoded = encode_key(key)
        groups = by_partition.setdefault(reduce_partition(encoded, partitions), {})
        group = groups.get(encoded)
        if group is None:
            groups[encoded] = (key, [value])
        else:
            group[1].append(value)
    return by_partition


def _section_entries(
    groups: Iterable[tuple[Any, list[Any]]], f: BinaryIO, at: int, path: str
) -> tuple[list[SectionEntry], int]:
    """One section's keys as header entries: a key's values pickled inline (pickled once, not again with
    the header), or, at BLOB_BYTES and more, written to f first (from offset `at`) and entered as a Blob.
    Returns the entries and the new offset."""
    entries: list[SectionEntry] = []
    for key, values in groups:
        data = pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) < BLOB_BYTES:
            entries.append((key, data))
            continue
        f.write(data)
        entries.append((key, Blob(path=path, start=at, end=at + len(data), count=len(values))))
        at += len(data)
    return entries, at


def write_sections(
    items: Iterable[tuple[Any, Any]],
    *,
    partitions: int,
    directory: str,
    encode_key: Callable[[Any], bytes],
) -> ShuffleFile | None:
    """Writes (key, value) items into one new file under `directory`, a section per reduce partition
    that gets any; None (and no file) when there are no items.

    A section is a pickled list of (key, values) entries. In a section of at most LAZY_KEYS_MAX keys
    (a shard's or packing group's records: few keys, values that grow with the corpus) a key's values
    of BLOB_BYTES or more are written before it and entered as a Blob, so that the reduce side reads them
    only as it iterates them; a section of more keys (a document's hash, signature band: small values
    each) holds its values."""
    by_partition = _by_partition(items, partitions, encode_key)
    if not by_partition:
        return None
    path = fs.join(directory, f"{SHUFFLE_FILE_PREFIX}{uuid.uuid4().hex}")
    sections, at = {}, 0
    with fs.open_file(path, "wb") as f:
        for partition in sorted(by_partition):
            groups = by_partition[partition].values()
            if len(groups) <= LAZY_KEYS_MAX:
                entries, at = _section_entries(groups, f, at, path)
            else:
                entries = list(groups)
            data = pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL)
            f.write(data)
            sections[partition] = (at, at + len(data))
            at += len(data)
    return ShuffleFile(path=path, sections=sections)


def _read(path: str, start: int, end: int) -> bytes:
    with fs.open_file(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def read_section(file: ShuffleFile, partition: int) -> list[SectionEntry]:
    """The (key, values or Blob) entries write_sections put in `file` for `partition`."""
    if partition not in file.sections:
        return []
    return pickle.loads(_read(file.path, *file.sections[partition]))


def read_groups(files: Sequence[ShuffleFile], partition: int) -> dict[Any, GroupValues]:
    """Every key of reduce partition `partition` -> its values, in the files' order."""
    groups: dict[Any, GroupValues] = {}
    for file in files:
        for key, values in read_section(file, partition):
            group = groups.setdefault(key, GroupValues())
            if isinstance(values, Blob):
                group.add_blob(values)
            elif isinstance(values, bytes):
                group.extend(pickle.loads(values))
            else:
                group.extend(values)
    return groups
