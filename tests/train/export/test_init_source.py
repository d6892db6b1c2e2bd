"""`lmshards train --init_from`: weights of transformers models (made by transformers here) and of earlier runs
arrive exactly on both backends, the export round-trips, shards that do not fit and bad sources are refused in one
line before any device work, and BERT's phase two continues a run on a longer shard set."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("keras_hub")
pytest.importorskip("transformers")

from lmshards.plumbing.cli import EXIT_USAGE  # noqa: E402
from lmshards.train.commands import cli  # noqa: E402
from lmshards.train.export.init_source import _mapping_spec, inspect_init_source  # noqa: E402
from lmshards.train.network.config_files import read_model_config  # noqa: E402
from lmshards.train.network.hf_mapping import hf_state_dict, keras_weights_from_hf  # noqa: E402
from tests.helpers import hf_source  # noqa: E402
from tests.helpers.hf_source import HF_CLASSES, hf_outputs, keras_outputs, sample_batch  # noqa: E402
from tests.helpers.jax_subprocess import run_jax  # noqa: E402
from tests.helpers.shard_factory import write_sample_shards  # noqa: E402

TOLERANCE = 1e-4
SEQ_LEN = 32
TRAIN_ARGS = [
    "--per_replica_batch",
    "8",
    "--log_every",
    "2",
    "--checkpoint_every",
    "4",
    "--eval_every",
    "4",
    "--eval_batches",
    "2",
    "--final_eval",
    "none",
    "--shuffle_buffer",
    "64",
]


@pytest.fixture(scope="module")
def shards(tmp_path_factory, sample_tokenizer, sample_files) -> str:
    out = tmp_path_factory.mktemp("shards")
    write_sample_shards(out, sample_tokenizer, sample_files, seq_len=SEQ_LEN, max_lines_per_file=40)
    return str(out)


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory) -> dict[str, Path]:
    """One saved model per transformers class, each as transformers made it."""
    base = tmp_path_factory.mktemp("hf")
    return {name: hf_source.save_hf_model(name, base / name) for name in HF_CLASSES}


def max_difference(ours: dict, reference: dict, mask: np.ndarray) -> dict[str, float]:
    real = mask == 1
    return {k: float(np.abs(ours[k][real] - reference[k][real]).max()) for k in reference}


def train(argv: list[str], capsys) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err


# ---------------------------------------------------------------- the weights arrive exactly


def test_the_inverse_mapping_undoes_the_export_mapping(hf_dirs):
    """transformers -> Keras names -> transformers gives back every encoder and head weight."""
    from lmshards.train.export.init_source import read_hf_state_dict

    for name in ("RobertaForMaskedLM", "BertForMaskedLM"):
        source = inspect_init_source(str(hf_dirs[name]))
        spec = _mapping_spec(source.model_config)
        state = read_hf_state_dict(str(hf_dirs[name] / "model.safetensors"))
        back = hf_state_dict(
            keras_weights_from_hf(state, spec, pad_token_id=hf_source.PAD),
            spec,
            pad_token_id=hf_source.PAD,
        )
        for key, value in state.items():
            if "position_embeddings" in key or "token_type" in key:
                continue  # RoBERTa's token-type row moves into the positions; compared through the logits
            np.testing.assert_array_equal(back[key], value, err_msg=key)


@pytest.mark.parametrize("class_name", list(HF_CLASSES))
def test_a_transformers_model_arrives_exactly_on_the_tensorflow_backend(
    class_name, hf_dirs, tmp_path
):
    ids, mask = sample_batch()
    model = hf_source.initial_model(
        str(hf_dirs[class_name]), backend="tensorflow", checkpoint_dir=str(tmp_path)
    )
    reference = hf_outputs(hf_dirs[class_name], ids, mask)
    diff = max_difference(keras_outputs(model, ids, mask), reference, mask)
    assert set(diff) == ({"sequence", "logits"} if HF_CLASSES[class_name][1] else {"sequence"})
    assert max(diff.values()) < TOLERANCE, diff
    assert np.abs(reference["sequence"]).max() > 0.5  # outputs of a real scale


def test_the_new_model_exports_back_to_the_same_transformers_logits(
    hf_dirs, sample_tokenizer, tmp_path
):
    """transformers -> --init_from -> lmshards export -> transformers: the same logits."""
    from lmshards.schemas.tokenizer_info import locate_tokenizer, special_token_ids
    from lmshards.train.export.hf_export import export_masked_lm

    ids, mask = sample_batch()
    specials = special_token_ids(locate_tokenizer(str(sample_tokenizer)))
    for name in ("RobertaForMaskedLM", "BertForMaskedLM"):
        model = hf_source.initial_model(
            str(hf_dirs[name]), backend="tensorflow", checkpoint_dir=str(tmp_path / name)
        )
        out = tmp_path / f"{name}-export"
        export_masked_lm(
            model,
            family=HF_CLASSES[name][0],
            tokenizer_dir_or_json=str(sample_tokenizer),
            special_token_ids=specials,
            output_dir=str(out),
        )
        diff = max_difference(
            hf_outputs(out, ids, mask), hf_outputs(hf_dirs[name], ids, mask), mask
        )
        assert max(diff.values()) < TOLERANCE, (name, diff)


# ---------------------------------------------------------------- a run as the source, phase two


@pytest.fixture(scope="module")
def source_run(shards, tmp_path_factory) -> Path:
    """A tiny TensorFlow run of 8 steps on the 32-token shards (the first phase)."""
    run = tmp_path_factory.mktemp("phase1") / "run"
    argv = ["--shards", shards, "--output", str(run), "--steps", "8", *TRAIN_ARGS]
    assert cli.main(argv) == 0
    return run


@pytest.fixture(scope="module")
def long_shards(tmp_path_factory, sample_tokenizer, sample_files) -> str:
    """The same tokens in 64-token sequences (what `lmshards repack` makes for the second phase)."""
    out = tmp_path_factory.mktemp("long_shards")
    write_sample_shards(
        out, sample_tokenizer, sample_files, seq_len=2 * SEQ_LEN, max_lines_per_file=40
    )
    return str(out)


@pytest.mark.slow
def test_a_run_arrives_exactly_from_its_newest_checkpoint(source_run, tmp_path):
    from lmshards.train.backends.weights import load_model_from_run

    ids, mask = sample_batch()
    trained, _ = load_model_from_run(str(source_run))
    model = hf_source.initial_model(
        str(source_run), backend="tensorflow", checkpoint_dir=str(tmp_path)
    )
    diff = max_difference(keras_outputs(model, ids, mask), keras_outputs(trained, ids, mask), mask)
    assert max(diff.values()) == 0.0, diff


@pytest.mark.slow
def test_phase_two_continues_a_run_on_longer_sequences_and_reruns_without_the_source(
    source_run, long_shards, tmp_path, capsys
):
    # Resuming the run itself on the longer set is refused, saying what differs and what to do instead.
    resume = ["--shards", long_shards, "--output", str(source_run), "--steps", "8", *TRAIN_ARGS]
    code, err = train(resume, capsys)
    assert code == EXIT_USAGE and len(err.strip().splitlines()) == 1
    assert "same tokenizer" in err and "seq_len 32 in the run, 64 in these --shards" in err
    assert f"--init_from {source_run}" in err and "another tokenization" not in err

    copy = tmp_path / "phase1"
    shutil.copytree(source_run, copy)
    run = tmp_path / "phase2"
    base = ["--shards", long_shards, "--output", str(run), "--init_from", str(copy), *TRAIN_ARGS]
    argv = [*base, "--steps", "4"]
    assert cli.main(argv) == 0
    capsys.readouterr()
    run_config = json.loads((run / "run_config.json").read_text())
    assert run_config["seq_len"] == 64 and run_config["train"]["init_from"] == str(copy)
    record = run_config["init_from"]
    assert record["kind"] == "run" and record["weights_fingerprint"].startswith("sha256:")
    assert run_config["model"] == json.loads((source_run / "run_config.json").read_text())["model"]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert (
        metrics[0]["step"] == 0 and "eval_loss" in metrics[0]
    )  # where it starts, before any update

    # The run has its own checkpoints now: a rerun never reads the source again.
    shutil.rmtree(copy)
    assert cli.main(argv) == 0
    assert "finished at step 4" in capsys.readouterr().out


# ---------------------------------------------------------------- refused: one line, exit 2, nothing written


def _gpt2(path: Path) -> Path:
    path.mkdir()
    (path / "config.json").write_text(
        json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 32})
    )
    return path


def _sharded(path: Path, hf_dirs) -> Path:
    shutil.copytree(hf_dirs["RobertaForMaskedLM"], path)
    (path / "model.safetensors").rename(path / "model-00001-of-00002.safetensors")
    (path / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    return path


def _no_weights(path: Path, hf_dirs) -> Path:
    path.mkdir()
    shutil.copy(hf_dirs["BertForMaskedLM"] / "config.json", path / "config.json")
    return path


def _damaged_run(path: Path) -> Path:
    """A run directory whose only checkpoint is not one (damaged, or of a version that wrote another layout)."""
    from lmshards.train.config import ModelConfig

    (path / "checkpoints").mkdir(parents=True)
    run_config = {
        "train": {"backend": "tensorflow"},
        "model": ModelConfig(vocabulary_size=2000).to_dict(),
    }
    (path / "run_config.json").write_text(json.dumps(run_config))
    (path / "checkpoints" / "ckpt-1.index").write_bytes(b"not a checkpoint")
    (path / "checkpoints" / "ckpt-1.data-00000-of-00001").write_bytes(b"not a checkpoint")
    return path


def _hf_with(path: Path, class_name: str, **overrides) -> Path:
    return hf_source.save_hf_model(class_name, path, **overrides)


BAD_SOURCES = {
    "not_a_model": (lambda p, h: (p.mkdir(), p)[1], "neither a Hugging Face model directory"),
    "gpt2": (
        lambda p, h: _gpt2(p),
        "model_type 'gpt2' (GPT2LMHeadModel) is not a supported family",
    ),
    "sharded": (lambda p, h: _sharded(p, h), "sharded weights (model.safetensors.index.json)"),
    "no_weights": (
        lambda p, h: _no_weights(p, h),
        "no weights (model.safetensors or pytorch_model.bin)",
    ),
    "damaged_run": (lambda p, h: _damaged_run(p), "does not restore"),
    "small_vocabulary": (
        lambda p, h: _hf_with(p, "RobertaForMaskedLM", vocab_size=1000),
        "vocabulary of 1000 tokens, and the shards' tokenizer has 2000",
    ),
    "other_pad_id": (
        lambda p, h: _hf_with(p, "BertForMaskedLM", pad_token_id=0),
        "pad token id 0, and the shards' tokenizer gives it id 1",
    ),
    "short_position_table": (
        lambda p, h: _hf_with(p, "BertForMaskedLM", max_position_embeddings=16),
        "position table of 16 positions, and the shards hold sequences of 32 tokens",
    ),
}


@pytest.mark.parametrize("case", list(BAD_SOURCES))
def test_a_source_that_cannot_start_the_run_is_refused_in_one_line(
    case, shards, hf_dirs, tmp_path, capsys
):
    make, expected = BAD_SOURCES[case]
    source = make(tmp_path / "source", hf_dirs)
    run = tmp_path / "run"
    code, err = train(
        ["--shards", shards, "--output", str(run), "--init_from", str(source), "--steps", "2"],
        capsys,
    )
    assert code == EXIT_USAGE, err
    errors = [line for line in err.splitlines() if line.startswith("lmshards train: error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert f"--init_from {str(source)!r}" in errors[0] and expected in errors[0], err
    assert not (run / "run_config.json").exists()  # refused before the run started


def test_a_model_option_that_contradicts_the_source_is_refused_naming_both(
    shards, hf_dirs, tmp_path, capsys
):
    source = str(hf_dirs["BertForMaskedLM"])
    base = ["--shards", shards, "--output", str(tmp_path / "run"), "--init_from", source]
    code, err = train([*base, "--steps", "2", "--model_preset", "base"], capsys)
    assert code == EXIT_USAGE and "--model_preset base asks for family bert, num_layers 12" in err
    assert "num_layers 2" in err and "Drop --model_preset" in err
    code, err = train([*base, "--steps", "2", "--model_family", "roberta"], capsys)
    assert (
        code == EXIT_USAGE
        and "is a bert model, and this command gives --model_family roberta" in err
    )


def test_model_config_takes_a_transformers_config_json(hf_dirs):
    config = read_model_config(str(hf_dirs["RobertaForMaskedLM"] / "config.json"))
    assert (config.family, config.vocabulary_size, config.num_layers, config.hidden_dim) == (
        "roberta",
        2000,
        2,
        32,
    )
    assert (
        config.max_sequence_length == hf_source.POSITIONS
    )  # 66 rows less RoBERTa's offset of pad + 1
    assert (config.activation, config.layer_norm_epsilon) == ("gelu", 1e-12)
    bert = read_model_config(str(hf_dirs["BertModel"] / "config.json"))
    assert (bert.family, bert.max_sequence_length) == ("bert", hf_source.POSITIONS)


# ---------------------------------------------------------------- learning: it starts where the source ended


@pytest.mark.slow
def test_continuing_an_exported_run_starts_at_its_eval_loss_and_ends_lower(
    shards, sample_tokenizer, tmp_path, capsys
):
    """On the bundled corpus's held-out blocks: the source run's last evaluation, its export's evaluation
    before the first update of the new run (the same batches and masks), then lower after training on."""
    from lmshards.train.export.hf_export import export_run

    def evals(run: Path) -> dict[int, float]:
        lines = (run / "metrics.jsonl").read_text().splitlines()
        return {r["step"]: r["eval_loss"] for r in map(json.loads, lines) if "eval_loss" in r}

    args = ["--per_replica_batch", "16", "--log_every", "10", "--checkpoint_every", "40"]
    args += ["--eval_every", "40", "--eval_batches", "4", "--final_eval", "none", "--seed", "4"]
    args += ["--shuffle_buffer", "64", "--tokenizer", str(sample_tokenizer)]
    source = tmp_path / "source"
    source_argv = ["--shards", shards, "--output", str(source), "--learning_rate", "1e-2"]
    source_argv += ["--warmup_steps", "2"]
    assert cli.main([*source_argv, "--steps", "40", *args]) == 0
    exported = tmp_path / "export"
    export_run(str(source), output_dir=str(exported))
    run = tmp_path / "continued"
    # A lower peak rate, as continued pretraining uses: the model is no longer random.
    argv = ["--shards", shards, "--output", str(run), "--init_from", str(exported), *args]
    assert cli.main([*argv, "--learning_rate", "3e-3", "--warmup_steps", "8", "--steps", "80"]) == 0
    capsys.readouterr()

    before, after = evals(source), evals(run)
    random_loss = float(
        np.log(hf_source.VOCAB)
    )  # a model that knows nothing: uniform over the vocabulary
    assert before[40] < random_loss - 0.3, (before, after)
    assert abs(after[0] - before[40]) < 1e-3, (before, after)  # starts where the source ended
    assert after[80] < after[0] - 0.05, after  # and learns on


def test_a_source_carrying_another_tokenizer_is_refused(
    shards, hf_dirs, sample_tokenizer, tmp_path, capsys
):
    """Same size and special ids, but two tokens swap ids: the model's tokens are not the shards'."""
    source = tmp_path / "source"
    shutil.copytree(hf_dirs["RobertaForMaskedLM"], source)
    parsed = json.loads(Path(sample_tokenizer).read_text())
    vocab = parsed["model"]["vocab"]
    a, b = [t for t, i in vocab.items() if i in (100, 101)]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (source / "tokenizer.json").write_text(json.dumps(parsed))
    base = ["--shards", shards, "--output", str(tmp_path / "run"), "--init_from", str(source)]
    for extra in (
        [],
        ["--tokenizer", str(sample_tokenizer)],
    ):  # tokens compared when the shards' are known
        code, err = train([*base, "--steps", "2", *extra], capsys)
        assert code == EXIT_USAGE
        assert "carries tokenizer sha256:" in err and "and the shards were made with sha256:" in err
        assert f"--tokenizer {source} so the shards use the model's tokens" in err


def test_a_rerun_before_the_first_checkpoint_refuses_a_source_that_changed(tmp_path):
    from lmshards.plumbing.errors import LmshardsError
    from lmshards.train.export.init_source import (
        InitWeights,
        check_same_source,
        weights_fingerprint,
    )

    arrays = {"token_embedding": np.ones((3, 2), np.float32)}
    weights = InitWeights(arrays, weights_fingerprint(arrays), "model.safetensors")
    previous = {"init_from": {"path": "src", "weights_fingerprint": weights.fingerprint}}
    check_same_source(previous, weights)
    check_same_source(None, weights)  # a new run
    changed = {"token_embedding": np.full((3, 2), 2.0, np.float32)}
    with pytest.raises(LmshardsError, match="now holds other weights"):
        check_same_source(previous, InitWeights(changed, weights_fingerprint(changed), "x"))


def test_a_rerun_must_name_the_source_the_run_started_from(shards, hf_dirs, tmp_path, capsys):
    run = _damaged_run(tmp_path / "run")  # a run started without --init_from, with a checkpoint
    source = str(hf_dirs["RobertaForMaskedLM"])
    code, err = train(
        ["--shards", shards, "--output", str(run), "--init_from", source, "--steps", "8"],
        capsys,
    )
    assert code == EXIT_USAGE
    assert "is a run started from --init_from unset, and this command gives --init_from" in err


@pytest.mark.slow
def test_on_the_jax_backend_transformers_models_and_a_jax_run_arrive_exactly(
    hf_dirs, shards, source_run, tmp_path
):
    """One JAX process: every transformers class, then a JAX run (which the TensorFlow backend reads too); a
    TensorFlow run is refused by the JAX backend with the way round it."""
    from lmshards.train.backends.weights import load_model_from_run

    ids, mask = sample_batch()
    references = {name: hf_outputs(path, ids, mask) for name, path in hf_dirs.items()}
    run = tmp_path / "jax_run"
    argv = [
        "--backend",
        "jax",
        "--shards",
        shards,
        "--output",
        str(run),
        "--steps",
        "4",
        *TRAIN_ARGS,
    ]
    code = f"""
import json
from lmshards.plumbing.errors import LmshardsError
from tests.helpers import hf_source
from lmshards.train.commands import cli
from lmshards.train.backends.weights import load_model_from_run
ids, mask = hf_source.sample_batch()
out = {{}}
for name, path in {json.dumps({k: str(v) for k, v in hf_dirs.items()})}.items():
    model = hf_source.initial_model(path, backend="jax", checkpoint_dir="{tmp_path}/" + name)
    out[name] = {{k: v.tolist() for k, v in hf_source.keras_outputs(model, ids, mask).items()}}
assert cli.main({json.dumps(argv)}) == 0
trained, _ = load_model_from_run("{run}")
model = hf_source.initial_model("{run}", backend="jax", checkpoint_dir="{tmp_path}/run")
ours, theirs = hf_source.keras_outputs(model, ids, mask), hf_source.keras_outputs(trained, ids, mask)
out["run_diff"] = max(float(abs(ours[k] - theirs[k]).max()) for k in ours)
try:
    hf_source.initial_model("{source_run}", backend="jax", checkpoint_dir="{tmp_path}/tf")
    out["refused"] = ""
except LmshardsError as e:
    out["refused"] = str(e)
print(json.dumps(out))
"""
    outputs = run_jax(code, devices=2, without_tensorflow=False)
    for name, reference in references.items():
        ours = {k: np.asarray(v, np.float32) for k, v in outputs[name].items()}
        diff = max_difference(ours, reference, mask)
        assert max(diff.values()) < TOLERANCE, (name, diff)
    assert outputs["run_diff"] == 0.0
    assert "is a run of the TensorFlow backend" in outputs["refused"]
    assert "lmshards export" in outputs["refused"]

    trained, _ = load_model_from_run(str(run))
    model = hf_source.initial_model(
        str(run), backend="tensorflow", checkpoint_dir=str(tmp_path / "c")
    )
    diff = max_difference(keras_outputs(model, ids, mask), keras_outputs(trained, ids, mask), mask)
    assert max(diff.values()) < TOLERANCE, diff


@pytest.mark.parametrize("file_format", ["pytorch_model.bin", "bfloat16 safetensors"])
def test_other_weight_files_arrive_too(file_format, hf_dirs, tmp_path):
    """pytorch_model.bin as older transformers saved it, and bfloat16 safetensors (read through torch)."""
    import torch
    from safetensors.torch import load_file, save_file

    source, reference = tmp_path / "source", tmp_path / "reference"
    shutil.copytree(hf_dirs["BertForMaskedLM"], source)
    shutil.copytree(hf_dirs["BertForMaskedLM"], reference)
    state = load_file(source / "model.safetensors")
    if file_format == "pytorch_model.bin":
        (source / "model.safetensors").unlink()
        torch.save(state, source / "pytorch_model.bin")
    else:  # the reference: the same bfloat16 values in float32
        save_file({k: v.to(torch.bfloat16) for k, v in state.items()}, source / "model.safetensors")
        rounded = {k: v.to(torch.bfloat16).float() for k, v in state.items()}
        save_file(rounded, reference / "model.safetensors")
    ids, mask = sample_batch()
    model = hf_source.initial_model(
        str(source), backend="tensorflow", checkpoint_dir=str(tmp_path / "c")
    )
    diff = max_difference(keras_outputs(model, ids, mask), hf_outputs(reference, ids, mask), mask)
    assert max(diff.values()) < TOLERANCE, diff
    assert inspect_init_source(str(source)).weights.read_from.endswith(  # type: ignore[union-attr]
        "pytorch_model.bin" if file_format == "pytorch_model.bin" else "model.safetensors"
    )


def test_a_transformers_source_is_checked_without_importing_tensorflow(shards, hf_dirs, tmp_path):
    """Reading and mapping a transformers model happens in preflight: a misfit is refused before TensorFlow loads."""
    import subprocess
    import sys

    from tests.helpers.jax_subprocess import REPO

    probe = (
        "import sys\nfrom lmshards.command.cli import main\ncode = main(sys.argv[1:])\n"
        "print('TENSORFLOW', 'tensorflow' in sys.modules)\nsys.exit(code)\n"
    )
    source = str(hf_dirs["BertForMaskedLM"])
    argv = ["train", "--shards", shards, "--output", str(tmp_path / "run"), "--init_from", source]
    done = subprocess.run(
        [sys.executable, "-c", probe, *argv, "--steps", "2", "--model_preset", "small"],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == EXIT_USAGE, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "TENSORFLOW False"
    assert "--model_preset small asks for" in done.stderr
