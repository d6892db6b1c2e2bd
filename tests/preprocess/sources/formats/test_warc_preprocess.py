"""`lmshards preprocess` of a Common Crawl style .warc.gz: the documents it tokenizes, what it counts, and
the URLs its curation audit names."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.preprocess.sources import ReadOptions, iter_documents
from tests.helpers.web import html_response, page, warc_record, write_warc

TOKENIZER = str(Path(__file__).resolve().parents[3] / "data" / "golden" / "tokenizer.json")

TEXTS = [
    "Alpha\n\nThe alpha page holds one paragraph of main content, long enough to be kept.",
    "Beta\n\nThe beta page says something else entirely, and also at some length.",
]


def test_preprocess_of_a_warc_gz_tokenizes_its_pages_main_text(tmp_path, sample_tokenizer, capsys):
    from tokenizers import Tokenizer

    records = [
        warc_record("warcinfo", b"software: test\r\n"),
        warc_record("request", b"GET / HTTP/1.1\r\n\r\n", url="http://a.example/"),
        html_response("http://a.example/", page(*TEXTS[0].split("\n\n"))),
        html_response("http://big.example/", page("Big", "word " * 2000)),
        html_response("http://b.example/", page(*TEXTS[1].split("\n\n"))),
    ]
    path = write_warc(tmp_path / "CC-MAIN-0001.warc.gz", records)
    # The last record cut short, as a download that stopped: counted, the records before it kept.
    path.write_bytes(path.read_bytes() + gzip.compress(records[2], mtime=0)[:-20])
    options = ["--max_html_bytes", "4096"]
    assert list(iter_documents([str(path)], ReadOptions(max_html_bytes=4096))) == TEXTS

    out = tmp_path / "out"
    argv = [
        "preprocess",
        "--input",
        str(path),
        "--tokenizer",
        str(sample_tokenizer),
        "--output",
        str(out),
    ]
    assert lmshards_main([*argv, "--seq_len", "8", "--validation_fraction", "0", *options]) == 0
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    reading = manifest["reading"]
    assert reading["documents"] == 2
    assert (reading["warc_records_other"], reading["documents_html_too_large"]) == (2, 1)
    assert reading["warc_files_truncated"] == 1
    assert "warc_records_malformed" not in reading  # web counters are written only when found
    # Every whole record, and what of the cut one could be decompressed.
    whole = len(b"".join(records))
    assert whole <= reading["bytes_read"] < whole + len(records[2])
    tokenizer = Tokenizer.from_file(str(sample_tokenizer))
    tokens = sum(len(encoding.ids) for encoding in tokenizer.encode_batch(TEXTS))
    assert manifest["splits"]["train"]["totals"]["tokens_in"] == tokens
    assert manifest["options"]["max_html_bytes"] == 4096
    capsys.readouterr()


ENGLISH = "The committee met on Tuesday to discuss the new budget for the public library."
GERMAN = "Der Ausschuss hat am Dienstag über den neuen Haushalt der Stadtbibliothek beraten."
TWO_WORKERS = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]


def _audit_lines(output: Path) -> list[str]:
    return [
        line
        for path in sorted((output / "curation").glob("removed-*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


@pytest.mark.slow  # the staged run starts two worker processes
def test_the_audit_names_a_removed_pages_url_on_every_path(tmp_path):
    records = [
        warc_record("warcinfo", b"software: test\r\n"),
        html_response("http://a.example/", page("Library", ENGLISH)),
        html_response("http://de.example/", page("Bibliothek", GERMAN)),
        html_response("http://copy.example/", page("Library", ENGLISH)),
    ]
    warc = write_warc(tmp_path / "CC-MAIN-0002.warc.gz", records)
    text = tmp_path / "plain.txt"  # a format without URLs: its audit lines have no "url"
    text.write_text(GERMAN + "\n", encoding="utf-8")
    argv = ["preprocess", "--input", str(warc), "--input", str(text), "--tokenizer", TOKENIZER]
    argv += ["--seq_len", "8", "--validation_fraction", "0", "--languages", "en"]

    audits = {}
    for name, flags in [
        ("default", ["--dedup", "exact"]),  # local.py: both passes
        ("staged", ["--dedup", "exact", *TWO_WORKERS]),  # the Beam stage
        ("steps", []),  # documents.py: the document steps alone
    ]:
        assert lmshards_main([*argv, "--output", str(tmp_path / name), *flags]) == 0
        audits[name] = _audit_lines(tmp_path / name)
    assert audits["default"] == audits["staged"]
    removals = {(r["source"], r["index"]): r for r in map(json.loads, audits["default"])}
    assert {ref: (r.get("step"), r.get("url")) for ref, r in removals.items()} == {
        (str(text), 0): ("language", None),  # no "url" key: the plain-text line keeps its bytes
        (str(warc), 2): ("language", "http://de.example/"),  # the warcinfo record is record 0
        (str(warc), 3): (None, "http://copy.example/"),
    }
    assert "url" not in removals[str(text), 0]
    assert removals[str(warc), 3]["kept"] == {"source": str(warc), "index": 1}
    steps = [line for line in audits["default"] if '"step"' in line]
    assert sorted(audits["steps"]) == sorted(steps)
