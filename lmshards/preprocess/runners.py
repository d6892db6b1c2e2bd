"""Which Beam runner runs the pipeline, and what lmshards sets up differently for each.

- No --runner: Beam's FnApiRunner in this process, with the tokenizer's threads on every core (without any
  Beam flag and with a local output, lmshards.preprocess.local runs the same one step without Beam).
- --runner DaskRunner: Beam's DaskRunner with its gaps closed (lmshards.preprocess.dask_runner), on the cluster
  at --dask_client_address or on a local one (one worker process per core, on 127.0.0.1).
- --runner DataflowRunner: stage the worker-only distribution; with --dry_run=True build the job
  offline, write it to --dataflow_job_file and print its estimated size and cost.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import glob
import importlib
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence

from apache_beam.options.pipeline_options import (
    DebugOptions,
    DirectOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    TestOptions,
    WorkerOptions,
)
from apache_beam.version import __version__ as beam_version

from lmshards.plumbing import fs
from lmshards.preprocess.curation.steps.dedup import DEDUP_EXACT, DEDUP_NEAR
from lmshards.preprocess.options import (
    SUGGESTED_RUNNERS,
    PreprocessError,
    resolved_tokenizer_threads,
)
from lmshards.preprocess.pipeline_options import LmshardsPreprocessOptions  # noqa: F401 (our flags, known to Beam's parser)
from lmshards.schemas.constants import PACKING_BEST_FIT

FNAPI_RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"
DIRECT_RUNNER = "apache_beam.runners.direct.direct_runner.DirectRunner"
DATAFLOW_RUNNER = "apache_beam.runners.dataflow.dataflow_runner.DataflowRunner"
DASK_RUNNER = "lmshards.preprocess.dask_runner.DaskRunner"
# Beam's own DaskRunner loses and duplicates outputs of our pipeline; asking for it gets ours.
BEAM_DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
REPLACED_RUNNERS = {BEAM_DASK_RUNNER: DASK_RUNNER}
# Every runner known by its short name (Beam's own, plus Dask's), by its class path.
RUNNERS = {
    path.rsplit(".", 1)[1]: path for path in (*StandardOptions.ALL_KNOWN_RUNNERS, DASK_RUNNER)
}
# Runners that run every worker in this one process (the tokenizer may then use every core).
IN_PROCESS_RUNNERS = (FNAPI_RUNNER, DIRECT_RUNNER)
IN_MEMORY = "in_memory"
# What to install when a runner's modules do not import. lmshards' default install has apache-beam[gcp];
# this names the Beam version installed here.
INSTALL_HINTS = {
    DASK_RUNNER: 'pip install "lmshards[dask]"',
    DATAFLOW_RUNNER: f'pip install "apache-beam[gcp]=={beam_version}" (part of lmshards\' default install)',
}
# setup.py builds the worker-only distribution (preprocess + schemas) when this is set. Beam's
# stager runs `setup.py sdist` in a subprocess that inherits our environment.
WORKER_PACKAGE_ENV = "LMSHARDS_WORKER_PACKAGE"
# Runners whose workers run on other machines: every path they read or write must be on gs://.
REMOTE_RUNNERS = (DATAFLOW_RUNNER,)
WORKER_READABLE_PREFIX = "gs://"
# What the worker sdist is built from, copied out of the checkout (setup.py reads README.md and the
# version module), so the build writes nothing into the checkout. MANIFEST.in stays behind: it only
# prunes folders the copy does not hold, and setuptools would warn about each one.
STAGED_SETUP_FILES = ("setup.py", "pyproject.toml", "README.md")
STAGED_SETUP_FOLDERS = ("lmshards",)


# ---------------------------------------------------------------- selection


def resolve_runner(name: str) -> str:
    """The class path of runner `name`: a short name (any case, "Runner" optional, as Beam accepts) or a path.

    Raises:
      PreprocessError: an unknown name, or a runner whose package is not installed.
    """
    by_lower = {short.lower(): path for short, path in RUNNERS.items()}
    key = name.lower()
    path = by_lower.get(key) or by_lower.get(f"{key}runner") or (name if "." in name else None)
    if path is None:
        raise PreprocessError(
            f"--runner {name!r} is not a known runner; use one of {', '.join(SUGGESTED_RUNNERS)} (or a full class path)."
        )
    path = REPLACED_RUNNERS.get(path, path)
    _check_importable(name, path)
    return path


def _load_dask_runner() -> type:
    from lmshards.preprocess.dask_runner import DaskRunner  # needs the [dask] extra

    return DaskRunner


def _load_dataflow_runner() -> type:
    # The runner's module imports without the GCP libraries; submitting (or dry-running) needs these.
    import apache_beam.runners.dataflow.internal.apiclient  # noqa: F401
    from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

    return DataflowRunner


# The runners lmshards sets up itself, each loaded by a plain import (Beam still takes the class path).
RUNNER_LOADERS = {DASK_RUNNER: _load_dask_runner, DATAFLOW_RUNNER: _load_dataflow_runner}


def _check_importable(name: str, path: str) -> None:
    module, _, cls = path.rpartition(".")
    try:
        if path in RUNNER_LOADERS:
            RUNNER_LOADERS[path]()
            found = True
        else:  # any other runner, named by the class path a user gave
            found = hasattr(importlib.import_module(module), cls)
    except ImportError as e:
        fix = INSTALL_HINTS.get(path, f"install the package that provides {module!r}")
        raise PreprocessError(f"--runner {name!r} cannot be used: {e}; {fix}.") from e
    if not found:
        raise PreprocessError(
            f"--runner {name!r}: module {module!r} has no {cls!r}; check the class path."
        )


def pipeline_options(beam_args: Sequence[str]) -> PipelineOptions:
    """Beam's options from the command line's Beam flags, with our defaults and the runner resolved.

    Without --runner: Beam's FnApiRunner in this process. Naming it skips the DirectRunner's attempt
    to download the Prism runner; in-process, with the tokenizer's own threads on every core, it is
    as fast on one machine as one worker process per core, at a fraction of the memory (no
    per-process Beam harness, no cross-process shuffle).

    Raises:
      PreprocessError: an unknown or uninstalled --runner, or --dry_run=True on a runner other than Dataflow.
    """
    args = list(beam_args)
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    if "--runner" not in given:
        args.append("--runner=FnApiRunner")
        if "--direct_running_mode" not in given:
            args.append(f"--direct_running_mode={IN_MEMORY}")
    options = PipelineOptions(args)
    standard = options.view_as(StandardOptions)
    path = resolve_runner(standard.runner)
    if path == DASK_RUNNER:
        standard.runner = path  # Beam does not know the short name, and its own class is replaced
    if is_dry_run(options) and path != DATAFLOW_RUNNER:
        raise PreprocessError(
            f"--dry_run=True needs --runner DataflowRunner; {standard.runner!r} would run the job."
        )
    return options


def beam_flags() -> list[str]:
    """Every flag of every Beam pipeline option class imported so far: Beam's, ours, and those of a
    runner once resolve_runner has imported it (Dask's)."""
    flags: list[str] = []

    def collect(parser) -> None:
        flags.extend(
            opt
            for action in parser._actions
            for opt in action.option_strings
            if opt.startswith("--")
        )

    PipelineOptions([]).get_all_options(add_extra_args_fn=collect)
    return flags


def unknown_beam_args(args: Sequence[str]) -> list[str]:
    """The words of args that no Beam pipeline option class imported so far declares.

    Parsed by the parser Beam itself builds for its options (every PipelineOptions subclass, ours
    included), so a flag's value (`--runner DataflowRunner`) is never taken for a flag; Beam alone would
    only log a warning and drop the rest.
    """
    parsers: list[argparse.ArgumentParser] = []
    PipelineOptions([]).get_all_options(add_extra_args_fn=parsers.append)
    _, unknown = parsers[0].parse_known_args(list(args))
    return unknown


def runner_path(options: PipelineOptions) -> str:
    return resolve_runner(options.view_as(StandardOptions).runner)


def is_default_runner(options: PipelineOptions) -> bool:
    """Whether the pipeline runs on the default runner: Beam's FnApiRunner, in this process's memory.

    There preprocess runs as one step (lmshards.preprocess.in_process); any other runner runs the staged
    Beam pipeline.
    """
    # No runner at all is Beam's own default, the DirectRunner.
    return (
        options.view_as(StandardOptions).runner is not None
        and runner_path(options) == FNAPI_RUNNER
        and options.view_as(DirectOptions).direct_running_mode == IN_MEMORY
    )


def tokenizer_threads(requested: int, options: PipelineOptions) -> int:
    """--tokenizer_threads, with 0 (auto) resolved for the runner of `options` (resolved_tokenizer_threads)."""
    in_process = (
        runner_path(options) in IN_PROCESS_RUNNERS
        and options.view_as(DirectOptions).direct_running_mode == IN_MEMORY
    )
    return resolved_tokenizer_threads(requested, in_process=in_process)


# ---------------------------------------------------------------- Dataflow: staging and dry run


def check_worker_paths(options: PipelineOptions, paths: Mapping[str, Sequence[str]]) -> None:
    """Refuses a local path (flag -> its paths) given to a runner whose workers run on other machines.

    Raises:
      PreprocessError: the first local path, with its flag and the fix.
    """
    if runner_path(options) not in REMOTE_RUNNERS:
        return
    runner = options.view_as(StandardOptions).runner
    for flag, values in paths.items():
        for path in values:
            if path and not path.startswith(WORKER_READABLE_PREFIX):
                raise PreprocessError(
                    f"{flag} {path!r} is not on Cloud Storage, and {runner}'s workers cannot read or write "
                    f"this machine's files; copy it to a gs:// bucket and pass {flag} gs://BUCKET/..."
                )


def prepare_staging(options: PipelineOptions) -> None:
    """With --setup_file, makes Beam stage the worker distribution, not the trainer's code, built from a
    copy of the setup file's folder in a temporary directory: the build's egg-info and sdist never land
    in the user's checkout."""
    setup = options.view_as(SetupOptions)
    if setup.setup_file:
        os.environ.setdefault(WORKER_PACKAGE_ENV, "1")
        setup.setup_file = staged_setup_copy(setup.setup_file)
        _build_sdist_quietly()


def build_sdist(setup_file: str, dist_dir: str) -> str:
    """The path of the sdist `setup.py sdist` builds into dist_dir, its output kept off the terminal.

    Raises:
      RuntimeError: the build failed (its output's tail), as Beam's stager raises.
    """
    done = subprocess.run(
        # -d is sdist's dist-dir option.
        [sys.executable, os.path.basename(setup_file), "-q", "sdist", "-d", dist_dir],
        cwd=os.path.dirname(setup_file),
        capture_output=True,
        text=True,
        check=False,
    )
    built = glob.glob(os.path.join(dist_dir, "*.tar.gz"))
    if done.returncode != 0 or not built:
        raise RuntimeError(
            f"building the worker sdist from {setup_file} failed: {(done.stderr or done.stdout)[-2000:]}"
        )
    return built[0]


def staged_setup_copy(setup_file: str) -> str:
    """setup_file's copy, with what its sdist is built from, in a temporary directory removed at exit."""
    source = os.path.dirname(os.path.abspath(setup_file))
    copy = tempfile.mkdtemp(prefix="lmshards-worker-sdist-")
    atexit.register(shutil.rmtree, copy, ignore_errors=True)
    for name in (os.path.basename(setup_file), *STAGED_SETUP_FILES):
        if os.path.isfile(os.path.join(source, name)):
            shutil.copy2(os.path.join(source, name), copy)
    for name in STAGED_SETUP_FOLDERS:
        if os.path.isdir(os.path.join(source, name)):
            shutil.copytree(
                os.path.join(source, name),
                os.path.join(copy, name),
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
    return os.path.join(copy, os.path.basename(setup_file))


def _has_pypa_build() -> bool:
    """True where `python -m build` works. A checkout's `build/` folder (what setuptools leaves after a wheel
    build) is found as a namespace package without an origin, and is not it."""
    spec = importlib.util.find_spec("build")
    return spec is not None and spec.origin is not None


def _build_sdist_quietly() -> None:
    """Where the `build` module is not installed, builds the sdist the way Beam's stager falls back to
    (`setup.py sdist`), its output captured: the stager's first attempt, `python -m build`, would print
    "No module named build" on the user's terminal before falling back."""
    from apache_beam.runners.portability.stager import Stager

    if _has_pypa_build() or getattr(Stager, "_lmshards_quiet", False):
        return
    beam_build = Stager._build_setup_package

    def build_setup_package(setup_file, temp_dir, build_setup_args=None):
        if build_setup_args is not None or not setup_file.endswith("setup.py"):
            return beam_build(setup_file, temp_dir, build_setup_args)
        return build_sdist(setup_file, temp_dir)

    Stager._build_setup_package = staticmethod(build_setup_package)  # type: ignore[method-assign]
    Stager._lmshards_quiet = True  # type: ignore[attr-defined]


def is_dry_run(options: PipelineOptions) -> bool:
    return bool(options.view_as(TestOptions).dry_run)


def dry_run_job_file(options: PipelineOptions) -> str | None:
    return options.view_as(DebugOptions).dataflow_job_file


def dry_run(pipeline, options: PipelineOptions, *, input_bytes: int | None) -> None:
    """Builds the Dataflow job without submitting it, writes it to --dataflow_job_file if given, and
    prints the job's estimated size and cost for input_bytes of preprocess input (None: no estimate,
    for pipelines the cost model was not measured on)."""
    result = pipeline.run()
    job_file = dry_run_job_file(options)
    if job_file:
        write_dry_run_job_file(result, job_file)
    if input_bytes is None:
        return
    workers = options.view_as(WorkerOptions)
    machine_type = workers.machine_type or DEFAULT_MACHINE_TYPE
    try:
        estimate = estimate_dataflow_cost(
            input_bytes,
            machine_type=machine_type,
            max_workers=workers.max_num_workers,
            work=work_options(options.get_all_options()),
        )
    except UnknownMachineType as e:
        print(f"No cost estimate: {e}")
        return
    print(estimate.describe())


# ---------------------------------------------------------------- Dataflow: cost estimate


# Dry-run cost estimate: the runbook's cost model (dataflow_templates/README.md, "Cost model").
# The staged pipeline's throughput per core (what a Dataflow worker runs), measured on the English benchmark
# corpus: 1.32 MB of text per CPU second with one worker process, 1.38 with two (docs/benchmarks.md, "The
# staged path"); the model rounds down. Its workers now run at 0.86-0.90 of the tokenizer alone per CPU
# second: 0.94-1.05 MB on a slow VM, 3.4-3.7 on a faster one, above 1.3 / DATAFLOW_OVERHEAD on both
# ("The staged path per core, restated"). (Text with more tokens per byte, such as the bundled
# multilingual sample, ran at 0.92-0.95.)
DATAFLOW_MB_PER_VCPU_S = 1.3
# CPU seconds per MB of each option that changes the work, as a multiple of the plain run's: measured on
# one machine by bench/bench_plan_costs.py (docs/benchmarks.md, "Plan costs"). --dedup near includes exact.
WORK_RATIO_DEDUP_EXACT = 2.7
WORK_RATIO_DEDUP_NEAR = 10.6
WORK_RATIO_DECONTAMINATE = 3.8
WORK_RATIO_BEST_FIT = 1.2
WORK_RATIO_KEEP_TOKENS = 1.3
# On top of that: the SDK harness, GCS reads and writes, shuffle I/O, start-up, autoscaling's idle tail.
DATAFLOW_OVERHEAD = 1.5
# Dataflow Shuffle volume per input byte: token ids to packing groups (~0.6: two bytes an id, with each
# document's hash and length; 0.54-0.58 of the four-byte ids' volume) + records to shards (~0.8).
SHUFFLE_BYTES_PER_INPUT_BYTE = 1.4
DISK_GB_PER_WORKER = 25  # Dataflow's boot disk for batch jobs with Dataflow Shuffle
# Dataflow batch list prices, us-central1 (USD).
VCPU_HOUR_USD = 0.056
MEMORY_GB_HOUR_USD = 0.003557
SHUFFLE_GB_USD = 0.011
DISK_GB_HOUR_USD = 0.000054
DEFAULT_MACHINE_TYPE = "n1-standard-1"  # what Dataflow gives a batch job without --machine_type
# The worker count suggested: enough to finish in about this long, at most --max_num_workers.
TARGET_WALL_HOURS = 0.5
# GB of memory per vCPU of the predefined machine types: N1, and every later series.
N1_MEMORY_GB_PER_VCPU = {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9}
MEMORY_GB_PER_VCPU = {"standard": 4.0, "highmem": 8.0, "highcpu": 1.0}
_PREDEFINED_MACHINE = re.compile(
    r"(?P<series>[a-z0-9]+)-(?P<kind>standard|highmem|highcpu)-(?P<vcpus>\d+)(-.*)?"
)
_CUSTOM_MACHINE = re.compile(r"(?:[a-z0-9]+-)?custom-(?P<vcpus>\d+)-(?P<memory_mb>\d+)(-ext)?")
_MB = 1_000_000
_GB = 1_000_000_000


@dataclasses.dataclass(frozen=True)
class JobWork:
    """How much CPU work per MB a job's options ask for: the plain run's times `ratio`."""

    ratio: float = 1.0
    options: tuple[str, ...] = ()  # the flags behind it, as the estimate names them


def job_work(*, dedup: str, decontaminate: bool, packing: str, keep_tokens: bool) -> JobWork:
    """Each option adds its measured extra CPU (its ratio minus 1) to the plain run's."""
    extras = {
        f"--dedup {DEDUP_EXACT}": WORK_RATIO_DEDUP_EXACT if dedup == DEDUP_EXACT else None,
        f"--dedup {DEDUP_NEAR}": WORK_RATIO_DEDUP_NEAR if dedup == DEDUP_NEAR else None,
        "--decontaminate": WORK_RATIO_DECONTAMINATE if decontaminate else None,
        f"--packing {PACKING_BEST_FIT}": WORK_RATIO_BEST_FIT
        if packing == PACKING_BEST_FIT
        else None,
        "--keep_tokens": WORK_RATIO_KEEP_TOKENS if keep_tokens else None,
    }
    given = {flag: ratio for flag, ratio in extras.items() if ratio is not None}
    return JobWork(ratio=1.0 + sum(r - 1.0 for r in given.values()), options=tuple(given))


def work_options(options: Mapping[str, object]) -> JobWork:
    """job_work of the preprocess flags among Beam's parsed options (absent ones count as unset)."""
    return job_work(
        dedup=str(options.get("dedup") or ""),
        decontaminate=bool(options.get("decontaminate")),
        packing=str(options.get("packing") or ""),
        keep_tokens=bool(options.get("keep_tokens")),
    )


class UnknownMachineType(ValueError):
    """A machine type whose vCPUs and memory cannot be read from its name."""


@dataclasses.dataclass(frozen=True)
class MachineShape:
    vcpus: int
    memory_gb: float


def machine_shape(machine_type: str) -> MachineShape:
    """vCPUs and memory of a predefined (n2-standard-4) or custom (custom-8-32768) Compute Engine type.

    Raises:
      UnknownMachineType: any other name (shared-core types, or a series this does not know).
    """
    if match := _CUSTOM_MACHINE.fullmatch(machine_type):
        return MachineShape(vcpus=int(match["vcpus"]), memory_gb=int(match["memory_mb"]) / 1024)
    if match := _PREDEFINED_MACHINE.fullmatch(machine_type):
        per_vcpu = N1_MEMORY_GB_PER_VCPU if match["series"] == "n1" else MEMORY_GB_PER_VCPU
        vcpus = int(match["vcpus"])
        return MachineShape(vcpus=vcpus, memory_gb=vcpus * per_vcpu[match["kind"]])
    raise UnknownMachineType(
        f"machine type {machine_type!r} (vCPUs and memory unknown; e.g. n2-standard-4)."
    )


@dataclasses.dataclass(frozen=True)
class CostEstimate:
    """A Dataflow job's size and cost, from the runbook's cost model (see describe() for its assumptions)."""

    input_bytes: int
    machine_type: str
    machine: MachineShape
    workers: int
    vcpu_hours: float
    wall_hours: float  # processing time with `workers` workers, start-up not included
    vcpu_usd: float
    memory_usd: float
    shuffle_usd: float
    disk_usd: float
    work: JobWork = JobWork()

    @property
    def usd(self) -> float:
        return self.vcpu_usd + self.memory_usd + self.shuffle_usd + self.disk_usd

    def size_and_cost(self) -> str:
        """'about 12 min of processing plus worker start-up, about $5.63'; under a minute of worker time
        says so, with the cost rounded up to a cent rather than shown as $0.00."""
        if self.vcpu_hours / self.machine.vcpus * 60 < 1:
            return f"under a minute of worker time; about ${max(math.ceil(self.usd * 100) / 100, 0.01):.2f}"
        return f"about {self.wall_hours * 60:,.0f} min of processing plus worker start-up, about ${self.usd:,.2f}"

    def work_line(self) -> str:
        if not self.work.options:
            return "  Work: a plain run (no curation, concat packing)"
        return (
            f"  Work: {self.work.ratio:.1f} x a plain run's CPU for {', '.join(self.work.options)} "
            "(each option's measured extra, bench/bench_plan_costs.py)"
        )

    def describe(self) -> str:
        m = self.machine
        return "\n".join(
            [
                f"Dataflow estimate for {self.input_bytes / _MB:,.1f} MB of input: {self.workers} x {self.machine_type} "
                f"({m.vcpus} vCPUs, {m.memory_gb:g} GB each), {self.vcpu_hours:,.2f} vCPU-hours, "
                f"{self.size_and_cost()}",
                f"  vCPU ${self.vcpu_usd:,.2f}, memory ${self.memory_usd:,.2f}, Dataflow Shuffle ${self.shuffle_usd:,.2f}, "
                f"disk ${self.disk_usd:,.2f}",
                self.work_line(),
                f"  Assumptions: {DATAFLOW_MB_PER_VCPU_S} MB/s of input per vCPU (the staged path on English text, measured "
                f"on one machine) x "
                f"{DATAFLOW_OVERHEAD} for Dataflow's overhead; Shuffle {SHUFFLE_BYTES_PER_INPUT_BYTE} x the input; "
                f"{DISK_GB_PER_WORKER} GB disk per worker; Dataflow batch list prices in us-central1 (vCPU-hour "
                f"${VCPU_HOUR_USD}, GB-hour ${MEMORY_GB_HOUR_USD}, Shuffle GB ${SHUFFLE_GB_USD}); workers enough to "
                f"finish in about {TARGET_WALL_HOURS * 60:.0f} min, at most --max_num_workers; input sizes as stored "
                "(compressed files hold more text); Cloud Storage billed separately.",
            ]
        )


def estimate_dataflow_cost(
    input_bytes: int, *, machine_type: str, max_workers: int | None, work: JobWork = JobWork()
) -> CostEstimate:
    """The runbook's cost model applied to input_bytes of input on `machine_type` workers, the CPU time
    scaled by the work the job's options ask for (job_work).

    Raises:
      UnknownMachineType: see machine_shape.
    """
    machine = machine_shape(machine_type)
    vcpu_hours = input_bytes / _MB / DATAFLOW_MB_PER_VCPU_S / 3600 * DATAFLOW_OVERHEAD * work.ratio
    wanted = max(1, math.ceil(vcpu_hours / (TARGET_WALL_HOURS * machine.vcpus)))
    workers = min(wanted, max_workers) if max_workers else wanted
    worker_hours = vcpu_hours / machine.vcpus
    return CostEstimate(
        input_bytes=input_bytes,
        machine_type=machine_type,
        machine=machine,
        workers=workers,
        vcpu_hours=vcpu_hours,
        wall_hours=worker_hours / workers,
        vcpu_usd=vcpu_hours * VCPU_HOUR_USD,
        memory_usd=worker_hours * machine.memory_gb * MEMORY_GB_HOUR_USD,
        shuffle_usd=input_bytes * SHUFFLE_BYTES_PER_INPUT_BYTE / _GB * SHUFFLE_GB_USD,
        disk_usd=worker_hours * DISK_GB_PER_WORKER * DISK_GB_HOUR_USD,
        work=work,
    )


def write_dry_run_job_file(result, path: str) -> None:
    """Writes the Dataflow job that a `--dry_run=True` run built but did not submit.

    Beam 2.77's DataflowRunner returns from a dry run before it stages anything or writes
    --dataflow_job_file, so nothing needs credentials or network. This fills in the job's
    environment (worker pools, container image, pipeline options) the way submission would, and
    writes {"job": the Dataflow Job as --dataflow_job_file has it, minus staged packages,
    "pipeline": the Beam runner-API pipeline, with the artifacts that would be staged}.
    """
    from apache_beam.runners.dataflow.internal import apiclient
    from google.protobuf import json_format

    job = result.job
    job.proto.environment = apiclient.Environment(
        packages=[],
        options=job.options,
        environment_version=apiclient._FNAPI_ENVIRONMENT_MAJOR_VERSION,
        proto_pipeline_staged_url="",
        proto_pipeline=job.proto_pipeline,
    ).proto
    document = {
        "job": json.loads(job.json()),
        "pipeline": json_format.MessageToDict(job.proto_pipeline),
    }
    fs.write_text_atomic(path, json.dumps(document, indent=1, sort_keys=True) + "\n")
