"""Device detection, device-aware defaults and the strategy built from them.

Every TPU signal is faked (environment mapping, device files under tmp_path); no TPU resolver runs
and nothing leaves this machine.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from lmshards.plumbing.errors import LmshardsError
from lmshards.train import devices
from lmshards.train.devices import (
    GpuInfo,
    call_sizes,
    check_tpu_batch,
    choose_strategy,
    describe_devices,
    detect_tpu_signals,
    gpu_probe_skip_reason,
    resolve_precision,
    resolve_steps_per_execution,
    steps_in_next_call,
    tpu_resolver_target,
    use_fast_cpu_kernels,
)

H100 = GpuInfo("NVIDIA H100 80GB HBM3", (9, 0))
A100 = GpuInfo("NVIDIA A100-SXM4-40GB", (8, 0))
T4 = GpuInfo("Tesla T4", (7, 5))
P100 = GpuInfo("Tesla P100-PCIE-16GB", (6, 0))


def fake_dev(root: Path, *names: str) -> str:
    """A /dev stand-in holding empty files with the given relative names."""
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()
    return str(root)


# ---------------------------------------------------------------- detection


@pytest.mark.parametrize(
    "name, value",
    [
        ("TPU_NAME", "my-tpu"),
        ("TPU_ACCELERATOR_TYPE", "v5litepod-8"),
        ("TPU_WORKER_ID", "0"),
    ],
)
def test_each_tpu_env_var_alone_is_a_signal_and_auto_chooses_tpu(tmp_path, name, value):
    signals = detect_tpu_signals(
        environ={name: value, "HOME": "/root"}, dev_root=fake_dev(tmp_path)
    )
    assert signals == [f"env {name}={value}"]
    report = describe_devices(signals=signals, gpus=[H100], environ={name: value})
    assert (report.strategy, report.precision, report.steps_per_execution) == (
        "tpu",
        "mixed_bfloat16",
        32,
    )
    assert report.tpu_expected and signals[0] in report.reasons["strategy"]


def test_tpu_skip_mds_query_is_no_signal(tmp_path):
    """JAX sets it on import on machines without TPU chips; it must not send training to a TPU."""
    environ = {"TPU_SKIP_MDS_QUERY": "1", "HOME": "/root"}
    assert detect_tpu_signals(environ=environ, dev_root=fake_dev(tmp_path)) == []


@pytest.mark.parametrize("device", ["accel0", "vfio/0", "vfio/3"])
def test_each_tpu_device_file_alone_is_a_signal(tmp_path, device):
    root = fake_dev(tmp_path, device, "null")
    signals = detect_tpu_signals(environ={}, dev_root=root)
    assert signals == [f"device {tmp_path / device}"]
    assert describe_devices(signals=signals, gpus=[], environ={}).strategy == "tpu"


def test_tpu_flag_is_a_signal(tmp_path):
    assert detect_tpu_signals(environ={}, tpu_flag="local", dev_root=fake_dev(tmp_path)) == [
        "--tpu local"
    ]


def test_no_signal_on_a_plain_machine(tmp_path):
    # VFIO's control file, Linux's accel/ directory (an Intel NPU) and an empty TPU variable are no TPU.
    root = fake_dev(tmp_path, "vfio/vfio", "null", "accel/accel0")
    assert detect_tpu_signals(environ={"TPU_NAME": "", "PATH": "/bin"}, dev_root=root) == []
    report = describe_devices(signals=[], gpus=[], environ={})
    assert (report.strategy, report.precision, report.steps_per_execution) == ("cpu", "float32", 10)
    assert report.device_kind == "CPU" and not report.tpu_expected


def test_all_signals_are_listed_in_a_fixed_order(tmp_path):
    root = fake_dev(tmp_path, "vfio/1", "vfio/0", "accel0")
    environ = {"TPU_WORKER_ID": "3", "TPU_NAME": "pod", "TPU_ACCELERATOR_TYPE": "v6e-16"}
    assert detect_tpu_signals(environ=environ, tpu_flag="pod", dev_root=root) == [
        "--tpu pod",
        "env TPU_NAME=pod",
        "env TPU_ACCELERATOR_TYPE=v6e-16",
        "env TPU_WORKER_ID=3",
        f"device {tmp_path / 'accel0'}",
        f"device {tmp_path / 'vfio/0'}",
        f"device {tmp_path / 'vfio/1'}",
    ]


def test_default_dev_root_is_read_at_call_time(tmp_path, monkeypatch):
    monkeypatch.setattr(devices, "DEV_ROOT", fake_dev(tmp_path, "vfio/0"))
    assert detect_tpu_signals(environ={}) == [f"device {tmp_path / 'vfio/0'}"]


def test_resolver_target(tmp_path):
    empty, vm = fake_dev(tmp_path / "a"), fake_dev(tmp_path / "b", "vfio/0")
    assert (
        tpu_resolver_target(tpu_flag="my-pod", environ={"TPU_NAME": "x"}, dev_root=vm) == "my-pod"
    )
    # A VM's own chips: 'local', even when TPU_NAME is set (TF would otherwise ask the Cloud TPU API).
    assert tpu_resolver_target(tpu_flag=None, environ={"TPU_NAME": "x"}, dev_root=vm) == "local"
    assert tpu_resolver_target(tpu_flag=None, environ={"TPU_NAME": "x"}, dev_root=empty) is None
    assert (
        tpu_resolver_target(
            tpu_flag=None, environ={"TPU_ACCELERATOR_TYPE": "v5p-8"}, dev_root=empty
        )
        == "local"
    )


def test_gpu_probe_is_skipped_only_when_no_gpu_can_exist(tmp_path):
    with_gpu, without = (
        fake_dev(tmp_path / "g", "nvidia0", "nvidiactl"),
        fake_dev(tmp_path / "n", "nvidiactl"),
    )
    assert gpu_probe_skip_reason(environ={}, dev_root=with_gpu) is None
    assert "CUDA_VISIBLE_DEVICES" in gpu_probe_skip_reason(
        environ={"CUDA_VISIBLE_DEVICES": ""}, dev_root=with_gpu
    )
    assert "CUDA_VISIBLE_DEVICES" in gpu_probe_skip_reason(
        environ={"CUDA_VISIBLE_DEVICES": "-1"}, dev_root=with_gpu
    )
    assert gpu_probe_skip_reason(environ={"CUDA_VISIBLE_DEVICES": "1"}, dev_root=with_gpu) is None
    assert "no GPU device file" in gpu_probe_skip_reason(environ={}, dev_root=without)


# ---------------------------------------------------------------- choices


def test_choose_strategy():
    assert choose_strategy("auto", signals=["env TPU_NAME=x"], num_gpus=8) == "tpu"
    assert choose_strategy("auto", signals=[], num_gpus=2) == "mirrored"
    assert choose_strategy("auto", signals=[], num_gpus=0) == "cpu"
    assert choose_strategy("mirrored", signals=["env TPU_NAME=x"], num_gpus=0) == "mirrored"
    with pytest.raises(LmshardsError, match="'gpu'.*auto, tpu, mirrored, cpu"):
        choose_strategy("gpu", signals=[], num_gpus=0)


@pytest.mark.parametrize(
    "platform, gpus, expected",
    [
        ("tpu", [], "mixed_bfloat16"),
        ("gpu", [H100], "mixed_bfloat16"),
        ("gpu", [A100, H100], "mixed_bfloat16"),
        ("gpu", [T4], "mixed_float16"),
        ("gpu", [A100, T4], "mixed_float16"),  # every replica must support the policy
        ("gpu", [P100], "float32"),
        ("gpu", [GpuInfo("AMD Instinct MI250X")], "float32"),  # capability unknown
        ("cpu", [], "float32"),
    ],
)
def test_auto_precision(platform, gpus, expected):
    capabilities = [g.compute_capability for g in gpus]
    assert (
        resolve_precision("auto", platform=platform, gpu_compute_capabilities=capabilities)
        == expected
    )


def test_explicit_precision_passes_through_and_unknown_is_refused():
    assert resolve_precision("float32", platform="tpu") == "float32"
    assert resolve_precision("mixed_float16", platform="cpu") == "mixed_float16"
    with pytest.raises(LmshardsError, match="'bf16'"):
        resolve_precision("bf16", platform="tpu")


def test_steps_per_execution():
    assert [resolve_steps_per_execution("auto", platform=p) for p in ("tpu", "gpu", "cpu")] == [
        32,
        8,
        10,
    ]
    assert resolve_steps_per_execution(5, platform="tpu") == 5
    for bad in (0, -3, "8", True):
        with pytest.raises(LmshardsError, match="steps_per_execution"):
            resolve_steps_per_execution(bad, platform="gpu")


def test_report_for_gpus():
    report = describe_devices(signals=[], gpus=[A100, A100], environ={})
    assert (report.strategy, report.precision, report.steps_per_execution) == (
        "mirrored",
        "mixed_bfloat16",
        8,
    )
    assert report.device_kind == A100.name
    assert report.to_json()["gpus"] == [{"name": A100.name, "compute_capability": "8.0"}] * 2
    older = describe_devices(signals=[], gpus=[T4], environ={})
    assert older.precision == "mixed_float16" and "7.5" in older.reasons["precision"]


def test_tpu_report_names_the_slice():
    report = describe_devices(
        signals=["env TPU_ACCELERATOR_TYPE=v5p-8"],
        gpus=[],
        environ={"TPU_ACCELERATOR_TYPE": "v5p-8"},
    )
    assert report.device_kind == "TPU v5p-8"


# ---------------------------------------------------------------- chunks between boundaries


def run_chunks(
    start: int, stop: int, every: tuple[int, ...], steps_per_execution: int
) -> list[int]:
    """The step each host call ends on, as the training loop advances."""
    ends, step = [], start
    while step < stop:
        n = steps_in_next_call(
            step, stop=stop, every=every, steps_per_execution=steps_per_execution
        )
        assert 1 <= n <= steps_per_execution
        step += n
        ends.append(step)
    return ends


@pytest.mark.parametrize("start", [0, 37, 99])
@pytest.mark.parametrize("steps_per_execution", [1, 8, 32, 1000])
def test_chunks_end_on_every_boundary_and_never_cross_one(start, steps_per_execution):
    stop, every = 253, (50, 100, 30)  # log, checkpoint, eval
    ends = run_chunks(start, stop, every, steps_per_execution)
    boundaries = {
        s for s in range(start + 1, stop + 1) if s == stop or any(s % e == 0 for e in every)
    }
    assert boundaries <= set(ends)
    assert ends[-1] == stop
    starts = [start, *ends[:-1]]
    assert not any(a < b < end for a, end in zip(starts, ends) for b in boundaries)
    # Between boundaries the calls are as long as allowed.
    assert len(ends) == sum(
        -(-(b - a) // steps_per_execution)
        for a, b in zip([start, *sorted(boundaries)], sorted(boundaries))
    )


def test_chunk_sizes_example():
    assert run_chunks(0, 100, (50,), 32) == [32, 50, 82, 100]
    assert run_chunks(0, 10, (4,), 1) == list(range(1, 11))


# ---------------------------------------------------------------- TPU batch warning


@pytest.mark.parametrize("global_batch, cores", [(64, 8), (1024, 8), (256, 32), (8, 1)])
def test_tpu_batch_that_splits_into_multiples_of_8_is_fine(global_batch, cores):
    assert check_tpu_batch(global_batch, cores) is None


def test_tpu_batch_warning_names_the_split_and_a_fix():
    message = check_tpu_batch(32, 8)
    assert "4 per core" in message and "--per_replica_batch 8 (global batch 64)" in message
    uneven = check_tpu_batch(100, 8)
    assert "12.5 per core" in uneven and "--per_replica_batch 16" in uneven
    assert "--per_replica_batch 24" in check_tpu_batch(8 * 20, 8)


# ---------------------------------------------------------------- the strategy (imports TensorFlow)


class FakeInit:
    """Stands in for TPU initialisation: records calls, then raises or returns what it was given."""

    def __init__(self, outcome):
        self.outcome, self.calls = outcome, []

    def __call__(self, tpu):
        self.calls.append(tpu)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


@pytest.fixture(scope="module")
def strategy_module():
    from lmshards.train.backends import tensorflow_strategy

    return tensorflow_strategy


def expected_fallback(tf) -> dict:
    gpus = tf.config.list_logical_devices("GPU")
    return {"strategy": "mirrored" if gpus else "cpu", "replicas": max(1, len(gpus))}


@pytest.mark.parametrize(
    "error",
    [
        ValueError("Please provide a TPU Name to connect to."),
        RuntimeError("no TPU"),
        OSError("metadata server unreachable"),
    ],
)
def test_auto_with_a_signal_falls_back_with_a_warning_naming_it(strategy_module, caplog, error):
    import tensorflow as tf

    init = FakeInit(error)
    with caplog.at_level(logging.WARNING, logger="lmshards.train.backends.tensorflow_strategy"):
        strategy = strategy_module.make_strategy(
            "auto", tpu=None, signals=["device /dev/vfio/0"], init_tpu=init
        )
    assert init.calls == [None]
    summary = strategy_module.strategy_summary(strategy)
    assert {k: summary[k] for k in ("strategy", "replicas")} == expected_fallback(tf)
    warning = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert (
        "device /dev/vfio/0" in warning and str(error) in warning and summary["strategy"] in warning
    )


def test_auto_with_a_signal_uses_the_tpu_that_initialises(strategy_module):
    sentinel = object()
    init = FakeInit(sentinel)
    assert (
        strategy_module.make_strategy("auto", tpu="local", signals=["--tpu local"], init_tpu=init)
        is sentinel
    )
    assert init.calls == ["local"]


def test_strategy_tpu_without_a_signal_is_a_clear_error_before_any_init(strategy_module):
    init = FakeInit(object())
    with pytest.raises(
        LmshardsError, match="no TPU signal.*TPU_ACCELERATOR_TYPE.*--tpu local"
    ) as e:
        strategy_module.make_strategy("tpu", signals=[], init_tpu=init)
    assert init.calls == [] and "/dev/vfio" in str(e.value)


def test_strategy_tpu_that_does_not_initialise_names_the_signals(strategy_module):
    init = FakeInit(RuntimeError("TPU busy"))
    with pytest.raises(
        LmshardsError, match=r"TPU busy.*env TPU_NAME=x, device /dev/accel0.*--tpu local"
    ):
        strategy_module.make_strategy(
            "tpu", signals=["env TPU_NAME=x", "device /dev/accel0"], init_tpu=init
        )


def test_auto_without_signals_never_tries_the_tpu(strategy_module):
    import tensorflow as tf

    init = FakeInit(object())
    strategy = strategy_module.make_strategy("auto", signals=[], init_tpu=init)
    assert init.calls == []
    summary = strategy_module.strategy_summary(strategy)
    assert {k: summary[k] for k in ("strategy", "replicas")} == expected_fallback(tf)


def test_summary_and_defaults_of_cpu_strategies(strategy_module):
    import tensorflow as tf

    if tf.config.list_logical_devices("GPU"):
        pytest.skip("describes a machine without GPUs")
    default = strategy_module.make_strategy("cpu", signals=[])
    assert strategy_module.strategy_summary(default) == {
        "strategy": "cpu",
        "replicas": 1,
        "device_kind": "CPU",
    }
    mirrored = tf.distribute.MirroredStrategy(
        ["/cpu:0"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    assert strategy_module.strategy_summary(mirrored) == {
        "strategy": "mirrored",
        "replicas": 1,
        "device_kind": "CPU",
    }
    for strategy in (default, mirrored):
        assert not strategy_module.uses_gpus(strategy)
        assert strategy_module.num_input_pipelines(strategy) == 1
        assert strategy_module.device_defaults(
            strategy, precision="auto", steps_per_execution="auto"
        ) == ("float32", 10)
        assert strategy_module.device_defaults(
            strategy, precision="mixed_bfloat16", steps_per_execution=4
        ) == ("mixed_bfloat16", 4)


def test_call_sizes_compile_a_size_only_when_it_comes_again():
    # The first window of --log_every 50 at 10 per call ends with 9 steps: run as one-step calls, the
    # program of 1 being compiled already; a size asked for a second time gets its own call.
    assert call_sizes(1, most=10, asked=set()) == [1]
    assert call_sizes(10, most=10, asked={1}) == [10]
    assert call_sizes(9, most=10, asked={1, 10}) == [1] * 9
    assert call_sizes(9, most=10, asked={1, 9, 10}) == [9]
    asked: set[int] = set()
    for n in (1, 10, 10, 10, 10, 9, 10, 10, 10, 10, 10):
        assert sum(call_sizes(n, most=10, asked=asked)) == n
        asked.add(n)


# ---------------------------------------------------------------- TensorFlow's CPU kernels


def test_fast_cpu_kernels_turn_onednn_on_unless_the_user_chose():
    unset: dict[str, str] = {}
    use_fast_cpu_kernels(unset)
    assert unset == {"TF_ENABLE_ONEDNN_OPTS": "1"}

    chosen = {"TF_ENABLE_ONEDNN_OPTS": "0"}
    use_fast_cpu_kernels(chosen)
    assert chosen == {"TF_ENABLE_ONEDNN_OPTS": "0"}
