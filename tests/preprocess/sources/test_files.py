"""Finding the input files: globs, directories, hidden names, errors naming the pattern, gs://."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from preprocess.sources import InputError, ReadOptions, ReadStats, expand_inputs, iter_documents
from tests.helpers.text_corpus import write


def test_expand_inputs_sorts_dedups_and_sizes(tmp_path):
    for name, data in [("b.txt", b"bb"), ("a.txt", b"a"), ("c.jsonl", b"{}\n")]:
        write(tmp_path / name, data)
    files = expand_inputs([str(tmp_path / "*.txt"), str(tmp_path / "a.txt"), str(tmp_path / "c.jsonl")])
    assert [(Path(f.path).name, f.bytes) for f in files] == [("a.txt", 1), ("b.txt", 2), ("c.jsonl", 3)]
    assert all(os.path.isabs(f.path) for f in files)


def test_expand_inputs_directory_is_its_files_without_hidden_ones(tmp_path):
    for rel in ["part-0.txt", "sub/part-1.txt", "_SUCCESS", ".part-0.txt.crc", "_tmp/x.txt", ".git/config"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        write(tmp_path / rel, b"x\n")
    files = expand_inputs([str(tmp_path)])
    assert [os.path.relpath(f.path, tmp_path) for f in files] == ["part-0.txt", os.path.join("sub", "part-1.txt")]


@pytest.mark.parametrize("pattern, words", [
    ("nothing-*.txt", ["nothing-*.txt", "matches no file", "quote"]),
    ("missing.txt", ["missing.txt", "does not exist"]),
    ("emptydir", ["emptydir", "holds no files"]),
    ("  ", ["empty"]),
])
def test_expand_inputs_errors_name_the_pattern(tmp_path, pattern, words):
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "emptydir" / "_SUCCESS").write_bytes(b"")
    target = pattern if pattern.isspace() else str(tmp_path / pattern)
    with pytest.raises(InputError) as e:
        expand_inputs([target])
    assert all(w in str(e.value) for w in words), str(e.value)


def test_expand_inputs_rejects_no_input_and_unreadable_file(tmp_path):
    with pytest.raises(InputError, match="No input"):
        expand_inputs([])
    os.symlink(tmp_path / "gone.txt", tmp_path / "dangling.txt")
    with pytest.raises(InputError, match="dangling.txt"):
        expand_inputs([str(tmp_path / "*.txt")])


@pytest.mark.gcs
def test_gcs_glob_and_gzip(gcs_emulator):
    from schemas import fs

    data = b"one\r\ntwo\n\nthree\n"
    fs.write_bytes_atomic(f"{gcs_emulator}/corpus/b.txt.gz", gzip.compress(data))
    fs.write_bytes_atomic(f"{gcs_emulator}/corpus/a.txt", b"zero\n")
    fs.write_bytes_atomic(f"{gcs_emulator}/corpus/c.bin", b"no")
    files = expand_inputs([f"{gcs_emulator}/corpus/*.t*"])
    assert [(f.path, f.bytes) for f in files] == [
        (f"{gcs_emulator}/corpus/a.txt", 5), (f"{gcs_emulator}/corpus/b.txt.gz", len(gzip.compress(data)))]
    stats = ReadStats()
    assert list(iter_documents([f"{gcs_emulator}/corpus/*.t*"], ReadOptions(), stats)) == ["zero", "one", "two", "three"]
    assert stats.bytes_read == 5 + len(data) and stats.documents_empty == 1
    assert [f.path for f in expand_inputs([f"{gcs_emulator}/corpus"])] == [
        f"{gcs_emulator}/corpus/a.txt", f"{gcs_emulator}/corpus/b.txt.gz", f"{gcs_emulator}/corpus/c.bin"]
    with pytest.raises(InputError, match="matches no file"):
        expand_inputs([f"{gcs_emulator}/corpus/*.parquet"])
    with pytest.raises(InputError, match="does not exist"):
        expand_inputs([f"{gcs_emulator}/corpus/missing.txt"])
