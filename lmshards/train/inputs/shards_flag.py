"""What one `--shards` value means: a shard set's path and its weight.

- Short: `PATH` or `PATH:WEIGHT`. A weight is split off the last `:` when what follows is a number
  (`gs://b/web:0.7`); any other `:` belongs to the path (`gs://b/run:v2`, `/data/2026-01-01T10:00/set`).
  When a local value could be read both ways, what exists decides: a value that exists as written is
  that path (`runs/2026-12-01T10:30` names that directory even though `30` is a number); where the
  path before the `:WEIGHT` exists too, both readings exist and the value is refused, with both
  explicit spellings shown. (A gs:// value is read from its text alone: looking would cost a request
  per value; `path=` names such a set.) When the part before that `:WEIGHT` holds a `:` itself (`/data/a:b:0.5`), the value
  is refused the same way.
- Explicit: `path=PATH` or `weight=WEIGHT,path=PATH`. Everything after `path=` is the path, verbatim
  (colons and commas included): the way to name `/data/set:2` itself (`path=/data/set:2`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence

from lmshards.plumbing import fs
from lmshards.plumbing.errors import LmshardsError

PATH_KEY = "path="
WEIGHT_KEY = "weight="
# What a weight after the last colon looks like (inf and nan too: refused as weights, never a path).
_NUMBER_RE = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$|^[+-]?(?:inf|nan)$", re.I)
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclasses.dataclass(frozen=True)
class ShardSource:
    """One --shards value: a shard set directory (local or gs://) and its weight, None when not given."""

    path: str
    weight: float | None = None


def parse_shards_flag(text: str) -> ShardSource:
    """`PATH`, `PATH:WEIGHT`, `path=PATH` or `weight=WEIGHT,path=PATH` -> ShardSource (see the module doc).

    Raises:
      LmshardsError: an empty path, a weight that is not a positive finite number, or an ambiguous
        short value; the message shows how to write it.
    """
    if text.startswith((PATH_KEY, WEIGHT_KEY)):
        return _explicit(text)
    head, sep, tail = text.rpartition(":")
    if not sep or not head or not _NUMBER_RE.match(tail):
        return ShardSource(_checked_path(text, text))
    ambiguous = ":" in _SCHEME_RE.sub("", head)
    if not ambiguous and not fs.is_remote(text) and fs.exists(text):
        if not fs.exists(head):
            return ShardSource(text)
        ambiguous = True
    if ambiguous:
        raise LmshardsError(
            f"--shards {text!r} can be read two ways: the set {head!r} with weight {tail}, or the set "
            f"{text!r} without a weight. Write --shards weight={tail},path={head} or --shards path={text}."
        )
    return ShardSource(_checked_path(head, text), _weight(tail, text, head))


def _explicit(text: str) -> ShardSource:
    weight = None
    rest = text
    if rest.startswith(WEIGHT_KEY):
        value, comma, rest = rest[len(WEIGHT_KEY) :].partition(",")
        if not comma or not rest.startswith(PATH_KEY):
            raise LmshardsError(
                f"--shards {text!r}: after weight=W comes ',path=PATH', e.g. weight={value or 0.5},path=gs://b/shards."
            )
        weight = value
    path = rest[len(PATH_KEY) :]
    _checked_path(path, text)
    return ShardSource(path, None if weight is None else _weight(weight, text, path))


def _checked_path(path: str, text: str) -> str:
    if not path.strip():
        raise LmshardsError(f"--shards {text!r} names no path; give a shard set directory.")
    return path


def _weight(value: str, text: str, path: str) -> float:
    try:
        weight = float(value)
    except ValueError:
        weight = math.nan
    if not (math.isfinite(weight) and weight > 0):
        raise LmshardsError(
            f"--shards {text!r}: the weight {value} must be a positive number, e.g. {path}:0.5."
        )
    return weight


def source_weights(sources: Sequence[ShardSource]) -> tuple[float, ...]:
    """The weights as given, or 1.0 each when none is given.

    Raises:
      LmshardsError: some sets have a weight and others not.
    """
    missing = [s.path for s in sources if s.weight is None]
    if len(missing) == len(sources):
        return tuple(1.0 for _ in sources)
    if missing:
        raise LmshardsError(
            f"--shards {missing[0]!r} has no weight but other --shards have one; give every set a weight "
            f"(e.g. {missing[0]}:0.5) or none (equal weights)."
        )
    return tuple(s.weight for s in sources if s.weight is not None)
