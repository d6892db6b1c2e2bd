"""One duration format and one size convention for every command."""

from __future__ import annotations

import argparse

import pytest

from lmshards.plumbing.progress import Pacer, bytes_progress
from lmshards.plumbing.units import format_duration, format_eta, format_size, parse_size, size_flag


@pytest.mark.parametrize(
    "seconds,text",
    [
        (0, "0.0 s"),
        (0.44, "0.4 s"),
        (9.94, "9.9 s"),
        (9.96, "10 s"),
        (59.4, "59 s"),
        (61, "1 min 01 s"),
        (185, "3 min 05 s"),
        (3599, "59 min 59 s"),
        (3600, "1 h 00 min"),
        (7620, "2 h 07 min"),
        (90000, "25 h 00 min"),
        (-3, "0.0 s"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_eta_is_unknown_until_something_moved():
    assert format_eta(100, 0.0) == "unknown"
    assert format_eta(100, 10.0) == "10 s"
    assert format_eta(5, 10.0) == "0.5 s"
    assert format_eta(-5, 10.0) == "0.0 s"


@pytest.mark.parametrize(
    "text,nbytes",
    [
        ("256MiB", 256 * 2**20),
        ("256 MiB", 256 * 2**20),
        ("500MB", 500_000_000),
        ("1.5GB", 1_500_000_000),
        ("2gib", 2 * 2**30),
        ("64KiB", 65536),
        ("7B", 7),
    ],
)
def test_parse_size_reads_the_unit_as_its_standard_defines_it(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["256", "1.5", "MB", "12 parsecs", "-1MB", ""])
def test_parse_size_refuses_a_value_without_a_known_unit_and_shows_how_to_write_it(text):
    with pytest.raises(ValueError, match="256MiB, 500MB or 2GB"):
        parse_size(text)


def test_format_size_round_trips():
    for nbytes in (256 * 2**20, 500_000_000, 64 * 2**10, 7, 3 * 2**30):
        assert parse_size(format_size(nbytes)) == nbytes
    assert format_size(256 * 2**20) == "256MiB"
    assert format_size(500_000_000) == "500MB"


def test_bytes_progress():
    assert (
        bytes_progress(done=30_000_000, total=120_000_000, seconds=10.0)
        == "30.0 of 120.0 MB (25%), 3.00 MB/s, ETA 30 s"
    )
    assert (
        bytes_progress(done=0, total=0, seconds=0.0) == "0.0 of 0.0 MB (100%), 0.00 MB/s, ETA 0.0 s"
    )


def test_pacer_is_due_at_most_once_per_interval():
    now = [0.0]
    pacer = Pacer(10.0, clock=lambda: now[0])
    assert not pacer.due()
    now[0] = 9.9
    assert not pacer.due()
    now[0] = 10.0
    assert pacer.due()
    assert not pacer.due()
    now[0] = 25.0
    assert pacer.due()
    assert pacer.elapsed() == 25.0


def test_a_size_flag_keeps_bare_numbers_in_its_unit_and_reads_units_by_their_standard():
    mib_flag = size_flag("MiB")
    assert mib_flag("128") == 128.0  # old values keep their meaning
    assert mib_flag("0.25") == 0.25
    assert mib_flag("1GiB") == 1024.0
    assert mib_flag("500MB") == pytest.approx(500e6 / 2**20)
    with pytest.raises(argparse.ArgumentTypeError, match="256MiB, 500MB or 2GB"):
        mib_flag("12 parsecs")
