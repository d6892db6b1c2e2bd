"""Runner selection: names, the Dask mapping, clear errors for unknown or uninstalled runners, defaults."""

from __future__ import annotations

import os
import sys

import pytest
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

from preprocess import runners
from preprocess.options import PreprocessError

UNKNOWN = ("--runner 'Foo' is not a known runner; use one of DirectRunner, DataflowRunner, DaskRunner, FlinkRunner, "
           "SparkRunner, PrismRunner (or a full class path).")


@pytest.mark.parametrize("name,path", [
    ("DirectRunner", runners.DIRECT_RUNNER),
    ("directrunner", runners.DIRECT_RUNNER),
    ("Direct", runners.DIRECT_RUNNER),  # Beam accepts the name without "Runner" too
    ("FnApiRunner", runners.FNAPI_RUNNER),
    ("DataflowRunner", runners.DATAFLOW_RUNNER),
    ("PrismRunner", "apache_beam.runners.portability.prism_runner.PrismRunner"),
    ("FlinkRunner", "apache_beam.runners.portability.flink_runner.FlinkRunner"),
    (runners.FNAPI_RUNNER, runners.FNAPI_RUNNER),
])
def test_known_runners_resolve_to_their_class_path(name, path):
    assert runners.resolve_runner(name) == path


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
        if name == "dask" or name.startswith(("dask.", "distributed", "apache_beam.runners.dask")):
            monkeypatch.delitem(sys.modules, name)
    for name in ("dask", "dask.bag", "distributed", "dask.distributed"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.parametrize("name", ["DaskRunner", "dask", runners.DASK_RUNNER])
def test_dask_without_dask_installed_names_the_extra(monkeypatch, name):
    _without_dask(monkeypatch)
    with pytest.raises(PreprocessError) as e:
        runners.resolve_runner(name)
    assert f"--runner {name!r} cannot be used" in str(e.value)
    assert str(e.value).endswith('pip install "lmshards[dask]".')


def test_dask_short_name_maps_to_beams_class_path():
    pytest.importorskip("dask.distributed")
    options = runners.pipeline_options(["--runner", "DaskRunner"])
    assert options.view_as(StandardOptions).runner == runners.DASK_RUNNER
    assert runners.tokenizer_threads(0, options) == 1  # one worker process per core


def test_default_is_the_in_process_fnapi_runner_with_every_core():
    options = runners.pipeline_options([])
    assert options.view_as(StandardOptions).runner == "FnApiRunner"
    assert options.view_as(DirectOptions).direct_running_mode == "in_memory"
    assert runners.tokenizer_threads(0, options) == (os.cpu_count() or 1)
    assert runners.tokenizer_threads(3, options) == 3  # an explicit value wins


@pytest.mark.parametrize("args", [
    ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    ["--runner=DataflowRunner"],
])
def test_multi_process_runners_get_one_tokenizer_thread(args):
    assert runners.tokenizer_threads(0, runners.pipeline_options(args)) == 1


def test_dry_run_only_on_dataflow():
    with pytest.raises(PreprocessError, match="--dry_run=True needs --runner DataflowRunner"):
        runners.pipeline_options(["--dry_run=True"])
    assert runners.is_dry_run(runners.pipeline_options(["--runner=DataflowRunner", "--dry_run=True"]))


def test_only_the_dask_runner_loses_finish_bundle_output():
    from apache_beam.options.pipeline_options import PipelineOptions

    assert runners.keeps_finish_bundle_output(runners.pipeline_options([]))
    assert runners.keeps_finish_bundle_output(runners.pipeline_options(["--runner=DataflowRunner"]))
    assert not runners.keeps_finish_bundle_output(PipelineOptions(["--runner", runners.DASK_RUNNER]))
