"""Bounded reads: each limit of lmshards.plumbing.bounded at its boundary, and special files refused by kind."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from lmshards.plumbing import bounded
from lmshards.plumbing.bounded import ReadLimitError
from lmshards.plumbing.errors import LmshardsError


def _refusal(text: str | bytes, **limits) -> str:
    with pytest.raises(ReadLimitError) as e:
        bounded.load_json(text, what="config 'c.json'", **limits)
    return str(e.value)


def test_refusals_are_user_errors_and_value_errors():
    # LmshardsError: one line from the CLI; ValueError: code that treats unparsable as damaged does so too.
    assert issubclass(ReadLimitError, LmshardsError)
    assert issubclass(ReadLimitError, ValueError)


def test_size_limit_at_its_boundary():
    text = '"' + "x" * 98 + '"'  # 100 bytes
    assert bounded.load_json(text, what="c", max_bytes=100) == "x" * 98
    assert bounded.load_json(text.encode(), what="c", max_bytes=100) == "x" * 98
    message = _refusal(text, max_bytes=99)
    assert message == (
        "config 'c.json' holds 100 bytes, over the 99B limit for it; is it the right file?"
    )
    # Characters are counted as UTF-8 bytes: 26 three-byte characters and the quotes are 80 bytes.
    assert "80 bytes" in _refusal('"' + "€" * 26 + '"', max_bytes=79)


def test_depth_limit_at_its_boundary():
    assert bounded.load_json("[" * 64 + "]" * 64, what="c") == json.loads("[" * 64 + "]" * 64)
    assert bounded.load_json('{"a":' * 64 + "1" + "}" * 64, what="c")["a"]["a"]
    assert _refusal("[" * 65 + "]" * 65) == (
        "config 'c.json' nests 65 levels deep, over the limit of 64; is it the right file?"
    )


def test_depth_is_counted_without_recursion_and_ignores_brackets_in_strings():
    started = time.monotonic()
    assert "nests 100000 levels deep" in _refusal("[" * 100_000 + "]" * 100_000)
    assert "nests 100000 levels deep" in _refusal("[" * 100_000)  # cut short: still one line
    assert time.monotonic() - started < 5
    assert bounded.json_depth('["[[[[", {"k": "]]]{{\\"["}]') == 2
    assert bounded.json_depth("12") == 0
    assert bounded.load_json('["' + "[" * 1000 + '"]', what="c") == ["[" * 1000]


def test_integer_digits_at_python_limit():
    assert bounded.MAX_INT_DIGITS == 4300
    assert bounded.load_json("9" * 4300, what="c") == int("9" * 4300)
    assert bounded.load_json("-" + "9" * 4300, what="c") == -int("9" * 4300)
    assert _refusal("[" + "9" * 4301 + "]") == (
        "config 'c.json' holds an integer of 4301 digits, over the limit of 4300; is it the right file?"
    )


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1E309"])
def test_float_overflowing_to_infinity_is_refused(number):
    assert _refusal(f'{{"lr": {number}}}') == (
        f"config 'c.json' holds the number {number}, which is not finite as a float; "
        "is it the right file?"
    )


def test_largest_finite_float_is_read():
    assert bounded.load_json("1.7976931348623157e308", what="c") == 1.7976931348623157e308


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_json_constants_are_refused(constant):
    assert _refusal(f"[1, {constant}]") == (
        f"config 'c.json' holds {constant}, which is not JSON; is it the right file?"
    )


def test_malformed_json_and_bytes_keep_their_own_errors():
    with pytest.raises(json.JSONDecodeError):
        bounded.load_json('{"a": 1', what="c")
    with pytest.raises(UnicodeDecodeError):
        bounded.load_json(b'"\xff"', what="c")


def test_read_json_names_the_file_and_reads_a_regular_one(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"hidden": 8}')
    assert bounded.read_json(str(path), what="--model_config") == {"hidden": 8}
    path.write_text("[" * 70 + "]" * 70)
    with pytest.raises(ReadLimitError) as e:
        bounded.read_json(str(path), what="--model_config")
    assert str(e.value) == (
        f"--model_config {str(path)!r} nests 70 levels deep, over the limit of 64; is it the right file?"
    )


def test_read_bytes_checks_the_size_before_reading(tmp_path):
    path = tmp_path / "lease"
    path.write_bytes(b"x" * 11)
    assert bounded.read_bytes(str(path), what="lease file", max_bytes=11) == b"x" * 11
    with pytest.raises(ReadLimitError) as e:
        bounded.read_bytes(str(path), what="lease file", max_bytes=10)
    assert str(e.value) == (
        f"lease file {str(path)!r} holds 11 bytes, over the 10B limit for it; is it the right file?"
    )


def test_check_regular_file_returns_the_size(tmp_path):
    path = tmp_path / "shard"
    path.write_bytes(b"abc")
    assert bounded.check_regular_file(str(path), "shard file") == 3
    assert bounded.check_regular_file(str(path), "shard file", max_bytes=3) == 3
    with pytest.raises(ReadLimitError, match="holds 3 bytes, over the 2B limit"):
        bounded.check_regular_file(str(path), "shard file", max_bytes=2)
    with pytest.raises(FileNotFoundError):
        bounded.check_regular_file(str(tmp_path / "missing"), "shard file")


def test_special_files_are_refused_by_kind(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        cases = {
            str(fifo): "a FIFO (named pipe)",
            "/dev/zero": "a character device",
            str(tmp_path): "a directory",
            str(sock_path): "a socket",
        }
        for path, kind in cases.items():
            with pytest.raises(ReadLimitError) as e:
                bounded.check_regular_file(path, "shard file")
            assert str(e.value) == f"{path!r} is {kind}, not a shard file."
            with pytest.raises(ReadLimitError):  # never opened: a FIFO would block here
                bounded.read_json(path, what="manifest")
    finally:
        sock.close()


def test_a_symlink_is_refused_by_the_kind_it_points_to(tmp_path):
    link = tmp_path / "shard-00000-of-00001.tfrecord"
    link.symlink_to("/dev/urandom")
    with pytest.raises(ReadLimitError) as e:
        bounded.check_regular_file(str(link), "shard file")
    assert str(e.value) == (
        f"{str(link)!r} is a character device (through the symlink to '/dev/urandom'), not a shard file."
    )
