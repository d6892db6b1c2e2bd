"""Compressed inputs: read like plain ones, one range each, and bad data named."""

from __future__ import annotations

import bz2
import gzip

import pytest

from lmshards.preprocess.sources import (
    InputError,
    ReadOptions,
    ReadRange,
    ReadStats,
    expand_inputs,
    is_compressed,
    iter_documents,
    plan_ranges,
    read_range,
)
from tests.helpers.text_corpus import expected_documents, random_corpus, tree_bytes, write


@pytest.mark.parametrize(
    "name, compressed",
    [
        ("a.txt.gz", True),
        ("A.JSONL.GZ", True),
        ("gs://b/a.bz2", True),
        ("a.txt", False),
        ("a.gzip", False),
        ("a.tgz", False),
    ],
)
def test_is_compressed(name, compressed):
    assert is_compressed(name) is compressed


def test_compressed_files_read_like_plain_ones(tmp_path):
    data = random_corpus(3, lines=200, crlf=False, bom=True)
    plain = write(tmp_path / "a.txt", data)
    gz = write(tmp_path / "b.txt.gz", gzip.compress(data))
    bz = write(tmp_path / "c.txt.bz2", bz2.compress(data))
    options = ReadOptions()
    files = expand_inputs([str(plain), str(gz), str(bz)])
    ranges = plan_ranges(files, options=options, range_bytes=64)
    assert [r for r in ranges if r.path != str(plain)] == [
        ReadRange(str(gz), 0, -1),
        ReadRange(str(bz), 0, -1),
    ]
    expected = expected_documents(data, "line")
    for path in (gz, bz):
        stats = ReadStats()
        assert list(iter_documents([str(path)], options, stats)) == expected
        assert stats.bytes_read == len(data)


def test_corrupt_compressed_files_are_named(tmp_path):
    fake = write(tmp_path / "fake.txt.gz", b"plain text\n")
    with pytest.raises(InputError, match="fake.txt.gz.*not gzip"):
        plan_ranges(expand_inputs([str(fake)]), options=ReadOptions())
    with pytest.raises(InputError, match="fake.txt.gz.*not gzip"):
        iter_documents([str(fake)], ReadOptions())  # at the call, before any document is asked for
    truncated = write(
        tmp_path / "cut.txt.gz",
        gzip.compress(random_corpus(1, lines=2000, crlf=False, bom=False))[:2000],
    )
    with pytest.raises(
        InputError, match="cut.txt.gz.*corrupt or truncated gzip.*re-create or remove it"
    ):
        list(iter_documents([str(truncated)], ReadOptions()))
    bad_bz2 = write(tmp_path / "bad.txt.bz2", b"BZh9" + b"\x00" * 100)
    with pytest.raises(InputError, match="bad.txt.bz2.*corrupt or truncated bzip2"):
        list(iter_documents([str(bad_bz2)], ReadOptions()))


@pytest.mark.parametrize("suffix, compress", [(".gz", gzip.compress), (".bz2", bz2.compress)])
def test_truncated_or_damaged_data_is_one_input_error_naming_the_file(tmp_path, suffix, compress):
    """Cut anywhere after the magic bytes, or with a byte flipped: an InputError, never EOFError/zlib.error/OSError."""
    data = random_corpus(5, lines=3000, crlf=False, bom=False)
    whole = compress(data)
    damaged = {
        f"cut{n}": whole[:n]
        for n in (4, 10, 11, 100, len(whole) // 2, len(whole) - 8, len(whole) - 1)
    }
    damaged.update(
        {
            f"flip{n}": whole[:n] + bytes([whole[n] ^ 0x55]) + whole[n + 1 :]
            for n in (len(whole) // 3, len(whole) - 6)
        }
    )
    for name, content in damaged.items():
        write(
            tmp_path / f"{name}.jsonl{suffix}"
            if name == "cut100"
            else tmp_path / f"{name}.txt{suffix}",
            content,
        )
    before = tree_bytes(tmp_path)
    options = ReadOptions()
    for path in sorted(tmp_path.iterdir()):
        # Damage in the first bytes is found while planning (their content is checked), later damage
        # while reading: either way one InputError.
        with pytest.raises(InputError) as e:
            ranges = plan_ranges(expand_inputs([str(path)]), options=options)
            assert ranges == [ReadRange(str(path), 0, -1)]
            list(read_range(ranges[0], options))
        assert str(e.value).startswith(
            f"{str(path)!r}: corrupt or truncated {'gzip' if suffix == '.gz' else 'bzip2'}"
        )
        assert str(e.value).endswith("re-create or remove it (or leave it out of --input).")
    assert tree_bytes(tmp_path) == before
