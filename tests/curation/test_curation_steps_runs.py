"""The curation steps end to end: `lmshards preprocess` with document steps writes the same shard bytes,
audit and manifest on the default runner's single pass and on two worker processes (the staged
pipeline), alone and before dedup; the funnel adds up and `inspect --verify` checks it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.schemas.manifest import funnel_problems, read_manifest

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
TOKENIZER = str(GOLDEN / "tokenizer.json")
# One packing group per split and fixed shard counts, so that the shards depend on the documents alone.
SHARD_FLAGS = [
    "--seq_len=16",
    "--validation_fraction=0.2",
    "--num_shards=2",
    "--packing_group_tokens=100000000",
    "--remainder=pad",
]
ENGLISH = [
    "The committee met on Tuesday to discuss the new budget for the public library.",
    "She walked along the river and watched the boats drift slowly towards the sea.",
    "Our results show that the method works well on small and large data sets alike.",
    "Please read the instructions carefully before you begin to assemble the shelf.",
]
GERMAN = [
    "Der Ausschuss hat am Dienstag über den neuen Haushalt der Stadtbibliothek beraten.",
    "Sie ging am Fluss entlang und sah den Booten zu, die langsam zum Meer trieben.",
]
STEPS = ["--languages=en"]
TWO_WORKERS = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("languages")
    a = base / "a.txt"
    # a:0 en, a:1 de, a:2 blank (its line counts), a:3 en, a:4 en (an exact copy of a:0), a:5 de, a:6 en
    lines = [ENGLISH[0], GERMAN[0], "", ENGLISH[1], ENGLISH[0], GERMAN[1], ENGLISH[2]]
    a.write_text("\n".join(lines) + "\n", encoding="utf-8")
    b = base / "b.jsonl"
    b.write_text(
        json.dumps({"text": ENGLISH[3]}) + "\n" + json.dumps({"text": GERMAN[0]}) + "\n",
        encoding="utf-8",
    )
    return {"inputs": [str(a), str(b)], "a": str(a), "b": str(b)}


def _run(corpus, output: Path, *flags: str) -> int:
    inputs = [f"--input={path}" for path in corpus["inputs"]]
    args = ["preprocess", *inputs, f"--tokenizer={TOKENIZER}", f"--output={output}"]
    return lmshards_main([*args, *SHARD_FLAGS, *flags])


def _files(output: Path) -> dict[str, bytes]:
    """Every file of the output, the manifest less its time."""
    files = {
        p.relative_to(output).as_posix(): p.read_bytes()
        for p in sorted(output.rglob("*"))
        if p.is_file()
    }
    manifest = json.loads(files.pop("manifest.json"))
    manifest.pop("created_at")
    files["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return files


def _audit(output: Path) -> list[dict]:
    lines = [
        json.loads(line)
        for path in sorted((output / "curation").glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    return sorted(lines, key=lambda x: (x["source"], x["index"]))


@pytest.fixture(scope="module")
def language_run(corpus, tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("runs") / "language"
    assert _run(corpus, output, *STEPS) == 0
    return output


def test_each_removal_names_its_step_and_the_funnel_adds_up(corpus, language_run, capsys):
    audit = _audit(language_run)
    assert [(Path(r["source"]).name, r["index"], r["step"], r["reason"]) for r in audit] == [
        ("a.txt", 1, "language", "language"),
        ("a.txt", 5, "language", "language"),
        ("b.jsonl", 1, "language", "language"),
    ]
    assert all(r["detail"].startswith("language de ") for r in audit)
    curation = read_manifest(str(language_run)).curation
    assert curation is not None and curation.dedup == "none" and curation.version == 2
    (row,) = curation.steps
    assert (row["name"], row["documents_in"], row["documents_out"]) == ("language", 8, 5)
    assert row["counts"] == {"de": 3, "en": 5} and row["options"]["languages"] == "en"
    assert row["bytes_in"] - row["bytes_out"] == sum(r["bytes"] for r in audit)
    assert lmshards_main(["inspect", str(language_run), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "      language: 8 -> 5 documents" in out and "counted: de 3, en 5" in out


@pytest.mark.slow
def test_document_steps_run_before_dedup_the_same_on_both_paths(corpus, tmp_path):
    assert _run(corpus, tmp_path / "one", *STEPS, "--dedup=exact") == 0
    assert _run(corpus, tmp_path / "two", *STEPS, "--dedup=exact", *TWO_WORKERS) == 0
    assert _files(tmp_path / "one") == _files(tmp_path / "two")
    curation = read_manifest(str(tmp_path / "one")).curation
    assert [row["name"] for row in curation.steps] == ["language", "dedup"]
    assert curation.steps[1]["documents_in"] == 5 and curation.steps[1]["documents_out"] == 4
    assert curation.removed["exact"]["documents"] == 1  # a:4, a copy of a:0


def test_dedup_alone_keeps_the_curation_section_of_version_1(corpus, tmp_path):
    assert _run(corpus, tmp_path / "exact", "--dedup=exact") == 0
    curation = json.loads((tmp_path / "exact" / "manifest.json").read_text())["curation"]
    assert curation["version"] == 1 and "steps" not in curation


PARAGRAPHS = [
    "The city council met on Tuesday evening to discuss the new budget for the public library. Members "
    "of the council agreed that the library needs more money for books and staff. The mayor said that "
    "the town has to be careful with its spending this year. Several residents spoke in favour of the "
    "plan and asked the council to act quickly. The final vote will take place next month, after a "
    "second public hearing.",
    "She walked along the river in the early morning and watched the boats drift slowly towards the "
    "sea. The air was cold, and a thin mist lay over the water. A few fishermen were already at work on "
    "the far bank. She stopped for a while to talk with one of them about the weather and the fish. He "
    "told her that the catch had been poor all week.",
    "Our results show that the method works well on both small and large data sets, and that it is easy "
    "to use in practice. We tested it on five public benchmarks and compared it with three strong "
    "baselines. In every case the new method was at least as accurate, and in most cases it was faster. "
    "Contact the authors at jane.doe@example.org for the code and the data. We hope that other groups "
    "will build on this work.",
    "Please read the instructions carefully before you begin to assemble the shelf in your living room. "
    "You will need a screwdriver, a hammer and about an hour of free time. First, lay out all of the "
    "parts on the floor and check that nothing is missing. Then attach the side panels to the base with "
    "the long screws. If you have any questions, you can call our help line at any time of the day.",
]
ALL_STEPS = [
    "--languages=en",
    "--quality_filters=fineweb_quality,c4_quality,gopher_repetition,gopher_quality",  # any order
    "--pii=email,ip",
]


@pytest.fixture(scope="module")
def web(tmp_path_factory) -> dict:
    """Documents each step removes or changes, beside ones every step keeps."""
    base = tmp_path_factory.mktemp("web")
    lines = [
        PARAGRAPHS[0],  # 0 kept
        GERMAN[0],  # 1 language
        "spam " * 60,  # 2 gopher_quality: no stop words
        PARAGRAPHS[1] + " " + PARAGRAPHS[1],  # 3 gopher_repetition: every n-gram repeated
        PARAGRAPHS[3].replace("living room.", "living room. Lorem ipsum dolor sit amet."),  # 4 c4
        "",  # 5 blank: its line counts
        PARAGRAPHS[2],  # 6 kept, its email replaced
        PARAGRAPHS[3],  # 7 kept
    ]
    path = base / "web.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"inputs": [str(path)]}


@pytest.mark.slow
def test_every_step_in_order_the_same_in_process_and_on_two_workers(web, tmp_path, capsys):
    assert _run(web, tmp_path / "one", *ALL_STEPS) == 0
    assert _run(web, tmp_path / "two", *ALL_STEPS, *TWO_WORKERS) == 0
    assert _files(tmp_path / "one") == _files(tmp_path / "two")
    curation = read_manifest(str(tmp_path / "one")).curation
    names = [
        "language",
        "gopher_quality",
        "gopher_repetition",
        "c4_quality",
        "fineweb_quality",
        "pii",
    ]
    assert [row["name"] for row in curation.steps] == names
    assert funnel_problems(curation, written=3) == []
    audit = _audit(tmp_path / "one")
    assert [(r["index"], r["step"]) for r in audit] == [
        (1, "language"),
        (2, "gopher_quality"),
        (3, "gopher_repetition"),
        (4, "c4_quality"),
    ]
    assert audit[3]["reason"] == "lorem_ipsum"
    pii = curation.steps[-1]
    assert pii["counts"] == {"email": 1, "ip": 0} and pii["documents_out"] == 3
    assert lmshards_main(["inspect", str(tmp_path / "one"), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "c4_quality: 4 -> 3 documents" in out
    assert (
        "  curation: 7 read -> language 6 -> gopher_quality 5 -> gopher_repetition 4 -> c4_quality 3 "
        "-> fineweb_quality 3 -> pii 3 (documents; `lmshards inspect` for more)\n"
    ) in out


@pytest.mark.slow
def test_the_bad_words_step_the_same_on_both_paths_recording_its_list(corpus, tmp_path):
    words = tmp_path / "words.txt"
    words.write_bytes(b"River\nwet blanket\n")
    flags = (f"--c4_badwords_file={words}",)
    assert _run(corpus, tmp_path / "one", *flags) == 0
    assert _run(corpus, tmp_path / "two", *flags, *TWO_WORKERS) == 0
    assert _files(tmp_path / "one") == _files(tmp_path / "two")
    curation = read_manifest(str(tmp_path / "one")).curation
    (row,) = curation.steps
    assert row["name"] == "c4_badwords" and row["documents_out"] == row["documents_in"] - 1
    assert row["options"] == {
        "c4_badwords_file": str(words),
        "c4_badwords_anywhere": False,
        "c4_badwords_sha256": hashlib.sha256(words.read_bytes()).hexdigest(),
        "c4_badwords_words": 2,
    }
    assert funnel_problems(curation, written=row["documents_out"]) == []
    (removal,) = _audit(tmp_path / "one")
    assert (removal["source"], removal["index"]) == (corpus["a"], 3)
    assert (removal["step"], removal["reason"]) == ("c4_badwords", "bad_word")
    assert removal["detail"] == "listed 'river' at character 21"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--language_threshold=2"],
            "argument --language_threshold: '2' is not a finite number in [0, 1]",
        ),
        (["--quality_filters=nope"], "--quality_filters 'nope' is not a quality filter"),
        (["--gopher_min_words=-1"], "argument --gopher_min_words: '-1' is not a whole number >= 0"),
        (["--curate_sample=5"], "--curate_sample is ignored without a document step"),
        (
            ["--c4_badwords_file=/no/such/words.txt"],
            "--c4_badwords_file '/no/such/words.txt' does not exist; give the path of a word list.",
        ),
        (
            ["--c4_badwords_anywhere"],
            "--c4_badwords_anywhere is ignored without the c4_badwords step",
        ),
        (
            ["--gopher_min_words=10"],
            "--gopher_min_words is ignored without the gopher_quality step: add --quality_filters "
            "gopher_quality or leave --gopher_min_words out.",
        ),
    ],
)
def test_bad_step_flags_are_one_line_and_exit_2(corpus, tmp_path, capsys, flags, message):
    try:
        code = _run(corpus, tmp_path / "out", *flags)
    except SystemExit as exited:  # a value out of its flag's range is argparse's error
        code = exited.code
    assert code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if " INFO " not in line]
    assert len(err) == 1 and err[0].startswith("lmshards preprocess: error: ") and message in err[0]
    assert not (tmp_path / "out").exists()
