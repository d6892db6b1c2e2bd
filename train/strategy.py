"""Choosing the tf.distribute strategy: a TPU if reachable, else every GPU, else the CPU."""

from __future__ import annotations

import logging
import os

import tensorflow as tf

from schemas.errors import LmshardsError

log = logging.getLogger(__name__)

# Present on Cloud TPU VMs; TPU_NAME is set by TPU node setups and GKE.
_TPU_VM_DEVICE = "/dev/accel0"


def make_strategy(kind: str, *, tpu: str | None = None) -> tf.distribute.Strategy:
    """`auto` | `tpu` | `mirrored` | `cpu` -> a strategy. Raises LmshardsError if the asked-for kind is absent."""
    if kind == "tpu" or (kind == "auto" and _tpu_likely(tpu)):
        try:
            return _tpu_strategy(tpu)
        except (ValueError, RuntimeError, tf.errors.OpError) as e:
            if kind == "tpu":
                raise LmshardsError(
                    f"No TPU reachable with --tpu {tpu!r} ({e}). On a TPU VM pass --tpu local; otherwise the TPU's name."
                ) from e
            log.warning("No TPU reachable (%s); falling back to GPUs/CPU.", e)
    gpus = tf.config.list_logical_devices("GPU")
    if kind == "mirrored" or (kind == "auto" and gpus):
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        # Without NCCL (CPU, or logical devices) the default all-reduce is not available.
        ops = None if gpus else tf.distribute.ReductionToOneDevice()
        return tf.distribute.MirroredStrategy(devices, cross_device_ops=ops)
    if kind not in ("auto", "cpu"):
        raise LmshardsError(f"Unknown --strategy {kind!r}; choose auto, tpu, mirrored or cpu.")
    return tf.distribute.get_strategy()


def _tpu_likely(tpu: str | None) -> bool:
    return bool(tpu or os.environ.get("TPU_NAME") or os.path.exists(_TPU_VM_DEVICE))


def _tpu_strategy(tpu: str | None) -> tf.distribute.TPUStrategy:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
    if tpu not in (None, "", "local"):
        tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def uses_gpus(strategy: tf.distribute.Strategy) -> bool:
    """True when the strategy's replicas are GPUs, where an explicit jit_compile pays off."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return False
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        return any("GPU" in d.upper() for d in strategy.extended.worker_devices)
    return bool(tf.config.list_logical_devices("GPU"))


def num_input_pipelines(strategy: tf.distribute.Strategy) -> int:
    """Input pipelines the strategy creates: one per worker host."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return strategy.extended.num_hosts
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    return max(1, resolver.cluster_spec().num_tasks("worker") or 1)
