"""Choosing the tf.distribute strategy: a TPU if any TPU signal is present, else every GPU, else the CPU.

What to try comes from lmshards.train.devices (the same code `lmshards env` reports with); this module only
builds the strategy and describes the one it built.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from lmshards.plumbing.errors import LmshardsError
from lmshards.train.devices import (
    CPU_DEVICE_KIND,
    PLATFORM_CPU,
    PLATFORM_GPU,
    PLATFORM_TPU,
    STRATEGY_AUTO,
    STRATEGY_CPU,
    STRATEGY_MIRRORED,
    STRATEGY_TPU,
    TPU_LOCAL,
    TPU_SIGNALS_CHECKED,
    choose_strategy,
    detect_tpu_signals,
    gpu_device_kind,
    list_gpus,
    resolve_precision,
    resolve_steps_per_execution,
    tpu_device_kind,
    tpu_resolver_target,
)

log = logging.getLogger(__name__)

# What TPU initialisation raises when there is no TPU to reach: TF's own errors, a missing name
# (ValueError), a resolver or runtime failure (RuntimeError), an unreachable endpoint (OSError).
_TPU_INIT_ERRORS = (ValueError, RuntimeError, OSError, tf.errors.OpError)


def make_strategy(
    kind: str,
    *,
    tpu: str | None = None,
    signals: Sequence[str] | None = None,
    init_tpu: Callable[[str | None], tf.distribute.Strategy] | None = None,
) -> tf.distribute.Strategy:
    """`auto` | `tpu` | `mirrored` | `cpu` -> a strategy.

    signals: detect_tpu_signals(tpu_flag=tpu) unless given. init_tpu(tpu) builds the TPU strategy
    (tests pass a fake so no resolver runs). `auto` with a signal tries the TPU and, if it does not
    initialise, warns naming the signals and goes on with GPUs or the CPU.
    Raises:
      LmshardsError: `tpu` without a TPU signal or with a TPU that does not initialise; an unknown kind.
    """
    signals = detect_tpu_signals(tpu_flag=tpu) if signals is None else list(signals)
    gpus = tf.config.list_logical_devices("GPU")
    choice = choose_strategy(kind, signals=signals, num_gpus=len(gpus))
    if choice == STRATEGY_TPU:
        if not signals:
            raise LmshardsError(
                f"--strategy tpu but no TPU signal on this machine (checked {TPU_SIGNALS_CHECKED}). "
                "On a TPU VM pass --tpu local; for a remote TPU pass --tpu NAME; otherwise use --strategy auto."
            )
        try:
            return (init_tpu or _tpu_strategy)(tpu)
        except _TPU_INIT_ERRORS as e:
            found = ", ".join(signals)
            if kind == STRATEGY_TPU:
                raise LmshardsError(
                    f"--strategy tpu: the TPU did not initialise ({e}). TPU signals found: {found}. On a TPU VM pass "
                    "--tpu local and check that no other process holds the chips; for a remote TPU pass --tpu NAME."
                ) from e
            choice = choose_strategy(STRATEGY_AUTO, signals=(), num_gpus=len(gpus))
            log.warning(
                "TPU signals found (%s) but the TPU did not initialise (%s); training with strategy %s.",
                found,
                e,
                choice,
            )
    if choice == STRATEGY_MIRRORED:
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        # Without NCCL (CPU, or logical devices) the default all-reduce is not available.
        ops = None if gpus else tf.distribute.ReductionToOneDevice()
        return tf.distribute.MirroredStrategy(devices, cross_device_ops=ops)
    if gpus:  # the default strategy would place every op on GPU:0; `cpu` means the CPU
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    return tf.distribute.get_strategy()


def _tpu_strategy(tpu: str | None) -> tf.distribute.TPUStrategy:
    target = tpu_resolver_target(tpu_flag=tpu, environ=os.environ)
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=target)
    if target != TPU_LOCAL:  # a remote TPU (or a pod slice) is driven over gRPC from this process
        tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def strategy_platform(strategy: tf.distribute.Strategy) -> str:
    """Where the strategy's replicas run: tpu | gpu | cpu."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return PLATFORM_TPU
    return (
        PLATFORM_GPU
        if any("GPU" in d.upper() for d in _replica_devices(strategy))
        else PLATFORM_CPU
    )


def _replica_devices(strategy: tf.distribute.Strategy) -> tuple[str, ...]:
    try:
        return tuple(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy has no device list: it runs where TF places ops
        return tuple(d.name for d in tf.config.list_logical_devices("GPU")[:1]) or (
            "/device:CPU:0",
        )


def strategy_summary(strategy: tf.distribute.Strategy) -> dict[str, Any]:
    """{strategy: tpu|mirrored|cpu, replicas, device_kind} for the run's log line and run_summary.json."""
    platform = strategy_platform(strategy)
    if platform == PLATFORM_TPU:
        name, device_kind = STRATEGY_TPU, tpu_device_kind(os.environ)
    else:
        name = (
            STRATEGY_MIRRORED
            if isinstance(strategy, tf.distribute.MirroredStrategy)
            else STRATEGY_CPU
        )
        device_kind = gpu_device_kind(list_gpus()) if platform == PLATFORM_GPU else CPU_DEVICE_KIND
    return {"strategy": name, "replicas": strategy.num_replicas_in_sync, "device_kind": device_kind}


def device_defaults(
    strategy: tf.distribute.Strategy, *, precision: str, steps_per_execution: int | str
) -> tuple[str, int]:
    """(dtype policy, steps per host call) for --precision and --steps_per_execution on the strategy's devices.

    'auto' resolves as `lmshards env` reports it (same functions); explicit values pass through.
    """
    platform = strategy_platform(strategy)
    capabilities = (
        [gpu.compute_capability for gpu in list_gpus()] if platform == PLATFORM_GPU else []
    )
    return (
        resolve_precision(precision, platform=platform, gpu_compute_capabilities=capabilities),
        resolve_steps_per_execution(steps_per_execution, platform=platform),
    )


def uses_gpus(strategy: tf.distribute.Strategy) -> bool:
    """True when the strategy's replicas are GPUs, where an explicit jit_compile pays off."""
    return strategy_platform(strategy) == PLATFORM_GPU


def num_input_pipelines(strategy: tf.distribute.Strategy) -> int:
    """Input pipelines the strategy creates: one per worker host."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return strategy.extended.num_hosts
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    return max(1, resolver.cluster_spec().num_tasks("worker") or 1)
