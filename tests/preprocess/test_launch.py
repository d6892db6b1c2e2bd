"""The launcher's command tail: what every Beam command prints at its end, and its exit code."""

from __future__ import annotations

import pytest

from lmshards.plumbing.cli import EXIT_FAILURE, EXIT_OK, error_line
from lmshards.plumbing.errors import LmshardsError
from lmshards.preprocess.failures import RunFailure
from lmshards.preprocess.launch import dry_run_line, run_failures


def tail(body) -> int:
    """A Beam command's run and closing line as the commands write them, around body."""
    with run_failures("preprocess") as failed_run:
        print(body())
        return EXIT_OK
    return failed_run.code


def test_a_finished_run_prints_its_summary(capsys):
    assert tail(lambda: "wrote out/") == EXIT_OK
    assert capsys.readouterr().out == "wrote out/\n"


@pytest.mark.parametrize(
    "job_file, line",
    [
        (None, "lmshards stats: dry run, nothing submitted or written"),
        (
            "job.json",
            "lmshards stats: dry run, nothing submitted or written; Dataflow job written to job.json",
        ),
    ],
)
def test_a_dry_run_line_names_the_job_file_it_was_given(job_file, line):
    assert dry_run_line("stats", job_file) == line


def test_a_run_failure_is_one_error_line_and_exit_1(capsys):
    def full_disk() -> str:
        raise RunFailure("out/: no space left on device; free some space and run again.")

    assert tail(full_disk) == EXIT_FAILURE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err
        == error_line("preprocess", "out/: no space left on device; free some space and run again.")
        + "\n"
    )


def test_a_user_error_is_left_to_one_line_errors():
    """one_line_errors turns it into its one line and exit 2; the tail must not swallow it."""

    def bad_input() -> str:
        raise LmshardsError("--input 'x': no such file.")

    with pytest.raises(LmshardsError, match="no such file"):
        tail(bad_input)
