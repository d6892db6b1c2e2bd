"""Optimizer: no weight decay on LayerNorm weights and biases; warmup then linear/cosine decay to 0, and --extend segments."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("keras_hub")

from lmshards.train.config import preset_config  # noqa: E402
from lmshards.train.network.model import build_masked_lm  # noqa: E402
from lmshards.train.optim import WarmupDecay, make_optimizer, warmup_steps_for  # noqa: E402


def test_weight_decay_skips_layer_norm_and_biases():
    model = build_masked_lm(preset_config("tiny", family="bert", vocabulary_size=100))
    schedule = WarmupDecay(peak=1e-3, warmup_steps=1, total_steps=10)
    optimizer = make_optimizer(
        schedule=schedule, weight_decay=0.01, clip_norm=1.0, loss_scaling=False
    )
    optimizer.build(model.trainable_variables)
    decayed = {v.name for v in model.trainable_variables if optimizer._use_weight_decay(v)}
    assert decayed == {"embeddings", "kernel"}


@pytest.mark.parametrize("decay, middle", [("linear", 0.5e-3), ("cosine", 0.5e-3)])
def test_schedule(decay, middle):
    s = WarmupDecay(peak=1e-3, warmup_steps=10, total_steps=110, decay=decay)
    assert [float(s(x)) for x in (0, 5, 10, 60, 110, 200)] == pytest.approx(
        [0, 0.5e-3, 1e-3, middle, 0, 0], abs=1e-9
    )
    assert float(s(35)) == pytest.approx(
        0.75e-3 if decay == "linear" else 0.5e-3 * (1 + 0.7071067811865476), rel=1e-5
    )


def test_default_warmup_is_five_percent():
    assert (
        warmup_steps_for(1000, None) == 50
        and warmup_steps_for(10, None) == 1
        and warmup_steps_for(1000, 7) == 7
    )


@pytest.mark.parametrize("decay", ["linear", "cosine"])
def test_extension_continues_the_rate_and_falls_linearly_to_zero(decay):
    base = WarmupDecay(peak=1e-3, warmup_steps=10, total_steps=110, decay=decay)
    extended = base.extended(from_step=60, to_step=160)
    rate_at_60 = float(base(60))
    assert extended.end_step == 160 and base.end_step == 110
    # Unchanged before the extension, continuous at its start, linear to 0 at its end, no warmup.
    assert [float(extended(s)) for s in (0, 5, 10, 59)] == pytest.approx(
        [float(base(s)) for s in (0, 5, 10, 59)], abs=1e-9
    )
    assert [float(extended(s)) for s in (60, 85, 110, 160, 200)] == pytest.approx(
        [rate_at_60, 0.75 * rate_at_60, 0.5 * rate_at_60, 0.0, 0.0], abs=1e-9
    )


def test_a_second_extension_takes_over_from_its_start_and_the_config_round_trips():
    first = WarmupDecay(peak=1e-3, warmup_steps=10, total_steps=110).extended(
        from_step=60, to_step=160
    )
    second = first.extended(from_step=100, to_step=300)
    assert float(second(100)) == pytest.approx(float(first(100)), abs=1e-12)
    assert float(second(200)) == pytest.approx(0.5 * float(first(100)), abs=1e-9)
    assert [e["start_step"] for e in second.get_config()["extensions"]] == [60, 100]
    again = WarmupDecay.from_config(json.loads(json.dumps(second.get_config())))
    assert [float(again(s)) for s in range(0, 320, 7)] == [
        float(second(s)) for s in range(0, 320, 7)
    ]
    assert again.end_step == 300
