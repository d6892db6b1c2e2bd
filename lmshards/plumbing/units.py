"""Units every command prints and parses: durations and byte sizes.

Sizes follow one convention: a unit means what its standard says (MB = 10^6 bytes, MiB = 2^20 bytes;
K, M, G and T alone are decimal too), and every figure a command prints (progress, throughput, totals)
is in decimal MB. A size flag accepts a value with any unit (`256MiB`, `1.5GB`); a bare number is read
in the unit the flag's name and help state (bytes for `--max_bytes`, MiB for `--target_shard_mb`).
"""

from __future__ import annotations

import argparse
import re

KB = 1000
MB = 1000**2
GB = 1000**3
KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30

SIZE_UNITS = {
    "B": 1,
    "KB": KB,
    "MB": MB,
    "GB": GB,
    "TB": 1000**4,
    "KIB": KIB,
    "MIB": MIB,
    "GIB": GIB,
    "TIB": 1 << 40,
    "K": KB,
    "M": MB,
    "G": GB,
    "T": 1000**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str, *, bare_unit: str | None = None) -> int:
    """Bytes in a size: '256MiB' -> 268435456, '1.5GB' -> 1500000000, '64' -> 64 MiB if bare_unit='MiB'.

    Raises:
        ValueError: `text` is not a number with a known unit (or a bare number when bare_unit is
            None); the message shows how to write it.
    """
    match = _SIZE_RE.match(text)
    unit = (match[2] or bare_unit or "") if match else ""
    if match is None or unit.upper() not in SIZE_UNITS:
        raise ValueError(
            f"{text!r} is not a size with a unit: write e.g. 256MiB, 500MB or 2GB "
            "(MB = 10^6 bytes, MiB = 2^20 bytes)"
        )
    return int(float(match[1]) * SIZE_UNITS[unit.upper()])


def format_size(nbytes: int) -> str:
    """A byte count as the shortest exact spelling with a binary or decimal unit: 268435456 -> '256MiB'."""
    for unit in ("TiB", "GiB", "MiB", "KiB", "TB", "GB", "MB", "KB"):
        factor = SIZE_UNITS[unit.upper()]
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return f"{nbytes}B"


def megabytes(nbytes: float) -> float:
    """Decimal megabytes, the unit of every printed figure."""
    return nbytes / MB


def format_duration(seconds: float) -> str:
    """'0.4 s', '42 s', '3 min 05 s', '2 h 07 min': two units at most; tenths below 10 s."""
    if seconds < 9.95:
        return f"{max(seconds, 0.0):.1f} s"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


ETA_UNKNOWN = "unknown"


def format_eta(left: float, rate: float) -> str:
    """How long `left` units take at `rate` units per second; ETA_UNKNOWN while the rate is 0."""
    if left <= 0:
        return format_duration(0)
    return format_duration(left / rate) if rate > 0 else ETA_UNKNOWN


class SizeFlag:
    """An argparse `type` for a size flag: the value in `bare_unit` units ('500MB' for a MiB flag -> 476.8...).

    A bare number is already in `bare_unit`, so old values of a flag keep their meaning. A flag in
    bytes ('B') gets a whole number of bytes.
    """

    def __init__(self, bare_unit: str):
        self.bare_unit = bare_unit
        self.__name__ = f"size in {bare_unit}"  # argparse names the type in its error message

    def __call__(self, text: str) -> float:
        try:
            nbytes = parse_size(text, bare_unit=self.bare_unit)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return nbytes if self.bare_unit == "B" else nbytes / SIZE_UNITS[self.bare_unit.upper()]


def size_flag(bare_unit: str) -> SizeFlag:
    """The argparse `type` of a flag whose bare numbers are in `bare_unit` (see SizeFlag)."""
    return SizeFlag(bare_unit)
