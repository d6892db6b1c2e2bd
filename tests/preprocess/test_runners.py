"""Runner selection: names, the Dask mapping, clear errors for unknown or uninstalled runners, defaults."""

from __future__ import annotations

import os
import sys

import pytest
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

from lmshards.preprocess import runners
from lmshards.preprocess.options import PreprocessError

UNKNOWN = (
    "--runner 'Foo' is not a known runner; use one of DirectRunner, DataflowRunner, DaskRunner, FlinkRunner, "
    "SparkRunner, PrismRunner (or a full class path)."
)


@pytest.mark.parametrize(
    "name,path",
    [
        ("DirectRunner", runners.DIRECT_RUNNER),
        ("directrunner", runners.DIRECT_RUNNER),
        ("Direct", runners.DIRECT_RUNNER),  # Beam accepts the name without "Runner" too
        ("FnApiRunner", runners.FNAPI_RUNNER),
        ("DataflowRunner", runners.DATAFLOW_RUNNER),
        ("PrismRunner", "apache_beam.runners.portability.prism_runner.PrismRunner"),
        ("FlinkRunner", "apache_beam.runners.portability.flink_runner.FlinkRunner"),
        (runners.FNAPI_RUNNER, runners.FNAPI_RUNNER),
    ],
)
def test_known_runners_resolve_to_their_class_path(name, path):
    assert runners.resolve_runner(name) == path


def test_the_runners_lmshards_loads_itself_are_the_classes_their_paths_name():
    for path, load in runners.RUNNER_LOADERS.items():
        runner = load()
        assert f"{runner.__module__}.{runner.__qualname__}" == path


def test_unknown_runner_lists_the_runners():
    with pytest.raises(PreprocessError) as e:
        runners.resolve_runner("Foo")
    assert str(e.value) == UNKNOWN


def test_a_class_path_that_does_not_import_names_the_module():
    with pytest.raises(PreprocessError, match="no_such_package"):
        runners.resolve_runner("no_such_package.runner.MyRunner")
    with pytest.raises(PreprocessError, match="has no 'NoRunner'"):
        runners.resolve_runner("apache_beam.runners.direct.direct_runner.NoRunner")


def _without_dask(monkeypatch) -> None:
    """As if dask were not installed: its modules fail to import."""
    for name in list(sys.modules):
        if name in ("dask", "lmshards.preprocess.dask_runner") or name.startswith(
            ("dask.", "distributed", "apache_beam.runners.dask")
        ):
            monkeypatch.delitem(sys.modules, name)
    for name in ("dask", "dask.bag", "distributed", "dask.distributed"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.parametrize(
    "name", ["DaskRunner", "dask", runners.DASK_RUNNER, runners.BEAM_DASK_RUNNER]
)
def test_dask_without_dask_installed_names_the_extra(monkeypatch, name):
    _without_dask(monkeypatch)
    with pytest.raises(PreprocessError) as e:
        runners.resolve_runner(name)
    assert f"--runner {name!r} cannot be used" in str(e.value)
    assert str(e.value).endswith('pip install "lmshards[dask]".')


@pytest.mark.parametrize("name", ["DaskRunner", "dask", runners.BEAM_DASK_RUNNER])
def test_dask_names_map_to_our_dask_runner(name):
    pytest.importorskip("dask.distributed")
    options = runners.pipeline_options(["--runner", name])
    assert (
        options.view_as(StandardOptions).runner
        == runners.DASK_RUNNER
        == "lmshards.preprocess.dask_runner.DaskRunner"
    )
    assert runners.tokenizer_threads(0, options) == 1  # one worker process per core


def test_dataflow_without_the_gcp_libraries_names_what_to_install(monkeypatch):
    """Beam's Dataflow runner module imports without them; submitting (or a dry run) would fail later."""
    import google.cloud
    from apache_beam.version import __version__ as beam_version

    monkeypatch.delitem(
        sys.modules, "apache_beam.runners.dataflow.internal.apiclient", raising=False
    )
    monkeypatch.setitem(
        sys.modules, "google.cloud.dataflow", None
    )  # as if google-cloud-dataflow-client were absent
    monkeypatch.delattr(google.cloud, "dataflow", raising=False)
    with pytest.raises(PreprocessError) as e:
        runners.resolve_runner("DataflowRunner")
    assert str(e.value).startswith("--runner 'DataflowRunner' cannot be used: ")
    assert str(e.value).endswith(
        f'pip install "apache-beam[gcp]=={beam_version}" (part of lmshards\' default install).'
    )


def test_runner_errors_exit_2_with_one_line(capsys, monkeypatch):
    from lmshards.preprocess.cli import main

    _without_dask(monkeypatch)
    golden = "tests/data/golden"
    args = [
        "--input",
        f"{golden}/docs.jsonl",
        "--tokenizer",
        f"{golden}/tokenizer.json",
        "--output",
        "unused",
    ]
    assert main([*args, "--runner", "Foo"]) == 2
    assert main([*args, "--runner", "DaskRunner"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors[0] == f"lmshards preprocess: error: {UNKNOWN}"
    assert errors[1].startswith(
        "lmshards preprocess: error: --runner 'DaskRunner' cannot be used: "
    )
    assert errors[1].endswith('pip install "lmshards[dask]".')


def test_default_is_the_in_process_fnapi_runner_with_every_core():
    options = runners.pipeline_options([])
    assert options.view_as(StandardOptions).runner == "FnApiRunner"
    assert options.view_as(DirectOptions).direct_running_mode == "in_memory"
    assert runners.tokenizer_threads(0, options) == (os.cpu_count() or 1)
    assert runners.tokenizer_threads(3, options) == 3  # an explicit value wins


@pytest.mark.parametrize(
    "args",
    [
        ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
        ["--runner=DataflowRunner"],
    ],
)
def test_multi_process_runners_get_one_tokenizer_thread(args):
    assert runners.tokenizer_threads(0, runners.pipeline_options(args)) == 1


def test_dry_run_only_on_dataflow():
    with pytest.raises(PreprocessError, match="--dry_run=True needs --runner DataflowRunner"):
        runners.pipeline_options(["--dry_run=True"])
    assert runners.is_dry_run(
        runners.pipeline_options(["--runner=DataflowRunner", "--dry_run=True"])
    )


# ---------------------------------------------------------------- dry-run cost estimate


def test_cost_estimate_reproduces_the_runbooks_100_gb_figures():
    estimate = runners.estimate_dataflow_cost(
        100 * 10**9, machine_type="n2-standard-4", max_workers=25
    )
    assert estimate.machine == runners.MachineShape(vcpus=4, memory_gb=16.0)
    assert estimate.vcpu_hours == pytest.approx(
        32.05, abs=0.01
    )  # 100,000 MB / 1.3 MB/s / 3600 x 1.5
    assert estimate.workers == 17  # 32.05 vCPU-h on 4-vCPU workers in about 30 min
    assert estimate.wall_hours == pytest.approx(32.051 / 68, rel=1e-3)
    assert (
        round(estimate.vcpu_usd, 2),
        round(estimate.memory_usd, 2),
        round(estimate.shuffle_usd, 2),
        round(estimate.disk_usd, 2),
    ) == (1.79, 0.46, 1.54, 0.01)
    assert estimate.usd == pytest.approx(3.80, abs=0.01)  # the runbook's "~$3.80 per 100 GB"


def test_cost_estimate_caps_workers_and_prices_memory_by_machine():
    capped = runners.estimate_dataflow_cost(10**12, machine_type="n2-highcpu-8", max_workers=10)
    assert capped.workers == 10 and capped.wall_hours == pytest.approx(capped.vcpu_hours / 80)
    assert capped.machine.memory_gb == 8.0
    small = runners.estimate_dataflow_cost(
        10**6, machine_type=runners.DEFAULT_MACHINE_TYPE, max_workers=None
    )
    assert small.workers == 1 and small.machine == runners.MachineShape(vcpus=1, memory_gb=3.75)
    custom = runners.estimate_dataflow_cost(10**9, machine_type="custom-6-24576", max_workers=None)
    assert custom.machine == runners.MachineShape(vcpus=6, memory_gb=24.0)
    assert custom.vcpu_hours == pytest.approx(small.vcpu_hours * 1000)  # linear in the input
    with pytest.raises(runners.UnknownMachineType, match="e2-micro"):
        runners.estimate_dataflow_cost(10**9, machine_type="e2-micro", max_workers=None)


class _BuiltJob:
    def run(self):
        return None


def test_dry_run_prints_the_estimate_with_its_assumptions(capsys):
    options = runners.pipeline_options(
        [
            "--runner=DataflowRunner",
            "--dry_run=True",
            "--machine_type=n2-standard-4",
            "--max_num_workers=25",
        ]
    )
    runners.dry_run(_BuiltJob(), options, input_bytes=100 * 10**9)
    out = capsys.readouterr().out
    assert out.startswith(
        "Dataflow estimate for 100,000.0 MB of input: 17 x n2-standard-4 (4 vCPUs, 16 GB each), "
        "32.05 vCPU-hours, about 28 min of processing plus worker start-up, about $3.80\n"
    )
    for assumption in (
        "1.3 MB/s of input per vCPU (the staged path on English text",
        "x 1.5 for Dataflow's overhead",
        "us-central1",
        "at most --max_num_workers",
        "compressed files hold more text",
    ):
        assert assumption in out
    runners.dry_run(
        _BuiltJob(),
        runners.pipeline_options(
            ["--runner=DataflowRunner", "--dry_run=True", "--machine_type=e2-micro"]
        ),
        input_bytes=1,
    )
    assert capsys.readouterr().out.startswith("No cost estimate: machine type 'e2-micro'")
