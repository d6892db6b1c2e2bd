"""`lmshards env`: versions, signals, the auto choices and the runtime check, under faked TPU
environments, faked distributions and on this machine. No test loads a real libtpu."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from lmshards.schemas.version import __version__
from lmshards.train import devices
from lmshards.train.commands import runtime_check
from lmshards.train.commands.env_cli import STACK, main
from lmshards.train.commands.runtime_check import RuntimeProbe
from lmshards.train.devices import TPU_ENV_VARS

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def plain_machine(tmp_path, monkeypatch) -> Path:
    """No TPU variable, visible GPUs left to the device files, and an empty stand-in for /dev."""
    for name in TPU_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    dev = tmp_path / "dev"
    dev.mkdir()
    monkeypatch.setattr(devices, "DEV_ROOT", str(dev))
    # The real import is tested once below, in its own process; here the runtime loads.
    monkeypatch.setattr(runtime_check, "probe_runtime", lambda backend: LOADS)
    return dev


LOADS = RuntimeProbe(True, "tensorflow 2.20.0, keras 3.15.1, keras_hub 0.32.0")


def env_json(capsys, *args: str) -> dict:
    assert main(["--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_under_a_faked_tpu_vm_environment(plain_machine, monkeypatch, capsys):
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v6e-8")
    monkeypatch.setenv("TPU_WORKER_ID", "0")
    report = env_json(capsys)
    assert report["signals"] == ["env TPU_ACCELERATOR_TYPE=v6e-8", "env TPU_WORKER_ID=0"]
    assert (report["strategy"], report["precision"], report["steps_per_execution"]) == (
        "tpu",
        "mixed_bfloat16",
        32,
    )
    assert report["tpu_expected"] is True and report["device_kind"] == "TPU v6e-8"
    assert report["gpus"] == [] and report["gpu_probe"].startswith("not probed: no GPU device file")


def test_json_with_a_faked_vfio_chip(plain_machine, capsys):
    (plain_machine / "vfio").mkdir()
    (plain_machine / "vfio" / "0").touch()
    report = env_json(capsys)
    assert report["signals"] == [f"device {plain_machine / 'vfio' / '0'}"]
    assert report["strategy"] == "tpu" and report["device_kind"] == "TPU"


def test_json_with_the_tpu_flag(plain_machine, capsys):
    report = env_json(capsys, "--tpu", "local")
    assert report["signals"] == ["--tpu local"] and report["strategy"] == "tpu"


def test_json_on_a_cpu_machine(plain_machine, capsys):
    report = env_json(capsys)
    assert report["signals"] == [] and report["tpu_expected"] is False
    assert (report["strategy"], report["precision"], report["steps_per_execution"]) == (
        "cpu",
        "float32",
        10,
    )
    assert report["device_kind"] == "CPU" and report["gpus"] == []
    assert set(report["reasons"]) == {"strategy", "precision", "steps_per_execution"}
    versions = report["versions"]
    assert versions["lmshards"] == __version__ and versions["python"] == platform.python_version()
    assert set(versions) == {"python", "lmshards", *STACK}
    for dist in STACK:
        try:
            installed = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        assert versions[dist] == installed, dist


def test_cuda_visible_devices_and_the_flag_skip_the_gpu_probe(plain_machine, monkeypatch, capsys):
    (plain_machine / "nvidia0").touch()
    assert env_json(capsys, "--no_gpu_probe")["gpu_probe"] == "not probed: --no_gpu_probe"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "CUDA_VISIBLE_DEVICES" in env_json(capsys)["gpu_probe"]


def test_text_report(plain_machine, monkeypatch, capsys):
    monkeypatch.setenv("TPU_NAME", "my-tpu")
    assert main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "TPU signals: env TPU_NAME=my-tpu" in lines
    auto = {line.split()[0]: line.split()[2] for line in lines if line.startswith("  --")}
    assert auto == {
        "--strategy": "tpu",
        "--precision": "mixed_bfloat16",
        "--steps_per_execution": "32",
    }
    assert f"tensorflow {importlib.metadata.version('tensorflow')}" in lines[1]


def test_unknown_flag_is_one_error_line_with_a_hint(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--jsn"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lmshards env: error:") and "'--json'" in err[0]


def test_lmshards_env_runs_without_importing_tensorflow():
    """The real command, in its own process and on this machine's /dev, with every GPU hidden."""
    code = (
        "import sys; from lmshards.command.cli import main; rc = main(['env', '--json']); "
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'; sys.exit(rc)"
    )
    environ = {k: v for k, v in os.environ.items() if k not in TPU_ENV_VARS}
    environ["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {"strategy", "precision", "steps_per_execution", "signals", "versions", "gpus"} <= set(
        report
    )
    # It imported TensorFlow, keras and keras-hub in a subprocess, which loaded them.
    assert (report["backend"], report["runtime_ok"], report["problems"]) == ("tensorflow", True, [])
    assert report["runtime_detail"].startswith(f"tensorflow {report['versions']['tensorflow']}, ")
    assert report["signals"] == devices.detect_tpu_signals(environ=environ)
    assert report["strategy"] == ("tpu" if report["signals"] else "cpu")


# ---------------------------------------------------------------- the runtime check

TPU_SET = {"tensorflow-tpu": "2.20.0", "libtpu": "0.0.31", "keras": "3.15.1", "keras-hub": "0.32.0"}
JAX_SET = {
    "jax": "0.10.2",
    "jaxlib": "0.10.2",
    "libtpu": "0.0.42.2",
    "keras": "3.15.1",
    "keras-hub": "0.32.0",
}


def test_the_pinned_tpu_set_has_no_problem():
    assert runtime_check.stack_problems("tensorflow", TPU_SET) == []
    assert runtime_check.stack_problems("jax", JAX_SET) == []


@pytest.mark.parametrize(
    "second", [{"tensorflow": "2.21.0"}, {"tensorflow-cpu": "2.20.0"}], ids=["tensorflow", "cpu"]
)
def test_two_tensorflow_distributions_are_an_error_naming_both(second):
    (problem,) = runtime_check.stack_problems("tensorflow", {**TPU_SET, **second})
    name, version = next(iter(second.items()))
    assert f"{name} {version}" in problem and "tensorflow-tpu 2.20.0" in problem
    # The TPU build is the one kept: it is why tensorflow-tpu is there.
    assert (
        f"pip uninstall -y {name} tensorflow-tpu` then `pip install tensorflow-tpu==2.20.0`"
        in problem
    )
    # The jax backend reads its input with tf.data, so a broken TensorFlow matters to it too.
    assert problem in runtime_check.stack_problems("jax", {**JAX_SET, **TPU_SET, **second})


def test_tensorflow_and_tensorflow_cpu_keep_tensorflow():
    problem = runtime_check.tensorflow_conflict(
        {"tensorflow": "2.21.0", "tensorflow-cpu": "2.21.0"}
    )
    assert "pip uninstall -y tensorflow tensorflow-cpu" in problem
    assert "pip install tensorflow==2.21.0" in problem


@pytest.mark.parametrize("libtpu", ["0.0.17", "0.0.21.1", "0.0.30", "0.0.31", "0.0.31.1"])
def test_libtpu_releases_that_load_with_tensorflow_tpu(libtpu):
    assert runtime_check.stack_problems("tensorflow", {**TPU_SET, "libtpu": libtpu}) == []


@pytest.mark.parametrize("libtpu", ["0.0.16", "0.0.32", "0.0.43.2", "0.0.52"])
def test_libtpu_outside_the_tensorflow_tpu_range_is_an_error_naming_both(libtpu):
    (problem,) = runtime_check.stack_problems("tensorflow", {**TPU_SET, "libtpu": libtpu})
    assert f"libtpu {libtpu} is outside 0.0.17-0.0.31" in problem
    assert "tensorflow-tpu 2.20.0" in problem and "pip install 'libtpu==0.0.31'" in problem


@pytest.mark.parametrize(
    ("jax", "libtpu", "fix"),
    [("0.10.2", "0.0.50", "jax[tpu]==0.10.2"), ("0.12.1", "0.0.42.2", "jax[tpu]==0.12.*")],
)
def test_libtpu_that_does_not_match_jax_is_an_error(jax, libtpu, fix):
    versions = {**JAX_SET, "jax": jax, "jaxlib": jax, "libtpu": libtpu}
    (problem,) = runtime_check.stack_problems("jax", versions)
    assert f"libtpu {libtpu}" in problem and f"jax {jax}" in problem and fix in problem
    assert (
        runtime_check.stack_problems(
            "jax", {**versions, "libtpu": "0.0.50.1" if jax == "0.12.1" else "0.0.42"}
        )
        == []
    )


def test_a_runtime_release_with_no_known_range_is_a_note_not_an_error():
    versions = {**JAX_SET, "jax": "0.11.2", "jaxlib": "0.11.2", "libtpu": "0.0.45"}
    assert runtime_check.stack_problems("jax", versions) == []
    assert runtime_check.libtpu_notes("jax", versions) == [
        "no known libtpu range for jax 0.11.2; libtpu 0.0.45 unchecked"
    ]


def test_a_missing_runtime_is_an_error():
    (problem,) = runtime_check.stack_problems("tensorflow", {"keras": "3.15.1"})
    assert problem.startswith(
        "--backend tensorflow needs a TensorFlow distribution (tensorflow or tensorflow-tpu) and "
        "keras-hub, not installed here"
    )
    (problem,) = runtime_check.stack_problems(
        "jax", {"jax": "0.10.2", "keras": "3.15.1", "keras-hub": "0.32.0"}
    )
    assert problem.startswith("--backend jax needs jaxlib, not installed here")
    assert f"jax[tpu]=={runtime_check.jax_release()}" in problem


TPU_VM = ["env TPU_ACCELERATOR_TYPE=v5litepod-8", "device /dev/vfio/0"]
JAX_TPU_VENV = {**JAX_SET, "tensorflow": "2.21.0"}  # jax[tpu] with plain tensorflow for tf.data


def test_the_jax_backend_in_the_tensorflow_tpu_venv_names_the_venv_and_a_pinned_fix():
    (problem,) = runtime_check.stack_problems("jax", TPU_SET, signals=TPU_VM)
    assert problem.startswith(
        "--backend jax needs jax and jaxlib, and this is the TensorFlow TPU venv "
        "(tensorflow-tpu 2.20.0, libtpu 0.0.31)"
    )
    assert "breaking --backend tensorflow" in problem
    assert "scripts/setup_tpu_env.sh --backend jax VENV" in problem
    assert f"jax[tpu]=={runtime_check.jax_release()})" in problem and "'jax[tpu]'" not in problem
    assert runtime_check.jax_release((3, 11)) == "0.10.2"
    assert runtime_check.jax_release((3, 12)) == runtime_check.jax_release((3, 13)) == "0.12.0.1"


def test_tpu_signals_with_plain_tensorflow_fail_the_tensorflow_backend():
    (problem,) = runtime_check.stack_problems("tensorflow", JAX_TPU_VENV, signals=TPU_VM)
    assert problem.startswith(
        "TPU signals (env TPU_ACCELERATOR_TYPE=v5litepod-8, device /dev/vfio/0)"
    )
    assert "tensorflow 2.21.0 is not TensorFlow's TPU build" in problem
    assert "tensorflow-tpu==2.20.0, libtpu==0.0.31" in problem
    assert "train here with --backend jax" in problem  # this venv can: it is the JAX one
    assert runtime_check.stack_problems("jax", JAX_TPU_VENV, signals=TPU_VM) == []
    assert (
        runtime_check.stack_problems("tensorflow", JAX_TPU_VENV) == []
    )  # no TPU: CPU/GPU are fine


def test_tpu_signals_with_jax_but_no_libtpu_name_the_libtpu_of_that_jax():
    no_libtpu = {k: v for k, v in JAX_SET.items() if k != "libtpu"}
    (problem,) = runtime_check.stack_problems("jax", no_libtpu, signals=TPU_VM)
    assert "no libtpu: jax 0.10.2 would train on the CPU" in problem
    assert "pip install 'jax[tpu]==0.10.2'" in problem


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_tpu_variables_without_a_chip_say_this_host_has_none(backend):
    versions = TPU_SET if backend == "tensorflow" else JAX_SET
    signals = ["env TPU_ACCELERATOR_TYPE=v5litepod-8", "env TPU_WORKER_ID=0"]
    (problem,) = runtime_check.stack_problems(backend, versions, signals=signals)
    assert "but no TPU chip on this host" in problem and "--strategy cpu" in problem
    # A named TPU (TPU_NAME or --tpu) is reached over the network by the TensorFlow backend.
    remote = runtime_check.stack_problems("tensorflow", TPU_SET, signals=["env TPU_NAME=my-tpu"])
    assert remote == []


def test_a_libtpu_out_of_range_on_a_tpu_vm_is_one_problem_with_its_pinned_fix():
    (problem,) = runtime_check.stack_problems(
        "tensorflow", {**TPU_SET, "libtpu": "0.0.42"}, signals=TPU_VM
    )
    assert "libtpu 0.0.42 is outside 0.0.17-0.0.31" in problem
    assert "pip install 'libtpu==0.0.31'" in problem


def _fake_modules(root: Path, modules: dict[str, str]) -> dict[str, str]:
    """Writes each module's source under root; returns an environment that imports them first."""
    for name, source in modules.items():
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(source)
    return {**os.environ, "PYTHONPATH": str(root)}


def test_the_probe_imports_the_runtime_keras_and_keras_hub_with_the_metadata_query_off(tmp_path):
    version = (
        'import os; __version__ = os.environ["TPU_SKIP_MDS_QUERY"] + os.environ["KERAS_BACKEND"]'
    )
    environ = _fake_modules(tmp_path, dict.fromkeys(("tensorflow", "keras", "keras_hub"), version))
    environ.pop("TPU_SKIP_MDS_QUERY", None)
    probe = runtime_check.probe_runtime("tensorflow", environ=environ)
    assert probe == RuntimeProbe(
        True, "tensorflow 1tensorflow, keras 1tensorflow, keras_hub 1tensorflow"
    )


@pytest.mark.parametrize(
    "fatal",
    [
        "2026-12-01 13:16:58.470804: F external/local_xla/xla/stream_executor/tpu/"
        "tpu_library_init_fns.inc:12]",  # TensorFlow's log format: libtpu 0.0.52 under tensorflow-tpu 2.20
        "F0000 00:00:1 tpu_library_init_fns.inc:12]",  # absl's
    ],
)
def test_a_runtime_that_aborts_on_import_is_reported_with_its_reason(tmp_path, fatal):
    abort = (
        "import os\n"
        "os.write(2, b'E0000 00:00:1 common_lib.cc:530] unexpected worker hostname\\n')\n"
        f"os.write(2, b'{fatal} "
        "ConfigureDistributedTpuOp_DoWork not available in this library.\\n')\n"
        "os.write(2, b'*** Check failure stack trace: ***\\n')\n"
        "os.abort()\n"
    )
    environ = _fake_modules(tmp_path, {"tensorflow": abort})
    probe = runtime_check.probe_runtime("tensorflow", environ=environ)
    assert not probe.ok
    assert probe.detail.startswith(f"importing tensorflow failed (killed by signal 6): {fatal}")
    assert probe.detail.endswith("ConfigureDistributedTpuOp_DoWork not available in this library.")
    (problem,) = runtime_check.check_backend("tensorflow", TPU_SET, probe=probe)
    assert problem.startswith("--backend tensorflow does not load: importing tensorflow failed")


def test_an_import_error_and_a_hung_import_are_reported(tmp_path):
    environ = _fake_modules(tmp_path / "a", {"jax": "raise ImportError('jaxlib is not installed')"})
    assert runtime_check.probe_runtime("jax", environ=environ) == RuntimeProbe(
        False, "importing jax failed (exit 1): ImportError: jaxlib is not installed"
    )
    environ = _fake_modules(tmp_path / "b", {"jax": "import time; time.sleep(30)"})
    hung = runtime_check.probe_runtime("jax", environ=environ, timeout_s=1)
    assert hung == RuntimeProbe(False, "importing jax did not finish in 1 s")


def test_check_exits_1_with_one_error_line_per_problem(plain_machine, monkeypatch, capsys):
    broken = {**TPU_SET, "tensorflow": "2.21.0", "libtpu": "0.0.52"}
    monkeypatch.setattr(
        runtime_check, "distribution_versions", lambda names: {n: broken.get(n) for n in names}
    )
    failed = RuntimeProbe(False, "importing tensorflow failed (killed by signal 6): F0000 ...")
    monkeypatch.setattr(runtime_check, "probe_runtime", lambda backend: failed)
    assert main(["--json"]) == 0  # without --check the report is all
    report = json.loads(capsys.readouterr().out)
    assert (report["backend"], report["runtime_ok"], len(report["problems"])) == (
        "tensorflow",
        False,
        3,
    )
    assert report["gpu_probe"] == "not probed: tensorflow did not load (see problems)"
    assert main(["--check"]) == 1
    out, err = capsys.readouterr()
    errors = err.strip().splitlines()
    assert errors == [f"lmshards env: error: {problem}" for problem in report["problems"]]
    assert "backend tensorflow: does not load: importing tensorflow failed" in out
    assert "problem: libtpu 0.0.52 is outside 0.0.17-0.0.31" in out


def test_check_passes_and_no_import_skips_the_probe(plain_machine, monkeypatch, capsys):
    monkeypatch.setattr(
        runtime_check, "distribution_versions", lambda names: {n: JAX_SET.get(n) for n in names}
    )
    assert main(["--check", "--backend", "jax", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["backend"], report["runtime_ok"], report["problems"]) == ("jax", True, [])
    monkeypatch.setattr(runtime_check, "probe_runtime", None)  # must not be called
    assert main(["--check", "--no_import", "--json"]) == 1  # no TensorFlow in JAX_SET
    report = json.loads(capsys.readouterr().out)
    assert report["runtime_ok"] is None and report["runtime_detail"] == "not checked: --no_import"
    assert report["problems"][0].startswith("--backend tensorflow needs a TensorFlow distribution")


def _fake_distribution(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_check_reads_the_installed_distributions(tmp_path):
    """Fake tensorflow-tpu and libtpu metadata on the path of a real `lmshards env --check --no_import`."""
    _fake_distribution(tmp_path, "tensorflow-tpu", "2.20.0")
    _fake_distribution(tmp_path, "libtpu", "0.0.52")
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    done = subprocess.run(
        [sys.executable, "-m", "lmshards", "env", "--check", "--no_import", "--json"],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert (
        report["versions"]["tensorflow-tpu"] == "2.20.0"
        and report["versions"]["libtpu"] == "0.0.52"
    )
    problems = report["problems"]
    assert any("libtpu 0.0.52 is outside 0.0.17-0.0.31" in p for p in problems)
    tensorflow = importlib.metadata.version("tensorflow")  # this venv's real one, beside the fake
    assert any(
        f"tensorflow {tensorflow} and tensorflow-tpu 2.20.0 are installed" in p for p in problems
    )
    assert done.stderr.strip().splitlines() == [f"lmshards env: error: {p}" for p in problems]


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_venv_holding_both_tpu_stacks_is_a_problem_for_either_backend(backend):
    both = {**TPU_SET, "jax": "0.10.2", "jaxlib": "0.10.2"}
    problems = runtime_check.stack_problems(backend, both)
    assert any(
        p.startswith("tensorflow-tpu 2.20.0 and jax 0.10.2 are installed in one venv")
        and "scripts/setup_tpu_env.sh --backend jax VENV" in p
        for p in problems
    ), problems
