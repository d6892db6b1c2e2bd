"""The one convention every `lmshards` subcommand follows, on both sides of the contract.

- User errors: `lmshards <command>: error: <message>` on stderr, exit 2 (argparse's own errors too).
- `--help` shows every default; required flags are listed as required.
- Logs go to stderr; stdout carries only the command's result (a summary, JSON, ...).
- An unknown flag gets a typo hint drawn from every flag the command knows.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn

from plumbing.errors import LmshardsError, disk_error_message

EXIT_OK = 0
EXIT_FAILURE = 1  # the run failed on the machine's side (disk full, lost permission, ...)
EXIT_USAGE = 2  # the user's input is wrong; the message says what to change
EXIT_PREEMPTED = (
    75  # EX_TEMPFAIL: stopped by SIGTERM/SIGINT after a checkpoint; rerunning the command resumes
)
EXIT_INTERRUPTED = 130
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def command_prog(command: str) -> str:
    """'lmshards <command>'; 'lmshards' for the top-level command ("")."""
    return f"lmshards {command}" if command else "lmshards"


def error_line(command: str, message: str) -> str:
    return f"{command_prog(command)}: error: {message}"


def print_error(command: str, message: str) -> None:
    print(error_line(command, str(message).rstrip()), file=sys.stderr)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows '(default: X)' after every flag that has a non-empty default, and keeps descriptions as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_ = action.help or ""
        # `is`, not `in`: 0 == False, and a default of 0 is shown like any other.
        unset = any(action.default is value for value in (None, False, argparse.SUPPRESS))
        if "%(default)" in help_ or unset or action.required:
            return help_
        if isinstance(action.default, (list, tuple)) and not action.default:
            return help_
        return super()._get_help_string(action) or help_

    def _format_action_invocation(self, action: argparse.Action) -> str:
        text = super()._format_action_invocation(action)
        return f"{text} (required)" if action.required and action.option_strings else text


class CommandParser(argparse.ArgumentParser):
    """argparse with the project's error line, default display and typo hints.

    extra_flags: flags accepted elsewhere (e.g. Beam's pipeline options) that typo hints may suggest.
    """

    def __init__(
        self,
        command: str = "",
        *,
        extra_flags: Iterable[str] = (),
        prog: str | None = None,
        **kwargs,
    ):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        # A prefix like --overwrit must not silently mean --overwrite.
        kwargs.setdefault("allow_abbrev", False)
        # argparse builds sub-parsers (`lmshards tokenizer train`) with prog= and no command.
        command = command or (prog or "").removeprefix("lmshards ")
        super().__init__(prog=prog or command_prog(command), **kwargs)
        self.command = command
        self.extra_flags = tuple(extra_flags)

    def known_flags(self) -> list[str]:
        ours = [
            opt for action in self._actions for opt in action.option_strings if opt.startswith("--")
        ]
        return ours + [flag for flag in self.extra_flags if flag not in ours]

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:"):
            hints = [typo_hint(arg, self.known_flags()) for arg in message.split(":", 1)[1].split()]
            message += "".join(f"; {hint}" for hint in hints if hint)
        print_error(self.command, f"{message} (see `{self.prog} --help`)")
        sys.exit(EXIT_USAGE)


def typo_hint(arg: str, known: Sequence[str]) -> str:
    """'did you mean --x?' for an unknown flag close to a known one, else ''."""
    name = arg.split("=", 1)[0]
    if not name.startswith("-"):
        return ""
    normalized = "--" + name.lstrip("-").replace("-", "_")
    if normalized in known and normalized != name:
        return f"unknown flag {name!r}; did you mean {normalized!r}?"
    close = difflib.get_close_matches(normalized, known, n=1, cutoff=0.75)
    return f"unknown flag {name!r}; did you mean {close[0]!r}?" if close else ""


def setup_logging(*, verbose: bool = False, packages: Sequence[str] = ()) -> None:
    """Logs on stderr: WARNING for libraries, INFO for our packages (DEBUG with verbose)."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT, stream=sys.stderr, force=True)
    for package in packages:
        logging.getLogger(package).setLevel(logging.DEBUG if verbose else logging.INFO)


def run_command(command: str, body: Callable[[], int | None]) -> int:
    """Runs a subcommand's body; a user error becomes the one error line and exit 2."""
    try:
        return int(body() or EXIT_OK)
    except LmshardsError as e:
        print_error(command, str(e))
        return EXIT_USAGE
    except KeyboardInterrupt:
        print_error(command, "interrupted")
        return EXIT_INTERRUPTED


def run_writing(command: str, output: str, body: Callable[[], int | None]) -> int:
    """Runs the part of a command that writes `output`: a disk error there (full, quota, read-only,
    lost permission) becomes one line naming it and exit 1, not a traceback.

    User errors and bugs propagate (run_command reports the first; a bug keeps its traceback).
    """
    try:
        return int(body() or EXIT_OK)
    except LmshardsError:
        raise
    except Exception as e:
        message = disk_error_message(e, output)
        if message is None:
            raise
        print_error(command, message)
        return EXIT_FAILURE
