"""bench_mfu: the FLOPs formula, the peak table, and a run of the JAX step that never imports TensorFlow."""

from __future__ import annotations

import pytest

from bench import bench_mfu
from tests.helpers.jax_subprocess import run_jax

pytest.importorskip("jax")


def test_flops_per_token_of_base_follow_the_stated_formula():
    # base: 12 layers, hidden 768, FFN 3072, BERT's vocabulary, 32 predicted slots of 128 tokens.
    got = bench_mfu.flops_per_token(
        layers=12, hidden=768, intermediate=3072, seq_len=128, vocab=30522, predictions=32
    )
    encoder = 6 * 12 * (4 * 768**2 + 2 * 768 * 3072)
    attention = 12 * 12 * 128 * 768
    head = 6 * 0.25 * (768**2 + 768 * 30522)
    assert got == encoder + attention + head
    assert 5.5e8 < got < 5.7e8


def test_peaks_by_device_kind():
    assert bench_mfu.peak_flops("NVIDIA H200") == 989e12
    assert bench_mfu.peak_flops("TPU v5 lite") == 197e12
    assert bench_mfu.peak_flops("TPU v5") == 459e12
    assert bench_mfu.peak_flops("cpu") is None


@pytest.mark.slow
def test_a_run_on_2_devices_reports_speed_and_never_imports_tensorflow():
    code = (
        "import json, sys\n"
        "from bench import bench_mfu\n"
        "report = bench_mfu.main(['--presets', 'tiny', '--steps', '2', '--warmup', '1',"
        " '--per_device_batch', '2', '--vocab', '500', '--precision', 'float32'])\n"
        "print(json.dumps(dict(report, tensorflow_after='tensorflow' in sys.modules)))\n"
    )
    report = run_jax(code, devices=2)
    assert report["tensorflow_imported"] is False and report["tensorflow_after"] is False
    (tiny,) = report["results"]
    assert (report["devices"], tiny["global_batch"], tiny["steps_timed"]) == (2, 4, 2)
    assert tiny["step_time_s"] > 0
    assert tiny["tokens_per_s"] == pytest.approx(4 * 128 / tiny["step_time_s"])
    assert tiny["mfu"] is None  # no known peak for CPUs
