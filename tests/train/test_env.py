"""`lmshards env`: versions, signals and the auto choices, under faked TPU environments and on this machine."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.version import __version__
from train import devices
from train.devices import TPU_ENV_VARS
from train.env_cli import STACK, main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def plain_machine(tmp_path, monkeypatch) -> Path:
    """No TPU variable, visible GPUs left to the device files, and an empty stand-in for /dev."""
    for name in TPU_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    dev = tmp_path / "dev"
    dev.mkdir()
    monkeypatch.setattr(devices, "DEV_ROOT", str(dev))
    return dev


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
        1,
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
        "import sys; from lmshards.cli import main; rc = main(['env', '--json']); "
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
    assert report["signals"] == devices.detect_tpu_signals(environ=environ)
    assert report["strategy"] == ("tpu" if report["signals"] else "cpu")
