"""The learning benchmark's own logic: the reference's recipe, shard decoding and the shared evaluation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import RobertaConfig, RobertaForMaskedLM, get_linear_schedule_with_warmup

from bench import bench_learning as bl
from lmshards.schemas.constants import ATTENTION_MASK, INPUT_IDS, TRAIN_SPLIT
from lmshards.schemas.manifest import TokenizerInfo
from tests.helpers.shard_factory import write_shards

REPO = Path(__file__).resolve().parents[2]

SPEC = bl.MaskingSpec(vocab_size=1000, mask_id=4, special_ids=(0, 1, 2, 3, 4))
PAD = 1


def _records(
    rows: int, seq_len: int, *, seed: int = 0, padded_rows: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random non-special ids [rows, seq_len] with <s> ... </s>; the last padded_rows rows half padding."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, SPEC.vocab_size, size=(rows, seq_len))
    ids[:, 0], ids[:, -1] = 0, 2
    mask = np.ones_like(ids)
    if padded_rows:
        mask[-padded_rows:, seq_len // 2 :] = 0
        ids[mask == 0] = PAD
    return torch.from_numpy(ids), torch.from_numpy(mask)


def test_schedule_is_transformers_linear_warmup_with_5_percent_warmup():
    total = 300
    warmup = bl.warmup_steps_for(total)
    assert warmup == 15 and bl.warmup_steps_for(10) == 1 and bl.warmup_steps_for(21) == 2
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    hf = get_linear_schedule_with_warmup(
        optimizer, num_warmup_steps=warmup, num_training_steps=total
    )
    expected = [hf.lr_lambdas[0](step) for step in range(total + 1)]
    ours = [bl.lr_factor(step, warmup_steps=warmup, total_steps=total) for step in range(total + 1)]
    assert ours == pytest.approx(expected, abs=1e-12)
    # The first update runs at rate 0, the peak is reached at the end of warmup, the last update is above 0.
    assert (ours[0], ours[warmup], ours[total]) == (0.0, 1.0, 0.0)
    assert ours[total - 1] > 0.0
    assert all(a < b for a, b in zip(ours[:warmup], ours[1 : warmup + 1]))
    assert all(a > b for a, b in zip(ours[warmup:total], ours[warmup + 1 : total + 1]))


def test_weight_decay_skips_exactly_the_layernorm_weights_and_the_biases():
    config = RobertaConfig(vocab_size=50, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=16, max_position_embeddings=20, pad_token_id=1)  # fmt: skip
    model = RobertaForMaskedLM(config)
    decayed, kept = bl.param_groups(model, weight_decay=0.01)
    assert (decayed["weight_decay"], kept["weight_decay"]) == (0.01, 0.0)
    names = {id(p): n for n, p in model.named_parameters()}
    kept_names = {names[id(p)] for p in kept["params"]}
    decayed_names = {names[id(p)] for p in decayed["params"]}
    # In RoBERTa every 1-D parameter is a bias or a LayerNorm weight, and nothing else is.
    assert kept_names == {n for n, p in model.named_parameters() if p.ndim == 1}
    assert decayed_names == {n for n, p in model.named_parameters() if p.ndim > 1}
    assert (
        "lm_head.layer_norm.weight" in kept_names
        and "roberta.embeddings.LayerNorm.weight" in kept_names
    )
    assert (
        "roberta.embeddings.word_embeddings.weight" in decayed_names
    )  # tied to the decoder: listed once
    assert len(decayed["params"]) + len(kept["params"]) == len(list(model.parameters()))


def test_masking_is_80_10_10_of_15_percent_and_never_selects_special_or_padding_tokens():
    ids, mask = _records(400, 128, padded_rows=100)
    batch = bl.mask_tokens(ids, mask, SPEC, torch.Generator().manual_seed(0))
    selected = batch.labels != bl.IGNORE_INDEX
    candidate = mask.bool() & (ids > 4)

    assert not (selected & ~candidate).any()
    assert torch.equal(batch.labels[selected], ids[selected])
    assert torch.equal(batch.input_ids[~selected], ids[~selected])  # only selected tokens change
    assert torch.equal(batch.attention_mask, mask)
    assert selected.sum() / candidate.sum() == pytest.approx(0.15, abs=0.005)
    new = batch.input_ids[selected]
    masked = new == SPEC.mask_id
    kept = new == ids[selected]
    randomized = ~masked & ~kept
    n = selected.sum().item()
    assert masked.sum() / n == pytest.approx(0.8, abs=0.01)
    # A random draw equal to the original token (1 in 995) counts as kept: ~10% each.
    assert kept.sum() / n == pytest.approx(0.1, abs=0.01)
    assert randomized.sum() / n == pytest.approx(0.1, abs=0.01)
    assert (new[randomized] > 4).all()  # random replacements are never special tokens


def test_eval_batches_are_one_fixed_draw_and_every_model_is_scored_on_the_same_tensors():
    ids, mask = _records(150, 32, seed=1, padded_rows=10)
    validation = {INPUT_IDS: ids.numpy(), ATTENTION_MASK: mask.numpy()}
    batches = bl.eval_batches(validation, SPEC, batch_size=64)
    again = bl.eval_batches(validation, SPEC, batch_size=64)
    assert [len(b.input_ids) for b in batches] == [64, 64, 22]
    for a, b in zip(batches, again):
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.labels, b.labels)
    assert not torch.equal(bl.eval_batches(validation, SPEC, seed=7)[0].labels, batches[0].labels)

    oracle, uniform = _Scorer(batches), _Scorer(None)
    out = bl.evaluate_side_by_side({"a": oracle, "b": uniform}, batches, pairs=[("a", "b")])

    assert len(oracle.seen) == len(uniform.seen) == len(batches)
    for (ids_a, mask_a), (ids_b, mask_b), batch in zip(oracle.seen, uniform.seen, batches):
        assert ids_a is ids_b is batch.input_ids and mask_a is mask_b is batch.attention_mask
    predicted = int(sum((b.labels != bl.IGNORE_INDEX).sum() for b in batches))
    a, b = out["results"]["a"], out["results"]["b"]
    assert a.masked_tokens == b.masked_tokens == predicted > 0
    assert b.loss == pytest.approx(np.log(SPEC.vocab_size), rel=1e-6)  # uniform logits: log V nats
    assert a.accuracy == 1.0 and a.loss < 1e-6
    assert out["pairs"]["a - b"]["diff"] == pytest.approx(a.loss - b.loss, rel=1e-6)
    assert not oracle.training and not uniform.training  # scored in eval mode


def test_the_reference_applies_the_lm_head_at_the_masked_positions_only():
    config = RobertaConfig(vocab_size=SPEC.vocab_size, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=16, max_position_embeddings=40, pad_token_id=PAD)  # fmt: skip
    model = RobertaForMaskedLM(config).eval()
    ids, mask = _records(4, 32, seed=5, padded_rows=1)
    batch = bl.mask_tokens(ids, mask, SPEC, torch.Generator().manual_seed(0))
    calls = []
    model.lm_head.register_forward_hook(lambda module, args, out: calls.append(args[0].shape))
    with torch.no_grad():
        logits, labels = bl.masked_logits(model, batch)
        full = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    where = batch.labels != bl.IGNORE_INDEX
    assert calls[0] == (int(where.sum()), 8)  # the head saw the predicted tokens' states only
    torch.testing.assert_close(logits, full[where], atol=1e-5, rtol=0)
    assert torch.equal(labels, batch.labels[where])


def test_verdicts_need_every_loss_pair_and_one_fast_backend():
    systems = [bl.system_name(b) for b in bl.BACKENDS]
    assert bl.compared_pairs(systems) == [
        ("lmshards-tensorflow", "reference"),
        ("lmshards-jax", "reference"),
        ("lmshards-jax", "lmshards-tensorflow"),
    ]

    def times(ms):
        return bl.StepTimes(window_ms=(ms,), window=10, cpu_ms_per_step=ms, mean_load1=0.0)

    evaluation = {
        "pairs": {
            bl.pair_name(a, b): {"diff": 0.01, "stderr": 0.001}
            for a, b in bl.compared_pairs(systems)
        }
    }
    walls = {systems[0]: 105.0, systems[1]: 130.0, "reference": 100.0}
    v = bl.verdicts(
        evaluation,
        {systems[0]: times(150.0), systems[1]: times(90.0), "reference": times(100.0)},
        walls,
    )
    assert v["eval_loss"]["met"] and v["step_time"]["met"]
    # The default backend (TensorFlow) is judged on its wall time to the last step, start-up included.
    assert v["default_wall"]["default_backend"] == "lmshards-tensorflow"
    assert v["default_wall"]["over_reference"] == pytest.approx(1.05) and v["default_wall"]["met"]
    assert v["step_time"]["fastest"] == "lmshards-jax"
    assert v["step_time"]["systems"]["lmshards-tensorflow"]["over_reference"] == pytest.approx(1.5)
    evaluation["pairs"]["lmshards-jax - reference"]["diff"] = 0.03
    slow = bl.verdicts(
        evaluation,
        {systems[0]: times(150.0), systems[1]: times(120.0), "reference": times(100.0)},
        {**walls, systems[0]: 115.0},
    )
    assert not slow["eval_loss"]["met"] and not slow["step_time"]["met"]
    assert not slow["default_wall"]["met"]


class _Scorer(torch.nn.Module):
    """Records its inputs. Logits: 30 on each position's label (its batch found by identity); all 0 without batches."""

    def __init__(self, batches):
        super().__init__()
        self.labels = {id(b.input_ids): b.labels for b in batches or ()}
        self.seen = []

    def forward(self, *, input_ids, attention_mask):
        self.seen.append((input_ids, attention_mask))
        logits = torch.zeros(*input_ids.shape, SPEC.vocab_size)
        if self.labels:
            logits.scatter_(-1, self.labels[id(input_ids)].clamp(min=0).unsqueeze(-1), 30.0)
        return SimpleNamespace(logits=logits)


def test_masking_spec_comes_from_the_manifest_tokenizer(tmp_path):
    tokenizer = TokenizerInfo(fingerprint="sha256:" + "0" * 64, vocab_size=1000,
                              special_token_ids={"cls": 0, "pad": 1, "sep": 2, "unk": 3, "mask": 4},
                              all_special_ids=(0, 1, 2, 3, 4))  # fmt: skip
    ids, mask = (t.numpy() for t in _records(4, 16))
    manifest = write_shards(
        tmp_path, {TRAIN_SPLIT: (ids, mask, 1)}, seq_len=16, tokenizer=tokenizer, inputs=()
    )
    assert bl.MaskingSpec.from_manifest(manifest) == SPEC


def test_batches_are_full_and_each_epoch_visits_distinct_records():
    rows = list(bl.batch_rows(100, batch_size=32, steps=7, seed=0))
    assert len(rows) == 7 and all(len(r) == 32 for r in rows)
    for epoch in (
        rows[0:3],
        rows[3:6],
    ):  # 3 full batches per epoch; the 4 records left over are skipped
        seen = np.concatenate(epoch)
        assert len(set(seen.tolist())) == 96
    assert not np.array_equal(np.concatenate(rows[0:3]), np.concatenate(rows[3:6]))
    assert all(
        np.array_equal(a, b)
        for a, b in zip(rows, bl.batch_rows(100, batch_size=32, steps=7, seed=0))
    )
    with pytest.raises(ValueError, match="fewer than one batch"):
        next(bl.batch_rows(10, batch_size=32, steps=1, seed=0))


def test_timing_windows_leave_out_the_first_ten_steps():
    assert bl.kept_windows(300, window=10) == list(range(10, 291, 10))
    assert bl.kept_windows(100, window=20) == [20, 40, 60, 80]
    assert bl.kept_windows(40, window=3) == [12, 15, 18, 21, 24, 27, 30, 33, 36]
    times = bl.StepTimes(
        window_ms=(30.0, 10.0, 20.0, 50.0), window=10, cpu_ms_per_step=None, mean_load1=0.0
    )
    assert (times.median_ms, times.steps_per_s) == (25.0, 40.0)


def test_command_line_options_reach_the_lmshards_command_and_environment(tmp_path):
    for bad in (
        ["--shards", "somewhere"],
        ["--steps", "25"],
        ["--threads", "0"],
        ["--lmshards-env", "NOVALUE"],
    ):
        with pytest.raises(SystemExit):
            bl.parse_args(bad)
    config = bl.parse_args(["--steps", "110", "--lmshards-args", "--steps_per_execution 10", "--threads", "1",
                            "--lmshards-env", "TF_NUM_INTEROP_THREADS=2", "--work-dir", str(tmp_path)])  # fmt: skip
    args = bl.train_args(config, shards="S", tokenizer="T", run_dir=tmp_path / "run")
    flags = dict(zip(args[1:-2:2], args[2:-2:2]))
    assert args[-2:] == ["--steps_per_execution", "10"]
    assert bl.train_args(config, shards="S", tokenizer="T", run_dir=tmp_path, backend="jax")[
        1:3
    ] == [
        "--backend",
        "jax",
    ]
    expected = {
        "--steps": "110",
        "--per_replica_batch": "32",
        "--warmup_steps": "6",
        "--log_every": "50",
        "--model_preset": "tiny",
        "--learning_rate": "0.0005",
        "--lr_schedule": "linear",
        "--backend": "tensorflow",
    }
    assert {k: flags[k] for k in expected} == expected
    assert config.lmshards_env == {"TF_NUM_INTEROP_THREADS": "2"}
    assert bl.thread_env(config.threads) == {
        "TF_NUM_INTRAOP_THREADS": "1",
        "TF_NUM_INTEROP_THREADS": "1",
        "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false",
    }
    assert config.backends == bl.BACKENDS
    assert bl.thread_env(None) == {}


def test_families_train_modernbert_beside_roberta_with_the_same_masking_and_need_roberta(tmp_path):
    with pytest.raises(SystemExit):  # the reference is built from the RoBERTa export
        bl.parse_args(["--families", "modernbert"])
    config = bl.parse_args(["--families", "roberta", "modernbert", "--backends", "tensorflow",
                            "--work-dir", str(tmp_path)])  # fmt: skip
    assert (config.families, config.backends) == (("roberta", "modernbert"), ("tensorflow",))
    assert [bl.system_name("tensorflow", f) for f in config.families] == [
        "lmshards-tensorflow",
        "lmshards-tensorflow-modernbert",
    ]
    args = bl.train_args(config, shards="S", tokenizer="T", run_dir=tmp_path, family="modernbert")
    flags = dict(zip(args[1::2], args[2::2]))
    assert (flags["--model_family"], flags["--mlm_probability"]) == ("modernbert", "0.15")
    assert bl.compared_pairs(["lmshards-tensorflow", "lmshards-tensorflow-modernbert"])[-1] == (
        "lmshards-tensorflow-modernbert",
        "lmshards-tensorflow",
    )


PINNED_CHILD = """
import os, subprocess, sys
from bench.bench_learning import pin_to_cores
cores = pin_to_cores(int(sys.argv[1]))
child = subprocess.run(
    [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"], capture_output=True, text=True
)
print(cores, child.stdout.strip())
"""


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="pinning to fewer cores needs two of them"
)
def test_threads_pin_the_bench_and_the_processes_it_starts_to_that_many_cores():
    allowed = sorted(os.sched_getaffinity(0))

    def pinned(threads: int) -> str:
        done = subprocess.run(
            [sys.executable, "-c", PINNED_CHILD, str(threads)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    assert pinned(1) == f"{allowed[:1]} {allowed[:1]}"
    # No more cores than there are: every core stays.
    assert pinned(len(allowed)) == f"{allowed} {allowed}"
