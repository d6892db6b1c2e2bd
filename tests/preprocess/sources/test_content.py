"""Binary input files are told by their first bytes and refused naming what they are (never with advice
to pass an encoding), or, with `preprocess --skip_binary`, left out and counted."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import tarfile
import zlib

import pytest
import zstandard

from lmshards.command.cli import main as lmshards_main
from lmshards.preprocess.sources import (
    BinaryFileError,
    InputError,
    ReadOptions,
    expand_inputs,
    iter_documents,
    plan_ranges,
    skip_binary_files,
)

TEXT = b"The quick brown fox jumps over the lazy dog.\n" * 200
# Bytes that look like nothing in particular: what follows a binary format's header.
NOISE = bytes(range(256)) * 64


def _tar() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("a.txt")
        info.size = len(TEXT)
        tar.addfile(info, io.BytesIO(TEXT))
    return out.getvalue()


SPHINX_HEADER = (
    b"# Sphinx inventory version 2\n# Project: lmshards\n# Version: 1.0\n"
    b"# The remainder of this file is compressed using zlib.\n"
)
# (file name, its bytes, what the refusal says the file is)
BINARY = [
    (
        "corpus.txt",
        gzip.compress(TEXT),
        "holds gzip-compressed data, but its name does not end in .gz",
    ),
    ("corpus", bz2.compress(TEXT), "holds bzip2-compressed data"),
    ("corpus.jsonl", lzma.compress(TEXT), "holds xz-compressed data"),
    ("corpus.txt", zstandard.ZstdCompressor().compress(TEXT), "holds zstd-compressed data"),
    ("objects.inv", SPHINX_HEADER + zlib.compress(TEXT), "is a Sphinx inventory (objects.inv)"),
    ("data.bin", zlib.compress(NOISE), "is a zlib-compressed stream (Sphinx objects.inv?)"),
    ("logo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + NOISE, "is a PNG image"),
    ("photo.jpg", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + NOISE, "is a JPEG image"),
    ("anim.gif", b"GIF89a" + NOISE, "is a GIF image"),
    ("pic.webp", b"RIFF\x00\x10\x00\x00WEBPVP8 " + NOISE, "is a WebP image"),
    ("scan.tif", b"II*\x00" + NOISE, "is a TIFF image"),
    ("paper.pdf", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n" + NOISE, "is a PDF document"),
    ("corpus.zip", b"PK\x03\x04" + NOISE, "is a zip archive"),
    ("corpus.tar", _tar(), "is a tar archive"),
    ("corpus.tar.gz", gzip.compress(_tar()), "is a tar archive"),
    ("corpus.7z", b"7z\xbc\xaf\x27\x1c" + NOISE, "is a 7z archive"),
    ("corpus.rar", b"Rar!\x1a\x07\x01\x00" + NOISE, "is a RAR archive"),
    ("tool", b"\x7fELF\x02\x01\x01" + NOISE, "is an ELF executable"),
    ("index.db", b"SQLite format 3\x00" + NOISE, "is an SQLite database"),
]


@pytest.mark.parametrize("name, data, said", BINARY, ids=[b[2] for b in BINARY])
def test_a_binary_file_is_refused_naming_what_it_is(tmp_path, name, data, said):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(BinaryFileError) as e:
        plan_ranges(expand_inputs([str(path)]), options=ReadOptions())
    message = str(e.value)
    assert message.startswith(f"{str(path)!r} ") and said in message, message
    assert "--encoding" not in message and "\n" not in message
    # The same file is left out by skip_binary_files, and refused whatever --encoding says.
    assert skip_binary_files(expand_inputs([str(path)]), ReadOptions()) == ([], 1)
    with pytest.raises(BinaryFileError):
        iter_documents([str(path)], ReadOptions(encoding="latin-1"))


@pytest.mark.parametrize(
    "text",
    [
        b"x^2 + y^2 = z^2 is the text of this line.\n" * 50,  # starts with a valid zlib header
        b"x\xda is not a zlib stream either\n",
        b"%PD is not a PDF\n",
        b"RIFF files that are not WebP are not refused by name\n",
    ],
)
def test_text_that_starts_like_a_binary_header_is_read(tmp_path, text):
    path = tmp_path / "a.txt"
    path.write_bytes(text)
    docs = list(iter_documents([str(path)], ReadOptions(encoding="latin-1")))
    assert docs == text.decode("latin-1").splitlines()


def test_skip_binary_files_keeps_text_and_refuses_what_is_bad_for_another_reason(tmp_path, caplog):
    (tmp_path / "a.txt").write_bytes(TEXT)
    (tmp_path / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + NOISE)
    (tmp_path / "empty.txt").write_bytes(b"")
    files = expand_inputs([str(tmp_path)])
    kept, skipped = skip_binary_files(files, ReadOptions())
    assert [f.path for f in kept] == [str(tmp_path / "a.txt"), str(tmp_path / "empty.txt")]
    assert skipped == 1
    (tmp_path / "zipped.txt").write_bytes(gzip.compress(TEXT))
    assert skip_binary_files(expand_inputs([str(tmp_path)]), ReadOptions())[1] == 2
    assert (
        f"skipped {str(tmp_path / 'zipped.txt')!r}, gzip-compressed data, its name not ending in .gz"
        in caplog.text
    )
    (tmp_path / "table.csv").write_bytes(b"id,text\n1,hello\n")
    with pytest.raises(InputError, match="is CSV"):
        skip_binary_files(expand_inputs([str(tmp_path)]), ReadOptions())


def test_preprocess_skip_binary_counts_the_files_it_leaves_out(tmp_path, sample_tokenizer, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_bytes(TEXT)
    (corpus / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + NOISE)
    (corpus / "objects.inv").write_bytes(SPHINX_HEADER + zlib.compress(TEXT))
    argv = ["preprocess", "--input", str(corpus), "--tokenizer", str(sample_tokenizer)]
    argv += ["--output", str(tmp_path / "out"), "--seq_len", "8", "--validation_fraction", "0"]

    assert lmshards_main(argv) == 2
    err = capsys.readouterr().err
    assert "is a PNG image, not text" in err and "--encoding" not in err
    assert not (tmp_path / "out").exists()

    assert lmshards_main([*argv, "--skip_binary"]) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["reading"]["files_skipped_binary"] == 2
    assert manifest["reading"]["documents"] == 200
    assert [info["path"] for info in manifest["inputs"]] == [str(corpus / "a.txt")]
    assert manifest["options"]["skip_binary"] is True
    out = capsys.readouterr()
    assert "skipped: 2 binary files" in out.out
    assert f"--skip_binary: skipped {str(corpus / 'logo.png')!r}, a PNG image" in out.err
    assert f"skipped {str(corpus / 'objects.inv')!r}, a Sphinx inventory (objects.inv)" in out.err
