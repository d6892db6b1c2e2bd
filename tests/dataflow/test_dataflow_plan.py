"""The Dataflow plan reflects the job: the estimate counts the options that change the work, a small input
says so, local paths are refused for Dataflow's workers, and a dry run prints nothing stray and leaves the
user's checkout as it was (all offline: gs:// is the local emulator)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from lmshards.plumbing import fs
from lmshards.preprocess import runners
from lmshards.preprocess.cli import main
from tests.conftest import REPO

GB = 1_000_000_000
MACHINE = "n2-standard-4"


def _estimate(input_bytes: int, **options: object) -> runners.CostEstimate:
    return runners.estimate_dataflow_cost(
        input_bytes,
        machine_type=MACHINE,
        max_workers=None,
        work=runners.work_options(options),
    )


def test_each_option_that_changes_the_work_adds_its_measured_extra():
    plain = _estimate(100 * GB)
    near = _estimate(100 * GB, dedup="near", packing="best_fit")
    ratio = 1 + (runners.WORK_RATIO_DEDUP_NEAR - 1) + (runners.WORK_RATIO_BEST_FIT - 1)
    assert near.work.options == ("--dedup near", "--packing best_fit")
    assert near.vcpu_hours == pytest.approx(plain.vcpu_hours * ratio)
    assert near.usd > 3 * plain.usd
    everything = _estimate(100 * GB, dedup="exact", decontaminate=["gs://b/eval"], keep_tokens=True)
    assert everything.work.options == ("--dedup exact", "--decontaminate", "--keep_tokens")
    assert everything.vcpu_hours > plain.vcpu_hours
    # Unset options (the defaults Beam parses) leave the plain run's estimate.
    assert _estimate(100 * GB, dedup="none", packing="concat", keep_tokens=False) == plain
    assert "Work: a plain run" in plain.describe()
    assert f"Work: {ratio:.1f} x a plain run's CPU for --dedup near, --packing best_fit" in (
        near.describe()
    )


def test_the_measured_ratios_are_the_ones_the_docs_table_shows():
    table = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for flag, ratio in [
        ("--dedup exact", runners.WORK_RATIO_DEDUP_EXACT),
        ("--dedup near", runners.WORK_RATIO_DEDUP_NEAR),
        ("--decontaminate", runners.WORK_RATIO_DECONTAMINATE),
        ("--packing best_fit", runners.WORK_RATIO_BEST_FIT),
        ("--keep_tokens", runners.WORK_RATIO_KEEP_TOKENS),
    ]:
        assert f"| `{flag}` |" in table and f"| {ratio} |" in table, flag


def test_an_input_below_a_minute_of_work_says_so_instead_of_zero():
    line = _estimate(100_000).describe().splitlines()[0]
    assert line.endswith("under a minute of worker time; about $0.01"), line
    assert "$0.00" not in line and "0 min" not in line
    assert _estimate(100 * GB).describe().splitlines()[0].endswith("about $3.80")


@pytest.mark.parametrize("flag", ["--input", "--output", "--tokenizer", "--decontaminate"])
def test_a_local_path_for_dataflow_is_refused_before_anything_is_built(
    flag, tmp_path, capfd, monkeypatch
):
    # Nothing is read: the gs:// paths name a bucket no server holds, and none is asked.
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    local = tmp_path / "corpus"
    local.mkdir()
    paths = {
        "--input": "gs://nowhere/in",
        "--output": "gs://nowhere/out",
        "--tokenizer": "gs://nowhere/tok",
    }
    paths[flag] = str(local)
    argv = [f"{name}={path}" for name, path in paths.items()] + [
        "--runner=DataflowRunner",
        "--project=p",
        "--region=us-central1",
        "--temp_location=gs://nowhere/tmp",
        "--dry_run=True",
    ]
    assert main(argv) == 2
    out, err = capfd.readouterr()
    assert out == ""
    assert err == (
        f"lmshards preprocess: error: {flag} {str(local)!r} is not on Cloud Storage, and DataflowRunner's "
        f"workers cannot read or write this machine's files; copy it to a gs:// bucket and pass {flag} "
        "gs://BUCKET/...\n"
    )
    assert list(local.iterdir()) == []


def test_local_paths_stay_fine_on_runners_of_this_machine():
    options = runners.pipeline_options([])
    runners.check_worker_paths(options, {"--input": ("corpus/",), "--output": ("out",)})


def _checkout(root: Path) -> Path:
    """A user's checkout of lmshards: what its setup.py builds from, plus a tests folder it prunes."""
    root.mkdir()
    for name in ("setup.py", "MANIFEST.in", "README.md", "pyproject.toml"):
        shutil.copy2(REPO / name, root / name)
    shutil.copytree(
        REPO / "lmshards", root / "lmshards", ignore=shutil.ignore_patterns("__pycache__")
    )
    (root / "tests").mkdir()
    return root


def _files(root: Path) -> dict[str, float]:
    """Every file and folder under root, with its modification time."""
    return {str(p.relative_to(root)): p.stat().st_mtime for p in sorted(root.rglob("*"))}


@pytest.mark.gcs
@pytest.mark.slow
def test_a_dry_run_prints_no_stray_line_and_builds_its_sdist_outside_the_checkout(
    gcs_emulator, sample_tokenizer, sample_files, tmp_path, capfd, monkeypatch
):
    work = f"{gcs_emulator}/plan"
    fs.write_bytes_atomic(f"{work}/corpus/a.txt", sample_files[0].read_bytes()[:20_000])
    fs.write_bytes_atomic(f"{work}/tokenizer/tokenizer.json", sample_tokenizer.read_bytes())
    monkeypatch.delenv(runners.WORKER_PACKAGE_ENV, raising=False)
    checkout = _checkout(tmp_path / "checkout")
    monkeypatch.chdir(checkout)
    before = _files(checkout)
    argv = [
        f"--input={work}/corpus",
        f"--tokenizer={work}/tokenizer",
        f"--output={work}/out",
        "--seq_len=64",
        "--runner=DataflowRunner",
        "--dry_run=True",
        "--project=lmshards-test",
        "--region=us-central1",
        f"--temp_location={work}/tmp",
        f"--setup_file={checkout / 'setup.py'}",
        "--sdk_container_image=us-central1-docker.pkg.dev/lmshards-test/lmshards/preprocess:test",
        "--machine_type=n2-standard-4",
        f"--dataflow_job_file={tmp_path / 'job.json'}",
    ]
    assert main(argv) == 0
    out, err = capfd.readouterr()
    assert "No module named" not in out + err, err
    lines = out.splitlines()
    assert lines[0].startswith("Dataflow estimate for 0.0 MB of input: 1 x n2-standard-4")
    assert lines[0].endswith("under a minute of worker time; about $0.01")
    assert _files(checkout) == before
    assert sorted(os.listdir(tmp_path)) == ["checkout", "job.json"]


def test_repack_refuses_a_local_token_store_for_dataflow(tmp_path, capfd, monkeypatch):
    from lmshards.preprocess.repack_cli import main as repack_main

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    store = tmp_path / "tokens"
    store.mkdir()
    argv = [
        f"--tokens={store}",
        "--output=gs://nowhere/out",
        "--runner=DataflowRunner",
        "--project=p",
        "--region=us-central1",
        "--temp_location=gs://nowhere/tmp",
        "--dry_run=True",
    ]
    assert repack_main(argv) == 2
    out, err = capfd.readouterr()
    assert out == ""
    assert err.startswith(
        f"lmshards repack: error: --tokens {str(store)!r} is not on Cloud Storage"
    )
    assert err.count("\n") == 1
