"""`--shards` reads one way: a value that exists as written is that path, a path with a `:` can be
named, and a value with two readings (both existing, or a `:` before the weight) is refused with the
spellings that say what was meant."""

from __future__ import annotations

import pytest

from lmshards.plumbing.errors import LmshardsError
from lmshards.train.inputs.shards_flag import ShardSource, parse_shards_flag


@pytest.mark.parametrize(
    "text, path, weight",
    [
        ("data/web", "data/web", None),
        ("data/web:0.7", "data/web", 0.7),
        ("gs://b/web:2", "gs://b/web", 2.0),
        ("gs://bucket/x", "gs://bucket/x", None),
        ("gs://b/run:v2", "gs://b/run:v2", None),  # no number after the colon: part of the path
        ("/data/2026-01-01T10:00/set", "/data/2026-01-01T10:00/set", None),
        ("path=/data/set:2", "/data/set:2", None),
        ("path=gs://b/a:b:0.5", "gs://b/a:b:0.5", None),
        ("weight=0.5,path=/data/a:b", "/data/a:b", 0.5),
        ("weight=3,path=/data/with,comma:1", "/data/with,comma:1", 3.0),
    ],
)
def test_each_spelling_reads_one_way(text, path, weight):
    assert parse_shards_flag(text) == ShardSource(path, weight)


def test_a_value_that_exists_as_written_is_that_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "2026-12-01T10:30").mkdir(parents=True)
    assert parse_shards_flag("runs/2026-12-01T10:30") == ShardSource("runs/2026-12-01T10:30")
    # Nothing named as written: the weight reading, as before (whether or not its path exists).
    assert parse_shards_flag("runs/2026-12-01T11:30") == ShardSource("runs/2026-12-01T11", 30.0)
    (tmp_path / "set").mkdir()
    assert parse_shards_flag("set:2") == ShardSource("set", 2.0)
    assert parse_shards_flag("path=set:2") == ShardSource("set:2")


def test_a_value_whose_two_readings_both_exist_is_refused_showing_both(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("runs/2026-12-01T10:30", "runs/2026-12-01T10"):
        (tmp_path / name).mkdir(parents=True)
    with pytest.raises(LmshardsError) as refused:
        parse_shards_flag("runs/2026-12-01T10:30")
    message = str(refused.value)
    assert "can be read two ways" in message
    assert "--shards weight=30,path=runs/2026-12-01T10" in message
    assert "--shards path=runs/2026-12-01T10:30" in message
    assert parse_shards_flag("path=runs/2026-12-01T10:30") == ShardSource("runs/2026-12-01T10:30")
    assert parse_shards_flag("weight=30,path=runs/2026-12-01T10") == ShardSource(
        "runs/2026-12-01T10", 30.0
    )


@pytest.mark.parametrize("text", ["/data/a:b:0.5", "gs://b/x:y:2", "a:b:1e-3"])
def test_an_ambiguous_value_is_refused_showing_both_spellings(text):
    head, _, tail = text.rpartition(":")
    with pytest.raises(LmshardsError) as refused:
        parse_shards_flag(text)
    message = str(refused.value)
    assert "can be read two ways" in message
    assert f"--shards weight={tail},path={head}" in message and f"--shards path={text}" in message
    # Both spellings it shows read back as what they say.
    assert parse_shards_flag(f"weight={tail},path={head}") == ShardSource(head, float(tail))
    assert parse_shards_flag(f"path={text}") == ShardSource(text)


@pytest.mark.parametrize(
    "text, match",
    [
        ("path=", "names no path"),
        ("weight=0.5,path=", "names no path"),
        ("weight=0.5", "after weight=W comes ',path=PATH'"),
        ("weight=0,path=a", "must be a positive number"),
        ("weight=x,path=a", "must be a positive number"),
        ("a:inf", "must be a positive number"),
    ],
)
def test_bad_values_are_refused_naming_them(text, match):
    with pytest.raises(LmshardsError, match=match):
        parse_shards_flag(text)


def test_train_refuses_an_ambiguous_shards_value_in_one_line_before_writing(tmp_path, capsys):
    from lmshards.train.commands import cli

    run = tmp_path / "run"
    code = cli.main(["--shards", f"{tmp_path}/a:b:0.5", "--output", str(run), "--steps", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("lmshards train: error: --shards ")
    assert not run.exists()
