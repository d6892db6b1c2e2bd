"""`lmshards fill-mask` on tiny exported models: the Keras model's top-k, with either mask spelling."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import transformers
from tokenizers import Tokenizer

from lmshards.schemas.tokenizer_info import locate_tokenizer, special_token_ids
from lmshards.train.commands import fill_mask_cli
from lmshards.train.export.hf_export import export_masked_lm
from tests.helpers.masked_lm_factory import (
    tiny_masked_lm,
    train_bert_tokenizer,
    transformers_tokenizer_dir,
)

TEXT = "The capital of France is <mask>."


def export_tiny(family: str, tokenizer_path, out, *, vocabulary_size: int):
    masked_lm = tiny_masked_lm(family, vocabulary_size=vocabulary_size, seed=7)
    specials = special_token_ids(locate_tokenizer(str(tokenizer_path)))
    export_masked_lm(
        masked_lm,
        family=family,
        tokenizer_dir_or_json=str(tokenizer_path),
        special_token_ids=specials,
        output_dir=str(out),
    )
    return masked_lm, out


@pytest.fixture(scope="module")
def roberta_model(tmp_path_factory, sample_tokenizer):
    vocabulary_size = Tokenizer.from_file(str(sample_tokenizer)).get_vocab_size()
    return export_tiny(
        "roberta",
        sample_tokenizer,
        tmp_path_factory.mktemp("fm") / "roberta",
        vocabulary_size=vocabulary_size,
    )


@pytest.fixture(scope="module")
def bert_model(tmp_path_factory, sample_files):
    base = tmp_path_factory.mktemp("fm_bert")
    english = [f for f in sample_files if f.parent.name == "en"]
    tokenizer_dir = transformers_tokenizer_dir(
        train_bert_tokenizer(base / "tokenizer.json", english), base / "tokenizer"
    )
    return export_tiny("bert", tokenizer_dir, base / "model", vocabulary_size=600)


def run_json(capsys, *argv: str) -> list:
    assert fill_mask_cli.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def keras_top_k(masked_lm, model_dir, text: str, k: int) -> tuple[list[int], np.ndarray]:
    """Top-k token ids and probabilities the Keras model gives the (single) mask in text."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    ids = np.array([tokenizer(text)["input_ids"]], dtype="int32")
    inputs = {
        "token_ids": ids,
        "padding_mask": np.ones_like(ids),
        "mask_positions": np.array(
            [[ids[0].tolist().index(tokenizer.mask_token_id)]], dtype="int32"
        ),
    }
    if "segment_ids" in masked_lm.input:
        inputs["segment_ids"] = np.zeros_like(ids)
    logits = np.asarray(masked_lm(inputs, training=False))[0, 0].astype("float64")
    probabilities = np.exp(logits - logits.max())
    probabilities /= probabilities.sum()
    top = np.argsort(-probabilities)[:k]
    return top.tolist(), probabilities[top]


def test_fill_mask_json_is_the_keras_models_top_k(roberta_model, capsys):
    masked_lm, out = roberta_model
    (predictions,) = run_json(capsys, str(out), TEXT, "--top_k", "3")

    tokens, probabilities = keras_top_k(masked_lm, out, TEXT, 3)
    assert [p["token"] for p in predictions] == tokens
    np.testing.assert_allclose([p["score"] for p in predictions], probabilities, atol=1e-5)
    assert all(set(p) == {"score", "token", "token_str", "sequence"} for p in predictions)
    assert all(p["sequence"].startswith("The capital of France is") for p in predictions)


@pytest.mark.parametrize("family", ["roberta", "bert"])
def test_either_mask_spelling_works_for_either_family(family, roberta_model, bert_model, capsys):
    _, out = roberta_model if family == "roberta" else bert_model
    angle = run_json(capsys, str(out), "The capital of France is <mask>.")
    square = run_json(capsys, str(out), "The capital of France is [MASK].")
    assert angle == square
    assert len(angle) == 1 and len(angle[0]) == fill_mask_cli.DEFAULT_TOP_K


def test_plain_output_lists_scores_tokens_and_sequences_per_mask(bert_model, capsys):
    masked_lm, out = bert_model
    text = "The capital of [MASK] is <mask>."
    assert fill_mask_cli.main([str(out), text, "--top_k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()

    assert [lines[0], lines[4]] == ["mask 1 of 2:", "mask 2 of 2:"]
    assert lines[1].split() == ["score", "token", "token_str", "sequence"] == lines[5].split()
    (first, second) = run_json(capsys, str(out), text, "--top_k", "2")
    for line, prediction in zip(lines[2:4] + lines[6:8], first + second):
        score, token, *_ = line.split()
        assert (float(score), int(token)) == (round(prediction["score"], 4), prediction["token"])
        assert repr(prediction["token_str"]) in line and line.endswith(prediction["sequence"])


def test_fill_mask_errors_name_the_problem(roberta_model, tmp_path, capsys):
    _, out = roberta_model
    assert fill_mask_cli.main([str(out), "No mask in this text."]) == 2
    err = capsys.readouterr().err
    assert "No mask token in 'No mask in this text.'" in err and "<mask> or [MASK]" in err
    assert fill_mask_cli.main([str(tmp_path / "missing"), TEXT]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lmshards fill-mask: error: Model directory") and "does not exist" in err
    with pytest.raises(SystemExit) as exited:
        fill_mask_cli.main([str(out), TEXT, "--top_k", "0"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(
        "lmshards fill-mask: error: argument --top_k: '0' is not a whole number in [1, 1000]"
    )


class _Payload:
    """Unpickling this would create `marker`: a stand-in for code an untrusted weights file could run."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickled_weights_file_is_a_clean_error_and_is_never_run(roberta_model, tmp_path, capsys):
    _, out = roberta_model
    unsafe = tmp_path / "unsafe"
    shutil.copytree(out, unsafe)
    (unsafe / "model.safetensors").unlink()
    marker = tmp_path / "code-ran"
    (unsafe / "pytorch_model.bin").write_bytes(pickle.dumps(_Payload(marker)))
    assert fill_mask_cli.main([str(unsafe), TEXT]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"lmshards fill-mask: error: {str(unsafe)!r} holds a pickled weights file that torch refuses "
        "to load, as unpickling it could run code."
    )
    assert len(err.splitlines()) == 1 and "model.safetensors" in err
    assert not marker.exists()


def test_text_without_a_mask_is_refused_before_the_model_loads(roberta_model, monkeypatch, capsys):
    _, out = roberta_model

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(transformers, "pipeline", never)
    assert fill_mask_cli.main([str(out), "No mask in this text."]) == 2
    assert "No mask token in 'No mask in this text.'" in capsys.readouterr().err
    assert fill_mask_cli.saved_mask_token(str(out)) == "<mask>"


def test_fill_mask_prints_no_progress_bars(roberta_model, capfd):
    """Loading the weights draws transformers' tqdm bar unless it is turned off."""
    _, out = roberta_model
    assert fill_mask_cli.main([str(out), TEXT]) == 0
    err = capfd.readouterr().err
    assert "\r" not in err and "%|" not in err and "it/s" not in err, err


def test_a_text_longer_than_the_models_positions_is_refused_before_the_model_loads(
    roberta_model, capsys, monkeypatch
):
    import transformers

    _, out = roberta_model
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    limit = json.loads((out / "tokenizer_config.json").read_text())["model_max_length"]
    monkeypatch.setattr(transformers, "pipeline", lambda *a, **k: pytest.fail("model loaded"))
    long_text = "word " * (limit + 10) + "<mask>."
    assert fill_mask_cli.main([str(out), long_text]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("lmshards fill-mask: error: The text is ")
    assert f"takes at most {limit}; shorten it" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.fixture(scope="module")
def unigram_model(tmp_path_factory, sample_files):
    """A tiny RoBERTa exported with the default `lmshards tokenizer train` tokenizer (Unigram, Metaspace)."""
    from lmshards.corpus_tools.tokenizer.config import TokenizerTrainingConfig
    from lmshards.corpus_tools.tokenizer.training import train_and_write

    base = tmp_path_factory.mktemp("fm_unigram")
    english = tuple(str(f) for f in sample_files if f.parent.name == "en")
    config = TokenizerTrainingConfig(
        inputs=english, output=str(base / "tok"), vocab_size=800, max_bytes=200_000, seed=1
    )
    assert config.model == "unigram"
    train_and_write(config)
    vocabulary_size = Tokenizer.from_file(str(base / "tok" / "tokenizer.json")).get_vocab_size()
    return export_tiny("roberta", base / "tok", base / "model", vocabulary_size=vocabulary_size)


def test_a_unigram_tokenizer_marks_no_word_start_after_the_mask(unigram_model):
    _, out = unigram_model
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert "prepend_scheme" in tokenizer.backend_tokenizer.to_str()
    fill_mask_cli.prepend_only_at_the_start(tokenizer.backend_tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(tokenizer(TEXT)["input_ids"])
    assert tokens[-4:] == ["▁is", "<mask>", ".", "</s>"], tokens
    assert tokens[1] == "▁The"  # the start of the text is still a word start


def test_two_masks_print_no_special_tokens_and_one_line_per_prediction(unigram_model, capsys):
    _, out = unigram_model
    text = "The capital of <mask> is\nin <mask>."
    for per_mask in run_json(capsys, str(out), text, "--top_k", "2"):
        for prediction in per_mask:
            sequence = prediction["sequence"]
            assert "<s>" not in sequence and "</s>" not in sequence and "<mask>" in sequence
    assert fill_mask_cli.main([str(out), text, "--top_k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    predictions = [line for line in lines if line.strip()[:1].isdigit()]
    assert len(lines) == 8 and len(predictions) == 4 and all("\\n" in p for p in predictions)
