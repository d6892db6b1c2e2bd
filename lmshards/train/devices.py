"""Which accelerators this machine has, and the training defaults that follow from them.

Pure Python with no TensorFlow import at module level: `lmshards env` and the trainer's early checks
use it before (or without) loading TensorFlow. Only `list_gpus` imports TensorFlow, when called.
Every input (environment, device directory, GPU list) can be injected, so tests fake each signal
without touching a TPU resolver, a metadata server or the network.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Collection, Mapping, MutableMapping, Sequence
from typing import Any

from lmshards.plumbing.errors import LmshardsError

# --- what a TPU host looks like
# Set on Cloud TPU VMs (TPU_ACCELERATOR_TYPE, TPU_WORKER_ID) and by TPU node set-ups and GKE (TPU_NAME).
# Not TPU_SKIP_MDS_QUERY: importing JAX (which Keras does when it is installed) sets it to 1 on machines
# with no TPU chip, and tests set it to keep libtpu off the network.
TPU_ENV_VARS = ("TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID")
# Chips as device files under DEV_ROOT: v2-v4 VMs have accel0.., v5e/v5p/v6e VMs vfio/0... The digits
# leave out VFIO's control file vfio/vfio (any VFIO host has it) and Linux's accel/ directory of other
# accelerators (e.g. Intel NPUs as accel/accel0).
TPU_DEVICE_PATTERNS = ("accel[0-9]*", "vfio/[0-9]*")
# Device files of a GPU that TensorFlow could use: NVIDIA, ROCm, and WSL2's GPU bridge.
GPU_DEVICE_PATTERNS = ("nvidia[0-9]*", "kfd", "dxg")
DEV_ROOT = "/dev"
# TPUClusterResolver's name for the chips attached to this host (a TPU VM).
TPU_LOCAL = "local"
# For messages that say where no TPU was found.
TPU_SIGNALS_CHECKED = ", ".join(
    ["--tpu", *TPU_ENV_VARS, *(os.path.join(DEV_ROOT, p) for p in TPU_DEVICE_PATTERNS)]
)

# --- strategies and the platform their replicas run on
STRATEGY_AUTO = "auto"
STRATEGY_TPU = "tpu"
STRATEGY_MIRRORED = "mirrored"
STRATEGY_CPU = "cpu"
STRATEGIES = (STRATEGY_AUTO, STRATEGY_TPU, STRATEGY_MIRRORED, STRATEGY_CPU)
PLATFORM_TPU = "tpu"
PLATFORM_GPU = "gpu"
PLATFORM_CPU = "cpu"
CPU_DEVICE_KIND = "CPU"

# --- precision
AUTO = "auto"
FLOAT32 = "float32"
MIXED_FLOAT16 = "mixed_float16"
MIXED_BFLOAT16 = "mixed_bfloat16"
PRECISIONS = (AUTO, FLOAT32, MIXED_FLOAT16, MIXED_BFLOAT16)
# Ampere (8.0) and newer compute in bfloat16 on tensor cores; Volta/Turing (7.x) have float16 tensor
# cores only. Below 7.0 there are no tensor cores: float16 saves memory but not time, so float32.
BF16_MIN_COMPUTE_CAPABILITY = (8, 0)
FP16_MIN_COMPUTE_CAPABILITY = (7, 0)

# --- steps per host call (`--steps_per_execution auto`)
# Each host call launches one compiled program and fetches the losses back. On a TPU that round trip
# (host -> TPU runtime -> host) is comparable to a small model's whole step, so 32 steps per call bring
# it down to a few percent; on a GPU the launch cost is a Python/tf.function dispatch (~1 ms), so 8
# steps suffice. On a CPU, XLA (the JAX backend) spends about a third more CPU time per step in a one-step
# call than in a call of 10 (tiny, batch 32), and 10 divides every default interval; TensorFlow's loop
# costs the same either way. Logging, evaluation and checkpoint steps cut calls short, so these are upper
# bounds, and the steps of each call are the same computation whatever the grouping.
STEPS_PER_EXECUTION = {PLATFORM_TPU: 32, PLATFORM_GPU: 8, PLATFORM_CPU: 10}

# --- TensorFlow's CPU kernels
# TensorFlow turns its oneDNN kernels on by itself only on CPUs with AVX-512 VNNI, BF16 or AMX; elsewhere
# (AVX2 x86, every AMD EPYC before Zen 4) it runs Eigen's, which take ~1.3x as long for a small model's step
# (tiny, batch 32, 1 thread). Read once, when TensorFlow loads; a value the user set is kept.
TENSORFLOW_CPU_ENVIRONMENT = {"TF_ENABLE_ONEDNN_OPTS": "1"}


def use_fast_cpu_kernels(environ: MutableMapping[str, str] | None = None) -> None:
    """Sets TENSORFLOW_CPU_ENVIRONMENT where the user did not (os.environ by default). Call before importing TensorFlow."""
    environ = os.environ if environ is None else environ
    for name, value in TENSORFLOW_CPU_ENVIRONMENT.items():
        environ.setdefault(name, value)


# The TPU's matrix unit tiles the batch dimension by 8: a per-core batch that is not a multiple of 8 is
# padded, and the padding is computed and thrown away.
TPU_CORE_BATCH_MULTIPLE = 8

GPU_PROBED = "probed"  # DeviceReport.gpu_probe when GPUs were listed, rather than why they were not


# ---------------------------------------------------------------- detection


def detect_tpu_signals(
    *,
    environ: Mapping[str, str] = os.environ,
    tpu_flag: str | None = None,
    dev_root: str | None = None,
) -> list[str]:
    """Every sign that this machine is meant to train on a TPU, e.g. ['env TPU_ACCELERATOR_TYPE=v5litepod-8'].

    Reads only the flag, the environment and file names under dev_root (default DEV_ROOT): no TPU
    library is loaded and nothing is asked over the network.
    """
    signals = [f"--tpu {tpu_flag}"] if tpu_flag else []
    signals += [f"env {name}={environ[name]}" for name in TPU_ENV_VARS if environ.get(name)]
    signals += [f"device {path}" for path in local_tpu_devices(dev_root)]
    return signals


def local_tpu_devices(dev_root: str | None = None) -> list[str]:
    """Paths of this host's TPU chips (/dev/accelN, /dev/vfio/N), sorted."""
    root = dev_root or DEV_ROOT
    return sorted(
        path for pattern in TPU_DEVICE_PATTERNS for path in glob.glob(os.path.join(root, pattern))
    )


def tpu_resolver_target(
    *, tpu_flag: str | None, environ: Mapping[str, str], dev_root: str | None = None
) -> str | None:
    """What to pass as TPUClusterResolver(tpu=...).

    --tpu wins. Chips on this host mean a TPU VM: 'local' (TF's resolver otherwise demands a name).
    Else TPU_NAME names a remote TPU: None lets TF read it. Else 'local'.
    """
    if tpu_flag:
        return tpu_flag
    if local_tpu_devices(dev_root) or not environ.get("TPU_NAME"):
        return TPU_LOCAL
    return None


def tpu_device_kind(environ: Mapping[str, str] = os.environ) -> str:
    """A TPU's kind for logs: the slice type when the VM says it (e.g. 'TPU v5litepod-8'), else 'TPU'."""
    accelerator = environ.get("TPU_ACCELERATOR_TYPE")
    return f"TPU {accelerator}" if accelerator else "TPU"


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """One GPU as TensorFlow sees it. compute_capability is None for non-NVIDIA GPUs."""

    name: str
    compute_capability: tuple[int, int] | None = None

    @property
    def capability_text(self) -> str | None:
        return capability_text(self.compute_capability) if self.compute_capability else None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "compute_capability": self.capability_text}


def capability_text(cc: tuple[int, int]) -> str:
    """(9, 0) -> '9.0', the way NVIDIA writes compute capabilities."""
    return f"{cc[0]}.{cc[1]}"


def list_gpus() -> list[GpuInfo]:
    """The GPUs TensorFlow can use, with name and compute capability. Imports TensorFlow (seconds)."""
    import tensorflow as tf

    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        cc = details.get("compute_capability")
        gpus.append(
            GpuInfo(
                name=details.get("device_name", device.name),
                compute_capability=tuple(cc) if cc else None,
            )
        )
    return gpus


def gpu_device_kind(gpus: Sequence[GpuInfo]) -> str:
    """The GPUs' model names for logs, e.g. 'NVIDIA H100 80GB HBM3' (mixed models joined by ' + ')."""
    return " + ".join(dict.fromkeys(gpu.name for gpu in gpus)) or "GPU"


def gpu_probe_skip_reason(
    *, environ: Mapping[str, str] = os.environ, dev_root: str | None = None
) -> str | None:
    """Why listing GPUs cannot find any, so TensorFlow need not be imported to look; None when it might."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    root = dev_root or DEV_ROOT
    if not any(glob.glob(os.path.join(root, pattern)) for pattern in GPU_DEVICE_PATTERNS):
        return (
            f"no GPU device file ({', '.join(os.path.join(root, p) for p in GPU_DEVICE_PATTERNS)})"
        )
    return None


# ---------------------------------------------------------------- choices


def choose_strategy(kind: str, *, signals: Sequence[str], num_gpus: int) -> str:
    """The strategy `--strategy kind` tries first: tpu | mirrored | cpu.

    auto: a TPU when any TPU signal is present, else every GPU, else the CPU.
    Raises:
      LmshardsError: kind is not one of STRATEGIES.
    """
    if kind not in STRATEGIES:
        raise LmshardsError(f"Unknown --strategy {kind!r}; choose {', '.join(STRATEGIES)}.")
    if kind != STRATEGY_AUTO:
        return kind
    if signals:
        return STRATEGY_TPU
    return STRATEGY_MIRRORED if num_gpus else STRATEGY_CPU


def strategy_platform_for(strategy: str, *, num_gpus: int) -> str:
    """The platform a chosen strategy's replicas run on (mirrored runs on CPUs when there is no GPU)."""
    if strategy == STRATEGY_TPU:
        return PLATFORM_TPU
    return PLATFORM_GPU if num_gpus else PLATFORM_CPU


def resolve_precision(
    requested: str,
    *,
    platform: str,
    gpu_compute_capabilities: Sequence[tuple[int, int] | None] = (),
) -> str:
    """The Keras dtype policy for `--precision requested` on platform; explicit values pass through.

    auto: mixed_bfloat16 on TPUs and on GPUs that all have compute capability >= 8.0; mixed_float16 on
    7.x GPUs (the trainer then wraps the optimizer in a LossScaleOptimizer); float32 on CPUs, older or
    unknown GPUs.
    """
    return _auto_precision(requested, platform, gpu_compute_capabilities)[0]


def _auto_precision(
    requested: str, platform: str, capabilities: Sequence[tuple[int, int] | None]
) -> tuple[str, str]:
    """(policy, why) for resolve_precision and the device report."""
    if requested not in PRECISIONS:
        raise LmshardsError(f"Unknown --precision {requested!r}; choose {', '.join(PRECISIONS)}.")
    if requested != AUTO:
        return requested, "set by --precision"
    if platform == PLATFORM_TPU:
        return MIXED_BFLOAT16, "TPUs compute in bfloat16 natively"
    if platform != PLATFORM_GPU or not capabilities:
        return FLOAT32, "no accelerator: mixed precision would only add casts on a CPU"
    if any(cc is None for cc in capabilities):
        return FLOAT32, "a GPU's compute capability is unknown; pass --precision to choose"
    lowest = min(cc for cc in capabilities if cc is not None)
    shown = capability_text(lowest)
    if lowest >= BF16_MIN_COMPUTE_CAPABILITY:
        return MIXED_BFLOAT16, f"GPU compute capability {shown} >= 8.0 has bfloat16 tensor cores"
    if lowest >= FP16_MIN_COMPUTE_CAPABILITY:
        return (
            MIXED_FLOAT16,
            f"GPU compute capability {shown} < 8.0 has float16 tensor cores only (loss scaling on)",
        )
    return (
        FLOAT32,
        f"GPU compute capability {shown} < 7.0 has no tensor cores: float16 would not be faster",
    )


def resolve_steps_per_execution(requested: int | str, *, platform: str) -> int:
    """Training steps per host call for `--steps_per_execution requested`; an int passes through.

    auto: STEPS_PER_EXECUTION[platform] (32 on TPUs, 8 on GPUs, 10 on CPUs).
    Raises:
      LmshardsError: requested is neither 'auto' nor a positive int.
    """
    if requested == AUTO:
        return STEPS_PER_EXECUTION[platform]
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise LmshardsError(
            f"--steps_per_execution {requested!r} must be 'auto' or a positive integer."
        )
    return requested


def steps_in_next_call(
    step: int, *, stop: int, every: Sequence[int], steps_per_execution: int
) -> int:
    """How many steps the next host call may run from `step` without passing a boundary.

    Boundaries are `stop` and every multiple of each interval in `every` (logging, evaluation,
    checkpointing), so each of those steps ends a call and its work happens at exactly that step.
    Always >= 1 while step < stop.
    """
    return min(
        steps_per_execution, stop - step, *(interval - step % interval for interval in every)
    )


def call_sizes(n: int, *, most: int, asked: Collection[int]) -> list[int]:
    """The steps of each compiled call that together run n steps (n <= most): one call of n when n is 1 or
    `most` or was asked for before (`asked`), else n one-step calls.

    Each distinct call size compiles its own program, which on a CPU takes as long as hundreds of steps
    of `tiny`: a size asked for once (the steps left in the first logging window) is not worth it; one asked
    for again (every window of a --log_every that `most` does not divide) is.
    """
    if n in (1, most) or n in asked:
        return [n]
    return [1] * n


def check_tpu_batch(global_batch: int, num_cores: int) -> str | None:
    """A warning when the global batch does not give each TPU core a multiple of 8 sequences, else None."""
    per_core, rest = divmod(global_batch, num_cores)
    if rest == 0 and per_core % TPU_CORE_BATCH_MULTIPLE == 0:
        return None
    m = TPU_CORE_BATCH_MULTIPLE
    padded = -(-global_batch // (num_cores * m)) * m  # what each core computes anyway
    return (
        f"global batch {global_batch} over {num_cores} TPU cores is {global_batch / num_cores:g} per core, "
        f"not a multiple of {m}: each core pads its batch to {padded} and computes the padding for nothing. "
        f"Use --per_replica_batch {padded} (global batch {padded * num_cores})."
    )


# ---------------------------------------------------------------- the report `lmshards env` prints


@dataclasses.dataclass(frozen=True)
class DeviceReport:
    """What this machine has and what the `auto` defaults choose on it."""

    signals: tuple[str, ...]
    gpus: tuple[GpuInfo, ...]
    gpu_probe: str  # GPU_PROBED, or why GPUs were not listed
    strategy: str  # tpu | mirrored | cpu
    device_kind: str
    precision: str
    steps_per_execution: int
    reasons: Mapping[str, str]  # option -> why auto chose what it chose

    @property
    def tpu_expected(self) -> bool:
        return bool(self.signals)

    def to_json(self) -> dict[str, Any]:
        return {
            "signals": list(self.signals),
            "tpu_expected": self.tpu_expected,
            "gpus": [gpu.to_json() for gpu in self.gpus],
            "gpu_probe": self.gpu_probe,
            "strategy": self.strategy,
            "device_kind": self.device_kind,
            "precision": self.precision,
            "steps_per_execution": self.steps_per_execution,
            "reasons": dict(self.reasons),
        }


def describe_devices(
    *,
    signals: Sequence[str],
    gpus: Sequence[GpuInfo],
    gpu_probe: str = GPU_PROBED,
    environ: Mapping[str, str] = os.environ,
) -> DeviceReport:
    """What `--strategy auto`, `--precision auto` and `--steps_per_execution auto` choose, and why.

    The same choices the trainer makes, short of initialising the TPU: if that fails, training falls
    back to GPUs or the CPU with a warning naming the signals.
    """
    strategy = choose_strategy(STRATEGY_AUTO, signals=signals, num_gpus=len(gpus))
    platform = strategy_platform_for(strategy, num_gpus=len(gpus))
    precision, precision_why = _auto_precision(AUTO, platform, [g.compute_capability for g in gpus])
    steps = resolve_steps_per_execution(AUTO, platform=platform)
    if strategy == STRATEGY_TPU:
        strategy_why = f"TPU signals: {', '.join(signals)} (if the TPU does not initialise, train warns and falls back)"
        device_kind = tpu_device_kind(environ)
    elif strategy == STRATEGY_MIRRORED:
        strategy_why = f"no TPU signal; {len(gpus)} GPU(s)"
        device_kind = gpu_device_kind(gpus)
    else:
        strategy_why = "no TPU signal and no GPU"
        device_kind = CPU_DEVICE_KIND
    return DeviceReport(
        signals=tuple(signals),
        gpus=tuple(gpus),
        gpu_probe=gpu_probe,
        strategy=strategy,
        device_kind=device_kind,
        precision=precision,
        steps_per_execution=steps,
        reasons={
            "strategy": strategy_why,
            "precision": precision_why,
            "steps_per_execution": f"the {platform.upper()} default",
        },
    )
