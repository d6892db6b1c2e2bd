"""`lmshards preprocess --dedup/--decontaminate` end to end on a planted corpus: the exact audit,
the manifest's curation section, accounting against an uncurated run of the kept documents alone,
the same bytes on two worker processes and with other read ranges, and bad input refused."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.preprocess.stages.tokens import read_store_manifest
from lmshards.schemas.manifest import read_manifest

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
TOKENIZER = str(GOLDEN / "tokenizer.json")
# One packing group per split and fixed shard counts, so that the shards depend on the documents alone.
SHARD_FLAGS = [
    "--seq_len",
    "16",
    "--validation_fraction",
    "0.2",
    "--num_shards",
    "2",
    "--packing_group_tokens",
    "100000000",
    "--remainder",
    "pad",
]


def _doc(rng: random.Random, n: int = 60) -> list[str]:
    return [f"w{rng.randrange(100_000)}" for _ in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """Two inputs with planted copies and an eval set; the documents each run must keep."""
    rng = random.Random(7)
    d = [_doc(rng) for _ in range(5)]
    fillers = [" ".join(_doc(rng)) for _ in range(12)]
    base = tmp_path_factory.mktemp("planted")
    near_a = d[1][:30] + d[1][31:]  # one word of 60 left out: shorter, so d[1] is kept
    near_b = d[1][:45] + d[1][46:]
    # The audit names a document by its line: every line counts, empty and skipped ones too.
    a_lines = [
        " ".join(d[0]),  # a:0
        " ".join(d[1]),  # a:1
        " ".join(d[2]),  # a:2
        "",  # a:3 blank: read as no document, but its line counts
        "  " + "   ".join(d[0]) + " ",  # a:4 exact copy of a:0 (whitespace only)
        " ".join(near_a),  # a:5 near copy of a:1
        " ".join(d[3]),  # a:6 shares 20 words with the eval set
        *fillers[:8],  # a:7 .. a:14
    ]
    b_lines = [
        "not JSON",  # b:0 skipped (documents_invalid_json)
        "",  # b:1 empty
        json.dumps({"text": " ".join(d[2])}),  # b:2 exact copy of a:2
        json.dumps({"id": 3}),  # b:3 skipped (documents_missing_field)
        json.dumps({"text": " ".join(near_b)}),  # b:4 near copy of a:1
        *(json.dumps({"text": f}) for f in fillers[8:]),  # b:5 .. b:8
    ]
    a, b = base / "a.txt", base / "b.jsonl"
    a.write_text("\n".join(a_lines) + "\n", encoding="utf-8")
    b.write_text("\n".join(b_lines) + "\n", encoding="utf-8")
    eval_set = base / "eval.jsonl"
    eval_set.write_text(
        json.dumps({"question": " ".join(d[4])})  # eval:0
        + "\n\n"  # eval:1 empty
        + json.dumps({"question": "Q: " + " ".join(d[3][20:40]) + "?"})  # eval:2
        + "\n",
        encoding="utf-8",
    )
    kept_near = [a_lines[i] for i in (0, 1, 2)] + fillers
    return {"a": str(a), "b": str(b), "eval": str(eval_set), "kept_near": kept_near, "dir": base}


def _run(corpus, output: Path, *flags: str) -> int:
    return lmshards_main(
        [
            "preprocess",
            "--input",
            corpus["a"],
            "--input",
            corpus["b"],
            "--tokenizer",
            TOKENIZER,
            "--output",
            str(output),
            *SHARD_FLAGS,
            *flags,
        ]
    )


def _audit(output: Path) -> list[dict]:
    lines = [
        json.loads(line)
        for path in sorted((output / "curation").glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    return sorted(lines, key=lambda x: (x["source"], x["index"]))


def _files(output: Path) -> dict[str, bytes]:
    """Every file but the token store's (whose parts follow the bundles), the manifest less its time."""
    files = {
        p.relative_to(output).as_posix(): p.read_bytes()
        for p in sorted(output.rglob("*"))
        if p.is_file() and not p.relative_to(output).as_posix().startswith("tokens/")
    }
    manifest = json.loads(files.pop("manifest.json"))
    manifest.pop("created_at")
    files["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return files


CURATE = ["--dedup", "near", "--decontaminate", "", "--decontaminate_text_field", "question"]


def _curate(corpus) -> list[str]:
    return [corpus["eval"] if f == "" else f for f in CURATE]


@pytest.fixture(scope="module")
def near_run(corpus, tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("near") / "out"
    assert _run(corpus, output, *_curate(corpus), "--keep_tokens") == 0
    return output


def test_near_run_audits_each_planted_removal_exactly(corpus, near_run):
    a, b, ev = corpus["a"], corpus["b"], corpus["eval"]
    # Each index is the document's 0-based line in its file, empty and skipped lines counted.
    assert _audit(near_run) == [
        {"source": a, "index": 4, "reason": "exact", "bytes": len(_line(a, 4)),
         "kept": {"source": a, "index": 0}},
        {"source": a, "index": 5, "reason": "near", "bytes": len(_line(a, 5)),
         "kept": {"source": a, "index": 1}, "similarity": 0.86},
        {"source": a, "index": 6, "reason": "contaminated", "bytes": len(_line(a, 6)),
         "eval": {"source": ev, "index": 2}},
        {"source": b, "index": 2, "reason": "exact", "bytes": len(_line(a, 2)),
         "kept": {"source": a, "index": 2}},
        {"source": b, "index": 4, "reason": "near",
         "bytes": len(json.loads(_line(b, 4))["text"]),
         "kept": {"source": a, "index": 1}, "similarity": 0.85},
    ]  # fmt: skip
    # Each near copy lost one word of 60: 51 of the kept document's 60 5-grams shared (Jaccard 0.85).
    assert _line(ev, 2).startswith('{"question": "Q: ')


def _line(path: str, number: int) -> str:
    return Path(path).read_text(encoding="utf-8").split("\n")[number]


def test_the_manifest_counts_the_funnel_and_inspect_verify_checks_the_audit(
    corpus, near_run, capsys
):
    manifest = read_manifest(str(near_run))
    curation = manifest.curation
    assert curation is not None
    assert curation.dedup == "near" and curation.documents_in == 20
    assert {r: v["documents"] for r, v in curation.removed.items()} == {
        "exact": 2,
        "near": 2,
        "contaminated": 1,
    }
    assert curation.clusters == 3  # a:0, a:1 and a:2 each kept for their copies
    assert curation.eval_files == ({"path": corpus["eval"], "documents": 2, "removed": 1},)
    assert curation.options == {
        "minhash_ngram": 5,
        "minhash_bands": 14,
        "minhash_rows": 8,
        "minhash_min_words": 0,
        "decontaminate_ngram": 13,
    }
    written = sum(s.totals.documents for s in manifest.splits.values())
    assert curation.documents_in == written + curation.documents_removed == 15 + 5
    assert lmshards_main(["inspect", str(near_run), "--verify"]) == 0
    out, err = capsys.readouterr()
    assert "near: 2 documents" in out and "duplicate clusters: 3" in out
    assert "shards and the curation audit match the manifest" in err


def test_inspect_verify_finds_an_audit_that_disagrees(near_run, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(near_run, copy)
    (audit,) = [p for p in (copy / "curation").glob("*.jsonl") if "contaminated" in p.read_text()]
    lines = audit.read_text(encoding="utf-8").splitlines()  # a:4 exact, a:5 near, a:6 contaminated
    audit.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    assert lmshards_main(["inspect", str(copy), "--verify"]) == 1
    err = capsys.readouterr().err
    assert "2 audit lines, the manifest says 3" in err
    assert "the audit holds 0 contaminated removals (0 bytes)" in err
    assert "names eval file" in err


def test_the_token_store_holds_only_the_kept_documents(near_run):
    store = read_store_manifest(str(near_run / "tokens"))
    assert store.documents == 15


def test_curated_shards_equal_an_uncurated_run_of_the_kept_documents(corpus, near_run, tmp_path):
    kept = tmp_path / "kept.txt"
    kept.write_text("\n".join(corpus["kept_near"]) + "\n", encoding="utf-8")
    plain = tmp_path / "plain"
    assert (
        lmshards_main(
            ["preprocess", "--input", str(kept), "--tokenizer", TOKENIZER, "--output", str(plain)]
            + SHARD_FLAGS
        )
        == 0
    )
    curated, uncurated = read_manifest(str(near_run)), read_manifest(str(plain))
    for split in ("train", "validation"):
        assert curated.split(split).totals == uncurated.split(split).totals
        for ours, theirs in zip(curated.split(split).shards, uncurated.split(split).shards):
            assert ours.sha256 == theirs.sha256  # the same records, byte for byte


def test_exact_removes_only_exact_copies(corpus, tmp_path):
    output = tmp_path / "exact"
    assert _run(corpus, output, "--dedup", "exact") == 0
    a = corpus["a"]
    assert [(x["source"], x["index"], x["reason"], x["kept"]["index"]) for x in _audit(output)] == [
        (a, 4, "exact", 0),
        (corpus["b"], 2, "exact", 2),
    ]
    assert read_manifest(str(output)).curation.options == {}


# Two short distinct texts whose signatures share a band key (found by trying words in the last
# place: they share one 5-gram of three, Jaccard 1/3), and a short text with an exact copy.
SHORT_PAIR = ("field of the signal mask real", "field of the signal mask debug")
SHORT_COPY = "sigignore: ignored signals"


@pytest.mark.slow
def test_a_floor_keeps_short_distinct_texts_and_still_removes_short_exact_copies(tmp_path):
    from lmshards.preprocess.curation.minhash import band_keys, hash_family, signature
    from lmshards.preprocess.curation.text import shingles

    offsets = hash_family(14 * 8)
    keys = [
        set(band_keys(signature(shingles(t, 5), offsets), bands=14, rows=8)) for t in SHORT_PAIR
    ]
    assert keys[0] & keys[1]  # a candidate pair for near dedup
    rng = random.Random(11)
    lines = [" ".join(_doc(rng)) for _ in range(12)]  # 0..11: long fillers
    lines += [*SHORT_PAIR, SHORT_COPY, "  sigignore:  ignored signals"]  # 12, 13, 14, 15
    source = tmp_path / "short.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def audit(min_words: str) -> list[tuple[int, str, int]]:
        output = tmp_path / f"floor{min_words}"
        argv = ["preprocess", "--input", str(source), "--tokenizer", TOKENIZER]
        argv += ["--output", str(output), *SHARD_FLAGS, "--dedup", "near"]
        assert lmshards_main([*argv, "--minhash_min_words", min_words]) == 0
        options = read_manifest(str(output)).curation.options
        assert options["minhash_min_words"] == int(min_words)
        return [(x["index"], x["reason"], x["kept"]["index"]) for x in _audit(output)]

    # Without a floor the two distinct texts are one cluster (the one of the larger digest goes).
    removed = audit("0")
    assert removed[1] == (15, "exact", 14)
    assert removed[0][1:2] == ("near",) and {removed[0][0], removed[0][2]} == {12, 13}
    # Under 10 words they take no part in near dedup; the exact copy still goes.
    assert audit("10") == [(15, "exact", 14)]


def test_dedup_none_writes_no_curation(corpus, tmp_path):
    output = tmp_path / "none"
    assert _run(corpus, output, "--dedup", "none") == 0
    assert not (output / "curation").exists()
    assert "curation" not in json.loads((output / "manifest.json").read_text())


@pytest.mark.slow
def test_the_same_bytes_with_two_worker_processes_and_other_read_ranges(corpus, near_run, tmp_path):
    output = tmp_path / "mp"
    flags = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    assert (
        _run(corpus, output, *_curate(corpus), "--keep_tokens", "--range_mb", "0.0005", *flags) == 0
    )
    assert _files(output) == _files(near_run)
    assert read_store_manifest(str(output / "tokens")).documents == 15


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--minhash_bands", "0"],
            "argument --minhash_bands: '0' is not a whole number in [1, 10000]",
        ),
        (
            ["--minhash_rows", "-2"],
            "argument --minhash_rows: '-2' is not a whole number in [1, 10000]",
        ),
        (["--decontaminate", "MISSING"], "--decontaminate"),
        (["--decontaminate", "EMPTY"], "Every input file is empty"),
        (["--decontaminate", "EVAL", "--decontaminate_ngram", "61"], "longer than every document"),
    ],
)
def test_bad_curation_input_is_one_line_and_exit_2(corpus, tmp_path, capsys, flags, message):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    names = {"MISSING": str(tmp_path / "nope.txt"), "EMPTY": str(empty), "EVAL": corpus["eval"]}
    flags = [names.get(f, f) for f in flags]
    try:
        code = _run(corpus, tmp_path / "out", *flags, "--decontaminate_text_field", "question")
    except SystemExit as exited:  # a value out of its flag's range is argparse's error
        code = exited.code
    assert code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if " INFO " not in line]
    assert len(err) == 1 and err[0].startswith("lmshards preprocess: error: ") and message in err[0]
    assert not (tmp_path / "out").exists()


def test_repack_refuses_dedup(near_run, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        lmshards_main(
            [
                "repack",
                "--tokens",
                str(near_run),
                "--output",
                str(tmp_path / "r"),
                "--dedup",
                "near",
            ]
        )
    assert exit_.value.code == 2
    assert "--dedup is not a repack flag" in capsys.readouterr().err


def test_decontaminate_alone_removes_only_the_contaminated_document(corpus, tmp_path):
    output = tmp_path / "decontaminated"
    flags = ["--decontaminate", corpus["eval"], "--decontaminate_text_field", "question"]
    assert _run(corpus, output, *flags) == 0
    assert [(x["index"], x["reason"], x["eval"]["index"]) for x in _audit(output)] == [
        (6, "contaminated", 2)
    ]
    curation = read_manifest(str(output)).curation
    assert curation.dedup == "none" and curation.clusters == 0
    assert curation.options == {"decontaminate_ngram": 13}
