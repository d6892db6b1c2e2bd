"""Export of keras-hub masked LMs to transformers: equal logits, clean loading, same tokenizer ids."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer

from lmshards.plumbing.errors import LmshardsError, TokenizerError
from lmshards.schemas.tokenizer_info import locate_tokenizer, special_token_ids
from lmshards.train.commands import export_cli
from lmshards.train.divergence import DivergenceError
from lmshards.train.export.hf_export import check_loads_cleanly, export_masked_lm, push_to_hub
from lmshards.train.families import FAMILIES, family_names, get_family
from lmshards.train.network.hf_mapping import (
    MaskedLMSpec,
    hf_config,
    hf_state_dict,
    keras_weight_names,
)
from lmshards.train.network.keras_weights import keras_weights, masked_lm_spec
from tests.helpers.masked_lm_factory import (
    SEQ_LEN,
    perturb,
    tiny_masked_lm,
    train_bert_tokenizer,
    transformers_tokenizer_dir,
)

TEXTS = [
    "The capital of France is Paris.",
    "Привет, мир!",
    "学而时习之，不亦说乎",
    "  spaced   out\ttext  ",
]


def padded_batch(family_pad_id: int, vocabulary_size: int, *, first_id: int, seed: int = 1):
    """Random ids [3, SEQ_LEN]: one full row, two right-padded rows (pad id under attention_mask 0)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(first_id, vocabulary_size, (3, SEQ_LEN)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 11:] = 0
    mask[2, 3:] = 0
    ids[mask == 0] = family_pad_id
    return ids, mask


def keras_outputs(
    masked_lm, family: str, ids: np.ndarray, mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(sequence output, logits at every position) of the Keras model."""
    inputs = {"token_ids": ids, "padding_mask": mask}
    if get_family(family).uses_segment_ids:
        inputs["segment_ids"] = np.zeros_like(ids)
    sequence = masked_lm.backbone(inputs, training=False)
    if isinstance(sequence, dict):  # backbones with a pooler also return its output
        sequence = sequence["sequence_output"]
    positions = np.tile(np.arange(ids.shape[1], dtype="int32"), (ids.shape[0], 1))
    logits = masked_lm({**inputs, "mask_positions": positions}, training=False)
    return np.asarray(sequence), np.asarray(logits)


def hf_outputs(model_dir: Path, ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    model = transformers.AutoModelForMaskedLM.from_pretrained(model_dir)
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(ids, dtype=torch.long),
            attention_mask=torch.tensor(mask, dtype=torch.long),
            output_hidden_states=True,
        )
    return out.hidden_states[-1].numpy(), out.logits.numpy()


@pytest.fixture(scope="module")
def roberta_export(tmp_path_factory, sample_tokenizer):
    specials = special_token_ids(locate_tokenizer(str(sample_tokenizer)))
    vocabulary_size = Tokenizer.from_file(str(sample_tokenizer)).get_vocab_size()
    masked_lm = tiny_masked_lm("roberta", vocabulary_size=vocabulary_size)
    out = tmp_path_factory.mktemp("roberta") / "model"
    export_masked_lm(
        masked_lm,
        family="roberta",
        tokenizer_dir_or_json=str(sample_tokenizer),
        special_token_ids=specials,
        output_dir=str(out),
    )
    return masked_lm, out, specials


@pytest.fixture(scope="module")
def bert_tokenizer_dir(tmp_path_factory, sample_files) -> Path:
    base = tmp_path_factory.mktemp("bert_tokenizer")
    english = [f for f in sample_files if f.parent.name == "en"]
    return transformers_tokenizer_dir(
        train_bert_tokenizer(base / "tokenizer.json", english), base / "hf"
    )


@pytest.fixture(scope="module")
def bert_export(tmp_path_factory, bert_tokenizer_dir):
    specials = special_token_ids(locate_tokenizer(str(bert_tokenizer_dir)))
    masked_lm = tiny_masked_lm("bert", vocabulary_size=600)
    out = tmp_path_factory.mktemp("bert") / "model"
    export_masked_lm(
        masked_lm,
        family="bert",
        tokenizer_dir_or_json=str(bert_tokenizer_dir),
        special_token_ids=specials,
        output_dir=str(out),
    )
    return masked_lm, out, specials


def test_hf_state_dict_moves_roberta_positions_and_splits_heads_like_hf():
    spec = MaskedLMSpec(
        family="roberta",
        vocabulary_size=7,
        num_layers=1,
        num_heads=2,
        hidden_dim=4,
        intermediate_dim=6,
        dropout=0.0,
        max_sequence_length=5,
        num_segments=0,
        activation="gelu",
        layer_norm_epsilon=1e-5,
        head_activation="gelu",
        head_layer_norm_epsilon=1e-5,
    )
    rng = np.random.default_rng(0)
    shapes = {
        "token_embedding": (7, 4),
        "position_embedding": (5, 4),
        "layer.0.query.kernel": (4, 2, 2),
        "layer.0.key.kernel": (4, 2, 2),
        "layer.0.value.kernel": (4, 2, 2),
        "layer.0.query.bias": (2, 2),
        "layer.0.key.bias": (2, 2),
        "layer.0.value.bias": (2, 2),
        "layer.0.attention_output.kernel": (2, 2, 4),
        "layer.0.intermediate.kernel": (4, 6),
        "layer.0.intermediate.bias": (6,),
        "layer.0.output.kernel": (6, 4),
        "head.dense.kernel": (4, 4),
        "head.bias": (7,),
    }
    weights = {
        name: rng.normal(size=shapes.get(name, (4,))).astype("float32")
        for name in keras_weight_names(spec)
    }
    state = hf_state_dict(weights, spec, pad_token_id=3)

    positions = state["roberta.embeddings.position_embeddings.weight"]
    assert (
        positions.shape
        == (3 + 1 + 5, 4)
        == (hf_config(spec, {"pad": 3, "mask": 4})["max_position_embeddings"], 4)
    )
    np.testing.assert_array_equal(
        positions[4:], weights["position_embedding"]
    )  # first token -> row padding_idx + 1
    np.testing.assert_array_equal(positions[:4], 0.0)
    np.testing.assert_array_equal(
        state["roberta.embeddings.token_type_embeddings.weight"], np.zeros((1, 4))
    )
    query = state[
        "roberta.encoder.layer.0.attention.self.query.weight"
    ]  # torch [out = head * 2 + dim, in]
    kernel = weights["layer.0.query.kernel"]  # keras [in, head, dim]
    for h_in, head, dim in np.ndindex(kernel.shape):
        assert query[head * 2 + dim, h_in] == kernel[h_in, head, dim]
    output = state["roberta.encoder.layer.0.attention.output.dense.weight"]
    assert output[1, 2 + 1] == weights["layer.0.attention_output.kernel"][1, 1, 1]
    np.testing.assert_array_equal(state["lm_head.decoder.weight"], weights["token_embedding"])
    np.testing.assert_array_equal(state["lm_head.decoder.bias"], weights["head.bias"])

    with pytest.raises(ValueError, match="missing.*head.bias"):
        hf_state_dict({k: v for k, v in weights.items() if k != "head.bias"}, spec, pad_token_id=3)


def test_roberta_export_gives_keras_logits_at_every_real_token(roberta_export):
    masked_lm, out, specials = roberta_export
    ids, mask = padded_batch(specials["pad"], masked_lm.backbone.vocabulary_size, first_id=5)
    _, keras_logits = keras_outputs(masked_lm, "roberta", ids, mask)
    _, torch_logits = hf_outputs(out, ids, mask)

    real = mask == 1
    assert np.abs(torch_logits[real] - keras_logits[real]).max() < 1e-4
    assert np.abs(keras_logits).max() > 0.5  # logits of a real scale, not all near zero


def test_bert_export_gives_keras_encoder_states_and_close_logits(bert_export):
    masked_lm, out, specials = bert_export
    ids, mask = padded_batch(specials["pad"], masked_lm.backbone.vocabulary_size, first_id=5)
    keras_states, keras_logits = keras_outputs(masked_lm, "bert", ids, mask)
    torch_states, torch_logits = hf_outputs(out, ids, mask)

    real = mask == 1
    assert np.abs(torch_states[real] - keras_states[real]).max() < 1e-4
    # BertForMaskedLM's head uses hidden_act and layer_norm_eps; keras-hub's uses exact GELU and
    # epsilon 1e-5. The encoder is matched exactly, the head within a small, bounded difference.
    assert np.abs(torch_logits[real] - keras_logits[real]).max() < 3e-3
    # The same prediction wherever the top two logits are further apart than the heads may differ (a random
    # model's near-ties may swap within that difference).
    top2 = np.sort(keras_logits[real], axis=-1)[:, -2:]
    decided = top2[:, 1] - top2[:, 0] > 2 * 3e-3
    assert decided.mean() > 0.5
    np.testing.assert_array_equal(
        torch_logits[real].argmax(-1)[decided], keras_logits[real].argmax(-1)[decided]
    )


@pytest.mark.parametrize("family", family_names())
def test_export_of_the_trainers_model_gives_its_logits(family, tmp_path, sample_tokenizer):
    """The trainer builds each family's head as its transformers head computes, so every family exports exactly."""
    from lmshards.train.config import ModelConfig
    from lmshards.train.network.model import build_masked_lm

    vocabulary_size = Tokenizer.from_file(str(sample_tokenizer)).get_vocab_size()
    masked_lm = build_masked_lm(
        ModelConfig(
            family=family,
            vocabulary_size=vocabulary_size,
            num_layers=2,
            num_heads=2,
            hidden_dim=32,
            intermediate_dim=64,
            dropout=0.1,
            max_sequence_length=SEQ_LEN,
        )
    )
    perturb(masked_lm, seed=3)
    specials = special_token_ids(locate_tokenizer(str(sample_tokenizer)))
    out = tmp_path / "model"
    export_masked_lm(
        masked_lm,
        family=family,
        tokenizer_dir_or_json=str(sample_tokenizer),
        special_token_ids=specials,
        output_dir=str(out),
    )
    ids, mask = padded_batch(specials["pad"], vocabulary_size, first_id=5, seed=4)
    _, keras_logits = keras_outputs(masked_lm, family, ids, mask)
    _, torch_logits = hf_outputs(out, ids, mask)
    assert (
        type(transformers.AutoModelForMaskedLM.from_pretrained(out)).__name__
        == FAMILIES[family].hf_masked_lm_class
    )
    assert np.abs(torch_logits[mask == 1] - keras_logits[mask == 1]).max() < 1e-4
    assert np.abs(keras_logits).max() > 0.5  # logits of a real scale, not all near zero


def saved_by_transformers(masked_lm, family: str, specials: dict[str, int], out: Path) -> Path:
    """What transformers' own save_pretrained writes for the model holding masked_lm's weights."""
    spec = masked_lm_spec(masked_lm, family=family)
    model_family = get_family(family)
    config = getattr(transformers, model_family.hf_config_class)(**hf_config(spec, specials))
    model = getattr(transformers, model_family.hf_masked_lm_class)(config)
    state = hf_state_dict(keras_weights(masked_lm, spec), spec, pad_token_id=specials["pad"])
    model.load_state_dict(
        {name: torch.from_numpy(value) for name, value in state.items()}, strict=True
    )
    model.save_pretrained(out)
    return out


@pytest.mark.parametrize("family", ["roberta", "bert"])
def test_export_writes_the_bytes_transformers_save_pretrained_writes(
    family, roberta_export, bert_export, tmp_path
):
    # The writer needs no torch; what it writes must be what transformers writes with torch.
    masked_lm, out, specials = roberta_export if family == "roberta" else bert_export
    reference = saved_by_transformers(masked_lm, family, specials, tmp_path / "reference")
    assert sorted(p.name for p in reference.iterdir()) == ["config.json", "model.safetensors"]
    for name in ("config.json", "model.safetensors"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


def test_an_export_that_does_not_fill_every_parameter_is_refused(roberta_export, tmp_path):
    masked_lm, out, _ = roberta_export
    spec = masked_lm_spec(masked_lm, family="roberta")
    check_loads_cleanly(str(out), spec)  # the export itself loads cleanly
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    tensors = load_file(broken / "model.safetensors")
    del tensors["lm_head.bias"]
    save_file(tensors, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(RuntimeError, match=r"does not load cleanly.*missing_keys.*lm_head\.bias"):
        check_loads_cleanly(str(broken), spec)


@pytest.mark.parametrize("family", ["roberta", "bert"])
def test_export_loads_cleanly_with_a_config_matching_model_and_tokenizer(
    family, roberta_export, bert_export
):
    masked_lm, out, specials = roberta_export if family == "roberta" else bert_export
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert {k: list(v) for k, v in info.items()} == {
        "missing_keys": [],
        "unexpected_keys": [],
        "mismatched_keys": [],
        "error_msgs": [],
    }
    files = sorted(p.name for p in out.iterdir())
    assert files == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    config = model.config
    backbone = masked_lm.backbone
    assert (
        type(model).__name__ == {"roberta": "RobertaForMaskedLM", "bert": "BertForMaskedLM"}[family]
    )
    assert (
        config.vocab_size,
        config.hidden_size,
        config.num_hidden_layers,
        config.num_attention_heads,
    ) == (backbone.vocabulary_size, 32, 2, 2)
    assert config.intermediate_size == 64 and config.hidden_dropout_prob == pytest.approx(0.1)
    expected = {
        "roberta": ("gelu", 1e-5, SEQ_LEN + specials["pad"] + 1, 1),
        "bert": ("gelu_pytorch_tanh", 1e-12, SEQ_LEN, 2),
    }[family]
    assert (
        config.hidden_act,
        config.layer_norm_eps,
        config.max_position_embeddings,
        config.type_vocab_size,
    ) == expected
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert config.pad_token_id == tokenizer.pad_token_id == specials["pad"]
    assert tokenizer.mask_token_id == specials["mask"]
    if family == "roberta":
        assert (
            (config.bos_token_id, config.eos_token_id)
            == (tokenizer.bos_token_id, tokenizer.eos_token_id)
            == (specials["cls"], specials["sep"])
        )
    assert (
        model.get_output_embeddings().weight.data_ptr()
        == model.get_input_embeddings().weight.data_ptr()
    )


def test_exported_tokenizers_give_the_tokenizers_library_ids(
    roberta_export, bert_export, sample_tokenizer, bert_tokenizer_dir
):
    for (_, out, _), tokenizer_json in (
        (roberta_export, sample_tokenizer),
        (bert_export, bert_tokenizer_dir / "tokenizer.json"),
    ):
        reference = Tokenizer.from_file(str(tokenizer_json))
        exported = transformers.AutoTokenizer.from_pretrained(out)
        for text in TEXTS:
            assert exported(text)["input_ids"] == reference.encode(text).ids, (out, text)
    # A transformers tokenizer directory is copied byte for byte.
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (bert_export[1] / name).read_bytes() == (bert_tokenizer_dir / name).read_bytes()


def test_wrapped_mask_token_takes_the_space_before_it(roberta_export):
    tokenizer = transformers.AutoTokenizer.from_pretrained(roberta_export[1])
    ids = tokenizer("The capital of France is <mask>.")["input_ids"]
    assert (
        ids[ids.index(tokenizer.mask_token_id) - 1]
        == tokenizer("The capital of France is")["input_ids"][-2]
    )


def test_export_refuses_a_non_empty_output_and_a_tokenizer_with_other_role_ids(
    tmp_path, roberta_export, sample_tokenizer, bert_tokenizer_dir
):
    masked_lm, out, specials = roberta_export
    kwargs = dict(
        family="roberta", tokenizer_dir_or_json=str(sample_tokenizer), special_token_ids=specials
    )
    with pytest.raises(LmshardsError, match="is not empty; pass --overwrite"):
        export_masked_lm(masked_lm, output_dir=str(out), **kwargs)
    with pytest.raises(
        TokenizerError, match="pad token has id 0, but the model was trained with 1"
    ):
        other_tokenizer = {**kwargs, "tokenizer_dir_or_json": str(bert_tokenizer_dir)}
        export_masked_lm(masked_lm, output_dir=str(tmp_path / "m"), **other_tokenizer)
    assert (
        not (tmp_path / "m").exists() and os.listdir(tmp_path) == []
    )  # no partial output left behind
    with pytest.raises(LmshardsError, match="expects a keras-hub BertBackbone"):
        export_masked_lm(masked_lm, output_dir=str(tmp_path / "m"), **{**kwargs, "family": "bert"})
    with pytest.raises(
        LmshardsError,
        match=r"Unknown model family 'gpt2'; choose one of \['roberta', 'bert', 'modernbert'\]",
    ):
        export_masked_lm(masked_lm, output_dir=str(tmp_path / "m"), **{**kwargs, "family": "gpt2"})


def test_overwrite_replaces_an_export_only_once_the_new_one_is_complete(
    tmp_path, roberta_export, sample_tokenizer, bert_tokenizer_dir
):
    masked_lm, first, specials = roberta_export
    out = tmp_path / "model"
    kwargs = dict(family="roberta", special_token_ids=specials, output_dir=str(out), overwrite=True)
    export_masked_lm(masked_lm, tokenizer_dir_or_json=str(sample_tokenizer), **kwargs)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert before == {
        p.name: p.read_bytes() for p in first.iterdir()
    }  # the same model exports the same bytes

    with pytest.raises(TokenizerError):
        export_masked_lm(masked_lm, tokenizer_dir_or_json=str(bert_tokenizer_dir), **kwargs)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and os.listdir(tmp_path) == [
        "model"
    ]

    other = tiny_masked_lm("roberta", vocabulary_size=masked_lm.backbone.vocabulary_size, seed=5)
    export_masked_lm(other, tokenizer_dir_or_json=str(sample_tokenizer), **kwargs)
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert (
        after.keys() == before.keys() and after["model.safetensors"] != before["model.safetensors"]
    )
    assert after["tokenizer.json"] == before["tokenizer.json"] and os.listdir(tmp_path) == ["model"]


def test_push_to_hub_offline_or_unreachable_names_the_local_export(roberta_export, monkeypatch):
    from huggingface_hub import constants

    out = str(roberta_export[1])
    assert constants.HF_HUB_OFFLINE
    with pytest.raises(LmshardsError, match="offline mode is enabled") as raised:
        push_to_hub(out, "someone/tiny-roberta")
    assert f"The local export is complete at {out!r}" in str(raised.value)

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    with pytest.raises(LmshardsError, match="unreachable") as raised:
        push_to_hub(out, "someone/tiny-roberta")
    assert f"The local export is complete at {out!r}" in str(raised.value)


def train_tiny_run(tmp_path: Path, *, tokenizer_json: Path, files: list[Path]) -> Path:
    """A real `lmshards train` run (4 steps, checkpoints at 2 and 4) on shards of the sample corpus."""
    from lmshards.train.commands import cli as train_cli
    from tests.helpers.shard_factory import write_sample_shards

    write_sample_shards(
        tmp_path / "shards",
        tokenizer_json,
        files,
        seq_len=SEQ_LEN,
        train_shards=2,
        validation_shards=1,
        max_lines_per_file=40,
    )
    model_config = dict(
        num_layers=1,
        num_heads=2,
        hidden_dim=32,
        intermediate_dim=64,
        max_sequence_length=SEQ_LEN + 2,
    )
    (tmp_path / "model.json").write_text(json.dumps(model_config))
    run_dir = tmp_path / "run"
    args = [
        "--shards",
        str(tmp_path / "shards"),
        "--output",
        str(run_dir),
        "--tokenizer",
        str(tokenizer_json),
    ]
    args += [
        "--model_config",
        str(tmp_path / "model.json"),
        "--steps",
        "4",
        "--checkpoint_every",
        "2",
        "--keep",
        "2",
    ]
    args += [
        "--eval_every",
        "100",
        "--per_replica_batch",
        "4",
        "--strategy",
        "cpu",
        "--learning_rate",
        "0.01",
    ]
    assert train_cli.main(args) == 0
    return run_dir


def test_export_checks_its_output_and_the_run_config_before_any_work(tmp_path, capsys):
    (tmp_path / "a-file").write_text("not a directory")
    assert (
        export_cli.main([str(tmp_path / "no-run"), "--output", str(tmp_path / "a-file" / "model")])
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith(
        f"lmshards export: error: the directory of --output {str(tmp_path / 'a-file')!r} is a file"
    )
    assert len(err.splitlines()) == 1
    run = tmp_path / "run"
    run.mkdir()
    (run / "run_config.json").write_text('{"model": ')
    assert export_cli.main([str(run), "--output", str(tmp_path / "model")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"lmshards export: error: {str(run / 'run_config.json')!r} is damaged: not valid JSON"
    )
    assert len(err.splitlines()) == 1 and not (tmp_path / "model").exists()


@pytest.mark.slow
def test_export_cli_exports_a_training_run_at_its_latest_or_a_chosen_checkpoint(
    tmp_path, sample_tokenizer, sample_files, bert_tokenizer_dir, capfd
):
    from lmshards.train.backends.weights import load_model_from_run

    run_dir = train_tiny_run(tmp_path, tokenizer_json=sample_tokenizer, files=sample_files)
    specials = special_token_ids(locate_tokenizer(str(sample_tokenizer)))
    first = str(run_dir / "checkpoints" / "ckpt-2")
    exports = {None: tmp_path / "latest", first: tmp_path / "first"}
    logits = {}
    for checkpoint, out in exports.items():
        assert (
            export_cli.main(
                [str(run_dir), "--output", str(out)]
                + (["--checkpoint", checkpoint] if checkpoint else [])
            )
            == 0
        )
        masked_lm, _ = load_model_from_run(str(run_dir), checkpoint=checkpoint)
        ids, mask = padded_batch(specials["pad"], masked_lm.backbone.vocabulary_size, first_id=5)
        _, keras_logits = keras_outputs(masked_lm, "roberta", ids, mask)
        _, logits[checkpoint] = hf_outputs(out, ids, mask)
        assert np.abs(logits[checkpoint][mask == 1] - keras_logits[mask == 1]).max() < 1e-4
    assert np.abs(logits[None] - logits[first]).max() > 1e-3  # the two checkpoints really differ
    err = capfd.readouterr().err
    assert "%|" not in err and "it/s]" not in err, err  # no third-party progress bars

    code = export_cli.main(
        [str(run_dir), "--output", str(tmp_path / "other"), "--tokenizer", str(bert_tokenizer_dir)]
    )
    assert code == 2
    assert "is not the one the run was trained with" in capfd.readouterr().err
    not_a_run = tmp_path / "not-a-run"
    not_a_run.mkdir()
    code = export_cli.main([str(not_a_run), "--output", str(tmp_path / "other")])
    assert code == 2
    assert "run_config.json" in capfd.readouterr().err
    assert not (tmp_path / "other").exists()


@pytest.mark.gcs
def test_export_copies_a_transformers_tokenizer_directory_from_gcs(
    gcs_emulator, bert_export, bert_tokenizer_dir, tmp_path
):
    from lmshards.plumbing import fs

    remote = f"{gcs_emulator}/export-test/tokenizer"
    for path in bert_tokenizer_dir.iterdir():
        fs.write_bytes_atomic(fs.join(remote, path.name), path.read_bytes())
    masked_lm, _, specials = bert_export
    out = tmp_path / "model"
    export_masked_lm(
        masked_lm,
        family="bert",
        tokenizer_dir_or_json=remote,
        special_token_ids=specials,
        output_dir=str(out),
    )
    for path in bert_tokenizer_dir.iterdir():
        assert (out / path.name).read_bytes() == path.read_bytes()


def test_export_refuses_non_finite_weights_and_writes_nothing(sample_tokenizer, tmp_path):
    vocabulary_size = Tokenizer.from_file(str(sample_tokenizer)).get_vocab_size()
    masked_lm = tiny_masked_lm("roberta", vocabulary_size=vocabulary_size)
    variable = masked_lm.trainable_weights[3]
    poisoned = variable.numpy()
    poisoned.flat[0] = np.nan
    variable.assign(poisoned)
    out = tmp_path / "model"
    with pytest.raises(DivergenceError, match=r"non-finite weights in 1 of \d+ tensors"):
        export_masked_lm(
            masked_lm,
            family="roberta",
            tokenizer_dir_or_json=str(sample_tokenizer),
            special_token_ids=special_token_ids(locate_tokenizer(str(sample_tokenizer))),
            output_dir=str(out),
        )
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_export_names_the_step_and_warns_when_the_run_has_not_finished(tmp_path, caplog):
    from lmshards.train.export.hf_export import checkpoint_step, log_exported_step
    from lmshards.train.run_dir import RunDir

    assert checkpoint_step(str(tmp_path / "checkpoints" / "ckpt-4")) == 4
    assert checkpoint_step("runs/a/checkpoints/ckpt-12.npz") == 12
    run = RunDir(str(tmp_path))
    config = {
        "schedule": {
            "peak": 1e-3,
            "warmup_steps": 1,
            "total_steps": 10,
            "decay": "linear",
            "extensions": [],
        }
    }
    caplog.set_level("INFO", logger="lmshards.train.export.hf_export")
    log_exported_step(run, config, str(tmp_path / "checkpoints" / "ckpt-4"))
    (record,) = caplog.records
    assert record.levelname == "WARNING"
    assert "exporting the model of step 4 of 10" in record.getMessage()
    assert "the run has not finished" in record.getMessage()

    (tmp_path / "run_summary.json").write_text("{}")
    caplog.clear()
    log_exported_step(run, config, str(tmp_path / "checkpoints" / "ckpt-4"))
    assert caplog.records[0].levelname == "WARNING"
    assert "a checkpoint before the run's end" in caplog.records[0].getMessage()
    caplog.clear()
    log_exported_step(run, config, str(tmp_path / "checkpoints" / "ckpt-10"))
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert "the model of step 10" in caplog.records[0].getMessage()
