"""Bad records are skipped and counted by reason, never fatal: in the reader, in the tokenizer, and in
the manifest and closing summary of a whole preprocess run on the default runner and on Beam's stages."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.preprocess.sources import ReadOptions, ReadStats, iter_documents
from lmshards.preprocess.sources.formats.jsonl import MAX_JSON_DEPTH, nested_deeper_than
from lmshards.preprocess.stages.encode import encode_accepted, encode_documents

# A word-level tokenizer whose unknown-token "[UNK]" is missing from its vocabulary: it raises on
# any word it does not know, as such a tokenizer does on real text.
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[MASK]"]
GOOD = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))]  # 8 words, 8 tokens each
# One line of each kind of bad record, and the reading counter that counts it.
BAD = {
    "documents_lone_surrogate": '{"text": "alpha \\ud800 beta"}',
    "documents_json_too_deep": "[" * 100_000 + "]" * 100_000,
    "documents_non_string_text": '{"text": ["alpha", "beta"]}',
    "documents_invalid_json": '{"text": "alpha beta',
    "documents_tokenizer_error": '{"text": "alpha unknownword beta"}',
}
# Runners: the default (one in-process step), Beam's own stages on an in-process runner, and the
# curation stage's path (its accounting: every document curation kept is written or counted).
RUNNERS = {
    "default": [],
    "beam_stages": ["--direct_running_mode=multi_threading"],
    "curated": ["--dedup", "exact"],
}


def _tokenizer_json() -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(SPECIALS + WORDS)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer.to_str()


def _corpus() -> bytes:
    """The good records with one bad record of each kind among them."""
    lines = [json.dumps({"text": text}) for text in GOOD]
    for i, line in enumerate(BAD.values()):
        lines.insert(2 * i + 1, line)
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    """(the JSON Lines corpus, the tokenizer.json)."""
    work = tmp_path_factory.mktemp("bad_records")
    (work / "corpus.jsonl").write_bytes(_corpus())
    (work / "tokenizer.json").write_text(_tokenizer_json(), encoding="utf-8")
    return work / "corpus.jsonl", work / "tokenizer.json"


def test_each_bad_json_line_is_skipped_and_counted_once(corpus):
    stats = ReadStats()
    texts = list(iter_documents([str(corpus[0])], ReadOptions(), stats))
    # The tokenizer's reject is a good JSON line: the reader hands it on.
    assert texts == GOOD[:5] + ["alpha unknownword beta"] + GOOD[5:]
    for counter in set(BAD) - {"documents_tokenizer_error"}:
        assert getattr(stats, counter) == 1, counter
    assert stats.documents == len(GOOD) + 1 and stats.documents_empty == 0


def test_nesting_is_measured_without_parsing():
    assert not nested_deeper_than("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, MAX_JSON_DEPTH)
    assert nested_deeper_than("[" * (MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH)
    # Brackets inside strings, escaped quotes included, are text.
    text = json.dumps({"text": '"[' * (2 * MAX_JSON_DEPTH)})
    assert not nested_deeper_than(text, MAX_JSON_DEPTH)
    # Many shallow arrays are not deep.
    assert not nested_deeper_than("[" + ",".join(["[1]"] * 2000) + "]", MAX_JSON_DEPTH)


def test_a_valid_surrogate_pair_is_text_and_a_lone_one_is_skipped(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"text": "ok \\ud83d\\ude42"}\n{"text": "lone \\udc00"}\n', encoding="utf-8")
    stats = ReadStats()
    assert list(iter_documents([str(path)], ReadOptions(), stats)) == ["ok \U0001f642"]
    assert stats.documents_lone_surrogate == 1


def test_the_tokenizer_rejects_only_the_documents_it_raises_on(corpus, caplog):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(_tokenizer_json())
    texts = [GOOD[0], "alpha unknownword", GOOD[1], "nope"]
    encoded = encode_accepted(tokenizer, texts)
    assert encoded.texts == [GOOD[0], GOOD[1]] and encoded.rejected == 2
    assert "Missing [UNK] token" in encoded.error
    chunk = encode_documents(tokenizer, texts)
    alone = encode_documents(tokenizer, [GOOD[0], GOOD[1]])
    assert chunk.rejected == 2 and alone.rejected == 0
    assert chunk.tokens.tolist() == alone.tokens.tolist()
    assert chunk.hashes.tolist() == alone.hashes.tolist()


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_a_run_skips_each_bad_record_and_counts_it_once(corpus, runner, tmp_path, capsys):
    path, tokenizer = corpus
    output = tmp_path / "out"
    argv = ["preprocess", "--input", str(path), "--tokenizer", str(tokenizer)]
    argv += ["--output", str(output), "--seq_len", "8", "--validation_fraction", "0"]
    argv += ["--documents_per_tokenizer_call", "1"]  # the rejected document is a batch alone
    assert lmshards_main(argv + RUNNERS[runner]) == 0

    manifest = json.loads((output / "manifest.json").read_text(encoding="utf-8"))
    reading = manifest["reading"]
    assert {name: reading[name] for name in BAD} == dict.fromkeys(BAD, 1)
    assert reading["documents"] == len(GOOD) + 1  # the reader handed on the tokenizer's reject
    train = manifest["splits"]["train"]["totals"]
    assert train["documents"] == len(GOOD)
    assert train["tokens_in"] == 8 * len(GOOD) and train["records"] == len(GOOD)
    summary = capsys.readouterr().out
    assert (
        "skipped: 1 invalid JSON, 1 text not a string, 1 JSON nested too deep, "
        "1 lone surrogate, 1 tokenizer error"
    ) in summary


def test_a_skipped_line_is_logged_with_its_file_and_offset(corpus, caplog):
    caplog.set_level(logging.WARNING)
    list(iter_documents([str(corpus[0])], ReadOptions()))
    first_bad = len(json.dumps({"text": GOOD[0]})) + 1
    assert (
        f"corpus.jsonl: line at byte {first_bad} skipped: field 'text' holds a lone surrogate \\ud800"
        in caplog.text
    )
