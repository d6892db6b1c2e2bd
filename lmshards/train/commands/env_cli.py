"""`lmshards env`: the stack's versions, whether the backend's runtime loads, the accelerators and TPU
signals found, and what `auto` chooses here.

It never initialises a TPU and asks nothing over the network. The backend's runtime is imported in a
subprocess (lmshards/train/commands/runtime_check.py), so a libtpu that aborts its import cannot take this command down.
TensorFlow is imported here only to list GPUs, and only when it loaded in that subprocess, a GPU
device file exists and CUDA_VISIBLE_DEVICES does not hide them all. `--check` exits 1 when
`lmshards train` could not run here, with one error line per problem.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from lmshards.plumbing import stopping
from lmshards.plumbing.cli import (
    EXIT_FAILURE,
    EXIT_OK,
    CommandParser,
    add_verbose_flag,
    one_line_errors,
    print_error,
    setup_logging,
)
from lmshards.schemas.version import __version__
from lmshards.train.commands import runtime_check
from lmshards.train.commands.runtime_check import (
    BACKEND_TENSORFLOW,
    BACKENDS,
    CHECKED_DISTRIBUTIONS,
)
from lmshards.train.devices import (
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
    *CHECKED_DISTRIBUTIONS,
    "tensorflow-text",
    "transformers",
    "tokenizers",
    "apache-beam",
    "torch",
)
NOT_IMPORTED = "not checked: --no_import"


def build_parser() -> CommandParser:
    p = CommandParser(COMMAND, description=__doc__)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default=BACKEND_TENSORFLOW,
        help="the `lmshards train --backend` whose runtime to check",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1, with one error line per problem, when `lmshards train` could not run here",
    )
    p.add_argument(
        "--no_import",
        action="store_true",
        help="check the installed distributions only; do not import the backend's runtime",
    )
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
    return {
        "python": platform.python_version(),
        "lmshards": __version__,
        **runtime_check.distribution_versions(STACK),
    }


def find_gpus(
    *, probe: bool, tensorflow_loads: bool, environ: Mapping[str, str] = os.environ
) -> tuple[list[GpuInfo], str]:
    """(GPUs, GPU_PROBED) or ([], why they were not listed)."""
    if not probe:
        return [], "not probed: --no_gpu_probe"
    if not tensorflow_loads:
        return [], "not probed: tensorflow did not load (see problems)"
    reason = gpu_probe_skip_reason(environ=environ)
    if reason:
        return [], f"not probed: {reason}"
    try:
        return list_gpus(), GPU_PROBED
    except ImportError:
        return [], "not probed: tensorflow is not installed"


def format_text(
    report: DeviceReport, versions: Mapping[str, str | None], runtime: Mapping[str, Any]
) -> str:
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
        f"backend {runtime['backend']}: " + _runtime_text(runtime),
        *(f"problem: {problem}" for problem in runtime["problems"]),
        *(f"note: {note}" for note in runtime["notes"]),
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


def _runtime_text(runtime: Mapping[str, Any]) -> str:
    if runtime["runtime_ok"] is None:
        return runtime["runtime_detail"]
    return ("loads: " if runtime["runtime_ok"] else "does not load: ") + runtime["runtime_detail"]


def check_runtime(
    backend: str,
    versions: Mapping[str, str | None],
    *,
    import_runtime: bool,
    signals: Sequence[str] = (),
) -> dict[str, Any]:
    """The report's backend part: backend, runtime_ok (None: not imported), runtime_detail, problems, notes."""
    probe = runtime_check.probe_runtime(backend) if import_runtime else None
    return {
        "backend": backend,
        "runtime_ok": probe.ok if probe else None,
        "runtime_detail": probe.detail if probe else NOT_IMPORTED,
        "problems": runtime_check.check_backend(backend, versions, probe=probe, signals=signals),
        "notes": runtime_check.libtpu_notes(backend, versions),
    }


def run(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    setup_logging(verbose=args.verbose, packages=["lmshards.train"])
    if not args.verbose:  # TensorFlow's C++ start-up lines, should listing GPUs import it
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    versions = stack_versions()
    signals = detect_tpu_signals(tpu_flag=args.tpu)
    runtime = check_runtime(
        args.backend, versions, import_runtime=not args.no_import, signals=signals
    )
    # Listing GPUs imports TensorFlow in this process: not when the probe saw it fail, or half overwritten.
    tensorflow_failed = args.backend == BACKEND_TENSORFLOW and runtime["runtime_ok"] is False
    tensorflow_loads = not tensorflow_failed and not runtime_check.tensorflow_conflict(versions)
    gpus, gpu_probe = find_gpus(probe=not args.no_gpu_probe, tensorflow_loads=tensorflow_loads)
    report = describe_devices(signals=signals, gpus=gpus, gpu_probe=gpu_probe)
    if args.json:
        print(json.dumps({"versions": versions, **runtime, **report.to_json()}, indent=2))
    else:
        print(format_text(report, versions, runtime))
    if args.check and runtime["problems"]:
        for problem in runtime["problems"]:
            print_error(COMMAND, problem)
        return EXIT_FAILURE
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    with one_line_errors(COMMAND) as failed, stopping.stop_signals():
        return run(sys.argv[1:] if argv is None else argv)
    return failed.code
