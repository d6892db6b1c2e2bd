"""The one convention every `lmshards` subcommand follows, on both sides of the contract.

- User errors: `lmshards <command>: error: <message>` on stderr, exit 2 (argparse's own errors too).
- `--help` shows every default; required flags are listed as required.
- Logs go to stderr; stdout carries only the command's result (a summary, JSON, ...).
- An unknown flag gets a typo hint drawn from every flag the command knows; no flag is ignored.
- `--verbose` (debug logs, and third-party start-up lines) and `--overwrite` (replace an earlier output)
  are switches with the same meaning everywhere; any switch also takes `=true` / `=false`, as launchers
  that pass every parameter as `--name=value` (Dataflow Flex Templates) write them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import logging
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import NoReturn

from lmshards.plumbing import fs, stopping
from lmshards.plumbing.errors import FailedRunError, LmshardsError, disk_error_message
from lmshards.plumbing.flag_types import Number

EXIT_OK = 0
EXIT_FAILURE = 1  # the run failed on the machine's side (disk full, lost permission, ...)
EXIT_USAGE = 2  # the user's input is wrong; the message says what to change
EXIT_PREEMPTED = (
    75  # EX_TEMPFAIL: stopped by SIGTERM/SIGINT after a checkpoint; rerunning the command resumes
)
EXIT_INTERRUPTED = 130
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
VERBOSE_HELP = "debug logs, and the start-up and log lines of TensorFlow and other libraries"
_TRUE_WORDS = ("true", "1", "yes")
_FALSE_WORDS = ("false", "0", "no")


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
        help_ = self._with_default(action)
        if isinstance(action.type, Number):  # every numeric flag states its range
            help_ = f"{help_}; {action.type.describe()}"
        return help_

    def _with_default(self, action: argparse.Action) -> str:
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
    renamed: a flag this command does not take -> the flag to use instead (a renamed flag's new name,
      lmshards' name for run_mlm.py's); the hint names it. A value that starts with the flag is the whole hint.
    """

    def __init__(
        self,
        command: str = "",
        *,
        extra_flags: Iterable[str] = (),
        renamed: dict[str, str] | None = None,
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
        self.renamed = dict(renamed or {})

    def known_flags(self) -> list[str]:
        ours = [
            opt for action in self._actions for opt in action.option_strings if opt.startswith("--")
        ]
        return ours + [flag for flag in self.extra_flags if flag not in ours]

    def switches(self) -> set[str]:
        """The --flags of this parser that take no value (store_true and the like)."""
        return {
            opt
            for action in self._actions
            if action.nargs == 0
            for opt in action.option_strings
            if opt.startswith("--")
        }

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else args
        self.refuse_renamed(args)
        args = normalize_switches(args, self.switches(), command=self.command)
        return super().parse_known_args(args, namespace)

    def renamed_in(self, args: Sequence[str]) -> list[str]:
        """The renamed flags args holds (run_mlm.py's names), once each, in order; none under --help."""
        if {"-h", "--help"} & set(args):
            return []
        own = set(self.known_flags())
        found: list[str] = []
        for arg in args:
            if arg == "--":  # the rest are positional words
                break
            name = arg.split("=", 1)[0]
            if name in self.renamed and name not in own and name not in found:
                found.append(name)
        return found

    def refuse_renamed(self, args: Sequence[str]) -> None:
        """Exits 2 with one hint line per renamed flag in args, before argparse names missing required flags:
        someone pasting a run_mlm.py command line learns every lmshards name at once."""
        found = self.renamed_in(args)
        for name in found:
            print_error(self.command, self._hint(name))
        if found:
            sys.exit(EXIT_USAGE)

    def _hint(self, arg: str) -> str:
        name = arg.split("=", 1)[0]
        if name in self.renamed:
            hint = self.renamed[name]
            return hint if hint.startswith(name) else f"{name} is {hint} in {self.prog}"
        return typo_hint(arg, self.known_flags())

    def reject_unknown(self, unknown: Sequence[str]) -> None:
        """Exits 2 when unknown holds anything: each flag named, with a typo hint over every known flag."""
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:"):
            hints = [self._hint(arg) for arg in message.split(":", 1)[1].split()]
            message += "".join(f"; {hint}" for hint in hints if hint)
        print_error(self.command, f"{message} (see `{self.prog} --help`)")
        sys.exit(EXIT_USAGE)


def normalize_switches(
    args: Sequence[str], switches: Iterable[str], *, command: str = ""
) -> list[str]:
    """args with `--switch=true` written `--switch` and `--switch=false` dropped.

    Exits 2 on another value, e.g. `--overwrite=maybe`.
    """
    switches = set(switches)
    out: list[str] = []
    for position, arg in enumerate(args):
        if arg == "--":  # the rest are positional words
            return out + list(args[position:])
        name, eq, value = arg.partition("=")
        if not eq or name not in switches:
            out.append(arg)
        elif value.strip().lower() in _TRUE_WORDS:
            out.append(name)
        elif value.strip().lower() not in _FALSE_WORDS:
            print_error(
                command,
                f"{name} is a switch; write {name} (or {name}=true / {name}=false), not {arg!r}",
            )
            sys.exit(EXIT_USAGE)
    return out


def add_verbose_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)


def add_overwrite_flag(parser: argparse.ArgumentParser, *, help: str) -> None:
    """--overwrite: replace an earlier output of this command (help says what is replaced and when it is refused)."""
    parser.add_argument("--overwrite", action="store_true", help=help)


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
    # gcsfs logs each failed retry with its traceback, and fsspec's read-ahead each failed read; the
    # command reports the failure in one line.
    for library in ("gcsfs", "fsspec.prefetcher"):
        logging.getLogger(library).setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    for package in packages:
        logging.getLogger(package).setLevel(logging.DEBUG if verbose else logging.INFO)


@dataclasses.dataclass
class Failure:
    """The exit code of a command whose body an error ended (see one_line_errors); EXIT_OK while none has."""

    code: int = EXIT_OK


@contextlib.contextmanager
def one_line_errors(command: str) -> Iterator[Failure]:
    """Ends the block on a user error, a stop or a gs:// failure with its one error line, and records the
    exit code in the Failure it yields; a bug propagates with its traceback.

    A body returns its own code; after the block, the Failure's code is the command's:

        with one_line_errors(COMMAND) as failed, stopping.stop_signals():
            ...
            return EXIT_OK
        return failed.code

    A stop (SIGTERM or SIGINT, lmshards.plumbing.stopping): its output's lease and partial files were removed on
    the way out (lmshards.plumbing.lease.output_lease); one line and exit 130, whatever a library raised meanwhile.
    A user error: exit 2 (a FailedRunError: 1).
    """
    failed = Failure()
    # A stop recorded by an earlier command in this process is not this one's: without this a later
    # command's user error read as "stopped" (exit 130), and `lmshards train`, which keeps its own
    # handlers rather than stop_signals(), never cleared it.
    stopping.forget()
    try:
        yield failed
    except BaseException as e:
        failed.code = _error_exit(command, e)


def _error_exit(command: str, e: BaseException) -> int:
    """Prints e's one line and returns its exit code; raises e again when it is a bug."""
    # Once a stop is asked for, whatever the unwinding raised (Beam wraps the interrupt) is the stop.
    if stopping.requested() is not None or isinstance(e, KeyboardInterrupt):
        print_error(
            command,
            f"stopped by {stopping.signal_name()}; its lease and partial output were removed. "
            "Run the command again to start over.",
        )
        return EXIT_INTERRUPTED
    if isinstance(e, LmshardsError):
        print_error(command, str(e))
        return EXIT_FAILURE if isinstance(e, FailedRunError) else EXIT_USAGE
    # A gs:// request that failed mid-run (network, permissions): one line, not gcsfs' traceback.
    if isinstance(e, Exception) and fs.is_storage_failure(e):
        print_error(command, fs.storage_problem(e))
        return EXIT_USAGE
    raise e


@contextlib.contextmanager
def disk_errors(command: str, output: str) -> Iterator[Failure]:
    """Ends the block that writes `output` on a disk error there (full, quota, read-only, lost permission)
    with one line naming it, and records exit 1 in the Failure it yields, not a traceback.

    User errors and bugs propagate (one_line_errors reports the first; a bug keeps its traceback).
    """
    failed = Failure()
    try:
        yield failed
    except LmshardsError:
        raise
    except Exception as e:
        message = disk_error_message(e, output)
        if message is None:
            raise
        print_error(command, message)
        failed.code = EXIT_FAILURE
