"""The Dask runner's file shuffle: the groups of a GroupByKey, read back from files, whatever the
partitioning, and the partition of a key the same in every process."""

from __future__ import annotations

import collections
import os
import pickle
import random
import subprocess
import sys

import numpy as np
import pytest
from apache_beam import coders

from lmshards.preprocess.dask_shuffle import (
    BLOB_BYTES,
    LAZY_KEYS_MAX,
    SHUFFLE_FILE_PREFIX,
    Blob,
    read_groups,
    read_section,
    reduce_partition,
    write_sections,
)

ENCODE = coders.registry.get_coder(object).as_deterministic_coder("test").encode


def _random_partitions(seed: int, inputs: int) -> list[list[tuple[object, object]]]:
    rng = random.Random(seed)
    keys = [("train", g) for g in range(7)] + [b"\x00digest", 12, ("validation", 0), None]
    return [
        [(rng.choice(keys), (i, j, np.arange(rng.randrange(4)))) for j in range(rng.randrange(30))]
        for i in range(inputs)
    ]


def _written_and_expected(inputs, partitions: int, directory: str):
    """The shuffle files of `inputs` (empty ones left out), and every key's values in input order."""
    written = [
        write_sections(items, partitions=partitions, directory=directory, encode_key=ENCODE)
        for items in inputs
    ]
    expected: dict[object, list] = collections.defaultdict(list)
    for items in inputs:
        for key, value in items:
            expected[key].append(value)
    return [file for file in written if file is not None], expected


@pytest.mark.parametrize("partitions", [1, 3, 16])
def test_the_groups_read_back_are_the_keys_with_all_their_values_in_input_order(
    tmp_path, partitions
):
    inputs = _random_partitions(seed=partitions, inputs=5)
    files, expected = _written_and_expected(inputs, partitions, str(tmp_path))

    got: dict[object, list] = {}
    for j in range(partitions):
        for key, values in read_groups(files, j).items():
            assert key not in got, f"key {key!r} in two reduce partitions"
            got[key] = values

    assert got.keys() == expected.keys()
    for key, values in expected.items():
        assert [(i, j) for i, j, _ in got[key]] == [(i, j) for i, j, _ in values]
        for mine, theirs in zip(got[key], values):
            np.testing.assert_array_equal(mine[2], theirs[2])
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(f.path) for f in files)
    assert all(name.startswith(SHUFFLE_FILE_PREFIX) for name in os.listdir(tmp_path))


def test_an_empty_input_partition_writes_no_file_and_only_used_sections_are_listed(tmp_path):
    assert write_sections([], partitions=4, directory=str(tmp_path), encode_key=ENCODE) is None
    assert list(tmp_path.iterdir()) == []
    file = write_sections(
        [(None, 1), (None, 2)], partitions=64, directory=str(tmp_path), encode_key=ENCODE
    )
    assert list(file.sections) == [reduce_partition(ENCODE(None), 64)]
    sections = [read_section(file, j) for j in range(64) if read_section(file, j)]
    assert [[(key, pickle.loads(values)) for key, values in s] for s in sections] == [
        [(None, [1, 2])]
    ]


def test_a_few_keys_large_values_are_read_only_as_they_are_iterated(tmp_path):
    big = [np.full(BLOB_BYTES // 8, i, dtype=np.int64) for i in range(3)]
    items = [("shard", big[0]), ("small", 1), ("shard", big[1]), ("shard", big[2]), ("small", 2)]
    first = write_sections(items, partitions=1, directory=str(tmp_path), encode_key=ENCODE)
    second = write_sections(
        [("shard", big[0]), ("small", 3)], partitions=1, directory=str(tmp_path), encode_key=ENCODE
    )
    entries = dict(read_section(first, 0))
    assert isinstance(entries["shard"], Blob) and entries["shard"].count == 3
    assert pickle.loads(entries["small"]) == [1, 2]  # small values stay in the section

    groups = read_groups([first, second], 0)
    assert list(groups["small"]) == [1, 2, 3] and len(groups["small"]) == 3
    shard = pickle.loads(pickle.dumps(groups["shard"]))  # a Dask result travels
    assert len(shard) == 4
    for _ in range(2):  # iterable again: the Blobs are read each time
        assert [int(v[0]) for v in shard] == [0, 1, 2, 0]

    os.remove(first.path)  # nothing of the Blob was held: iterating now needs the file
    with pytest.raises(FileNotFoundError):
        list(groups["shard"])


def test_a_section_of_many_keys_holds_its_values(tmp_path):
    items = [(k, np.zeros(BLOB_BYTES, np.uint8)) for k in range(LAZY_KEYS_MAX + 1)]
    file = write_sections(items, partitions=1, directory=str(tmp_path), encode_key=ENCODE)
    entries = read_section(file, 0)
    assert len(entries) == LAZY_KEYS_MAX + 1
    assert not any(isinstance(values, Blob) for _, values in entries)


def test_each_section_holds_only_its_own_partitions_keys(tmp_path):
    items = [(("train", g), g) for g in range(50)]
    file = write_sections(items, partitions=5, directory=str(tmp_path), encode_key=ENCODE)
    for j in range(5):
        section = read_section(file, j)
        assert section, "50 keys over 5 partitions leave none empty"
        assert all(reduce_partition(ENCODE(key), 5) == j for key, _ in section)


def test_a_keys_partition_is_the_same_in_a_process_with_another_string_hash_seed():
    keys = [("train", 3), "abc", b"bytes", 7, ("validation", "x", 2)]
    here = [reduce_partition(ENCODE(key), 97) for key in keys]
    code = (
        "from apache_beam import coders\n"
        "from lmshards.preprocess.dask_shuffle import reduce_partition\n"
        "encode = coders.registry.get_coder(object).as_deterministic_coder('t').encode\n"
        f"print([reduce_partition(encode(k), 97) for k in {keys!r}])\n"
    )
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == str(here)
    assert len(set(here)) > 1  # not a constant


def test_shuffle_files_on_gcs_group_the_same(gcs_emulator):
    from lmshards.plumbing import fs

    directory = f"{gcs_emulator}/shuffle"
    files, expected = _written_and_expected(_random_partitions(seed=7, inputs=3), 4, directory)
    got = {key: values for j in range(4) for key, values in read_groups(files, j).items()}
    assert {k: [v[:2] for v in vs] for k, vs in got.items()} == {
        k: [v[:2] for v in vs] for k, vs in expected.items()
    }
    assert all(f.path.startswith("gs://") and fs.exists(f.path) for f in files)
