"""`lmshards env`: the stack's versions, the accelerators and TPU signals found, and what `auto` chooses here.

It never initialises a TPU and asks nothing over the network. TensorFlow is imported only to list
GPUs, and only when a GPU device file exists and CUDA_VISIBLE_DEVICES does not hide them all.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Mapping, Sequence

from plumbing.cli import CommandParser, add_verbose_flag, run_command, setup_logging
from schemas.version import __version__
from train.devices import (
    GPU_PROBED,
    TPU_SIGNALS_CHECKED,
    DeviceReport,
    GpuInfo,
    describe_devices,
    detect_tpu_signals,
    gpu_probe_skip_reason,
    list_gpus,
)

COMMAND = "env"
# Distributions whose versions matter to a run; read from their metadata, never by importing them.
STACK = (
    "tensorflow",
    "tensorflow-tpu",
    "libtpu",
    "keras",
    "keras-hub",
    "transformers",
    "tokenizers",
    "apache-beam",
    "torch",
)


def build_parser() -> CommandParser:
    p = CommandParser(COMMAND, description=__doc__)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument(
        "--tpu", help="the --tpu value `lmshards train` would get (counts as a TPU signal)"
    )
    p.add_argument(
        "--no_gpu_probe", action="store_true", help="do not import TensorFlow to list GPUs"
    )
    add_verbose_flag(p)
    return p


def stack_versions() -> dict[str, str | None]:
    """python, lmshards and each STACK distribution -> its version (None when not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version(), "lmshards": __version__}
    for dist in STACK:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return versions


def find_gpus(*, probe: bool, environ: Mapping[str, str] = os.environ) -> tuple[list[GpuInfo], str]:
    """(GPUs, GPU_PROBED) or ([], why they were not listed)."""
    if not probe:
        return [], "not probed: --no_gpu_probe"
    reason = gpu_probe_skip_reason(environ=environ)
    if reason:
        return [], f"not probed: {reason}"
    try:
        return list_gpus(), GPU_PROBED
    except ImportError:
        return [], "not probed: tensorflow is not installed"


def format_text(report: DeviceReport, versions: Mapping[str, str | None]) -> str:
    """The human-readable report: versions, accelerators and signals, then each auto choice and why."""
    installed = [
        f"{name} {version}" for name, version in versions.items() if version and name != "python"
    ]
    missing = [name for name, version in versions.items() if not version]
    signals = ", ".join(report.signals) or f"none (checked {TPU_SIGNALS_CHECKED})"
    gpus = ", ".join(
        f"{g.name} (compute capability {g.capability_text or 'unknown'})" for g in report.gpus
    )
    lines = [
        f"Python {versions['python']} on {platform.system()} {platform.machine()}",
        f"stack: {', '.join(installed)}",
        f"not installed: {', '.join(missing) or '-'}",
        f"TPU signals: {signals}",
        f"GPUs: {gpus or 'none'}"
        + ("" if report.gpu_probe == GPU_PROBED else f" ({report.gpu_probe})"),
        f"device kind: {report.device_kind}",
        "auto chooses here:",
    ]
    choices = {
        "strategy": report.strategy,
        "precision": report.precision,
        "steps_per_execution": report.steps_per_execution,
    }
    for option, value in choices.items():
        lines.append(f"  --{option + ' auto':<25} {value!s:<15} {report.reasons[option]}")
    return "\n".join(lines)


def run(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    setup_logging(verbose=args.verbose, packages=["train"])
    if not args.verbose:  # TensorFlow's C++ start-up lines, should listing GPUs import it
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    gpus, gpu_probe = find_gpus(probe=not args.no_gpu_probe)
    report = describe_devices(
        signals=detect_tpu_signals(tpu_flag=args.tpu), gpus=gpus, gpu_probe=gpu_probe
    )
    versions = stack_versions()
    if args.json:
        print(json.dumps({"versions": versions, **report.to_json()}, indent=2))
    else:
        print(format_text(report, versions))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(COMMAND, lambda: run(sys.argv[1:] if argv is None else argv))
