"""ModernBERT: the Keras model computes what transformers' ModernBertForMaskedLM computes, on both backends.

The export loads as ModernBertForMaskedLM with every parameter filled; `--init_from` reads a directory transformers
itself wrote (either config.json form); a packed block's documents are computed as if alone; variants lmshards does
not build are refused naming the field.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer

from lmshards.plumbing.errors import LmshardsError
from lmshards.schemas.tokenizer_info import locate_tokenizer, special_token_ids
from lmshards.train.config import ModelConfig, preset_config
from lmshards.train.export.hf_export import export_masked_lm
from lmshards.train.export.init_source import inspect_init_source
from lmshards.train.network.config_files import model_config_from_hf
from lmshards.train.network.hf_mapping import hf_state_dict, keras_weights_from_hf
from lmshards.train.network.keras_weights import assign_keras_weights, keras_weights, masked_lm_spec
from lmshards.train.network.model import build_masked_lm
from tests.helpers.jax_subprocess import run_jax
from tests.helpers.masked_lm_factory import perturb

VOCAB = 300
# A tiny ModernBERT with all three of its layer kinds: global, local, local; a 16-token window.
TINY = ModelConfig(
    family="modernbert",
    vocabulary_size=VOCAB,
    num_layers=3,
    num_heads=2,
    hidden_dim=32,
    intermediate_dim=48,
    dropout=0.0,
    max_sequence_length=2048,
    activation="gelu",
    layer_norm_epsilon=1e-5,
    rope_theta_global=160_000.0,
    rope_theta_local=10_000.0,
    local_window=16,
    global_every=3,
)
SPECIALS = {"pad": 0, "cls": 1, "sep": 2, "mask": 3}


def hf_model_config(**overrides) -> transformers.ModernBertConfig:
    """TINY as transformers' own config (eager attention: the reference computation)."""
    config = transformers.ModernBertConfig(
        **{
            "vocab_size": VOCAB,
            "hidden_size": 32,
            "intermediate_size": 48,
            "num_hidden_layers": 3,
            "num_attention_heads": 2,
            "max_position_embeddings": 2048,
            "local_attention": 16,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "cls_token_id": 1,
            "sep_token_id": 2,
            **overrides,
        }
    )
    config._attn_implementation = "eager"
    return config


def torch_logits(
    model, ids: np.ndarray, mask: np.ndarray | None = None, positions=None
) -> np.ndarray:
    with torch.no_grad():
        return model(
            input_ids=torch.tensor(ids, dtype=torch.long),
            attention_mask=None if mask is None else torch.tensor(mask, dtype=torch.long),
            position_ids=None if positions is None else torch.tensor(positions, dtype=torch.long),
        ).logits.numpy()


def keras_logits(masked_lm, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    every = np.tile(np.arange(ids.shape[1], dtype="int32"), (ids.shape[0], 1))
    inputs = {"token_ids": ids, "padding_mask": mask, "mask_positions": every}
    return np.asarray(masked_lm(inputs, training=False))


def random_ids(rows: int, length: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(4, VOCAB, (rows, length)).astype("int32")


@pytest.fixture(scope="module")
def trained_like():
    """TINY with every weight moved off its initial value (norm gammas off 1, the head bias off 0)."""
    masked_lm = build_masked_lm(TINY)
    perturb(masked_lm, seed=5)
    return masked_lm


def test_keras_weights_map_to_the_state_dict_and_back_unchanged(trained_like):
    spec = masked_lm_spec(trained_like, family="modernbert")
    weights = keras_weights(trained_like, spec)
    state = hf_state_dict(weights, spec, pad_token_id=0)
    model = transformers.ModernBertForMaskedLM(hf_model_config())
    assert set(state) == set(model.state_dict())
    assert all(tuple(model.state_dict()[k].shape) == v.shape for k, v in state.items())
    back = keras_weights_from_hf(state, spec, pad_token_id=0)
    assert set(back) == set(weights)
    for name, value in weights.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)


@pytest.mark.parametrize("length", [128, 1024])
def test_export_loads_as_modernbert_and_gives_the_trainers_logits(
    trained_like, tmp_path, sample_tokenizer, length
):
    vocabulary_size = Tokenizer.from_file(str(sample_tokenizer)).get_vocab_size()
    masked_lm = build_masked_lm(dataclasses.replace(TINY, vocabulary_size=vocabulary_size))
    perturb(masked_lm, seed=7)
    specials = special_token_ids(locate_tokenizer(str(sample_tokenizer)))
    out = tmp_path / "model"
    export_masked_lm(
        masked_lm,
        family="modernbert",
        tokenizer_dir_or_json=str(sample_tokenizer),
        special_token_ids=specials,
        output_dir=str(out),
    )
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert type(model).__name__ == "ModernBertForMaskedLM"
    assert {k: list(v) for k, v in info.items() if k != "error_msgs"} == {
        "missing_keys": [],
        "unexpected_keys": [],
        "mismatched_keys": [],
    }
    saved = json.loads((out / "config.json").read_text())
    assert saved["layer_types"] == ["full_attention", "sliding_attention", "sliding_attention"]
    assert saved["rope_parameters"]["full_attention"]["rope_theta"] == 160_000.0
    assert saved["rope_parameters"]["sliding_attention"]["rope_theta"] == 10_000.0
    assert (saved["local_attention"], saved["max_position_embeddings"]) == (16, 2048)
    model.config._attn_implementation = "eager"
    ids = np.random.default_rng(length).integers(5, vocabulary_size, (2, length)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, length // 2 :] = 0  # a padded row: its real tokens must not see the padding
    ids[mask == 0] = specials["pad"]
    expected = torch_logits(model, ids, mask)
    got = keras_logits(masked_lm, ids, mask)
    assert np.abs(got[mask == 1] - expected[mask == 1]).max() < 1e-4
    assert np.abs(expected).max() > 0.5  # logits of a real scale


def save_transformers_model(
    directory: Path, *, old_form: bool, seed: int, **overrides
) -> transformers.ModernBertForMaskedLM:
    """A random ModernBertForMaskedLM saved by transformers (hf_model_config's, with `overrides`); old_form: its
    config.json rewritten as transformers 4 wrote it (global_attn_every_n_layers, global_rope_theta,
    local_rope_theta; no layer_types, rope_parameters)."""
    torch.manual_seed(seed)
    config = hf_model_config(
        **overrides,
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 80_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 5_000.0},
        },
    )
    model = transformers.ModernBertForMaskedLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    model.save_pretrained(directory)
    if old_form:
        path = directory / "config.json"
        data = json.loads(path.read_text())
        del data["layer_types"], data["rope_parameters"]
        data.update(
            global_attn_every_n_layers=3, global_rope_theta=80_000.0, local_rope_theta=5_000.0
        )
        path.write_text(json.dumps(data))
    return model


def first_evaluation(
    shards: Path, init_from: Path, output: Path, monkeypatch
) -> tuple[dict, list[tuple[dict[str, np.ndarray], np.ndarray]]]:
    """`lmshards train --init_from init_from` (TensorFlow, one step): (its first evaluation's metrics record,
    each batch that evaluation read with the logits [n, vocabulary] the trainer computed at its n predictions)."""
    import tensorflow as tf

    from lmshards.train.backends import tensorflow as backend
    from lmshards.train.commands import cli

    seen = []
    compile_steps = backend.TensorFlowBackend._compile_steps

    def compile_and_record(self):
        compile_steps(self)
        eval_step = self._eval_step

        def record(batch):
            # The eval step's own computation (compact on the CPU), on the batch it is given.
            predicted = tf.where(batch["mask_weights"] > 0)
            logits = backend.predicted_logits(self.model, batch, predicted, training=False)
            seen.append(({k: v.numpy() for k, v in batch.items()}, logits.numpy()))
            return eval_step(batch)

        self._eval_step = record

    monkeypatch.setattr(backend.TensorFlowBackend, "_compile_steps", compile_and_record)
    argv = ["--shards", str(shards), "--output", str(output), "--init_from", str(init_from)]
    argv += ["--model_family", "modernbert", "--steps", "1", "--per_replica_batch", "8"]
    assert cli.main([*argv, "--eval_every", "1", "--eval_batches", "2"]) == 0
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    first = next(r for r in rows if "eval_loss" in r)
    return first, seen[: first["eval_batches"]]


def save_fitting_model(directory: Path, tokenizer: Path) -> transformers.ModernBertForMaskedLM:
    """save_transformers_model with the vocabulary and special token ids of the shards' `tokenizer`."""
    ids = special_token_ids(locate_tokenizer(str(tokenizer)))
    return save_transformers_model(
        directory,
        old_form=False,
        seed=3,
        vocab_size=Tokenizer.from_file(str(tokenizer)).get_vocab_size(),
        pad_token_id=ids["pad"],
        bos_token_id=ids["cls"],
        eos_token_id=ids["sep"],
        cls_token_id=ids["cls"],
        sep_token_id=ids["sep"],
    )


@pytest.mark.parametrize("old_form", [False, True])
def test_init_from_reads_a_directory_transformers_wrote_in_either_form(tmp_path, old_form):
    save_transformers_model(tmp_path / "hf", old_form=old_form, seed=3)
    source = inspect_init_source(str(tmp_path / "hf"))
    config = source.model_config
    assert (config.family, config.num_layers, config.hidden_dim, config.intermediate_dim) == (
        "modernbert",
        3,
        32,
        48,
    )
    assert (
        config.rope_theta_global,
        config.rope_theta_local,
        config.local_window,
        config.global_every,
    ) == (
        80_000.0,
        5_000.0,
        16,
        3,
    )
    assert source.weights is not None and source.weights.has_head


def test_init_from_a_directory_transformers_wrote_evaluates_its_logits(
    tmp_path, shards_32, sample_tokenizer, monkeypatch
):
    """The trainer's first evaluation (step 0, before any update) computes transformers' logits, to 1e-4, at
    every predicted position of the batches it reads, and reports their cross-entropy."""
    reference = save_fitting_model(tmp_path / "hf", sample_tokenizer)
    record, batches = first_evaluation(shards_32, tmp_path / "hf", tmp_path / "run", monkeypatch)
    assert record["step"] == 0 and len(batches) == record["eval_batches"] == 2
    reference.config._attn_implementation = "eager"
    losses, worst = [], 0.0
    for batch, logits in batches:
        rows, slots = np.nonzero(batch["mask_weights"] > 0)
        expected = torch_logits(reference, batch["token_ids"], batch["padding_mask"])
        expected = expected[rows, batch["mask_positions"][rows, slots]]
        worst = max(worst, float(np.abs(logits - expected).max()))
        labels = batch["mask_ids"][rows, slots]
        shifted = expected - expected.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        losses.extend(-log_probs[np.arange(len(labels)), labels])
    assert worst < 1e-4 and np.abs(expected).max() > 0.5  # logits of a real scale
    assert record["eval_masked_tokens"] == len(losses) > 0
    assert record["eval_loss"] == pytest.approx(float(np.mean(losses)), rel=1e-5)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"hidden_activation": "silu"}, "hidden_activation 'silu'"),
        ({"mlp_bias": True}, "mlp_bias True"),
        ({"attention_bias": True}, "attention_bias True"),
        ({"norm_bias": True}, "norm_bias True"),
        ({"decoder_bias": False}, "decoder_bias False"),
        ({"layer_types": ["full_attention", "full_attention", "sliding_attention"]}, "layer_types"),
    ],
)
def test_a_variant_lmshards_does_not_build_is_refused_naming_the_field(overrides, named):
    data = hf_model_config(**overrides).to_dict()
    with pytest.raises(LmshardsError) as e:
        model_config_from_hf(data, source="config.json")
    assert named in str(e.value)
    assert "\n" not in str(e.value)


def test_the_presets_are_modernbert_base_and_a_tiny_one():
    base = preset_config("base", family="modernbert", vocabulary_size=50368)
    assert (base.num_layers, base.hidden_dim, base.num_heads, base.intermediate_dim) == (
        22,
        768,
        12,
        1152,
    )
    assert (
        base.rope_theta_global,
        base.rope_theta_local,
        base.local_window,
        base.global_every,
    ) == (
        160_000.0,
        10_000.0,
        128,
        3,
    )
    assert (base.max_sequence_length, base.dropout, base.layer_norm_epsilon) == (8192, 0.0, 1e-5)
    # The other families' presets are unchanged.
    assert preset_config("base", family="bert", vocabulary_size=100).max_sequence_length == 512
    assert (
        preset_config("tiny", family="roberta", vocabulary_size=100).to_dict()
        == ModelConfig(family="roberta", vocabulary_size=100, max_sequence_length=512).to_dict()
    )


def packed_case(seed: int) -> dict[str, np.ndarray]:
    """Two documents (40 and 90 tokens, longer than the 16-token window) packed into one 160-token block."""
    rng = np.random.default_rng(seed)
    lengths = (40, 90)
    ids = np.zeros((1, 160), "int32")
    segments = np.zeros_like(ids)
    positions = np.zeros_like(ids)
    start = 0
    for segment, length in enumerate(lengths, start=1):
        ids[0, start : start + length] = rng.integers(4, VOCAB, length)
        segments[0, start : start + length] = segment
        positions[0, start : start + length] = np.arange(length)
        start += length
    return {"token_ids": ids, "attention_segment_ids": segments, "position_ids": positions}


PACKED_CHECK = """
import json
import numpy as np
from lmshards.train.config import ModelConfig
from lmshards.train.network.model import build_masked_lm
from lmshards.train.network.keras_weights import assign_keras_weights

arrays = dict(np.load("{npz}"))
ids, expected = arrays.pop("check_ids"), arrays.pop("expected")
block = {{k: arrays.pop(k) for k in ("token_ids", "attention_segment_ids", "position_ids")}}
models = []
for packed in (False, True):
    models.append(build_masked_lm(ModelConfig(**{config!r}), packed=packed))
    assign_keras_weights(models[-1], arrays, family="modernbert")
plain, packed = models


def logits(ids):
    every = np.arange(ids.shape[1], dtype="int32")[None]
    inputs = {{"token_ids": ids, "padding_mask": np.ones_like(ids), "mask_positions": every}}
    return np.asarray(plain(inputs, training=False))


got = np.asarray(packed({{**block, "mask_positions": np.arange(160, dtype="int32")[None]}}, training=False))
worst = 0.0
for segment in (1, 2):
    where = np.flatnonzero(block["attention_segment_ids"][0] == segment)
    worst = max(worst, float(np.abs(got[0, where] - logits(block["token_ids"][:, where])[0]).max()))
print(json.dumps({{"plain": float(np.abs(logits(ids) - expected).max()), "packed": worst}}))
"""


def packed_worst(masked_lm, block) -> float:
    """The largest difference between a packed block's logits and each of its documents' alone."""
    packed = build_masked_lm(TINY, packed=True)
    assign_keras_weights(
        packed,
        keras_weights(masked_lm, masked_lm_spec(masked_lm, family="modernbert")),
        family="modernbert",
    )
    every = np.arange(block["token_ids"].shape[1], dtype="int32")[None]
    got = np.asarray(packed({**block, "mask_positions": every}, training=False))
    worst = 0.0
    for segment in (1, 2):
        where = np.flatnonzero(block["attention_segment_ids"][0] == segment)
        ids = block["token_ids"][:, where]
        alone = keras_logits(masked_lm, ids, np.ones_like(ids))
        worst = max(worst, float(np.abs(got[0, where] - alone[0]).max()))
    return worst


def test_a_packed_blocks_documents_are_computed_as_if_alone(trained_like):
    assert packed_worst(trained_like, packed_case(seed=2)) < 1e-5


@pytest.mark.slow
def test_the_jax_backend_computes_the_same_logits_and_packs_the_same_way(trained_like, tmp_path):
    """One JAX process: transformers' logits on a 1,024-token sequence, and a packed block against its documents."""
    spec = masked_lm_spec(trained_like, family="modernbert")
    weights = keras_weights(trained_like, spec)
    model = transformers.ModernBertForMaskedLM(hf_model_config()).eval()
    model.load_state_dict(
        {k: torch.from_numpy(v) for k, v in hf_state_dict(weights, spec, pad_token_id=0).items()}
    )
    ids = random_ids(1, 1024, seed=11)
    npz = tmp_path / "case.npz"
    np.savez(
        npz, **weights, **packed_case(seed=4), check_ids=ids, expected=torch_logits(model, ids)
    )
    worst = run_jax(PACKED_CHECK.format(npz=npz, config=dataclasses.asdict(TINY)), devices=1)
    assert worst["plain"] < 1e-4
    assert worst["packed"] < 1e-5


def test_the_masking_rate_defaults_to_the_familys():
    from lmshards.train.commands.cli import parse_config

    base = ["--shards", "s", "--output", "o", "--steps", "1"]
    assert parse_config([*base, "--model_family", "modernbert"]).mlm_probability == 0.3
    assert parse_config([*base, "--model_family", "bert"]).mlm_probability == 0.15
    assert parse_config(base).mlm_probability == 0.15
    given = [*base, "--model_family", "modernbert", "--mlm_probability", "0.2"]
    assert parse_config(given).mlm_probability == 0.2


def test_rope_theta_global_sets_a_rotary_models_theta_and_is_refused_elsewhere():
    from lmshards.train.loop.preflight import with_rope_theta_global

    assert with_rope_theta_global(TINY, 320_000.0).rope_theta_global == 320_000.0
    with pytest.raises(LmshardsError) as e:
        with_rope_theta_global(ModelConfig(family="bert"), 320_000.0)
    assert str(e.value) == (
        "--rope_theta_global 320000: the bert model has no rotary positions; drop the flag, or train "
        "--model_family modernbert."
    )


E2E_ARGS = [
    "--per_replica_batch",
    "4",
    "--log_every",
    "1",
    "--eval_every",
    "3",
    "--eval_batches",
    "1",
]


def run_train(*args: str) -> None:
    import os
    import subprocess
    import sys

    from tests.helpers.jax_subprocess import REPO

    done = subprocess.run(
        [sys.executable, "-m", "lmshards", "train", *E2E_ARGS, *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_modernbert_run_trains_exports_and_starts_a_long_context_phase(
    backend, tmp_path, sample_tokenizer, sample_files
):
    """Phase 1 at 32 tokens with ModernBERT's recipe options, its export, then phase 2 from it at 64 tokens with
    another global RoPE theta."""
    from tests.helpers.shard_factory import write_sample_shards

    short, long = tmp_path / "short", tmp_path / "long"
    for out, seq_len in ((short, 32), (long, 64)):
        write_sample_shards(
            out, sample_tokenizer, sample_files, seq_len=seq_len, max_lines_per_file=40
        )
    run = tmp_path / "run"
    recipe = ["--lr_schedule", "wsd", "--decay_shape", "1-sqrt", "--optimizer", "stable_adamw"]
    run_train(
        *("--shards", str(short), "--output", str(run), "--backend", backend, "--steps", "4"),
        *(
            "--model_family",
            "modernbert",
            "--checkpoint_every",
            "2",
            "--tokenizer",
            str(sample_tokenizer),
        ),
        *recipe,
    )
    recorded = json.loads((run / "run_config.json").read_text())
    assert recorded["model"]["family"] == "modernbert"
    assert recorded["model"]["rope_theta_global"] == 160_000.0
    assert recorded["train"]["mlm_probability"] == 0.3
    assert (recorded["train"]["optimizer"], recorded["schedule"]["decay"]) == (
        "stable_adamw",
        "wsd",
    )
    from lmshards.train.export.hf_export import export_run

    export_run(str(run), output_dir=str(tmp_path / "export"))
    _, info = transformers.AutoModelForMaskedLM.from_pretrained(
        tmp_path / "export", output_loading_info=True
    )
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))

    second = tmp_path / "second"
    run_train(
        *("--shards", str(long), "--output", str(second), "--backend", backend, "--steps", "2"),
        *("--init_from", str(run), "--model_family", "modernbert", "--rope_theta_global", "320000"),
    )
    recorded = json.loads((second / "run_config.json").read_text())
    assert recorded["model"]["rope_theta_global"] == 320_000.0
    assert recorded["init_from"]["kind"] == "run"


@pytest.fixture(scope="module")
def shards_32(tmp_path_factory, sample_tokenizer, sample_files) -> Path:
    from tests.helpers.shard_factory import write_sample_shards

    out = tmp_path_factory.mktemp("shards_32")
    write_sample_shards(out, sample_tokenizer, sample_files, seq_len=32, max_lines_per_file=20)
    return out


@pytest.fixture(scope="module")
def other_vocab(tmp_path_factory) -> Path:
    """A ModernBERT of VOCAB tokens, saved by transformers without a tokenizer."""
    out = tmp_path_factory.mktemp("other_vocab")
    save_transformers_model(out, old_form=False, seed=1)
    return out


def test_a_model_that_does_not_fit_the_shards_is_one_line_and_exit_2(
    shards_32, other_vocab, sample_tokenizer, tmp_path, capsys
):
    from lmshards.train.commands import cli

    vocab = Tokenizer.from_file(str(sample_tokenizer)).get_vocab_size()
    assert vocab != VOCAB
    config = tmp_path / "config.json"
    cases = (
        (
            hf_model_config(),
            None,
            f"has vocabulary_size {VOCAB} but the shards' tokenizer has {vocab} tokens",
        ),
        (
            dataclasses.replace(hf_model_config(), vocab_size=vocab, max_position_embeddings=16),
            None,
            "The shards hold sequences of 32 tokens but the modernbert model takes at most 16",
        ),
        (
            None,
            other_vocab,
            f"has a vocabulary of {VOCAB} tokens, and the shards' tokenizer has {vocab}",
        ),
    )
    for hf_config, init_from, expected in cases:
        argv = ["--shards", str(shards_32), "--output", str(tmp_path / "run"), "--steps", "1"]
        if hf_config is not None:
            config.write_text(hf_config.to_json_string())
            argv += ["--model_config", str(config)]
        else:
            argv += ["--init_from", str(init_from)]
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert expected in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.slow
def test_a_preempted_modernbert_run_resumes_exactly(shards_32, tmp_path):
    """SIGINT after step 4 (exit 75), then the same command: the losses of an uninterrupted run, to 1e-6."""
    import signal

    from lmshards.train import run_dir
    from lmshards.train.commands import cli

    argv = [
        *(
            "--shards",
            str(shards_32),
            "--model_family",
            "modernbert",
            "--steps",
            "6",
            "--per_replica_batch",
            "4",
        ),
        *(
            "--checkpoint_every",
            "3",
            "--eval_every",
            "3",
            "--eval_batches",
            "1",
            "--log_every",
            "1",
        ),
        *(
            "--lr_schedule",
            "wsd",
            "--optimizer",
            "stable_adamw",
            "--learning_rate",
            "1e-3",
            "--warmup_steps",
            "2",
        ),
    ]

    def losses(run: Path) -> dict[int, float]:
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return {r["step"]: r["loss"] for r in rows if "loss" in r}

    assert cli.main([*argv, "--output", str(tmp_path / "reference")]) == 0
    add = run_dir.MetricsLog.add

    def add_then_interrupt(self, record):
        add(self, record)
        if record["step"] == 4 and "loss" in record:
            signal.raise_signal(signal.SIGINT)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_dir.MetricsLog, "add", add_then_interrupt)
        assert cli.main([*argv, "--output", str(tmp_path / "run")]) == 75
    assert max(losses(tmp_path / "run")) == 4
    assert cli.main([*argv, "--output", str(tmp_path / "run")]) == 0
    assert losses(tmp_path / "run") == pytest.approx(losses(tmp_path / "reference"), abs=1e-6)
