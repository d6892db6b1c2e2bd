"""One version, everywhere: the code's __version__, setup.py's computed version, the installed distribution's,
`lmshards --version`, what every writer records as tool_version, and the changelog's latest release."""

from __future__ import annotations

import ast
import datetime
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.schemas.version import __version__

REPO = Path(__file__).resolve().parents[2]
CHANGELOG = REPO / "CHANGELOG.md"
GOLDEN = REPO / "tests" / "data" / "golden"
# A release heading of the changelog, Keep a Changelog style: `## [0.6.0] - 2026-12-04`.
RELEASE_HEADING = re.compile(r"^## \[(?P<name>[^\]]+)\](?: - (?P<date>\S+))?\s*$", re.MULTILINE)
UNRELEASED = "Unreleased"
SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
# Modules that write a tool_version (manifests, token store, stats, tokenizer metadata, dataset export,
# run config): each must record the code's __version__.
WRITERS = {
    "lmshards/preprocess/launch.py",
    "lmshards/preprocess/plan.py",
    "lmshards/corpus_tools/stats/stats.py",
    "lmshards/corpus_tools/stats/token_store.py",
    "lmshards/corpus_tools/tokenizer/save.py",
    "lmshards/corpus_tools/dataset/export.py",
    "lmshards/train/loop/trainer.py",
}


def changelog_releases() -> list[tuple[str, str | None]]:
    """(name, date) of every release heading of CHANGELOG.md, top to bottom."""
    text = CHANGELOG.read_text(encoding="utf-8")
    return [(m["name"], m["date"]) for m in RELEASE_HEADING.finditer(text)]


def semver(version: str) -> tuple[int, int, int]:
    match = SEMVER.match(version)
    assert match, f"{version!r} is not MAJOR.MINOR.PATCH"
    return int(match[1]), int(match[2]), int(match[3])


def test_the_installed_distribution_is_this_version():
    installed = importlib.metadata.version("lmshards")
    assert installed == __version__, (
        f"installed lmshards {installed} but the code says {__version__}: reinstall (pip install -e .)"
    )


def test_setup_py_computes_this_version():
    env = {k: v for k, v in os.environ.items() if k != "LMSHARDS_WORKER_PACKAGE"}
    done = subprocess.run(
        [sys.executable, "setup.py", "--version"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == __version__


def test_lmshards_version_prints_the_version(capsys):
    assert lmshards_main(["--version"]) == 0
    assert capsys.readouterr().out == f"{__version__}\n"
    assert lmshards_main(["--help"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"lmshards {__version__}"


def test_the_changelog_s_latest_release_is_this_version():
    released = [(name, date) for name, date in changelog_releases() if name != UNRELEASED]
    assert released and released[0][0] == __version__


def test_the_changelog_s_releases_are_dated_and_in_descending_order():
    releases = changelog_releases()
    names = [name for name, _ in releases]
    assert UNRELEASED not in names[1:], "an Unreleased section goes above every release"
    dated = [(name, date) for name, date in releases if name != UNRELEASED]
    assert len(dated) >= 2
    versions = [semver(name) for name, _ in dated]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
    dates = []
    for name, date in dated:
        assert date is not None, f"release {name} has no date"
        dates.append(datetime.date.fromisoformat(date))
    assert dates == sorted(dates, reverse=True)


def _tool_version_values(source: str) -> list[ast.expr]:
    """The values a module gives tool_version: keyword arguments and dict literal keys."""
    found: list[ast.expr] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and node.arg == "tool_version":
            found.append(node.value)
        elif isinstance(node, ast.Dict):
            found += [
                value
                for key, value in zip(node.keys, node.values)
                if isinstance(key, ast.Constant) and key.value == "tool_version"
            ]
    return found


def test_every_writer_records_the_code_s_version():
    writers = set()
    for path in sorted((REPO / "lmshards").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for value in _tool_version_values(source):
            # A reader takes the value a file holds (data["tool_version"]); a writer records __version__.
            if isinstance(value, ast.Subscript):
                continue
            where = path.relative_to(REPO).as_posix()
            assert isinstance(value, ast.Name) and value.id == "__version__", (
                f"{where}:{value.lineno} records tool_version {ast.unparse(value)}"
            )
            assert "from lmshards.schemas.version import __version__" in source, where
            writers.add(where)
    assert WRITERS <= writers


@pytest.mark.slow
def test_a_shard_set_and_its_token_store_record_the_installed_version(tmp_path):
    output = tmp_path / "out"
    argv = ["preprocess", "--tokenizer", str(GOLDEN / "tokenizer.json"), "--output", str(output)]
    argv += ["--input", str(GOLDEN / "corpus" / "en.txt"), "--seq_len", "64", "--keep_tokens"]
    assert lmshards_main(argv) == 0
    installed = importlib.metadata.version("lmshards")
    for manifest in (output / "manifest.json", output / "tokens" / "manifest.json"):
        assert json.loads(manifest.read_text(encoding="utf-8"))["tool_version"] == installed
