"""Every command owns only what it wrote: each writer refuses, before any work and with exit 2, an --output
that is another command's output, lies inside one, is the input it reads or holds it, or holds a user's
files (with --overwrite too), and an earlier output of its own without --overwrite. Every file there is
left as it was."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.plumbing.errors import OutputError
from lmshards.plumbing.outputs import check_file_output, check_replaceable
from lmshards.preprocess.options import PreprocessConfig
from lmshards.preprocess.pipeline import run_pipeline
from lmshards.schemas.constants import (
    MODEL_CONFIG_JSON,
    MODEL_SAFETENSORS,
    RUN_CONFIG_JSON,
    TOKENIZER_INFO_JSON,
    TOKENIZER_JSON,
    TOKENS_DIR_NAME,
)
from lmshards.schemas.layouts import (
    DATASET_EXPORT_OUTPUT,
    DEMO_MARKER,
    DEMO_OUTPUT,
    EXPORT_SUCCESS_JSON,
    METRICS_JSONL,
    MODEL_EXPORT_OUTPUT,
    OUTPUT_KINDS,
    PREPROCESS_OUTPUT,
    STATS_HTML,
    STATS_JSON,
    STATS_OUTPUT,
    TOKENIZER_OUTPUT,
)
from tests.helpers.text_corpus import tree_bytes

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
CORPUS = str(GOLDEN / "corpus" / "*.txt")
TOKENIZER = str(GOLDEN / "tokenizer.json")
IN_PROCESS = ["--direct_running_mode=in_memory"]
# A run that never starts: every case is refused before the first step.
TRAIN_ARGS = [
    "--steps",
    "2",
    "--per_replica_batch",
    "4",
    "--eval_every",
    "2",
    "--eval_batches",
    "1",
]
USER_FILES = {"notes.txt": b"my notes\n", "data/table.csv": b"a,b\n1,2\n"}


@pytest.fixture(scope="module")
def shard_set(tmp_path_factory) -> Path:
    """A real shard set of the golden corpus that keeps its token store (SHARD_SET/tokens)."""
    output = tmp_path_factory.mktemp("inputs") / "shards"
    config = PreprocessConfig(
        inputs=(CORPUS,), tokenizer=TOKENIZER, output=str(output), seq_len=64, keep_tokens=True
    )
    run_pipeline(config, IN_PROCESS)
    return output


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def fake_run(root: Path) -> Path:
    """A training run's files (what `lmshards train` writes, without training)."""
    return _write(
        root,
        {
            RUN_CONFIG_JSON: b'{"train": {}, "model": {}}\n',  # the sections every reader checks
            METRICS_JSONL: b'{"step": 1}\n',
            "checkpoints/ckpt-1.index": b"index",
            f"tokenizer/{TOKENIZER_JSON}": Path(TOKENIZER).read_bytes(),
        },
    )


# The earlier output of each writer, as its own files (a shard set and a run are built separately).
OWN_FILES = {
    "tokenizer train": {TOKENIZER_INFO_JSON: b"{}\n", TOKENIZER_JSON: b"{}\n"},
    "dataset export": {
        EXPORT_SUCCESS_JSON: b"{}\n",
        "train-00000-of-00001.jsonl": b'{"text": "a"}\n',
    },
    "stats": {STATS_JSON: b"{}\n", STATS_HTML: b"<html></html>\n"},
    "export": {MODEL_CONFIG_JSON: b"{}\n", MODEL_SAFETENSORS: b"weights", TOKENIZER_JSON: b"{}\n"},
    "demo": {DEMO_MARKER: b"made by lmshards demo\n", "demo_summary.json": b"{}\n"},
}


class Case:
    """The directories of one test: the inputs a writer reads and the --output it is given."""

    def __init__(self, root: Path, shard_set: Path):
        self.root = root
        self.run = fake_run(root / "runs" / "run")
        self.shards = shard_set

    def argv(self, writer: str, output: Path, *, overwrite: bool) -> list[str]:
        out = str(output)
        flag = ["--overwrite"] if overwrite else []
        return {
            "preprocess": [
                "preprocess",
                "--input",
                CORPUS,
                "--tokenizer",
                TOKENIZER,
                "--output",
                out,
            ]
            + flag
            + IN_PROCESS,
            "repack": ["repack", "--tokens", str(self.shards / TOKENS_DIR_NAME), "--output", out]
            + flag
            + IN_PROCESS,
            "train": ["train", "--shards", str(self.shards), "--output", out, *TRAIN_ARGS]
            + (["--restart"] if overwrite else []),
            "tokenizer train": ["tokenizer", "train", "--input", CORPUS, "--output", out]
            + ["--model", "bpe", "--vocab_size", "400"]
            + flag,
            "dataset export": ["dataset", "export", str(self.root / "no-dataset"), "--output", out]
            + flag,
            "stats": ["stats", str(self.shards), "--output", out] + flag,
            "export": ["export", str(self.run), "--output", out] + flag,
            "demo": ["demo", "--output", out],
        }[writer]


def copy_of(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


# target -> (builds the --output in a Case, whether it is the writer's own earlier output)
TARGETS: dict[str, Callable[[Case, str], Path]] = {
    "a user's files": lambda c, w: _write(c.root / "mine", USER_FILES),
    "the exported run": lambda c, w: c.run,
    "the run's parent": lambda c, w: c.run.parent,
    "a shard set": lambda c, w: copy_of(c.shards, c.root / "other_shards"),
    "a token store": lambda c, w: copy_of(c.shards / TOKENS_DIR_NAME, c.root / "store"),
    "a model export": lambda c, w: _write(c.root / "model", OWN_FILES["export"]),
    "inside a shard set": lambda c, w: copy_of(c.shards, c.root / "other_shards") / "sub",
}
WRITERS = (
    "preprocess",
    "repack",
    "train",
    "tokenizer train",
    "dataset export",
    "stats",
    "export",
    "demo",
)
# What the refusal says, by target; WRITER_SAYS overrides it for one writer.
SAYS = {
    "a user's files": "holds files lmshards did not write ('data/', 'notes.txt')",
    "the exported run": "holds a training run (written by `lmshards train`)",
    "the run's parent": "holds files lmshards did not write ('run/')",
    "a shard set": "holds a shard set (written by `lmshards preprocess` or `lmshards repack`)",
    "a token store": "holds a token store (written by `lmshards preprocess --keep_tokens`)",
    "a model export": "holds a model export (written by `lmshards export`)",
    "inside a shard set": "which holds a shard set",
}
OWN = "is not empty; pass --overwrite"
WRITER_SAYS = {
    ("preprocess", "a shard set"): OWN,
    ("repack", "a shard set"): OWN,
    ("export", "a model export"): OWN,
    ("train", "a user's files"): "holds files no training run wrote ('data/', 'notes.txt')",
    ("train", "the run's parent"): "holds files no training run wrote ('run/')",
    (
        "train",
        "a shard set",
    ): "is a shard set (written by `lmshards preprocess`), not a run directory",
    ("train", "a token store"): "is a token store (written by `lmshards preprocess --keep_tokens`)",
    ("train", "a model export"): "is a model directory (written by `lmshards export`)",
    (
        "demo",
        "a user's files",
    ): "not made by `lmshards demo` (it holds files lmshards did not write ('data/', 'notes.txt'))",
    (
        "demo",
        "the run's parent",
    ): "not made by `lmshards demo` (it holds 'run/')",
    ("demo", "the exported run"): "not made by `lmshards demo` (it holds a training run",
    ("demo", "a shard set"): "not made by `lmshards demo` (it holds a shard set",
    ("demo", "a token store"): "not made by `lmshards demo` (it holds a token store",
    ("demo", "a model export"): "not made by `lmshards demo` (it holds a model export",
}
# A run is resumed by `train`, not refused; `--restart` of a run is covered below.
RESUMED = {("train", "the exported run")}


def _refused(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert lmshards_main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    # One error line, the last (log lines may come before it).
    errors = [line for line in lines if line.startswith("lmshards ")]
    assert errors == lines[-1:], lines
    return errors[0]


@pytest.mark.parametrize(
    ("writer", "target"),
    [(w, t) for w in WRITERS for t in TARGETS if (w, t) not in RESUMED],
)
def test_a_writer_refuses_what_it_did_not_write_and_leaves_it_as_it_was(
    writer, target, shard_set, tmp_path, capsys
):
    case = Case(tmp_path, shard_set)
    output = TARGETS[target](case, writer)
    says = WRITER_SAYS.get((writer, target), SAYS[target])
    before = tree_bytes(tmp_path)
    # --overwrite (train: --restart) is where deleting would happen; an own output is refused without it.
    err = _refused(case.argv(writer, output, overwrite=says != OWN), capsys)
    assert err.startswith(f"lmshards {writer}: error: --output {str(output)!r}"), err
    assert says in err, err
    assert tree_bytes(tmp_path) == before
    assert output.exists() == (target != "inside a shard set")


@pytest.mark.parametrize("writer", [w for w in WRITERS if w in OWN_FILES])
def test_an_earlier_output_needs_overwrite_and_with_a_users_file_is_refused_even_with_it(
    writer, shard_set, tmp_path, capsys
):
    case = Case(tmp_path, shard_set)
    output = _write(tmp_path / "earlier", OWN_FILES[writer])
    before = tree_bytes(tmp_path)
    if writer != "demo":  # the demo replaces its own output without a flag
        err = _refused(case.argv(writer, output, overwrite=False), capsys)
        assert f"--output {str(output)!r} {OWN} to replace what it holds" in err, err
    _write(output, {"notes.txt": b"mine\n"})
    err = _refused(case.argv(writer, output, overwrite=True), capsys)
    assert "holds files lmshards did not write ('notes.txt')" in err, err
    assert tree_bytes(tmp_path) == {**before, "earlier/notes.txt": b"mine\n"}


def test_restart_of_a_run_holding_a_users_file_is_refused(shard_set, tmp_path, capsys):
    case = Case(tmp_path, shard_set)
    _write(case.run, {"notes.txt": b"mine\n"})
    before = tree_bytes(tmp_path)
    err = _refused(case.argv("train", case.run, overwrite=True), capsys)
    assert "holds files no training run wrote ('notes.txt')" in err, err
    assert tree_bytes(tmp_path) == before


@pytest.mark.parametrize(
    "kind",
    [
        PREPROCESS_OUTPUT,
        TOKENIZER_OUTPUT,
        DATASET_EXPORT_OUTPUT,
        STATS_OUTPUT,
        MODEL_EXPORT_OUTPUT,
        DEMO_OUTPUT,
    ],
    ids=lambda kind: kind.name,
)
def test_an_empty_or_new_directory_is_taken_and_an_earlier_output_replaced_only_with_overwrite(
    kind, tmp_path
):
    (tmp_path / "empty").mkdir()
    for new in (tmp_path / "empty", tmp_path / "new"):
        assert check_replaceable(str(new), kind=kind, overwrite=False, others=OUTPUT_KINDS) is False
    assert list(tmp_path.iterdir()) == [tmp_path / "empty"]
    earlier = _write(tmp_path / "earlier", {kind.marker: b"{}\n"})
    if kind.marker_format:
        (earlier / kind.marker).write_text(json.dumps({"format": kind.marker_format}))
    with pytest.raises(OutputError, match=OWN):
        check_replaceable(str(earlier), kind=kind, overwrite=False, others=OUTPUT_KINDS)
    assert check_replaceable(str(earlier), kind=kind, overwrite=True, others=OUTPUT_KINDS) is True


def test_stats_writes_its_default_output_inside_the_shard_set_and_nowhere_else_inside_it(shard_set):
    # The shard set's stats/ is open to `lmshards stats`; any other directory inside it is not.
    stats = str(shard_set / "stats")
    assert check_replaceable(stats, kind=STATS_OUTPUT, overwrite=True, others=OUTPUT_KINDS) in (
        True,
        False,
    )
    with pytest.raises(OutputError, match="is inside .* which holds a shard set"):
        check_replaceable(
            str(shard_set / "train" / "x"), kind=STATS_OUTPUT, overwrite=False, others=OUTPUT_KINDS
        )


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ("notes.html", "is a file lmshards did not write"),
        ("folder", "is a directory"),
        ("shards/report.html", "which holds a shard set"),
        ("runs/run/other.html", "which holds a training run"),
    ],
)
def test_report_replaces_only_an_earlier_report(output, says, shard_set, tmp_path, capsys):
    case = Case(tmp_path, shard_set)
    copy_of(shard_set, tmp_path / "shards")
    _write(tmp_path, {"notes.html": b"<html>mine</html>\n", "folder/keep.txt": b"mine\n"})
    before = tree_bytes(tmp_path)
    err = _refused(["report", str(case.run), "--output", str(tmp_path / output)], capsys)
    assert err.startswith(f"lmshards report: error: --output {str(tmp_path / output)!r}"), err
    assert says in err, err
    assert tree_bytes(tmp_path) == before


def test_an_earlier_report_is_told_by_its_head(tmp_path):
    from lmshards.command.report import GENERATOR_META, is_report

    page = _write(tmp_path, {"page.html": f"<!doctype html><head>{GENERATOR_META}".encode()})
    check_file_output(str(page / "page.html"), ours=is_report, kinds=OUTPUT_KINDS)
    assert not is_report(b"<!doctype html><head><title>mine</title>")


def test_stats_replaces_its_earlier_output_only_with_overwrite(shard_set, tmp_path, capsys):
    out = tmp_path / "store_stats"
    argv = ["stats", str(shard_set / TOKENS_DIR_NAME), "--output", str(out)]
    assert lmshards_main(argv) == 0
    (out / STATS_JSON).write_text("{}\n")  # an earlier output, whatever it holds
    before = tree_bytes(out)
    err = _refused(argv, capsys)
    assert f"--output {str(out)!r} {OWN}" in err, err
    assert tree_bytes(out) == before
    assert lmshards_main([*argv, "--overwrite"]) == 0
    assert json.loads((out / STATS_JSON).read_text())["kind"] == "token_store"
    assert sorted(tree_bytes(out)) == [STATS_HTML, STATS_JSON]


def test_a_demo_rerun_deletes_only_what_the_demo_wrote(shard_set, tmp_path):
    from lmshards.command.demo_steps import prepare_output

    demo = _write(
        tmp_path / "demo",
        {
            DEMO_MARKER: b"made by lmshards demo\n",
            "demo_summary.json": b"{}\n",
            "report.html": b"<html></html>\n",
            "logs/01-tokenizer.log": b"log\n",
            **{f"hf_model/{name}": data for name, data in OWN_FILES["export"].items()},
            **{f"tokenizer/{name}": data for name, data in OWN_FILES["tokenizer train"].items()},
        },
    )
    fake_run(demo / "run")
    copy_of(shard_set, demo / "shards")
    prepare_output(demo)
    assert tree_bytes(demo) == {DEMO_MARKER: b"made by lmshards demo; safe to delete\n"}
