"""Bounded reads: every JSON file lmshards reads, and every file it reads whole, goes through here.

A file is checked before it is read: a regular file (never a FIFO, a device such as /dev/zero, a socket or
a directory, also through a symlink) of at most a stated size. A JSON text is checked before it is parsed:
its size, its nesting depth (counted without recursion, so a 100,000-deep `[[[...` is one line, not a
RecursionError) and its numbers (no integer longer than Python's int digit limit, no NaN or infinity).
Each refusal is a ReadLimitError: one line naming the file and the limit.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from itertools import accumulate
from typing import Any

from lmshards.plumbing import fs
from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.units import format_size

# The largest JSON file of each kind lmshards reads (bytes). A manifest lists up to 10,000 shards (about
# 300 bytes each); a tokenizer.json of a 1M-piece vocabulary with its merges is about 100 MB.
MAX_JSON_BYTES = 16 * 2**20  # config.json, tokenizer_config.json, run files, leases, audit records
MAX_MANIFEST_BYTES = 64 * 2**20
MAX_TOKENIZER_JSON_BYTES = 512 * 2**20
MAX_JSON_LINE_BYTES = 2**20  # one line of metrics.jsonl or a curation audit file
# A whole JSON Lines file: metrics.jsonl (a few hundred bytes per logging window), an audit file (about
# 150 bytes per removed document).
MAX_JSONL_BYTES = 1024 * 2**20
# A weights file read whole (model.safetensors, pytorch_model.bin, a JAX checkpoint): the largest single
# file save_pretrained writes when asked for one (max_shard_size='100GB').
MAX_WEIGHTS_BYTES = 100 * 10**9
# Nesting deeper than any file lmshards writes or reads (a tokenizer.json nests about 6 levels), and far
# below the depth at which json.loads recurses out of the stack.
MAX_JSON_DEPTH = 64
# Python refuses to parse longer integers (sys.get_int_max_str_digits()); no lmshards value needs more.
MAX_INT_DIGITS = 4300

_FILE_KINDS = (  # (stat test, what the message calls it)
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)
# A JSON string, escapes included: its brackets do not nest anything.
_JSON_STRING_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET_RE = re.compile(r"[^\[\]{}]+")
_OPENING = frozenset("[{")


class ReadLimitError(LmshardsError, ValueError):
    """A file is not a regular file, or a file or JSON text is over one of this module's limits.

    A ValueError too, so that code that treats an unparsable file as damaged treats this one alike.
    """


def check_regular_file(path: str, what: str, max_bytes: int | None = None) -> int:
    """The size of the regular file at path (local or gs://), checked before anything reads it.

    what: what the file should be, e.g. "shard file" (the message says "... is a FIFO, not a shard file").

    Raises:
      ReadLimitError: path is (or links to) a directory, a device, a FIFO or a socket, or holds more
        than max_bytes.
      FileNotFoundError: nothing is at path.
    """
    if fs.is_remote(path):
        filesystem, stripped = fs.filesystem(path)
        info = filesystem.info(stripped)
        if info.get("type") == "directory":
            raise ReadLimitError(f"{path!r} is a directory, not a {what}.")
        size = int(info.get("size") or 0)
    else:
        mode = os.stat(path).st_mode  # follows a symlink: the kind of what it points to
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
            via = (
                f" (through the symlink to {os.path.realpath(path)!r})"
                if os.path.islink(path)
                else ""
            )
            raise ReadLimitError(f"{path!r} is {kind}{via}, not a {what}.")
        size = os.path.getsize(path)
    if max_bytes is not None:
        check_size(size, limit=max_bytes, what=f"{what} {path!r}")
    return size


def check_size(size: int, *, limit: int, what: str) -> None:
    """Raises ReadLimitError naming `what` when size (bytes) is over limit."""
    if size > limit:
        raise ReadLimitError(
            f"{what} holds {size} bytes, over the {format_size(limit)} limit for it; is it the right file?"
        )


def read_bytes(path: str, *, what: str, max_bytes: int) -> bytes:
    """The bytes of the regular file at path (local or gs://), of at most max_bytes.

    Reads at most max_bytes + 1 bytes, so a file that grows after the check is refused too.
    Raises ReadLimitError (see check_regular_file) and FileNotFoundError.
    """
    check_regular_file(path, what, max_bytes)
    with fs.open_file(path, "rb") as f:
        data = f.read(max_bytes + 1)
    check_size(len(data), limit=max_bytes, what=f"{what} {path!r}")
    return data


def read_text(path: str, *, what: str, max_bytes: int) -> str:
    """read_bytes decoded as UTF-8 (UnicodeDecodeError when it is not)."""
    return read_bytes(path, what=what, max_bytes=max_bytes).decode("utf-8")


def read_json(
    path: str, *, what: str, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """The JSON value in the file at path (local or gs://), read and parsed within the limits.

    what: the kind of file, e.g. "manifest"; messages name it with its path.
    Raises:
      ReadLimitError: the file is not a regular file, or over a limit (size, depth, numbers).
      json.JSONDecodeError, UnicodeDecodeError: it is not UTF-8 JSON (callers word their own fix).
      FileNotFoundError: nothing is at path.
    """
    text = read_text(path, what=what, max_bytes=max_bytes)
    return load_json(text, what=f"{what} {path!r}", max_bytes=max_bytes, max_depth=max_depth)


def load_json(
    text: str | bytes,
    *,
    what: str,
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
) -> Any:
    """json.loads within limits: at most max_bytes, max_depth levels of nesting, integers of at most
    MAX_INT_DIGITS digits, and no NaN or infinity.

    what: how messages name the text, e.g. "manifest 'out/manifest.json'".
    Raises:
      ReadLimitError: over a limit; the message names `what` and the limit.
      json.JSONDecodeError, UnicodeDecodeError: it is not UTF-8 JSON.
    """
    if isinstance(text, bytes):
        check_size(len(text), limit=max_bytes, what=what)
        text = text.decode("utf-8")
    # A character is at most 4 UTF-8 bytes: encode only when the count matters.
    elif len(text) > max_bytes // 4:
        check_size(len(text.encode("utf-8", "surrogatepass")), limit=max_bytes, what=what)
    depth = json_depth(text)
    if depth > max_depth:
        raise ReadLimitError(
            f"{what} nests {depth} levels deep, over the limit of {max_depth}; is it the right file?"
        )
    return json.loads(
        text,
        parse_int=lambda digits: _bounded_int(digits, what),
        parse_float=lambda digits: _finite_float(digits, what),
        parse_constant=lambda name: _refuse_constant(name, what),
    )


def json_depth(text: str) -> int:
    """How deep arrays and objects nest in a JSON text (0 for a scalar), counted without recursion.

    Brackets inside strings do not count. On text that is not JSON the count is only an estimate; the
    parser then names the error.
    """
    brackets = _NOT_BRACKET_RE.sub("", _JSON_STRING_RE.sub("", text))
    if not brackets:
        return 0
    return max(0, max(accumulate(1 if c in _OPENING else -1 for c in brackets)))


def _bounded_int(digits: str, what: str) -> int:
    count = len(digits.lstrip("-"))
    if count > MAX_INT_DIGITS:
        raise ReadLimitError(
            f"{what} holds an integer of {count} digits, over the limit of {MAX_INT_DIGITS}; "
            "is it the right file?"
        )
    return int(digits)


def _finite_float(digits: str, what: str) -> float:
    value = float(digits)
    if not math.isfinite(value):
        raise ReadLimitError(
            f"{what} holds the number {_shown(digits)}, which is not finite as a float; "
            "is it the right file?"
        )
    return value


def _refuse_constant(name: str, what: str) -> float:
    raise ReadLimitError(f"{what} holds {name}, which is not JSON; is it the right file?")


def _shown(digits: str) -> str:
    return digits if len(digits) <= 40 else f"{digits[:20]}...({len(digits)} characters)"
