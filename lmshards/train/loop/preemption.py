"""SIGTERM and SIGINT during `lmshards train`: a flag the training loop checks at every step boundary.

Without TensorFlow, so the command line installs it before anything slow starts: a signal at any
moment, start-up included, ends the command with exit 75 (a checkpoint saved when steps were trained
since the last one) instead of killing it, and rerunning the same command resumes.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any, ClassVar

log = logging.getLogger(__name__)


class PreemptionFlag:
    """Set by SIGTERM or SIGINT; the loop finishes the running steps, saves and returns. A second SIGINT stops at once.

    current() is re-entrant: the command line holds the process's flag around the whole command and the
    trainer joins it; a flag used alone (tests, benches) installs its handlers for its own block.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)
    _active: ClassVar[PreemptionFlag | None] = None

    def __init__(self):
        self.raised = False
        self._previous: dict[int, Any] = {}
        self._depth = 0

    @classmethod
    def current(cls) -> PreemptionFlag:
        """The flag installed now, or a new one."""
        return cls._active or cls()

    def __enter__(self) -> PreemptionFlag:
        self._depth += 1
        if self._depth == 1:
            PreemptionFlag._active = self
            if threading.current_thread() is threading.main_thread():
                self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def _handle(self, signum, frame):
        if self.raised and signum == signal.SIGINT:
            raise KeyboardInterrupt
        log.warning(
            "%s: stopping at the next step boundary, then saving a checkpoint (Ctrl-C again stops at once).",
            signal.Signals(signum).name,
        )
        self.raised = True

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0:
            for s, handler in self._previous.items():
                signal.signal(s, handler)
            self._previous = {}
            PreemptionFlag._active = None
