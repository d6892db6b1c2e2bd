"""Pacing and wording of progress lines, the same for every command."""

from __future__ import annotations

import time
from collections.abc import Callable

from lmshards.plumbing.units import format_eta, megabytes

# How often long work logs a progress line, unless a command says otherwise.
PROGRESS_EVERY_S = 10.0


class Pacer:
    """due() is True at most once per `every_s` seconds: paces the progress lines of long work."""

    def __init__(
        self, every_s: float = PROGRESS_EVERY_S, *, clock: Callable[[], float] = time.monotonic
    ):
        self.every_s = every_s
        self._clock = clock
        self.started = self._last = clock()

    def due(self) -> bool:
        now = self._clock()
        if now - self._last < self.every_s:
            return False
        self._last = now
        return True

    def elapsed(self) -> float:
        """Seconds since the pacer was made."""
        return self._clock() - self.started


def bytes_progress(*, done: int, total: int, seconds: float) -> str:
    """'30.0 of 120.0 MB (25%), 3.00 MB/s, ETA 30 s': how far a byte count is, its rate and what is left."""
    rate = done / seconds if seconds > 0 else 0.0
    percent = 100.0 * done / total if total else 100.0
    return (
        f"{megabytes(done):,.1f} of {megabytes(total):,.1f} MB ({percent:.0f}%), "
        f"{megabytes(rate):,.2f} MB/s, ETA {format_eta(total - done, rate)}"
    )
