"""A GroupByKey for the Dask runner that moves the grouped data through files, not worker memory.

Dask's task shuffle (what Beam's DaskRunner plans for a GroupByKey) keeps every shuffled element in the
workers' memory until its group is consumed, so a worker's peak grows with the corpus: the packing and
shard shuffles carry every token of it. Here, as in MapReduce's and Spark's shuffle files, each input
partition (one bundle's output) is written at once to one file, its elements in one section per reduce
partition that gets any (by a hash of the key's deterministic encoding), and each reduce partition reads
its section of every file that has one and groups what it read. Between the two, only the sections'
offsets stay in memory; a
worker holds one partition's elements at a time. The directory must be one every worker can read
(a local disk for a local cluster; a shared or gs:// path otherwise), and it needs free space for what
the job shuffles (about the size of the tokens, twice, for a plain preprocess).

The groups are the same as the task shuffle's: the same keys with the same values; within a group the
values come in input-partition order (the task shuffle's order is not defined either).
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from lmshards.plumbing import fs

SHUFFLE_FILE_PREFIX = "shuffle-"
_PARTITION_HASH_BYTES = 8


@dataclasses.dataclass(frozen=True)
class ShuffleFile:
    """One input partition's elements: reduce partition j's are bytes [start, end) = sections[j].

    Only the partitions that get elements have a section: what the reduce side holds of a shuffle grows
    with the (input partition, reduce partition) pairs that carry data, not with their product (a
    combine's partial results all go to one partition; a range's documents to a few packing groups).
    """

    path: str
    sections: dict[int, tuple[int, int]]


def reduce_partition(encoded_key: bytes, partitions: int) -> int:
    """The reduce partition of a key, from its deterministic encoding: the same on every worker process
    (Python's own hash of a str differs between processes)."""
    digest = hashlib.blake2b(encoded_key, digest_size=_PARTITION_HASH_BYTES).digest()
    return int.from_bytes(digest, "little") % partitions


def write_sections(
    items: Iterable[tuple[Any, Any]],
    *,
    partitions: int,
    directory: str,
    encode_key: Callable[[Any], bytes],
) -> ShuffleFile | None:
    """Writes (key, value) items into one new file under `directory`, a pickled list per reduce
    partition that gets any; None (and no file) when there are no items."""
    by_partition: dict[int, list[tuple[Any, Any]]] = {}
    for item in items:
        by_partition.setdefault(reduce_partition(encode_key(item[0]), partitions), []).append(item)
    if not by_partition:
        return None
    path = fs.join(directory, f"{SHUFFLE_FILE_PREFIX}{uuid.uuid4().hex}")
    sections, end = {}, 0
    with fs.open_file(path, "wb") as f:
        for partition in sorted(by_partition):
            data = pickle.dumps(by_partition[partition], protocol=pickle.HIGHEST_PROTOCOL)
            f.write(data)
            sections[partition] = (end, end + len(data))
            end += len(data)
    return ShuffleFile(path=path, sections=sections)


def read_section(file: ShuffleFile, partition: int) -> list[tuple[Any, Any]]:
    """The items write_sections put in `file` for `partition`."""
    if partition not in file.sections:
        return []
    start, end = file.sections[partition]
    with fs.open_file(file.path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    return pickle.loads(data)


def read_groups(files: Sequence[ShuffleFile], partition: int) -> dict[Any, list[Any]]:
    """Every key of reduce partition `partition` -> its values, in the files' order."""
    groups: dict[Any, list[Any]] = {}
    for file in files:
        for key, value in read_section(file, partition):
            groups.setdefault(key, []).append(value)
    return groups
