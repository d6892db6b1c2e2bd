"""Finding the input files: globs, directories, hidden names, lmshards outputs never read, errors naming
the pattern, empty inputs, gs://."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from lmshards.preprocess.sources import (
    InputDiscovery,
    InputError,
    ReadOptions,
    ReadStats,
    check_not_empty,
    discover_inputs,
    expand_inputs,
    iter_documents,
    no_documents_message,
)
from lmshards.schemas.manifest import InputFileInfo
from lmshards.schemas.shards import shard_relpath
from tests.helpers.text_corpus import tree_bytes, write

SHARD_BYTES = b"\x0c\x00\x00\x00\x00\x00\x00\x00\xa1\xb2\xc3\xd4\n\x0bline\x00\xff"  # a TFRecord frame, roughly


def earlier_output(root: Path, *, complete: bool) -> list[str]:
    """The files of an lmshards preprocess output at root (complete: with its manifest; else mid-run)."""
    files = {
        shard_relpath("train", 0, 2, 12): SHARD_BYTES,
        shard_relpath("train", 1, 2, 12): SHARD_BYTES,
        shard_relpath("validation", 0, 1, 3): SHARD_BYTES,
        "schema.pbtxt": b"feature {\n  name: 'input_ids'\n}\n",
        "tokenizer/tokenizer.json": b'{"model": {"vocab": {"a": 0}}}\n',
    }
    files.update(
        {"manifest.json": b'{"format": "lmshards.manifest"}\n'}
        if complete
        else {
            ".lmshards-tmp/shards/part-0": b"partial\n",
            ".lmshards-tmp/beam/a/b/c.txt": b"beam temp\n",
        }
    )
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        write(root / rel, data)
    return sorted(files)


def test_expand_inputs_sorts_dedups_and_sizes(tmp_path):
    for name, data in [("b.txt", b"bb"), ("a.txt", b"a"), ("c.jsonl", b"{}\n")]:
        write(tmp_path / name, data)
    files = expand_inputs(
        [str(tmp_path / "*.txt"), str(tmp_path / "a.txt"), str(tmp_path / "c.jsonl")]
    )
    assert [(Path(f.path).name, f.bytes) for f in files] == [
        ("a.txt", 1),
        ("b.txt", 2),
        ("c.jsonl", 3),
    ]
    assert all(os.path.isabs(f.path) for f in files)


def test_expand_inputs_directory_is_its_files_without_hidden_ones(tmp_path):
    for rel in [
        "part-0.txt",
        "sub/part-1.txt",
        "_SUCCESS",
        ".part-0.txt.crc",
        "_tmp/x.txt",
        ".git/config",
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        write(tmp_path / rel, b"x\n")
    files = expand_inputs([str(tmp_path)])
    assert [os.path.relpath(f.path, tmp_path) for f in files] == [
        "part-0.txt",
        os.path.join("sub", "part-1.txt"),
    ]


@pytest.mark.parametrize(
    "pattern, words",
    [
        ("nothing-*.txt", ["nothing-*.txt", "matches no file", "quote"]),
        ("missing.txt", ["missing.txt", "does not exist"]),
        ("emptydir", ["emptydir", "holds no files"]),
        ("  ", ["empty"]),
    ],
)
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


def test_directory_input_skips_earlier_outputs_and_reads_only_the_text(tmp_path, caplog):
    corpus = tmp_path / "corpus"
    write((corpus / "sub").mkdir(parents=True) or corpus / "a.txt", b"one\ntwo\n")
    write(corpus / "sub" / "b.txt", b"three\n")
    done = earlier_output(corpus / "out", complete=True)
    killed = earlier_output(corpus / "sub" / "out2", complete=False)
    before = tree_bytes(tmp_path)
    with caplog.at_level("WARNING", logger="lmshards.preprocess.sources.files"):
        discovery = discover_inputs([str(corpus)])
    # Hidden names (.lmshards-tmp/...) are never inputs; everything else in an output is skipped.
    skipped = len([f for f in done if not f.startswith(".")]) + len(
        [f for f in killed if not f.startswith(".")]
    )
    assert discovery == InputDiscovery(
        files=(
            InputFileInfo(str(corpus / "a.txt"), 8),
            InputFileInfo(str(corpus / "sub" / "b.txt"), 6),
        ),
        skipped=(str(corpus / "out"), str(corpus / "sub" / "out2")),
        skipped_files=skipped,
        found=2 + skipped,
        hidden=1,  # out2/.lmshards-tmp/, counted once
    )
    (warning,) = [r.getMessage() for r in caplog.records]
    assert (
        f"Skipped {skipped} files under lmshards outputs" in warning
        and str(corpus / "sub" / "out2") in warning
    )
    stats = ReadStats()
    assert list(iter_documents([str(corpus)], ReadOptions(), stats)) == ["one", "two", "three"]
    assert stats == ReadStats(documents=3, bytes_read=14, files_skipped_lmshards_output=skipped)
    assert ReadStats(**discovery.counts()) == ReadStats(
        files_skipped_lmshards_output=skipped, files_found=2 + skipped, entries_skipped_hidden=1
    )
    # Globs reach into outputs and, like directories, skip hidden names below their wildcards.
    for glob, files, outputs in [
        ("*/*", ["sub/b.txt"], ["out", "sub/out2"]),
        ("**", ["a.txt", "sub/b.txt"], ["out", "sub/out2"]),
        ("sub/**", ["sub/b.txt"], ["sub/out2"]),
    ]:
        found = discover_inputs([str(corpus / glob)])
        assert [Path(f.path).relative_to(corpus).as_posix() for f in found.files] == files, glob
        assert found.skipped == tuple(str(corpus / o) for o in outputs), glob
    everything = discover_inputs([str(corpus / "**")])
    assert (everything.skipped_files, everything.hidden) == (skipped, 1)
    assert tree_bytes(tmp_path) == before


@pytest.mark.parametrize(
    "rel",
    [
        "out/manifest.json",
        "out/schema.pbtxt",
        "out/" + shard_relpath("train", 1, 2, 12),
        "out/tokenizer/tokenizer.json",
        "killed/" + shard_relpath("validation", 0, 1, 3),
        "killed/.lmshards-tmp/beam/a/b/c.txt",
    ],
)
def test_a_file_named_inside_an_output_is_refused(tmp_path, rel):
    earlier_output(tmp_path / "out", complete=True)
    earlier_output(tmp_path / "killed", complete=False)
    write(tmp_path / "a.txt", b"text\n")
    before = tree_bytes(tmp_path)
    with pytest.raises(InputError) as e:
        discover_inputs([str(tmp_path / "a.txt"), str(tmp_path / rel)])
    output = tmp_path / rel.split("/")[0]
    assert (
        f"--input {str(tmp_path / rel)!r} lies inside the lmshards output {str(output)!r}"
        in str(e.value)
    )
    assert "manifest.json or .lmshards-tmp" in str(e.value) and "Pass the corpus" in str(e.value)
    assert tree_bytes(tmp_path) == before


@pytest.mark.parametrize("pattern", ["out", "out/train", "out/*", "killed/*/*"])
def test_an_input_holding_only_output_files_is_refused(tmp_path, pattern):
    earlier_output(tmp_path / "out", complete=True)
    earlier_output(tmp_path / "killed", complete=False)
    before = tree_bytes(tmp_path)
    with pytest.raises(InputError, match="every file it names lies inside an lmshards output") as e:
        discover_inputs([str(tmp_path / pattern)])
    assert repr(str(tmp_path / pattern)) in str(e.value) and "Pass the corpus" in str(e.value)
    assert tree_bytes(tmp_path) == before


def test_all_empty_inputs_are_refused_at_planning(tmp_path):
    for i in range(10):
        write(tmp_path / f"{i:02d}.txt", b"")
    before = tree_bytes(tmp_path)
    files = expand_inputs([str(tmp_path)])
    with pytest.raises(InputError) as e:
        check_not_empty(files)
    message = str(e.value)
    assert message.startswith(
        f"Every input file is empty (0 bytes): {str(tmp_path / '00.txt')!r}, "
    )
    assert (
        f"{str(tmp_path / '02.txt')!r} and 7 more (10 files)" in message and "03.txt" not in message
    )
    write(tmp_path / "z.txt", b"\n")
    check_not_empty(
        expand_inputs([str(tmp_path)])
    )  # one byte is enough here; reading decides the rest
    assert tree_bytes(tmp_path) == dict(before, **{"z.txt": b"\n"})


def test_no_documents_message_names_the_inputs_and_the_reasons(tmp_path):
    write(tmp_path / "blank.txt", b" \n\t\r\n\n")
    write(tmp_path / "a.jsonl", b'{"body": "x"}\n{"text": 1}\n[]\n')
    write(tmp_path / "empty.txt", b"")
    patterns = [
        str(tmp_path / "blank.txt"),
        str(tmp_path / "a.jsonl"),
        str(tmp_path / "empty.txt"),
        str(tmp_path),
    ]
    stats = ReadStats()
    assert list(iter_documents(patterns, ReadOptions(), stats)) == []
    message = no_documents_message(patterns, stats)
    assert message == (
        f"--input {patterns[0]!r}, {patterns[1]!r}, {patterns[2]!r} and 1 more gave no documents (35 bytes read; "
        "empty files: 1; empty or whitespace-only documents: 3; lines that are not JSON objects: 1; "
        "JSON objects without the text field: 1; JSON text fields that are not strings: 1). "
        "Check --input, --doc_separator, and --text_field (JSON Lines) or --text_column (Parquet)."
    )


@pytest.mark.gcs
def test_gcs_outputs_are_skipped_or_refused(gcs_emulator):
    from lmshards.plumbing import fs

    root = f"{gcs_emulator}/outputs"
    fs.write_bytes_atomic(f"{root}/corpus/a.txt", b"one\n")
    for rel in [
        f"{root}/corpus/out/manifest.json",
        f"{root}/corpus/out/" + shard_relpath("train", 0, 1, 3),
        f"{root}/corpus/killed/.lmshards-tmp/x",
        f"{root}/corpus/killed/" + shard_relpath("train", 0, 1, 3),
    ]:
        fs.write_bytes_atomic(rel, SHARD_BYTES)
    discovery = discover_inputs([f"{root}/corpus"])
    assert discovery == InputDiscovery(
        files=(InputFileInfo(f"{root}/corpus/a.txt", 4),),
        skipped=(f"{root}/corpus/killed", f"{root}/corpus/out"),
        skipped_files=3,
        found=4,
        hidden=1,
    )
    everything = discover_inputs([f"{root}/corpus/**"])  # a glob skips hidden names too
    assert (everything.skipped_files, everything.hidden) == (3, 1)
    stats = ReadStats()
    assert list(iter_documents([f"{root}/corpus"], ReadOptions(), stats)) == ["one"]
    assert stats.files_skipped_lmshards_output == 3
    for named in (
        f"{root}/corpus/out/manifest.json",
        f"{root}/corpus/killed/" + shard_relpath("train", 0, 1, 3),
    ):
        with pytest.raises(InputError, match="lies inside the lmshards output"):
            discover_inputs([named])
    with pytest.raises(InputError, match="every file it names lies inside an lmshards output"):
        discover_inputs([f"{root}/corpus/out"])
    assert fs.read_bytes(f"{root}/corpus/out/manifest.json") == SHARD_BYTES
    assert fs.read_bytes(f"{root}/corpus/a.txt") == b"one\n"


@pytest.mark.gcs
def test_gcs_glob_and_gzip(gcs_emulator):
    from lmshards.plumbing import fs

    data = b"one\r\ntwo\n\nthree\n"
    fs.write_bytes_atomic(f"{gcs_emulator}/corpus/b.txt.gz", gzip.compress(data))
    fs.write_bytes_atomic(f"{gcs_emulator}/corpus/a.txt", b"zero\n")
    fs.write_bytes_atomic(f"{gcs_emulator}/corpus/c.bin", b"no")
    files = expand_inputs([f"{gcs_emulator}/corpus/*.t*"])
    assert [(f.path, f.bytes) for f in files] == [
        (f"{gcs_emulator}/corpus/a.txt", 5),
        (f"{gcs_emulator}/corpus/b.txt.gz", len(gzip.compress(data))),
    ]
    stats = ReadStats()
    assert list(iter_documents([f"{gcs_emulator}/corpus/*.t*"], ReadOptions(), stats)) == [
        "zero",
        "one",
        "two",
        "three",
    ]
    assert stats.bytes_read == 5 + len(data) and stats.documents_empty == 1
    assert [f.path for f in expand_inputs([f"{gcs_emulator}/corpus"])] == [
        f"{gcs_emulator}/corpus/a.txt",
        f"{gcs_emulator}/corpus/b.txt.gz",
        f"{gcs_emulator}/corpus/c.bin",
    ]
    with pytest.raises(InputError, match="matches no file"):
        expand_inputs([f"{gcs_emulator}/corpus/*.parquet"])
    with pytest.raises(InputError, match="does not exist"):
        expand_inputs([f"{gcs_emulator}/corpus/missing.txt"])
