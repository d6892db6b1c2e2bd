"""Which Beam runner runs the pipeline, and what lmshards sets up differently for each.

- No --runner: Beam's FnApiRunner in this process, with the tokenizer's threads on every core.
- --runner DaskRunner: Beam's DaskRunner (Beam itself knows it only by its class path).
- --runner DataflowRunner: stage the worker-only distribution; with --dry_run=True build the job
  offline and write it to --dataflow_job_file.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Sequence

from apache_beam.options.pipeline_options import (
    DebugOptions,
    DirectOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    TestOptions,
)

from preprocess.options import PreprocessError
from schemas import fs

FNAPI_RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"
DIRECT_RUNNER = "apache_beam.runners.direct.direct_runner.DirectRunner"
DATAFLOW_RUNNER = "apache_beam.runners.dataflow.dataflow_runner.DataflowRunner"
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
# Every runner known by its short name (Beam's own, plus Dask's), by its class path.
RUNNERS = {path.rsplit(".", 1)[1]: path for path in (*StandardOptions.ALL_KNOWN_RUNNERS, DASK_RUNNER)}
# The runners an error message suggests: the ones a user of lmshards picks from.
SUGGESTED_RUNNERS = ("DirectRunner", "DataflowRunner", "DaskRunner", "FlinkRunner", "SparkRunner", "PrismRunner")
# Runners that run every worker in this one process (the tokenizer may then use every core).
IN_PROCESS_RUNNERS = (FNAPI_RUNNER, DIRECT_RUNNER)
IN_MEMORY = "in_memory"
# What to install when a runner's module does not import.
INSTALL_HINTS = {
    DASK_RUNNER: 'pip install "lmshards[dask]"',
    DATAFLOW_RUNNER: 'pip install "apache-beam[gcp]"',
}
# setup.py builds the worker-only distribution (preprocess + schemas) when this is set. Beam's
# stager runs `setup.py sdist` in a subprocess that inherits our environment.
WORKER_PACKAGE_ENV = "LMSHARDS_WORKER_PACKAGE"


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
    _check_importable(name, path)
    return path


def _check_importable(name: str, path: str) -> None:
    module, _, cls = path.rpartition(".")
    try:
        found = hasattr(importlib.import_module(module), cls)
    except ImportError as e:
        fix = INSTALL_HINTS.get(path, f"install the package that provides {module!r}")
        raise PreprocessError(f"--runner {name!r} cannot be used: {e}; {fix}.") from e
    if not found:
        raise PreprocessError(f"--runner {name!r}: module {module!r} has no {cls!r}; check the class path.")


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
        standard.runner = path  # Beam does not know the short name
    if is_dry_run(options) and path != DATAFLOW_RUNNER:
        raise PreprocessError(f"--dry_run=True needs --runner DataflowRunner; {standard.runner!r} would run the job.")
    return options


def beam_flags() -> list[str]:
    """Every flag of every Beam pipeline option class imported so far: Beam's, ours, and those of a
    runner once resolve_runner has imported it (Dask's)."""
    flags: list[str] = []

    def collect(parser) -> None:
        flags.extend(opt for action in parser._actions for opt in action.option_strings if opt.startswith("--"))

    PipelineOptions([]).get_all_options(add_extra_args_fn=collect)
    return flags


def keeps_finish_bundle_output(options: PipelineOptions) -> bool:
    """Whether the runner keeps what a DoFn emits in finish_bundle.

    Beam's DaskRunner (2.77) collects a bundle's outputs before it calls finish_bundle, so anything
    emitted there is lost; on it, no step may hold elements back until the bundle ends.
    """
    return options.view_as(StandardOptions).runner != DASK_RUNNER  # pipeline_options names it by path


def runner_path(options: PipelineOptions) -> str:
    return resolve_runner(options.view_as(StandardOptions).runner)


def tokenizer_threads(requested: int, options: PipelineOptions) -> int:
    """--tokenizer_threads, with 0 (auto) resolved: all cores for one in-process worker, else 1.

    On multi-process runners (multi_processing, Dask, Dataflow: one SDK process per vCPU) more
    threads per worker would only oversubscribe the cores.
    """
    if requested:
        return requested
    in_process = (runner_path(options) in IN_PROCESS_RUNNERS
                  and options.view_as(DirectOptions).direct_running_mode == IN_MEMORY)
    return (os.cpu_count() or 1) if in_process else 1


# ---------------------------------------------------------------- Dataflow: staging and dry run


def prepare_staging(options: PipelineOptions) -> None:
    """With --setup_file, makes Beam stage the worker distribution, not the trainer's code."""
    if options.view_as(SetupOptions).setup_file:
        os.environ.setdefault(WORKER_PACKAGE_ENV, "1")


def is_dry_run(options: PipelineOptions) -> bool:
    return bool(options.view_as(TestOptions).dry_run)


def dry_run_job_file(options: PipelineOptions) -> str | None:
    return options.view_as(DebugOptions).dataflow_job_file


def dry_run(pipeline, options: PipelineOptions) -> None:
    """Builds the Dataflow job without submitting it, and writes it to --dataflow_job_file if given."""
    result = pipeline.run()
    job_file = dry_run_job_file(options)
    if job_file:
        write_dry_run_job_file(result, job_file)


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
        packages=[], options=job.options, environment_version=apiclient._FNAPI_ENVIRONMENT_MAJOR_VERSION,
        proto_pipeline_staged_url="", proto_pipeline=job.proto_pipeline,
    ).proto
    document = {"job": json.loads(job.json()), "pipeline": json_format.MessageToDict(job.proto_pipeline)}
    fs.write_text_atomic(path, json.dumps(document, indent=1, sort_keys=True) + "\n")
