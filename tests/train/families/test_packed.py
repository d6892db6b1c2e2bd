"""Training on packed blocks (`preprocess --packing best_fit`): each document computed as if alone, on
both backends; the inputs the packed model reads; export; what is refused."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from lmshards.command.cli import main as lmshards_main  # noqa: E402
from lmshards.plumbing.errors import LmshardsError  # noqa: E402
from lmshards.schemas.constants import POSITIONS, SEGMENT_IDS  # noqa: E402
from lmshards.schemas.manifest import TokenizerInfo, read_manifest  # noqa: E402
from lmshards.train.config import ModelConfig  # noqa: E402
from lmshards.train.families import check_packed_support, family_names, get_family  # noqa: E402
from lmshards.train.families.base import PACKED_POSITIONS_INPUT, PACKED_SEGMENTS_INPUT  # noqa: E402
from lmshards.train.inputs import data, mixture  # noqa: E402
from tests.helpers.jax_subprocess import REPO, jax_env, run_jax  # noqa: E402
from tests.helpers.long_documents import write_long_documents  # noqa: E402
from tests.helpers.packed_blocks import alone_inputs, packed_vs_alone  # noqa: E402
from tests.helpers.shard_factory import write_packed_shards  # noqa: E402

SEQ_LEN = 32
# fp32 logits of a packed block equal each document's alone to this (the same sums, in another order).
EXACT = 1e-5


def _preprocess(output: Path, tokenizer: Path, files: list[Path], *flags: str) -> str:
    argv = ["preprocess", "--tokenizer", str(tokenizer), "--output", str(output)]
    for f in files:
        argv += ["--input", str(f)]
    argv += ["--seq_len", str(SEQ_LEN), "--validation_fraction", "0.1", "--num_shards", "2"]
    argv += ["--shard_multiple", "1", "--direct_running_mode=in_memory", *flags]
    assert lmshards_main(argv) == 0
    return str(output)


@pytest.fixture(scope="module")
def sets(tmp_path_factory, sample_tokenizer, sample_files) -> dict[str, str]:
    root = tmp_path_factory.mktemp("sets")
    english = [f for f in sample_files if f.parent.name == "en"]
    return {
        "packed": _preprocess(root / "packed", sample_tokenizer, english, "--packing", "best_fit"),
        "concat": _preprocess(root / "concat", sample_tokenizer, english),
    }


@pytest.mark.parametrize("family", family_names())
def test_a_packed_block_gives_each_document_its_logits_alone_tensorflow(family):
    result = packed_vs_alone(family)
    assert result["max_difference"] < EXACT and result["max_logit"] > 0.5


@pytest.mark.slow
def test_a_packed_block_gives_each_document_its_logits_alone_jax():
    code = (
        "import json\nfrom tests.helpers.packed_blocks import packed_vs_alone\n"
        "print(json.dumps({f: packed_vs_alone(f) for f in ('roberta', 'bert')}))"
    )
    for family, result in run_jax(code, devices=1).items():
        assert result["max_difference"] < EXACT and result["max_logit"] > 0.5, family


def test_without_segments_the_block_s_documents_would_see_each_other():
    """The check above can fail: the plain model on the same block differs from the documents alone."""
    from lmshards.train.config import ModelConfig
    from lmshards.train.network.model import build_masked_lm
    from tests.helpers.masked_lm_factory import perturb
    from tests.helpers.packed_blocks import BLOCKS, packed_block_inputs

    config = ModelConfig(vocabulary_size=300, dropout=0.0, max_sequence_length=SEQ_LEN)
    plain = build_masked_lm(config)
    perturb(plain, seed=0)
    rng = np.random.default_rng(0)
    docs = [[rng.integers(5, 300, n) for n in lengths] for lengths in BLOCKS]
    inputs = packed_block_inputs(docs, seq_len=SEQ_LEN, uses_segment_ids=False)
    concatenated = np.asarray(
        plain(
            {
                "token_ids": inputs["token_ids"],
                "padding_mask": (inputs[PACKED_SEGMENTS_INPUT] > 0).astype(np.int32),
                "mask_positions": inputs["mask_positions"],
            }
        )
    )
    second = docs[0][1]
    alone = np.asarray(plain(alone_inputs(second, uses_segment_ids=False)))[0]
    assert np.abs(concatenated[0, 7 : 7 + second.size] - alone).max() > 1e-2


def test_the_input_pipeline_feeds_segments_and_positions_and_never_predicts_padding(sets):
    mix = mixture.open_mixture([sets["packed"]])
    masking = data.masking_spec(mix.manifest, recipe="token", mlm_probability=0.3, tokenizer=None)
    train = mix.sets[0].files("train")
    files = mixture.SplitFiles(
        paths=train.paths[:1], records=train.records[:1]
    )  # one file: record order
    ds = data.eval_dataset(
        files,
        features=mix.manifest.features(),
        batch_size=8,
        masking=masking,
        with_segment_ids=False,
    )
    spec = {name: tf.io.FixedLenFeature([SEQ_LEN], tf.int64) for name in (SEGMENT_IDS, POSITIONS)}
    records = (
        tf.data.TFRecordDataset(list(files.paths))
        .batch(8)
        .map(lambda r: tf.io.parse_example(r, spec))
    )
    most = 0
    for batch, record in zip(ds, records):
        segments = batch[PACKED_SEGMENTS_INPUT].numpy()
        np.testing.assert_array_equal(segments, record[SEGMENT_IDS].numpy())
        np.testing.assert_array_equal(
            batch[PACKED_POSITIONS_INPUT].numpy(), record[POSITIONS].numpy()
        )
        most = max(most, int(segments.max()))
        weights = batch["mask_weights"].numpy() > 0
        predicted = np.take_along_axis(segments, batch["mask_positions"].numpy(), axis=1)[weights]
        assert (predicted > 0).all()
    assert most > 1  # blocks of several documents


def _train(shards: str, run: Path, *extra: str, backend: str = "tensorflow") -> list[str]:
    return [
        sys.executable, "-m", "lmshards", "train", "--shards", shards, "--output", str(run),
        "--backend", backend, "--steps", "4", "--per_replica_batch", "4", "--eval_every", "100",
        "--eval_batches", "2", "--checkpoint_every", "4", "--learning_rate", "1e-3", *extra,
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("family", family_names())
def test_a_run_on_packed_blocks_exports_a_model_with_the_trainer_s_logits(family, sets, tmp_path):
    import torch
    import transformers

    from lmshards.train.backends.weights import load_model_from_run
    from lmshards.train.commands import export_cli

    run = tmp_path / "run"
    done = subprocess.run(
        _train(sets["packed"], run, "--model_family", family, "--strategy", "cpu"),
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    config = json.loads((run / "run_config.json").read_text())
    assert SEGMENT_IDS in config["features"]
    model, _ = load_model_from_run(str(run))
    assert PACKED_SEGMENTS_INPUT in model.input
    assert export_cli.main([str(run), "--output", str(tmp_path / "model")]) == 0

    doc = np.random.default_rng(2).integers(5, 1000, 20).astype(np.int32)
    inputs = {"token_ids": doc[None], PACKED_SEGMENTS_INPUT: np.ones((1, doc.size), np.int32)}
    inputs[PACKED_POSITIONS_INPUT] = np.arange(doc.size, dtype=np.int32)[None]
    if get_family(family).uses_segment_ids:
        inputs["segment_ids"] = np.zeros((1, doc.size), np.int32)
    keras_logits = np.asarray(model({**inputs, "mask_positions": inputs[PACKED_POSITIONS_INPUT]}))
    hf = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "model")
    with torch.no_grad():
        hf_logits = hf(input_ids=torch.tensor(doc[None], dtype=torch.long)).logits.numpy()
    assert np.abs(hf_logits - keras_logits).max() < 1e-4


@pytest.mark.slow
def test_the_jax_backend_trains_on_packed_blocks(sets, tmp_path):
    run = tmp_path / "run"
    done = subprocess.run(
        _train(sets["packed"], run, backend="jax"),
        env=jax_env(1),
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run / "run_summary.json").read_text())
    assert (
        summary["global_step"] == 4
        and np.isfinite(summary["train_loss"])
        and np.isfinite(summary["eval_loss"])
    )


def test_a_mixture_of_packed_and_concatenated_sets_is_refused_naming_both(sets, tmp_path, capsys):
    argv = [
        "train",
        "--shards",
        sets["concat"],
        "--shards",
        sets["packed"],
        "--output",
        str(tmp_path / "r"),
    ]
    assert lmshards_main([*argv, "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"--shards {sets['packed']!r} is packed (--packing best_fit)" in err
    assert f"--shards {sets['concat']!r} is not" in err


def test_a_family_that_cannot_take_an_attention_mask_is_refused():
    family = dataclasses.replace(get_family("bert"), name="plain", keras_packed_backbone=None)
    with pytest.raises(LmshardsError) as e:
        check_packed_support(family, "--shards 'packed'")
    assert str(e.value).startswith(
        "--model_family plain cannot take the [batch, seq, seq] attention mask that keeps a packed block's "
        "documents apart, and --shards 'packed' is packed (--packing best_fit); use --model_family roberta or bert"
    )


@pytest.mark.parametrize("family", family_names())
def test_each_family_s_packed_backbone_is_its_keras_hub_backbone_with_the_same_variables(family):
    import keras_hub

    from lmshards.train.network.model import (
        build_masked_lm,
        keras_hub_classes,
        packed_backbone_class,
    )

    declared = get_family(family)
    cls = packed_backbone_class(declared)
    assert issubclass(cls, keras_hub_classes(declared)[0])
    assert issubclass(cls, keras_hub.models.Backbone)
    config = ModelConfig(family=family, vocabulary_size=100, max_sequence_length=SEQ_LEN)
    plain, packed_lm = build_masked_lm(config), build_masked_lm(config, packed=True)
    assert [v.path for v in packed_lm.weights] == [v.path for v in plain.weights]
    assert type(packed_lm.backbone).from_config(packed_lm.backbone.get_config()).count_params() == (
        plain.backbone.count_params()
    )


def _losses(run: Path) -> list[float]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r["loss"] for r in map(json.loads, lines) if "loss" in r]


@pytest.mark.slow
def test_both_backends_learn_from_documents_of_3_to_40_blocks(
    tmp_path, sample_tokenizer, sample_files
):
    """Every piece of a long document is a segment from position 0: positions stay inside the
    position table, so both backends train on them, and learn."""
    long = write_long_documents(tmp_path / "long.txt", sample_tokenizer, seq_len=SEQ_LEN)
    shards = _preprocess(tmp_path / "packed", sample_tokenizer, [long], "--packing", "best_fit")
    manifest = read_manifest(shards)
    assert manifest.split("train").totals.documents_split > 30
    steps = ["--steps", "24", "--log_every", "1", "--warmup_steps", "2", "--learning_rate", "3e-3"]
    for backend, env in (("tensorflow", None), ("jax", jax_env(1))):
        run = tmp_path / backend
        done = subprocess.run(
            _train(shards, run, *steps, backend=backend),
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        losses = _losses(run)
        assert len(losses) == 24 and np.isfinite(losses).all(), (backend, losses)
        # From about ln(vocab 2000) = 7.6: 0.5 lower in 24 steps on this machine, either backend.
        assert np.mean(losses[-4:]) < np.mean(losses[:4]) - 0.25, (backend, losses)


def test_a_packed_set_of_the_old_positions_is_refused_in_one_line(tmp_path, capsys):
    """Format version 3 numbered a long document's later pieces from the document's start."""
    seq_len = 8
    segments = np.ones((4, seq_len), np.int64)
    positions = np.arange(4 * seq_len).reshape(4, seq_len)  # one document of 4 blocks
    features = {
        "input_ids": np.full((4, seq_len), 7),
        "attention_mask": segments,
        "segment_ids": segments,
        "positions": positions,
    }
    tokenizer = TokenizerInfo(
        fingerprint="f" * 16, vocab_size=100, special_token_ids={"pad": 1}, all_special_ids=(1,)
    )
    old = tmp_path / "old"
    write_packed_shards(
        old, features, seq_len=seq_len, tokenizer=tokenizer, format_version=3, documents_split=1
    )
    argv = ["train", "--shards", str(old), "--output", str(tmp_path / "run"), "--steps", "1"]
    assert lmshards_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        f"{str(old)!r} is a packed set of manifest format_version 3: its 1 documents longer than a "
        "block carry positions past seq_len 8, which this lmshards does not train on; write it "
        "again with positions restarting in every piece: run `lmshards preprocess` again."
    )
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()
