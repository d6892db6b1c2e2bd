"""The Dataflow production path: the Flex Template's parameters, and the Dataflow job built offline."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import tarfile
from pathlib import Path

import pytest
from google.cloud import dataflow_v1beta3  # ships with apache-beam[gcp]

from lmshards.plumbing import fs
from lmshards.plumbing.flag_types import Number
from lmshards.plumbing.units import SizeFlag
from lmshards.preprocess import runners
from lmshards.preprocess.curation.steps import document_flags, quality_filters
from lmshards.preprocess.options import PreprocessConfig
from lmshards.preprocess.pipeline_options import LmshardsPreprocessOptions, config_from_options
from tests.conftest import REPO

METADATA = REPO / "dataflow_templates" / "preprocess" / "metadata.json"
GCS_PARAM_TYPES = {"GCS_READ_FILE", "GCS_READ_FOLDER", "GCS_WRITE_FOLDER", "GCS_WRITE_FILE"}


def _flag_actions() -> dict[str, argparse.Action]:
    """dest -> argparse action of every `lmshards preprocess` flag (Beam's own options excluded)."""
    parser = argparse.ArgumentParser()
    LmshardsPreprocessOptions._add_argparse_args(parser)
    return {a.dest: a for a in parser._actions if not isinstance(a, argparse._HelpAction)}


def _metadata_params() -> dict[str, dict]:
    return {p["name"]: p for p in json.loads(METADATA.read_text(encoding="utf-8"))["parameters"]}


def _required_flags(actions: dict[str, argparse.Action]) -> set[str]:
    """Flags whose PreprocessConfig field has no default (the config names --input `inputs`)."""
    no_default = {
        f.name
        for f in dataclasses.fields(PreprocessConfig)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    return {dest for dest in actions if dest in no_default or f"{dest}s" in no_default}


def test_metadata_is_a_valid_dataflow_template_metadata():
    """Parsed strictly by the Dataflow API's own message type: an unknown or misspelt field fails."""
    metadata = dataflow_v1beta3.TemplateMetadata.from_json(METADATA.read_text(encoding="utf-8"))
    assert metadata.name and metadata.description and not metadata.streaming
    assert all(p.label and p.help_text for p in metadata.parameters)


def test_metadata_parameters_match_the_pipeline_flags_one_to_one():
    actions, params = _flag_actions(), _metadata_params()
    assert sorted(params) == sorted(actions)
    required = _required_flags(actions)
    assert required == {"input", "tokenizer", "output"}
    for name, param in params.items():
        action = actions[name]
        assert param["isOptional"] == (name not in required), name
        assert (param["paramType"] == "ENUM") == bool(action.choices), name
        if action.choices:
            assert [o["value"] for o in param["enumOptions"]] == list(action.choices), name
        numeric = isinstance(action.type, (Number, SizeFlag))
        assert (param["paramType"] == "NUMBER") == numeric, name
        assert (param["paramType"] == "BOOLEAN") == (action.nargs == 0), name
        if action.default is None or action.default is False:
            assert "defaultValue" not in param, name
        else:
            assert param["defaultValue"] == str(action.default), name


def test_metadata_regexes_accept_defaults_and_gcs_paths_only_where_paths_go():
    for name, param in _metadata_params().items():
        patterns = [re.compile(r) for r in param.get("regexes", [])]
        if "defaultValue" in param:
            assert all(p.fullmatch(param["defaultValue"]) for p in patterns), name
        if param["paramType"] in GCS_PARAM_TYPES:
            assert patterns, name
            assert all(p.fullmatch("gs://bucket/corpus/*.jsonl.gz") for p in patterns), name
            assert not any(p.fullmatch("/home/me/corpus.txt") for p in patterns), name
    assert {n for n, p in _metadata_params().items() if p["paramType"] in GCS_PARAM_TYPES} == {
        "input",
        "tokenizer",
        "output",
    }


# Curation step parameters (no template default: the step's applies): a value each takes, its default
# or, where the text names registered things, some of them.
STEP_SAMPLES = {
    **{f.flag: str(f.default) for f in document_flags() if f.default not in ("", None, False)},
    "quality_filters": ",".join(s.name for s in quality_filters()),
    "languages": "en,de",
    "pii": "email,ip",
}


def _launcher_argv(params: dict[str, dict], *, types: set[str]) -> list[str]:
    """The --name=value flags the Flex Template launcher passes, one sample value per parameter."""
    samples = {
        "GCS_READ_FILE": "gs://bucket/in/*.txt",
        "GCS_WRITE_FOLDER": "gs://bucket/out",
        "BOOLEAN": "true",
        "NUMBER": "3",
        "TEXT": "body",
    }

    def sample(param: dict) -> str:
        if param["name"] in STEP_SAMPLES:
            return STEP_SAMPLES[param["name"]]
        if "defaultValue" in param:
            return param["defaultValue"]
        if (
            param["paramType"] == "ENUM"
        ):  # its first option (--remainder: its default follows --packing)
            return param["enumOptions"][0]["value"]
        return samples[param["paramType"]]

    return [
        f"--{name}={sample(param)}" for name, param in params.items() if param["paramType"] in types
    ]


def test_every_template_parameter_parses_as_the_launcher_passes_it():
    from apache_beam.options.pipeline_options import PipelineOptions

    params = _metadata_params()
    argv = _launcher_argv(params, types={p["paramType"] for p in params.values()} - {"BOOLEAN"})
    config = config_from_options(PipelineOptions(argv))
    assert config.inputs == ("gs://bucket/in/*.txt",) and config.output == "gs://bucket/out"
    assert config.seq_len == 128 and config.remainder == "drop" and config.doc_separator == "line"
    assert config.num_shards == 3  # a number without a default takes the sample value


# ---------------------------------------------------------------- the Dataflow job, built offline

IMAGE = "us-central1-docker.pkg.dev/lmshards-test/lmshards/preprocess:test"
STAGES = (
    "Read",
    "Tokenize",
    "Split",
    "Pack",
    "Shard",
    "Manifest",
)  # the top-level stages of build_pipeline
# The worker distribution ships these folders and no other code (the trainer stays off the workers).
# The packages a worker receives, all under the one import name.
WORKER_FOLDERS = {"lmshards/plumbing", "lmshards/preprocess", "lmshards/schemas"}


def _build_dry_run(argv: list[str]):
    """What `lmshards preprocess ARGV` does up to pipeline.run(), on the DataflowRunner in dry-run mode."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from lmshards.preprocess.pipeline import build_pipeline, plan_preprocess

    plan = plan_preprocess(config_from_options(PipelineOptions(argv)))
    pipeline = beam.Pipeline(options=runners.pipeline_options(argv))
    build_pipeline(pipeline, plan)
    runners.prepare_staging(
        pipeline.options
    )  # as ready_to_run does: the sdist is built from a copy
    return pipeline.run()


@pytest.fixture(scope="module")
def dry_run(gcs_emulator, sample_tokenizer, sample_files, tmp_path_factory):
    """(job file JSON, argv, gs:// work dir) of a dry run over part of the sample corpus on the emulator."""
    work = f"{gcs_emulator}/dry-run"
    for f in sample_files[:3]:
        fs.write_bytes_atomic(f"{work}/corpus/{f.parent.name}-{f.name}", f.read_bytes())
    fs.write_bytes_atomic(f"{work}/tokenizer/tokenizer.json", sample_tokenizer.read_bytes())
    job_file = str(tmp_path_factory.mktemp("dry-run") / "job.json")
    argv = [
        f"--input={work}/corpus",
        f"--tokenizer={work}/tokenizer",
        f"--output={work}/out",
        "--seq_len=64",
        "--range_mb=0.25",
        "--runner=DataflowRunner",
        "--dry_run=True",
        "--project=lmshards-test",
        "--region=us-central1",
        f"--temp_location={work}/tmp",
        f"--setup_file={REPO / 'setup.py'}",
        f"--sdk_container_image={IMAGE}",
        "--machine_type=n2-standard-4",
        "--max_num_workers=25",
        f"--dataflow_job_file={job_file}",
    ]
    with pytest.MonkeyPatch.context() as env:
        env.delenv(runners.WORKER_PACKAGE_ENV, raising=False)  # prepare_staging sets it
        result = _build_dry_run(argv)
    runners.write_dry_run_job_file(result, job_file)
    return json.loads(Path(job_file).read_text()), argv, work


def _transforms(job: dict) -> dict[str, dict]:
    return job["pipeline"]["components"]["transforms"]


def _artifacts(job: dict) -> dict[str, str]:
    """Staged name -> local file, of every artifact the workers' environment would receive."""
    from apache_beam.portability.api import beam_runner_api_pb2
    from google.protobuf import json_format

    out = {}
    for env in job["pipeline"]["components"]["environments"].values():
        for dep in env.get("dependencies", []):
            info = json_format.ParseDict(dep, beam_runner_api_pb2.ArtifactInformation())
            staged = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(
                info.role_payload
            ).staged_name
            out[staged] = beam_runner_api_pb2.ArtifactFilePayload.FromString(info.type_payload).path
    return out


def _shipped_folders(names: list[str]) -> set[str]:
    """Folders holding code under an sdist's root, its egg-info aside, named to the depth of a package of the
    import name (`lmshards/preprocess`): the code a worker receives."""
    folders = set()
    for parts in (name.split("/") for name in names):
        if len(parts) <= 2 or parts[1].endswith(".egg-info"):
            continue
        if parts[1] != "lmshards":
            folders.add(parts[1])
        elif len(parts) > 3:
            folders.add("/".join(parts[1:3]))
    return folders


def _fused_stages(job: dict) -> list[set[str]]:
    """The transform names of each fused stage, fused the way Beam's portable runners fuse.

    Dataflow fuses on its side with the same rule: producer and consumer fuse unless a
    GroupByKey (or a side input) lies between them.
    """
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2
    from apache_beam.runners.portability.fn_api_runner import translations
    from google.protobuf import json_format

    proto = json_format.ParseDict(job["pipeline"], beam_runner_api_pb2.Pipeline())
    _, stages = translations.create_and_optimize_stages(
        proto,
        phases=translations.standard_optimize_phases(),
        known_runner_urns=frozenset(
            [common_urns.primitives.GROUP_BY_KEY.urn, common_urns.primitives.FLATTEN.urn]
        ),
    )
    return [{t.unique_name for t in stage.transforms if t.unique_name} for stage in stages]


def _stage_of(stages: list[set[str]], prefix: str) -> int:
    (index,) = {i for i, names in enumerate(stages) for name in names if name.startswith(prefix)}
    return index


@pytest.mark.gcs
@pytest.mark.slow
def test_dry_run_builds_every_stage_and_touches_no_storage(dry_run):
    job, _, work = dry_run
    assert job["job"]["type"] == "JOB_TYPE_BATCH"
    stages = {t["uniqueName"] for t in _transforms(job).values() if "/" not in t["uniqueName"]}
    assert set(STAGES) <= stages
    # Nothing written: no output, nothing staged under temp_location (a dry run only builds).
    assert not fs.exists(f"{work}/out")
    assert not fs.exists(f"{work}/tmp")


@pytest.mark.gcs
@pytest.mark.slow
def test_dry_run_job_carries_the_options_container_and_machine(dry_run):
    job, _, work = dry_run
    options = job["job"]["environment"]["sdkPipelineOptions"]["options"]
    assert options["input"] == [f"{work}/corpus"] and options["output"] == f"{work}/out"
    assert options["tokenizer"] == f"{work}/tokenizer" and options["seq_len"] == 64
    # The sdist is built from a copy of the checkout's setup tree, outside the checkout.
    staged = Path(options["setup_file"])
    assert staged.name == "setup.py" and REPO not in staged.parents
    assert options["sdk_container_image"] == IMAGE
    (pool,) = job["job"]["environment"]["workerPools"]
    assert (
        pool["machineType"] == "n2-standard-4"
        and pool["autoscalingSettings"]["maxNumWorkers"] == 25
    )
    (image,) = pool["sdkHarnessContainerImages"]
    assert image["containerImage"] == IMAGE
    # One SDK process per vCPU: hence one Rust tokenizer thread per harness (--tokenizer_threads 1).
    assert image["useSingleCorePerContainer"] is True


@pytest.mark.gcs
@pytest.mark.slow
def test_dry_run_stages_the_worker_distribution_built_from_this_checkout(dry_run):
    """Beam's stager ran `setup.py sdist` on a copy of this checkout's setup tree."""
    artifacts = _artifacts(dry_run[0])
    with tarfile.open(artifacts["workflow.tar.gz"]) as tar:
        names = tar.getnames()
    assert _shipped_folders(names) == WORKER_FOLDERS
    assert any(name.endswith("/setup.py") and name.count("/") == 1 for name in names)


@pytest.mark.gcs
@pytest.mark.slow
def test_dry_run_graph_spreads_the_read_and_fuses_no_fan_out_into_one_worker(dry_run, sample_files):
    from lmshards.preprocess.sources import ReadOptions, expand_inputs, plan_ranges

    job, argv, work = dry_run
    # The read is split: every sample file is larger than --range_mb, so there are more ranges than files.
    files = expand_inputs([f"{work}/corpus"])
    assert len(
        plan_ranges(files, options=ReadOptions(), range_bytes=int(0.25 * 1024 * 1024))
    ) > 2 * len(files)
    stages = _fused_stages(job)
    # Ranges are redistributed before reading: listing them (one element fanning out to all of them)
    # is not fused with reading them.
    assert _stage_of(stages, "Read/ListRanges/FlatMap") != _stage_of(stages, "Read/ReadRanges")
    # Reading and tokenizing one range fuse on purpose: the raw text is never shuffled, and the
    # ranges (64 MiB each by default) are the unit of parallelism.
    assert (
        _stage_of(stages, "Read/ReadRanges")
        == _stage_of(stages, "Tokenize/Encode")
        == _stage_of(stages, "Split/Route")
    )
    # After each fan-out a GroupByKey redistributes: documents -> packing groups, blocks -> shards.
    assert _stage_of(stages, "Split/Route") != _stage_of(stages, "Pack/Pack")
    assert _stage_of(stages, "Shard/AssignShards") != _stage_of(stages, "Shard/WriteShard")
    # Packed groups are written to files where they are packed: only their sizes leave the stage.
    assert _stage_of(stages, "Pack/Pack") == _stage_of(stages, "Shard/SpillGroups")
    assert _stage_of(stages, "Shard/WriteShard") != _stage_of(stages, "Manifest/Write")


# ---------------------------------------------------------------- the CLI path to Dataflow


@pytest.mark.gcs
@pytest.mark.slow
def test_cli_dry_run_writes_the_job_file_and_never_touches_the_output(
    dry_run, tmp_path, monkeypatch
):
    from lmshards.preprocess.cli import main

    _, argv, work = dry_run
    fs.write_text_atomic(f"{work}/out/keep.txt", "an existing output")
    monkeypatch.delenv(runners.WORKER_PACKAGE_ENV, raising=False)
    job_file = tmp_path / "cli-job.json"
    argv = [a for a in argv if not a.startswith("--dataflow_job_file")] + [
        f"--dataflow_job_file={job_file}",
        "--overwrite",
    ]
    # A folder holding a file lmshards did not write is refused, --overwrite or not, before any job is built.
    assert main(argv) == 2
    assert not job_file.exists()
    argv = [a for a in argv if not a.startswith("--output=")] + [f"--output={work}/fresh-out"]
    assert main(argv) == 0
    assert not fs.exists(f"{work}/fresh-out")
    job = json.loads(job_file.read_text())
    assert set(STAGES) <= {t["uniqueName"] for t in _transforms(job).values()}
    with tarfile.open(_artifacts(job)["workflow.tar.gz"]) as tar:
        assert _shipped_folders(tar.getnames()) == WORKER_FOLDERS
    assert fs.read_text(f"{work}/out/keep.txt") == "an existing output"


def test_flex_template_boolean_parameters_parse():
    """The launcher writes every switch as --name=true/false; preprocess reads them as plain switches."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from lmshards.plumbing.cli import normalize_switches
    from lmshards.preprocess.cli import build_parser

    params = _metadata_params()
    paths = _launcher_argv(params, types={"GCS_READ_FILE", "GCS_WRITE_FOLDER"})
    switches = build_parser().switches()
    booleans = _launcher_argv(params, types={"BOOLEAN"})
    assert booleans == [
        "--overwrite=true",
        "--verbose=true",
        "--keep_tokens=true",
        "--html_drop_comments=true",
        "--skip_binary=true",
        "--c4_remove_lines=true",
        "--c4_badwords_anywhere=true",
    ]
    for name in ("overwrite", "keep_tokens", "skip_binary"):
        for value, expected in (("true", True), ("false", False)):
            argv = normalize_switches([*paths, f"--{name}={value}"], switches)
            assert argv == paths + ([f"--{name}"] if expected else [])
            assert getattr(config_from_options(PipelineOptions(argv)), name) is expected


@pytest.mark.gcs
@pytest.mark.slow
def test_dry_run_spreads_a_large_compressed_input_before_tokenizing(
    dry_run, sample_files, monkeypatch
):
    import gzip

    _, argv, work = dry_run
    text = b"".join(f.read_bytes() for f in sample_files)
    fs.write_bytes_atomic(f"{work}/gz/corpus.txt.gz", gzip.compress(text))
    monkeypatch.setenv(runners.WORKER_PACKAGE_ENV, "1")
    argv = [a for a in argv if not a.startswith(("--input=", "--output="))] + [
        f"--input={work}/gz",
        f"--output={work}/gz-out",
    ]
    job_file = f"{work}/gz-job.json"
    runners.write_dry_run_job_file(_build_dry_run(argv), job_file)
    stages = _fused_stages(json.loads(fs.read_text(job_file)))
    assert _stage_of(stages, "Read/ReadRanges") != _stage_of(stages, "Tokenize/Encode")


@pytest.mark.gcs
@pytest.mark.slow
def test_dry_run_builds_the_curation_stage_and_writes_nothing(dry_run, tmp_path):
    """Every curation step (--languages, --quality_filters, --c4_badwords_file, --pii, --decontaminate,
    --dedup near): the Dataflow job is built offline (the eval set and the word list read on gs:// for
    their checks), with the curation stage
    and its steps between Read and Tokenize, and nothing is written."""
    _, argv, work = dry_run
    fs.write_bytes_atomic(
        f"{work}/eval/eval.txt",
        b"one two three four five six seven eight nine ten eleven twelve thirteen\n",
    )
    fs.write_bytes_atomic(f"{work}/eval/words.txt", b"grue\nzorp\n")
    job_file = tmp_path / "curated-job.json"
    curated = [a for a in argv if not a.startswith(("--output=", "--dataflow_job_file="))] + [
        f"--output={work}/curated-out",
        f"--dataflow_job_file={job_file}",
        "--dedup=near",
        f"--decontaminate={work}/eval/eval.txt",
        "--languages=en",
        "--quality_filters=gopher_quality,gopher_repetition,c4_quality,fineweb_quality",
        f"--c4_badwords_file={work}/eval/words.txt",
        "--pii=email,ip",
    ]
    with pytest.MonkeyPatch.context() as env:
        env.setenv(runners.WORKER_PACKAGE_ENV, "1")
        result = _build_dry_run(curated)
    runners.write_dry_run_job_file(result, str(job_file))
    names = {t["uniqueName"] for t in _transforms(json.loads(job_file.read_text())).values()}
    assert {
        "Curate",
        "Curate/JudgeDocuments/Judge",
        "Curate/Deduplicate/Near/Near/Components",
        "Curate/Decontaminate",
    } <= names
    assert {"Read", "Tokenize", "Manifest"} <= names
    assert not fs.exists(f"{work}/curated-out")
