"""SIGTERM and SIGINT for every command: stop, release the output's lease, remove its partial files, one line.

A command's main holds stop_signals() around its body, inside lmshards.plumbing.cli.one_line_errors. A
signal is recorded first (`requested()`), then raised as Stopped (a KeyboardInterrupt) in the main
thread, and logging is silenced, so that what a library logs while it unwinds (Beam's traceback of the
interrupted step) never reaches the user; lmshards.plumbing.lease.output_lease then removes the partial
output and the lease, and one_line_errors prints one line and gives EXIT_INTERRUPTED. Later signals are
ignored until the cleanup is done. Inside deferred() (loading native code) the raise waits for the
block's end, its safe point (`check()`).

A raise can land where Python cannot propagate it: in a garbage-collection callback (JAX's), a finalizer
or a `__del__`, where Python only prints "Exception ignored" and goes on. Such a Stopped is caught by
sys.unraisablehook and delivered again a moment later, where the main thread runs on, so no signal is
lost. `lmshards train` installs its own handlers for its whole command (lmshards.train.loop.preemption:
save a checkpoint, exit 75).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)
_state: dict[str, int | None] = {"signal": None}
# True while a raised Stopped is on its way out; False again when Python swallowed it (see _swallowed).
_raised = [False]
_in_hook = [False]  # True inside the unraisable hook
AGAIN_AFTER_S = 0.01  # a swallowed stop is delivered again this long after (see _deliver_again)
# > 0 inside deferred(): a native library's set-up (`import tensorflow`) that an exception raised in the
# middle of would abort the process instead of stopping it.
_deferring = [0]
_installed = [0]  # > 0 while stop_signals() holds the handlers


class Stopped(KeyboardInterrupt):
    """The command was asked to stop by a signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def requested() -> int | None:
    """The signal that asked this process to stop, or None."""
    return _state["signal"]


def forget() -> None:
    """Forgets a stop an earlier command of this process recorded (a caller of a command's main that goes
    on after one was stopped, a test run): a signal stops the command it arrived in, not the next one."""
    _state["signal"] = None
    _raised[0] = False


def signal_name() -> str:
    signum = requested()
    return signal.Signals(signum).name if signum is not None else "SIGINT"


def _handle(signum: int, frame: Any) -> None:
    if _state["signal"] is None:
        _state["signal"] = signum
        logging.disable(
            logging.CRITICAL
        )  # a library's traceback of the interrupted work is noise now
        threading.excepthook = lambda args: None  # and so is a worker thread's
    if _in_hook[0]:  # a raise here would be swallowed too: deliver it again once the hook is done
        _deliver_again()
    elif not _deferring[0]:
        _raise_once()


def _raise_once() -> None:
    """Raises Stopped for the recorded signal unless one is already on its way out (the cleanup runs)."""
    signum = _state["signal"]
    if signum is None or _raised[0]:
        return
    _raised[0] = True
    raise Stopped(signum)


def check() -> None:
    """A safe point: raises Stopped if a signal asked to stop and its Stopped was not raised yet."""
    if _installed[0] and not _deferring[0]:
        _raise_once()


def _swallowed(previous: Any) -> Any:
    """An unraisable hook: a Stopped that Python could not propagate (raised inside a gc callback, a
    finalizer, a `__del__`) is delivered again, to land where it can, instead of printed and lost."""

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, Stopped):
            previous(unraisable)
            return
        _in_hook[0] = True
        try:
            _raised[0] = False
            _deliver_again()
        finally:
            _in_hook[0] = False

    return hook


def _deliver_again() -> None:
    """Delivers the recorded stop again in AGAIN_AFTER_S, through SIGALRM (_handle_again): by then the main
    thread has left the hook (it goes on where it was), and a raise lands where it can propagate."""
    signal.setitimer(signal.ITIMER_REAL, AGAIN_AFTER_S)


def _handle_again(signum: int, frame: Any) -> None:
    if _state["signal"] is not None:
        _handle(_state["signal"], frame)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A signal inside the block stops the command when the block ends, not in its middle."""
    _deferring[0] += 1
    try:
        yield
    finally:
        _deferring[0] -= 1
    check()


def ignore_signals() -> None:
    """Ignores SIGTERM and SIGINT from now on: for a command-line process whose command has ended, so that
    a signal while the interpreter shuts down (joining a library's threads) never turns a finished run,
    its output whole and its result printed, into one killed by the signal."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Turns SIGTERM and SIGINT into Stopped in the main thread while the block runs (elsewhere: nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    forget()
    hook = threading.excepthook
    unraisable_hook = sys.unraisablehook
    sys.unraisablehook = _swallowed(unraisable_hook)
    previous = {s: signal.signal(s, _handle) for s in SIGNALS}
    previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, _handle_again)
    _installed[0] += 1
    try:
        yield
    finally:
        _installed[0] -= 1
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, handler in previous.items():
            signal.signal(s, handler)
        sys.unraisablehook = unraisable_hook
        if _state["signal"] is not None:  # what ran next in this process logs again
            logging.disable(logging.NOTSET)
            threading.excepthook = hook
