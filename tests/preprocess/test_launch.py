"""The launcher's command tail: what every Beam command prints at its end, and its exit code."""

from __future__ import annotations

import pytest

from lmshards.plumbing.cli import EXIT_FAILURE, EXIT_OK, error_line
from lmshards.plumbing.errors import LmshardsError
from lmshards.preprocess.failures import RunFailure
from lmshards.preprocess.launch import report_run


def _summary(result: str, seconds: float) -> str:
    assert seconds >= 0
    return f"wrote {result}"


def test_a_finished_run_prints_its_summary(capsys):
    assert report_run("repack", lambda: "out/", summary=_summary) == EXIT_OK
    assert capsys.readouterr().out == "wrote out/\n"


@pytest.mark.parametrize(
    "job_file, line",
    [
        (None, "lmshards stats: dry run, nothing submitted or written\n"),
        (
            "job.json",
            "lmshards stats: dry run, nothing submitted or written; Dataflow job written to job.json\n",
        ),
    ],
)
def test_a_dry_run_prints_one_line_naming_the_job_file_it_was_given(capsys, job_file, line):
    assert report_run("stats", lambda: None, summary=_summary, job_file=job_file) == EXIT_OK
    assert capsys.readouterr().out == line


def test_a_run_failure_is_one_error_line_and_exit_1(capsys):
    def full_disk() -> str:
        raise RunFailure("out/: no space left on device; free some space and run again.")

    assert report_run("preprocess", full_disk, summary=_summary) == EXIT_FAILURE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err
        == error_line("preprocess", "out/: no space left on device; free some space and run again.")
        + "\n"
    )


def test_a_user_error_is_left_to_the_command_runner():
    """run_command turns it into its one line and exit 2; the tail must not swallow it."""

    def bad_input() -> str:
        raise LmshardsError("--input 'x': no such file.")

    with pytest.raises(LmshardsError, match="no such file"):
        report_run("preprocess", bad_input, summary=_summary)
