"""What `lmshards preprocess` does differently when it hands the pipeline to Dataflow.

Beam's dry run (`--dry_run=True`) builds the whole Dataflow job without submitting it; we write
that job to `--dataflow_job_file` so it can be reviewed (and tested) with no cloud account.
"""

from __future__ import annotations

import json
import os

from apache_beam.options.pipeline_options import DebugOptions, PipelineOptions, SetupOptions, TestOptions

from schemas import fs

# setup.py builds the worker-only distribution (preprocess + schemas) when this is set. Beam's
# stager runs `setup.py sdist` in a subprocess that inherits our environment.
WORKER_PACKAGE_ENV = "LMSHARDS_WORKER_PACKAGE"


def is_dry_run(options: PipelineOptions) -> bool:
    return bool(options.view_as(TestOptions).dry_run)


def prepare_staging(options: PipelineOptions) -> None:
    """With --setup_file, makes Beam stage the worker distribution, not the trainer's code."""
    if options.view_as(SetupOptions).setup_file:
        os.environ.setdefault(WORKER_PACKAGE_ENV, "1")


def dry_run_job_file(options: PipelineOptions) -> str | None:
    return options.view_as(DebugOptions).dataflow_job_file


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
