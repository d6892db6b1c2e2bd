"""`lmshards tokenizer train|inspect`: the three model types on the multilingual sample, outputs, bad input."""

from __future__ import annotations

import dataclasses
import json
import unicodedata
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from lmshards.command.cli import main as lmshards_main
from lmshards.corpus_tools.tokenizer.config import (
    DEFAULT_PRESET,
    MODEL_MAX_LENGTH,
    MODELS,
    PRESETS,
    TokenizerTrainingConfig,
)
from lmshards.corpus_tools.tokenizer.corpus_report import (
    DEFAULT_INSPECT_DOCUMENTS,
    corpus_report,
    load_tokenizer,
)
from lmshards.corpus_tools.tokenizer.training import train_and_write
from lmshards.plumbing import fs
from lmshards.schemas.constants import SPECIAL_ROLES, TOKENIZER_INFO_JSON, TOKENIZER_JSON
from lmshards.schemas.tokenizer_info import fingerprint, locate_tokenizer, special_token_ids

VOCAB_SIZE = 8000
# Unigram training is the slow one (~10x BPE per byte); a 700 kB sample keeps this file fast while
# leaving the held-out text with characters the sample never saw (the byte fallback's job).
# WordPiece has no fallback, so it trains on all of it: unseen Chinese characters are unknown.
TRAIN_BYTES = {"unigram": 700_000, "bpe": 1_500_000, "wordpiece": 4_000_000}
HELD_OUT_EVERY = 25


# --------------------------------------------------------------------------------------------
# Training on the bundled sample.


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, sample_files) -> tuple[Path, dict[str, list[str]]]:
    """The sample split into a training directory and held-out lines per language (every 25th line)."""
    root = tmp_path_factory.mktemp("corpus")
    held_out: dict[str, list[str]] = {}
    for path in sample_files:
        lang = path.parent.name
        lines = [
            line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
        ]
        held_out.setdefault(lang, []).extend(lines[::HELD_OUT_EVERY])
        train = [line for i, line in enumerate(lines) if i % HELD_OUT_EVERY]
        out = root / "train" / lang / path.name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(train) + "\n", encoding="utf-8")
    return root / "train", held_out


def _config(corpus_dir: Path, output: Path, model: str, **overrides) -> TokenizerTrainingConfig:
    fields = dict(
        inputs=(str(corpus_dir),),
        output=str(output),
        model=model,
        vocab_size=VOCAB_SIZE,
        max_bytes=TRAIN_BYTES[model],
        seed=5,
    )
    return TokenizerTrainingConfig(**{**fields, **overrides})


@pytest.fixture(scope="module", params=MODELS)
def trained(request, corpus, tmp_path_factory):
    model = request.param
    config = _config(corpus[0], tmp_path_factory.mktemp(model), model)
    return config, train_and_write(config)


def test_output_files_and_info(trained):
    config, result = trained
    out = Path(config.output)
    assert {TOKENIZER_JSON, TOKENIZER_INFO_JSON, "tokenizer_config.json"} <= {
        p.name for p in out.iterdir()
    }
    info = json.loads((out / TOKENIZER_INFO_JSON).read_text())
    assert (
        info["fingerprint"] == result.fingerprint == fingerprint((out / TOKENIZER_JSON).read_text())
    )
    assert info["vocab_size"] == result.vocab_size == VOCAB_SIZE
    assert info["options"] == json.loads(json.dumps(dataclasses.asdict(config)))
    sample = info["sample"]
    assert 0 < sample["bytes_sampled"] <= TRAIN_BYTES[config.model]
    assert (sample["bytes_sampled"] < sample["bytes_seen"]) == (
        TRAIN_BYTES[config.model] < sample["bytes_seen"]
    )
    assert info["read_stats"]["documents"] == info["sample"]["documents_seen"]
    preset = PRESETS[DEFAULT_PRESET[config.model]]
    roles = special_token_ids(locate_tokenizer(config.output))
    assert set(roles) == set(SPECIAL_ROLES)
    assert (
        roles
        == info["special_token_ids"]
        == {r: preset.tokens.index(t) for r, t in preset.by_role().items()}
    )


def test_post_processor_wraps_each_document(trained):
    config, _ = trained
    preset = PRESETS[DEFAULT_PRESET[config.model]]
    tok = Tokenizer.from_file(str(Path(config.output) / TOKENIZER_JSON))
    enc = tok.encode("Hello world")
    assert enc.tokens[0] == preset.cls and enc.tokens[-1] == preset.sep
    assert preset.cls not in enc.tokens[1:-1]
    # The mask token is matched in text; RoBERTa's takes the space before it (as roberta-base's does).
    masked = tok.encode("Paris is <mask>. Paris is [MASK].", add_special_tokens=False).ids
    mask_id = tok.token_to_id(preset.mask)
    assert masked.count(mask_id) == 1
    before = tok.encode(
        "Paris is" if preset.mask_lstrip else "Paris is ", add_special_tokens=False
    ).ids
    assert masked[masked.index(mask_id) - len(before) : masked.index(mask_id)] == before


def _expected_decode(tok: Tokenizer, model: str, text: str) -> str:
    if model == "bpe":
        return text
    if model == "unigram":
        return unicodedata.normalize("NFKC", text)
    # WordPiece decoding joins pieces with spaces; compare without whitespace.
    return "".join(tok.normalizer.normalize_str(text).split())


def test_held_out_text_round_trips(trained, corpus):
    config, _ = trained
    tok, roles = load_tokenizer(config.output)
    with_unknown = 0
    for lang, lines in corpus[1].items():
        for text in lines:
            ids = tok.encode(text).ids
            if (
                roles["unk"] in ids
            ):  # WordPiece: a word holding an unseen character (asserted rare below)
                with_unknown += 1
                continue
            decoded = tok.decode(ids)
            if config.model == "wordpiece":
                decoded = "".join(decoded.split())
            assert decoded == _expected_decode(tok, config.model, text), (lang, text)
    total = sum(len(lines) for lines in corpus[1].values())
    # WordPiece has no fallback: a held-out line with a character the sample lacks (a rare Chinese
    # character, "⁄") holds an unknown token; about 1.6% of lines here.
    assert with_unknown < (0.03 * total if config.model == "wordpiece" else 1)


def _sample_lines(sample_files: list[Path], lang: str) -> list[str]:
    return [
        line
        for path in sample_files
        if path.parent.name == lang
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def test_unknown_rate_on_russian_and_chinese(trained, sample_files):
    config, _ = trained
    tok, roles = load_tokenizer(config.output)
    ru = corpus_report(tok, _sample_lines(sample_files, "ru"), unk_id=roles["unk"])
    zh = corpus_report(tok, _sample_lines(sample_files, "zh"), unk_id=roles["unk"])
    assert ru.unknown_rate < 0.005 and zh.unknown_rate < 0.005, (ru, zh)
    assert zh.cjk_documents > 0.9 * zh.documents
    assert 0.4 < zh.tokens_per_cjk_char < 1.5
    assert 1.0 <= ru.tokens_per_word < 4.0
    if config.model != "wordpiece":  # byte pieces / bytes: nothing is unknown
        assert ru.unknown_tokens == zh.unknown_tokens == 0


def test_transformers_loads_the_directory_offline(trained, corpus, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    config, _ = trained
    preset = PRESETS[DEFAULT_PRESET[config.model]]
    hf = AutoTokenizer.from_pretrained(config.output)
    tok = Tokenizer.from_file(str(Path(config.output) / TOKENIZER_JSON))
    assert (hf.mask_token, hf.pad_token, hf.cls_token, hf.sep_token, hf.unk_token) == (
        preset.mask,
        preset.pad,
        preset.cls,
        preset.sep,
        preset.unk,
    )
    assert hf.model_max_length == MODEL_MAX_LENGTH
    # bos/eos as roberta-base and bert-base have them: <s>/</s> for RoBERTa's tokens, none for BERT's.
    assert (hf.bos_token, hf.eos_token) == (
        (preset.cls, preset.sep) if preset.name == "roberta" else (None, None)
    )
    texts = [lines[0] for lines in corpus[1].values()] + [
        "Hello, world!",
        "Привет, мир",
        "学而时习之",
    ]
    assert [hf(t)["input_ids"] for t in texts] == [tok.encode(t).ids for t in texts]


def test_same_seed_same_fingerprint(trained, tmp_path):
    config, result = trained
    again = train_and_write(dataclasses.replace(config, output=str(tmp_path / "again")))
    assert again.fingerprint == result.fingerprint
    assert (tmp_path / "again" / TOKENIZER_JSON).read_bytes() == (
        Path(config.output) / TOKENIZER_JSON
    ).read_bytes()


def test_other_seed_other_sample(corpus, tmp_path):
    first = train_and_write(
        _config(corpus[0], tmp_path / "a", "bpe", vocab_size=1000, max_bytes=300_000)
    )
    second = train_and_write(
        _config(corpus[0], tmp_path / "b", "bpe", vocab_size=1000, max_bytes=300_000, seed=6)
    )
    assert first.fingerprint != second.fingerprint
    assert first.sample.documents_seen == second.sample.documents_seen


def test_inspect_reports_tokens_and_rates(trained, corpus, tmp_path, capsys):
    config, _ = trained
    zh = tmp_path / "zh.txt"
    zh.write_text("\n".join(corpus[1]["zh"]) + "\n", encoding="utf-8")
    assert (
        lmshards_main(
            ["tokenizer", "inspect", config.output, "--text", "Hello world", "--input", str(zh)]
        )
        == 0
    )
    out = capsys.readouterr().out
    tok = Tokenizer.from_file(str(Path(config.output) / TOKENIZER_JSON))
    assert f"ids:     {tok.encode('Hello world').ids}" in out
    assert f"Sample of {min(len(corpus[1]['zh']), DEFAULT_INSPECT_DOCUMENTS):,} documents" in out
    assert "tokens per character" in out


# --------------------------------------------------------------------------------------------
# Bad input.


def _run(argv, capsys) -> tuple[int, str]:
    code = lmshards_main(["tokenizer", *argv])
    return code, capsys.readouterr().err


def test_empty_corpus_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("")
    (tmp_path / "b.txt").write_text("\n  \n")
    code, err = _run(
        ["train", "--input", str(tmp_path / "*.txt"), "--output", str(tmp_path / "out")], capsys
    )
    assert code == 2
    assert "No documents to train on" in err and "2 input file(s)" in err
    assert not (tmp_path / "out" / TOKENIZER_INFO_JSON).exists()


def test_sample_cap_below_every_document_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("a document longer than ten bytes\n")
    code, err = _run(
        [
            "train",
            "--input",
            str(tmp_path / "a.txt"),
            "--output",
            str(tmp_path / "out"),
            "--max_bytes",
            "10",
        ],
        capsys,
    )
    assert code == 2 and "--max_bytes 10 is smaller than every one of the 1 documents" in err


def test_missing_input_is_a_clear_error(tmp_path, capsys):
    code, err = _run(
        ["train", "--input", str(tmp_path / "nope.txt"), "--output", str(tmp_path / "out")], capsys
    )
    assert code == 2 and "nope.txt" in err and "does not exist" in err


@pytest.mark.parametrize("model, vocab_size, minimum", [("bpe", 100, 261), ("unigram", 100, 262)])
def test_vocab_below_the_fixed_alphabet_is_refused_before_reading(
    tmp_path, capsys, model, vocab_size, minimum
):
    code, err = _run(
        [
            "train",
            "--input",
            str(tmp_path / "never-read.txt"),
            "--output",
            str(tmp_path / "out"),
            "--model",
            model,
            "--vocab_size",
            str(vocab_size),
        ],
        capsys,
    )
    assert code == 2 and f"--vocab_size {vocab_size}" in err and f"at least {minimum}" in err


# Unigram's alphabet also holds the byte pieces and Metaspace's "▁", and its trainer always adds one
# piece beyond the characters.
@pytest.mark.parametrize("model, specials", [("wordpiece", 5), ("unigram", 5 + 256 + 1 + 1)])
def test_vocab_below_the_sample_alphabet_names_the_minimum(tmp_path, capsys, model, specials):
    text = "学而时习之不亦说乎有朋自远方来不亦乐乎人不知而不愠不亦君子乎"
    (tmp_path / "zh.txt").write_text(text + "\n")
    minimum = specials + len(set(text))
    code, err = _run(
        [
            "train",
            "--input",
            str(tmp_path / "zh.txt"),
            "--output",
            str(tmp_path / "out"),
            "--model",
            model,
            "--vocab_size",
            str(specials + 3),
        ],
        capsys,
    )
    assert code == 2
    assert f"need {minimum}" in err and f"--vocab_size {minimum} or more" in err


def _small_corpus(tmp_path: Path, sample_files: list[Path]) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_bytes(sample_files[0].read_bytes()[:20_000])
    return path


def test_non_empty_output_needs_overwrite_and_only_an_earlier_tokenizer_is_replaced(
    tmp_path, capsys, sample_files
):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    argv = [
        "train",
        "--input",
        str(_small_corpus(tmp_path, sample_files)),
        "--output",
        str(out),
        "--model",
        "bpe",
        "--vocab_size",
        "400",
    ]
    code, err = _run(argv, capsys)
    assert code == 2
    assert err.splitlines()[-1].startswith("lmshards tokenizer train: error: --output")
    # --overwrite would not help: the refusal names the user's file at once.
    assert "holds files lmshards did not write ('keep.txt')" in err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    # --overwrite replaces an earlier tokenizer, never files lmshards did not write.
    code, err = _run([*argv, "--overwrite"], capsys)
    assert code == 2 and "holds files lmshards did not write ('keep.txt')" in err
    assert (out / "keep.txt").read_text() == "mine"

    (out / "keep.txt").unlink()
    assert lmshards_main(["tokenizer", *argv]) == 0
    (out / "tokenizer.json").write_text(
        "{}"
    )  # the earlier output's files are replaced whatever they hold
    capsys.readouterr()
    assert lmshards_main(["tokenizer", *argv, "--overwrite"]) == 0
    captured = capsys.readouterr()
    # The summary on stdout, logs on stderr.
    assert captured.out.startswith("Sampled ") and "Fingerprint: sha256:" in captured.out
    assert (
        "INFO" not in captured.out
        and "lmshards.corpus_tools.tokenizer.training: Sample:" in captured.err
    )
    info = json.loads((out / TOKENIZER_INFO_JSON).read_text())
    assert info["options"]["overwrite"] is True
    assert {p.name for p in out.iterdir()} == {
        TOKENIZER_JSON,
        TOKENIZER_INFO_JSON,
        "tokenizer_config.json",
    }


def test_a_failed_overwrite_leaves_the_old_tokenizer(tmp_path, capsys, sample_files):
    out = tmp_path / "out"
    corpus_file = _small_corpus(tmp_path, sample_files)
    base = [
        "train",
        "--input",
        str(corpus_file),
        "--output",
        str(out),
        "--model",
        "bpe",
        "--vocab_size",
        "400",
    ]
    assert _run(base, capsys)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (tmp_path / "empty.txt").write_text("\n")
    failed = ["train", "--input", str(tmp_path / "empty.txt"), "--output", str(out), "--overwrite"]
    code, err = _run(failed, capsys)
    assert code == 2 and "No documents to train on" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_inspect_needs_text_or_input(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        lmshards_main(["tokenizer", "inspect", str(tmp_path)])
    assert e.value.code == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .startswith("lmshards tokenizer inspect: error: nothing to inspect")
    )


def test_unknown_preset_is_an_argparse_choice(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        lmshards_main(
            [
                "tokenizer",
                "train",
                "--input",
                "x",
                "--output",
                str(tmp_path),
                "--special_tokens",
                "gpt2",
            ]
        )
    assert e.value.code == 2
    assert "invalid choice: 'gpt2'" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# gs:// in and out.


@pytest.mark.gcs
@pytest.mark.slow
def test_gcs_round_trip(gcs_emulator, corpus, capsys):
    train_dir, held_out = corpus
    for lang in ("en", "ru", "zh"):
        name = sorted((train_dir / lang).iterdir())[0]
        fs.write_bytes_atomic(f"{gcs_emulator}/corpus/{lang}.txt", name.read_bytes()[:100_000])
    output = f"{gcs_emulator}/tokenizers/bpe"
    assert (
        lmshards_main(
            [
                "tokenizer",
                "train",
                "--input",
                f"{gcs_emulator}/corpus/*.txt",
                "--output",
                output,
                "--model",
                "bpe",
                "--vocab_size",
                "2000",
            ]
        )
        == 0
    )
    assert "Fingerprint: sha256:" in capsys.readouterr().out
    info = json.loads(fs.read_text(fs.join(output, TOKENIZER_INFO_JSON)))
    assert [i["path"] for i in info["inputs"]] == [
        f"{gcs_emulator}/corpus/{lang}.txt" for lang in ("en", "ru", "zh")
    ]
    source = locate_tokenizer(output)
    assert fingerprint(source.json_text) == info["fingerprint"]
    assert set(special_token_ids(source)) == set(SPECIAL_ROLES)
    tok, _ = load_tokenizer(output)
    text = held_out["ru"][0]
    assert tok.decode(tok.encode(text).ids) == text


def test_byte_fallback_pieces_are_counted_beside_unknown_tokens():
    """A Unigram vocabulary without CJK pieces spells 中 as three byte pieces: 0% unknown, 100% bytes."""
    from tokenizers import models

    from lmshards.corpus_tools.tokenizer.corpus_report import corpus_report

    vocab = [("<unk>", 0.0), ("a", -1.0)] + [(f"<0x{b:02X}>", -5.0) for b in range(256)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=True))
    report = corpus_report(tok, ["中中", "a"], unk_id=0)
    assert (report.tokens, report.unknown_tokens, report.byte_fallback_tokens) == (7, 0, 6)
    assert report.byte_fallback_rate == pytest.approx(6 / 7)


def test_inspect_prints_the_byte_fallback_rate_or_says_there_is_none(
    trained, corpus, tmp_path, capsys
):
    config, _ = trained
    en = tmp_path / "en.txt"
    en.write_text("\n".join(corpus[1]["en"][:50]) + "\n", encoding="utf-8")
    assert lmshards_main(["tokenizer", "inspect", config.output, "--input", str(en)]) == 0
    out = capsys.readouterr().out
    has_bytes = any(
        p.startswith("<0x")
        for p in Tokenizer.from_file(str(Path(config.output) / TOKENIZER_JSON)).get_vocab()
    )
    if has_bytes:
        assert "byte-fallback rate " in out and "byte pieces)" in out
    else:
        assert "byte-fallback rate n/a (no byte pieces in the vocabulary)" in out


def test_a_vocabulary_smaller_than_asked_is_a_warning_naming_the_fix(tmp_path, capsys):
    corpus = tmp_path / "small.txt"
    corpus.write_text("\n".join(f"a small corpus line number {i}" for i in range(200)))
    argv = ["train", "--input", str(corpus), "--output", str(tmp_path / "tok")]
    assert lmshards_main(["tokenizer", *argv, "--model", "bpe", "--vocab_size", "30000"]) == 0
    captured = capsys.readouterr()
    got = json.loads((tmp_path / "tok" / TOKENIZER_INFO_JSON).read_text())["vocab_size"]
    assert got < 30000
    assert f"the vocabulary has {got:,} tokens, fewer than --vocab_size 30,000" in captured.err
    assert "larger --max_bytes or more input" in captured.err


def test_train_and_inspect_log_the_files_they_found_once(tmp_path, capsys, sample_files):
    english = [str(p) for p in sample_files if p.parent.name == "en"][:1]
    output = tmp_path / "tok"
    argv = ["train", "--input", *english, "--output", str(output), "--model", "bpe"]
    code, err = _run([*argv, "--vocab_size", "400", "--max_bytes", "30000"], capsys)
    assert code == 0, err
    assert err.count("files found") == 1, err
    code, err = _run(["inspect", str(output), "--input", *english, "--max_documents", "20"], capsys)
    assert code == 0, err
    assert err.count("files found") == 1, err


def test_train_without_transformers_fails_before_reading(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # as without the `data` extra
    code, err = _run(
        ["train", "--input", str(tmp_path / "none.txt"), "--output", str(tmp_path / "tok")], capsys
    )
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "pip install 'lmshards[data]'" in err and "none.txt" not in err
    assert not (tmp_path / "tok").exists()


def test_compressed_and_legacy_inputs_train_the_same_tokenizer_as_plain_utf8(tmp_path, capsys):
    """The tokenizer trains on the text of .zst/.xz/.ndjson inputs and of --encoding text, never on their
    bytes; text that is not UTF-8 and compressed bytes under a .txt name are refused before training."""
    import lzma

    import zstandard

    lines = [f"caf\u00e9 na\u00efve number {i} " + "word " * (i % 7) for i in range(400)]
    text = "".join(line + "\n" for line in lines)
    plain, forms = tmp_path / "plain", tmp_path / "forms"
    plain.mkdir()
    forms.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (plain / name).write_text(text, encoding="utf-8")
    (forms / "a.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(text.encode()))
    records = "".join(json.dumps({"text": line}) + "\n" for line in lines)
    (forms / "b.ndjson.xz").write_bytes(lzma.compress(records.encode()))
    (forms / "c.txt").write_bytes(text.encode("latin-1"))
    common = ["--model", "bpe", "--vocab_size", "400", "--seed", "1"]

    def train_on(directory, output, *flags):
        argv = ["train", "--input", str(directory), "--output", str(tmp_path / output)]
        return _run([*argv, *common, *flags], capsys)

    assert train_on(plain, "p")[0] == 0
    code, err = train_on(forms, "f")
    assert code == 2 and "c.txt" in err and "--encoding latin-1" in err
    assert not (tmp_path / "f").exists()
    (forms / "d.txt").write_bytes(zstandard.ZstdCompressor().compress(b"hidden\n"))
    code, err = train_on(forms, "f", "--encoding", "latin-1")
    assert code == 2 and "d.txt" in err and "rename it to d.txt.zst" in err
    (forms / "d.txt").unlink()
    # --encoding applies to every file, so the mixed set is read with c.txt made UTF-8.
    (forms / "c.txt").write_text(text, encoding="utf-8")
    assert train_on(forms, "f")[0] == 0
    plain_json = (tmp_path / "p" / TOKENIZER_JSON).read_bytes()
    assert (tmp_path / "f" / TOKENIZER_JSON).read_bytes() == plain_json
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (legacy / name).write_bytes(text.encode("latin-1"))
    assert train_on(legacy, "l", "--encoding", "latin-1")[0] == 0
    assert (tmp_path / "l" / TOKENIZER_JSON).read_bytes() == plain_json
