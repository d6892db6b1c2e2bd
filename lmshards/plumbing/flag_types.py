"""Numeric flags: one range per flag, checked in one place before any work starts.

A `Number` is both the argparse `type` of a flag and the check a config runs on a value it was given
in code, so a flag's range is written once. A value outside it (negative, NaN, infinite, too large,
not a number) ends the command with one line naming the flag, the value and the range (exit 2), and
`--help` shows every range. To add a numeric flag: `parser.add_argument("--x", type=whole(1, 100))`,
or one of the named ranges below; call `.check("--x", value)` where a config is built without argparse.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from lmshards.plumbing.errors import LmshardsError

# Counts of steps, records, files, ...: large enough for any run, small enough for every int32 consumer.
MAX_COUNT = 2**31 - 1
# Seeds reach numpy (< 2^32), TensorFlow and JAX (int32 keys): one range that all of them take.
MAX_SEED = 2**31 - 1


class FlagRangeError(LmshardsError):
    """A numeric flag's value is outside its range, or not a number."""


def _shown(bound: float) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


@dataclasses.dataclass(frozen=True)
class Number:
    """A whole (integral) or real number within [low, high]; an open end excludes its bound.

    Real numbers are always finite. Whole numbers may be written as a float with no fraction
    (`1e3`), so `--seed 1e20` is told it is out of range rather than not a number.
    words: values taken as they are (e.g. "auto").
    """

    integral: bool
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    words: tuple[str, ...] = ()

    @property
    def __name__(self) -> str:  # argparse names a type by it
        return self.describe()

    def describe(self) -> str:
        """'a whole number in [1, 2147483647]', 'a finite number in (0, 1)', 'a finite number >= 0'."""
        what = "a whole number" if self.integral else "a finite number"
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            text = f"{what} in {left}{_shown(self.low)}, {_shown(self.high)}{right}"
        elif self.low is not None:
            text = f"{what} {'>' if self.low_open else '>='} {_shown(self.low)}"
        elif self.high is not None:
            text = f"{what} {'<' if self.high_open else '<='} {_shown(self.high)}"
        else:
            text = what
        return " or ".join([*(repr(w) for w in self.words), text])

    def contains(self, value: float) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if not math.isfinite(value) or (self.integral and value != int(value)):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def parse(self, text: str) -> float | int | str | None:
        """The value text spells, or None when it is not in range."""
        text = text.strip()
        if text in self.words:
            return text
        try:
            value: float = int(text) if self.integral else float(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                return None
        if not self.contains(value):
            return None
        return int(value) if self.integral else float(value)

    def __call__(self, text: str) -> float | int | str:
        value = self.parse(text)
        if value is None:
            raise argparse.ArgumentTypeError(f"{text!r} is not {self.describe()}")
        return value

    def check(self, flag: str, value: float | str | None) -> None:
        """Raises FlagRangeError naming flag, value and range; None (an unset flag) passes."""
        if value is None or (isinstance(value, str) and value in self.words):
            return
        if not self.contains(value):  # type: ignore[arg-type]
            raise FlagRangeError(f"{flag} {value!r} is out of range: it must be {self.describe()}.")


def whole(
    low: int | None = None, high: int | None = MAX_COUNT, *, words: tuple[str, ...] = ()
) -> Number:
    """A whole number in [low, high]."""
    return Number(True, low, high, words=words)


def real(
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> Number:
    """A finite number between low and high (closed ends unless told otherwise)."""
    return Number(False, low, high, low_open=low_open, high_open=high_open)


COUNT = whole(1)  # steps, batches, files, threads, ...: at least 1
NON_NEGATIVE_COUNT = whole(0)
SEED = whole(0, MAX_SEED)
POSITIVE = real(0.0, low_open=True)  # finite and > 0
NON_NEGATIVE = real(0.0)  # finite and >= 0
FRACTION_BELOW_ONE = real(0.0, 1.0, high_open=True)  # [0, 1)
PROBABILITY = real(0.0, 1.0, low_open=True, high_open=True)  # (0, 1)


def check_ranges(values: Any, ranges: Mapping[str, Number]) -> None:
    """Raises FlagRangeError for the first attribute of values outside its range (flag `--{name}`)."""
    for name, number in ranges.items():
        number.check(f"--{name}", getattr(values, name))
