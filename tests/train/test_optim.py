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


@pytest.mark.parametrize("shape", ["linear", "1-sqrt"])
def test_wsd_warms_up_holds_the_peak_then_decays_over_the_last_fraction(shape):
    s = WarmupDecay(
        peak=1e-3,
        warmup_steps=10,
        total_steps=110,
        decay="wsd",
        decay_fraction=0.2,
        decay_shape=shape,
    )
    # Decay starts at 110 - 0.2 * 110 = 88; at 99 a half of it has passed.
    left = 0.5 if shape == "linear" else 1 - 0.5**0.5
    assert [float(s(x)) for x in (0, 5, 10, 50, 88, 99, 110, 200)] == pytest.approx(
        [0, 0.5e-3, 1e-3, 1e-3, 1e-3, 1e-3 * left, 0, 0], abs=1e-9
    )
    # The record of a run keeps the fraction and shape, and rebuilds the same schedule.
    config = json.loads(json.dumps(s.get_config()))
    assert (config["decay_fraction"], config["decay_shape"]) == (0.2, shape)
    assert float(WarmupDecay.from_config(config)(99)) == pytest.approx(float(s(99)))
    # The other schedules' records are what they were.
    assert set(WarmupDecay(peak=1e-3, warmup_steps=1, total_steps=10).get_config()) == {
        "peak",
        "warmup_steps",
        "total_steps",
        "decay",
        "extensions",
    }


def stable_adamw_reference(grads, *, lr, beta_1=0.9, beta_2=0.98, eps=1e-6):
    """The weights after StableAdamW's updates of one tensor from 0 (Wortsman et al. 2023, Algorithm 2), without
    weight decay, in numpy; epsilon where Keras' Adam puts it (sqrt(v) + eps before the bias correction)."""
    import numpy as np

    m = v = np.zeros_like(grads[0])
    weight = np.zeros_like(grads[0])
    for t, g in enumerate(grads, start=1):
        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g * g
        v_hat = v / (1 - beta_2**t)
        rms = np.sqrt(np.mean(g * g / np.maximum(v_hat, eps**2)))
        step_lr = lr / max(1.0, rms)
        alpha = step_lr * np.sqrt(1 - beta_2**t) / (1 - beta_1**t)
        weight = weight - alpha * m / (np.sqrt(v) + eps)
    return weight


def test_stable_adamw_clips_a_spikes_update_per_tensor():
    import keras
    import numpy as np

    lr = 1e-2
    schedule = WarmupDecay(
        peak=lr, warmup_steps=0, total_steps=10**6, decay="wsd", decay_fraction=0.0
    )
    rng = np.random.default_rng(0)
    small = [rng.normal(0, 1e-3, (4, 3)).astype("float32") for _ in range(3)]
    spike = rng.normal(0, 1.0, (4, 3)).astype("float32")  # 1,000 times the gradients before it
    steps = {}
    for name in ("adamw", "stable_adamw"):
        variable = keras.Variable(np.zeros((4, 3), "float32"), name="kernel")
        optimizer = make_optimizer(
            schedule=schedule, weight_decay=0.0, clip_norm=None, loss_scaling=False, optimizer=name
        )
        optimizer.build([variable])
        for g in small:
            optimizer.apply_gradients([(keras.ops.convert_to_tensor(g), variable)])
        before = variable.numpy().copy()
        optimizer.apply_gradients([(keras.ops.convert_to_tensor(spike), variable)])
        steps[name] = (before, variable.numpy() - before)
    before, stable_step = steps["stable_adamw"]
    # Every step is Adam's divided by max(1, its tensor's RMS).
    np.testing.assert_allclose(before, stable_adamw_reference(small, lr=lr), rtol=1e-4, atol=1e-9)
    expected = stable_adamw_reference([*small, spike], lr=lr) - stable_adamw_reference(small, lr=lr)
    np.testing.assert_allclose(stable_step, expected, rtol=1e-3, atol=1e-9)
    # The spike's RMS is about 2 (g^2 / v_hat ~ 1 / (0.02 / (1 - 0.98^4))): its step is about half of Adam's.
    assert np.abs(stable_step).max() < 0.6 * np.abs(steps["adamw"][1]).max()


def test_stable_adamw_decays_weights_by_the_schedules_fraction_of_its_peak():
    import keras
    import numpy as np

    schedule = WarmupDecay(
        peak=1e-2, warmup_steps=0, total_steps=2
    )  # at step 1 the rate is half its peak
    variable = keras.Variable(np.ones((2,), "float32"), name="kernel")
    optimizer = make_optimizer(
        schedule=schedule,
        weight_decay=0.1,
        clip_norm=None,
        loss_scaling=False,
        optimizer="stable_adamw",
    )
    optimizer.build([variable])
    optimizer.apply_gradients(
        [(keras.ops.zeros((2,)), variable)]
    )  # step 0: rate 1e-2, decay 0.1 * 1
    optimizer.apply_gradients(
        [(keras.ops.zeros((2,)), variable)]
    )  # step 1: rate 0.5e-2, decay 0.1 * 0.5
    np.testing.assert_allclose(variable.numpy(), [0.9 * 0.95] * 2, rtol=1e-6)
