"""Curation on the default runner (curation/local.py): its numpy pieces against the reference
functions, and whole runs against the staged pipeline on two worker processes, byte for byte."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.preprocess.curation import local
from lmshards.preprocess.curation.decontaminate import contamination, document_ngrams
from lmshards.preprocess.curation.minhash import band_keys, hash_family, signature
from lmshards.preprocess.curation.records import CurationDoc, node_key
from lmshards.preprocess.curation.text import digest, exact_form, shingles
from lmshards.preprocess.sources import ReadOptions, ReadStats
from lmshards.preprocess.stages.read import ReadProgress, plan_sized_ranges
from lmshards.schemas.layouts import TEMP_DIR_NAME

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "golden"
TOKENIZER = str(GOLDEN / "tokenizer.json")
VOCAB = ["alpha", "Beta", "gamma", "délta", "x1", "ÆØ", "zeta", "eta", "theta", "iota"]
SHARD_FLAGS = ["--seq_len", "16", "--validation_fraction", "0.2", "--num_shards", "2"]
STAGED = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def _texts(rng: random.Random, count: int) -> list[str]:
    """Texts of 0 to 11 words (some under a 5-gram, some with none), odd spacing and punctuation."""
    return [
        " ".join(rng.choice(VOCAB) for _ in range(rng.randrange(0, 12)))
        + rng.choice(["", " !", "\t?"])
        for _ in range(count)
    ] + ["", "!!!", "one", "one two"]


def _digest_hi(texts: list[str]) -> np.ndarray:
    joined = b"".join(digest(exact_form(t)) for t in texts)
    return np.frombuffer(joined, ">u8").reshape(-1, 2)[:, 0].astype(np.uint64)


def test_block_signatures_are_minhash_signatures_of_text_shingles():
    texts = _texts(random.Random(1), 200)
    offsets = hash_family(3 * 4)
    hashes, counts = local.word_hashes_of(texts)
    values, owner = local.text_shingles(hashes, counts, _digest_hi(texts), 5)
    signatures = local.minhash_signatures(values, owner, len(texts), offsets)
    for text, sig in zip(texts, signatures):
        assert np.array_equal(sig, signature(shingles(text, 5), offsets)), text


def test_block_ngrams_are_the_decontamination_ngrams():
    texts = _texts(random.Random(2), 100)
    hashes, counts = local.word_hashes_of(texts)
    values, owner = local.window_hashes(hashes, counts, 3, short=False, bits=64)
    for i, text in enumerate(texts):
        assert sorted(set(values[owner == i].tolist())) == document_ngrams(text, 3).tolist()


def test_band_keys_agree_exactly_where_the_reference_band_keys_do():
    texts = _texts(random.Random(3), 150)
    offsets = hash_family(4 * 2)
    signatures = np.stack([signature(shingles(t, 2), offsets) for t in texts])
    ours = local.band_hashes(signatures, bands=4, rows=2)
    theirs = [band_keys(s, bands=4, rows=2) for s in signatures]
    pairs = [(i, j) for i in range(len(texts)) for j in range(i)]
    for band in range(4):
        assert {(i, j) for i, j in pairs if ours[i, band] == ours[j, band]} == {
            (i, j) for i, j in pairs if theirs[i][band] == theirs[j][band]
        }
    assert len(set(ours[0].tolist())) == 4  # equal values in two bands still give two keys


def test_components_label_each_connected_set_of_nodes_once():
    u = np.array([5, 9, 2, 40, 41, 7], dtype=np.int64)
    v = np.array([9, 2, 30, 41, 42, 7], dtype=np.int64)  # 5-9-2-30, 40-41-42, 7 alone with itself
    nodes, labels = local.components(u, v)
    assert nodes.tolist() == [2, 5, 7, 9, 30, 40, 41, 42]
    groups = {}
    for node, label in zip(nodes.tolist(), labels.tolist()):
        groups.setdefault(label, set()).add(node)
    assert sorted(map(sorted, groups.values())) == [[2, 5, 9, 30], [7], [40, 41, 42]]


def test_a_long_chain_is_one_component():
    chain = np.arange(5000, dtype=np.int64)
    nodes, labels = local.components(chain[1:], chain[:-1])
    assert len(nodes) == 5000 and len(set(labels.tolist())) == 1


def _rows(docs: list[CurationDoc], ranks: dict[str, int]) -> np.ndarray:
    block = local.Block(
        texts=[d.text for d in docs],
        source=np.array([ranks[d.source] for d in docs], dtype=np.int32),
        index=np.array([d.index for d in docs], dtype=np.int64),
        record=np.array([d.record for d in docs], dtype=np.int64),
    )
    return local.node_keys(block, np.arange(len(docs)), local.utf8_sizes(block.texts))


def test_clusters_keep_the_smallest_node_key():
    docs = [
        CurationDoc("b", 0, "the  same", 0),
        CurationDoc("a", 3, "the same", 5),
        CurationDoc("a", 1, " the same ", 1),
        CurationDoc("a", 2, "other", 2),
        CurationDoc("b", 1, "a longer text", 1),
    ]
    ranks = {"a": 0, "b": 1}
    rows = _rows(docs, ranks)
    removed, kept = local.exact_clusters(rows)
    assert [(r["source"], r["index"]) for r in removed] == [(0, 3), (1, 0)]
    assert {(k["source"], k["index"]) for k in kept} == {
        (0, 1)
    }  # a:1, the smallest (source, index)
    labels = np.array([7, 7, 7, 9, 7])  # one component of four, one alone
    gone, stays = local.near_clusters(rows, labels)
    smallest = min(node_key(d) for i, d in enumerate(docs) if labels[i] == 7)
    assert {docs[i].ref for i in stays} == {(smallest.source, smallest.doc_index)} == {("b", 1)}
    assert sorted(docs[i].ref for i in gone) == [("a", 1), ("a", 3), ("b", 0)]


def test_contamination_names_the_smallest_eval_record_of_a_shared_ngram():
    eval_docs = [
        local.NumberedTexts("e2", np.array([0]), ["alpha beta gamma delta"], [4]),
        local.NumberedTexts("e1", np.array([0, 1]), ["beta gamma delta", "zeta eta"], [7, 9]),
    ]
    index = local.eval_index(eval_docs, ["e2", "e1"], 2)
    texts = ["x gamma delta y", "zeta eta", "nothing here", "alpha beta"]
    hashes, counts = local.word_hashes_of(texts)
    values, owner = local.window_hashes(hashes, counts, 2, short=False, bits=64)
    found = local.contamination(values, owner, len(texts), index)
    refs = [None if f == local._NO_REF else local.unpacked_ref(int(f)) for f in found]
    names = [None if r is None else (index.paths[r[0]], r[1]) for r in refs]
    reference = {}
    for batch in eval_docs:
        for text, record in zip(batch.texts, batch.records):
            for value in document_ngrams(text, 2).tolist():
                reference[value] = min(
                    reference.get(value, (batch.source, record)), (batch.source, record)
                )
    expected = [contamination(CurationDoc("t", i, t, i), reference, 2) for i, t in enumerate(texts)]
    assert names == expected == [("e1", 7), ("e1", 9), None, ("e2", 4)]
    assert index.documents == {"e2": 1, "e1": 2}


def test_documents_are_numbered_as_the_staged_reader_numbers_them(tmp_path):
    path = tmp_path / "docs.txt"
    lines = [f"document {i}" if i % 3 else "" for i in range(40)]  # every third line empty
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    options = ReadOptions()
    _, ranges = plan_sized_ranges([str(path)], options, range_bytes=64)
    assert len(ranges) > 3
    read = list(
        local.numbered_texts(
            ranges, options, batch_size=4, stats=ReadStats(), progress=ReadProgress(1, 1e9)
        )
    )
    indices = [i for batch in read for i in batch.indices.tolist()]
    records = [r for batch in read for r in batch.records]
    texts = [t for batch in read for t in batch.texts]
    assert indices == list(range(26))
    assert records == [i for i in range(40) if i % 3]  # the line each came from
    assert texts == [lines[r] for r in records]


def test_spill_partitions_give_back_each_partitions_rows(tmp_path):
    spill = local.SpillPartitions(str(tmp_path), "keys", 3, local.BAND_DTYPE)
    rows = np.zeros(10, dtype=local.BAND_DTYPE)
    rows["node"] = np.arange(10)
    spill.add(np.arange(10) % 3, rows)
    spill.add(np.array([1]), rows[:1])
    spill.flush()
    assert [spill.read(p)["node"].tolist() for p in range(3)] == [
        [0, 3, 6, 9],
        [1, 4, 7, 0],
        [2, 5, 8],
    ]
    assert list(tmp_path.iterdir()) == []  # each read removes its file


# ---------------------------------------------------------------- whole runs against the staged path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, str]:
    """Two inputs with exact, near and short copies, and an eval set sharing 13-grams with some."""
    rng = random.Random(5)
    words = [f"w{i}" for i in range(3000)]
    base = [[rng.choice(words) for _ in range(rng.randrange(20, 60))] for _ in range(60)]
    lines = []
    for doc in base:
        lines.append(" ".join(doc))
        roll = rng.random()
        if roll < 0.3:  # a near copy: one word changed
            copy = list(doc)
            copy[rng.randrange(len(copy))] = rng.choice(words)
            lines.append(" ".join(copy))
        elif roll < 0.5:  # an exact copy, spaced differently
            lines.append("  " + "   ".join(doc))
    lines += ["short line here", "short  line here", "", "tiny"]
    # Exact copies once --pii email has replaced the addresses (and only then).
    lines += [f"Write to {name}@example.com: " + " ".join(base[5]) for name in ("ann", "bob")]
    rng.shuffle(lines)
    directory = tmp_path_factory.mktemp("local_corpus")
    a, b = directory / "a.txt", directory / "b.jsonl"
    a.write_text("\n".join(lines[: len(lines) // 2]) + "\n", encoding="utf-8")
    b.write_text(
        "\n".join(json.dumps({"text": t}) for t in lines[len(lines) // 2 :]) + "\n",
        encoding="utf-8",
    )
    eval_set = directory / "eval.txt"
    eval_set.write_text(
        "\n".join(" ".join(base[i][:15]) for i in (3, 17, 40)) + "\n", encoding="utf-8"
    )
    return {"a": str(a), "b": str(b), "eval": str(eval_set)}


def _files(output: Path) -> dict[str, str]:
    """Every file's SHA-256 (the manifest less its time): shards, audit, tokenizer, schema."""
    files = {}
    for p in sorted(output.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            if p.name == "manifest.json":
                manifest = json.loads(data)
                manifest.pop("created_at")
                data = json.dumps(manifest, sort_keys=True).encode()
            files[p.relative_to(output).as_posix()] = hashlib.sha256(data).hexdigest()
    return files


def _run(corpus: dict[str, str], output: Path, flags: list[str]) -> dict[str, str]:
    argv = ["preprocess", "--input", corpus["a"], "--input", corpus["b"], "--tokenizer", TOKENIZER]
    assert lmshards_main([*argv, "--output", str(output), *SHARD_FLAGS, *flags]) == 0
    return _files(output)


# Gopher's rules for this corpus's short documents: some kept, some removed.
GOPHER_SHORT = ["--gopher_min_words", "8", "--gopher_min_stop_words", "0"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags",
    [
        ["--dedup", "near", "--minhash_min_words", "4", "--decontaminate", "EVAL"],
        ["--dedup", "exact", "--pii", "email", "--range_mb", "0.001"],
        # Pass 2 runs only the steps that change text (PII) on what pass 1 kept.
        ["--dedup", "exact", "--languages", "all", "--quality_filters", "gopher_quality"]
        + [*GOPHER_SHORT, "--pii", "email"],
    ],
    ids=["near_min_words_decontaminate", "pii_exact", "filters_pii_exact"],
)
def test_the_default_runner_curates_as_the_staged_pipeline(corpus, tmp_path, flags):
    flags = [corpus["eval"] if f == "EVAL" else f for f in flags]
    ours = _run(corpus, tmp_path / "default", flags)
    staged = _run(corpus, tmp_path / "staged", [*flags, *STAGED])
    assert ours == staged  # shards, audit files and manifest, byte for byte
    manifest = json.loads((tmp_path / "default" / "manifest.json").read_text(encoding="utf-8"))
    removed = {reason: r["documents"] for reason, r in manifest["curation"]["removed"].items()}
    # 9 planted exact copies and a short one; 8 of the 13 one-word changes caught (a changed word
    # breaks 5 of a short text's 5-grams) and the two addressed copies; the 3 eval lines hit 3
    # documents and an exact copy. With --pii email the two addressed copies are exact ones.
    if "--quality_filters" not in flags:
        expected = (
            {"exact": 10, "near": 10, "contaminated": 4} if "near" in flags else {"exact": 11}
        )
        assert {reason: n for reason, n in removed.items() if n} == expected
    assert not list((tmp_path / "default" / TEMP_DIR_NAME).glob("*"))  # the spill files are gone


def test_the_second_read_runs_again_only_the_steps_that_change_text(corpus, tmp_path, monkeypatch):
    """Pass 1 judges with every step; pass 2 knows what they kept and runs only PII on it."""
    from lmshards.preprocess.curation import local

    calls: list[tuple[str, ...]] = []
    judge = local.judge_documents

    def recording(steps, docs):
        calls.append(tuple(step.name for step in steps))
        return judge(steps, docs)

    monkeypatch.setattr(local, "judge_documents", recording)
    gopher = ["--quality_filters", "gopher_quality", *GOPHER_SHORT]
    _run(corpus, tmp_path / "out", ["--dedup", "exact", *gopher, "--pii", "email"])
    assert set(calls) == {("gopher_quality", "pii"), ("pii",)}
    calls.clear()
    _run(corpus, tmp_path / "filters", ["--dedup", "exact", *gopher])
    assert set(calls) == {("gopher_quality",)}  # pass 2 judges nothing
