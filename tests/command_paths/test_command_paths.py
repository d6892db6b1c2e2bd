"""A command's entry reads top to bottom: from `lmshards preprocess` to the first document read, and from
`lmshards train` to the training loop, at most MAX_CALLS frames of lmshards code, each in a module named
for its role, and no callable handed through a helper on the way (docs/contributing.md draws both paths)."""

from __future__ import annotations

import errno
import sys
import traceback
import types
from pathlib import Path

import pytest

import lmshards
from lmshards.plumbing import cli, stopping
from lmshards.plumbing.errors import FailedRunError, LmshardsError
from lmshards.preprocess import cli as preprocess_cli
from lmshards.preprocess.stages import read as read_stage
from lmshards.train.commands import cli as train_cli
from tests.helpers.shard_factory import write_sample_shards

MAX_CALLS = 6
PACKAGE = str(Path(lmshards.__file__).parent)


class _Reached(Exception):
    """Raised where the path ends: nothing after it needs to run."""


def project_path(stack: traceback.StackSummary) -> list[str]:
    """'module.function' of each lmshards frame from the command's `main` on, the caller's last."""
    frames = [frame for frame in stack if frame.filename.startswith(PACKAGE)]
    names = [
        Path(frame.filename).relative_to(PACKAGE).with_suffix("").as_posix().replace("/", ".")
        + f".{frame.name}"
        for frame in frames
    ]
    starts = [i for i, name in enumerate(names) if name.endswith(".main")]
    assert starts, names
    return names[starts[-1] :]


def stop_and_record(seen: list[traceback.StackSummary]):
    def reached(*args, **kwargs):
        seen.append(traceback.extract_stack()[:-1])
        raise _Reached

    return reached


def first_read_path(monkeypatch, tmp_path, *flags: str) -> list[str]:
    """The lmshards frames from preprocess's main to the call that reads the first document."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"document {i} of a small corpus\n" for i in range(40)))
    seen: list[traceback.StackSummary] = []
    monkeypatch.setattr(read_stage, "read_range", stop_and_record(seen))
    golden = Path(__file__).resolve().parents[1] / "data" / "golden" / "tokenizer.json"
    argv = ["--input", str(corpus), "--tokenizer", str(golden), "--output", str(tmp_path / "out")]
    with pytest.raises(Exception):  # noqa: B017 (whatever Beam wraps _Reached in)
        preprocess_cli.main([*argv, *flags])
    assert len(seen) == 1  # the first read stopped the run
    return project_path(seen[0])


def test_preprocess_reaches_the_first_document_read_in_six_calls(monkeypatch, tmp_path):
    # Beam's DirectRunner named: the staged pipeline
    path = first_read_path(monkeypatch, tmp_path, "--runner=DirectRunner")
    assert path == [
        "preprocess.cli.main",
        "preprocess.pipeline.run_pipeline",
        "preprocess.launch.launch",
        "preprocess.transforms.read.process",
        "preprocess.stages.read.read_sized_range",
        "preprocess.stages.read.read_batches",
    ]
    assert len(path) <= MAX_CALLS


def test_the_default_preprocess_reaches_the_first_document_read_in_six_calls(monkeypatch, tmp_path):
    # No Beam flag and a local output: the in-process engine without Beam, which reads on the step's
    # own thread, with curation too (its first read decides what the second keeps).
    path = first_read_path(monkeypatch, tmp_path)
    curated = tmp_path / "curated"
    curated.mkdir()
    assert first_read_path(monkeypatch, curated, "--dedup", "exact") == path
    assert path == [
        "preprocess.cli.main",
        "preprocess.local.run_local",
        "preprocess.in_process.run_in_process",
        "preprocess.stages.read.read_sized_range",
        "preprocess.stages.read.read_batches",
    ]
    assert len(path) <= MAX_CALLS


@pytest.mark.slow  # preflight reads the shard set
def test_train_reaches_the_training_loop_in_two_calls(
    monkeypatch, tmp_path, sample_tokenizer, sample_files
):
    shards = tmp_path / "shards"
    write_sample_shards(shards, sample_tokenizer, sample_files, seq_len=32, max_lines_per_file=20)
    seen: list[traceback.StackSummary] = []
    trainer = types.ModuleType("lmshards.train.loop.trainer")
    trainer.train = stop_and_record(seen)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "lmshards.train.loop.trainer", trainer)
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")  # main sets it; restored after the test
    argv = ["--shards", str(shards), "--output", str(tmp_path / "run"), "--steps", "1"]
    with pytest.raises(_Reached):
        train_cli.main(argv)
    path = [*project_path(seen[0]), "train.loop.trainer.train"]
    assert path == ["train.commands.cli.main", "train.loop.trainer.train"]
    assert len(path) <= MAX_CALLS


# ---------------------------------------------------------------- what surrounds a command's body


def entry(body, *, output: str = "out") -> int:
    """A command's main as the commands write it, around body."""
    with cli.one_line_errors("stats") as failed, stopping.stop_signals():
        with cli.disk_errors("stats", output) as failed_writing:
            return body()
        return failed_writing.code
    return failed.code


def raising(error: BaseException):
    def body() -> int:
        raise error

    return body


def test_a_body_returns_its_own_code():
    assert entry(lambda: 3) == 3


@pytest.mark.parametrize(
    "error, code, line",
    [
        (LmshardsError("--input 'x' is empty; add files."), 2, "--input 'x' is empty; add files."),
        (FailedRunError("every document was removed."), 1, "every document was removed."),
        (
            OSError(errno.ENOSPC, "No space left on device"),
            1,
            "Cannot write to 'out': the disk is full (No space left on device); free some space or choose "
            "another location, then run the command again.",
        ),
        (
            KeyboardInterrupt(),
            130,
            "stopped by SIGINT; its lease and partial output were removed. Run the command again to start over.",
        ),
    ],
)
def test_an_error_ends_the_body_with_its_one_line_and_exit_code(error, code, line, capsys):
    assert entry(raising(error)) == code
    assert capsys.readouterr().err == f"lmshards stats: error: {line}\n"


def test_a_bug_keeps_its_traceback():
    with pytest.raises(ZeroDivisionError):
        entry(lambda: 1 // 0)
