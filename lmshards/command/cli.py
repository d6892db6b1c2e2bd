"""The `lmshards` command: dispatches each subcommand to its side, imported lazily.

Dataflow workers have no training stack and the trainer has no Beam, so a subcommand
imports only the package that serves it.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple

from lmshards.plumbing import stopping
from lmshards.plumbing.cli import EXIT_OK, EXIT_USAGE, print_error
from lmshards.plumbing.memory import freeze_imports_here, frozen_imports
from lmshards.schemas.version import __version__

Main = Callable[[list[str]], int | None]  # argv after the command's words -> exit code


class Subcommand(NamedTuple):
    main: Main  # imports the side that serves the command only when called
    help: str


# Each function imports its command's module when it runs, never when this module loads: importing
# the CLI must not import TensorFlow or Beam. Written as plain imports so that tools can follow them;
# frozen_imports keeps the garbage collector off them (Beam's import: 0.35 s less).
def _tokenizer_train(argv: list[str]) -> int | None:
    with frozen_imports():
        from lmshards.corpus_tools.tokenizer.cli import train_main

    return train_main(argv)


def _tokenizer_inspect(argv: list[str]) -> int | None:
    with frozen_imports():
        from lmshards.corpus_tools.tokenizer.cli import inspect_main

    return inspect_main(argv)


def _dataset_export(argv: list[str]) -> int | None:
    with frozen_imports():
        from lmshards.corpus_tools.dataset.cli import main

    return main(argv)


def _preprocess(argv: list[str]) -> int | None:
    with frozen_imports():
        from lmshards.preprocess.cli import main

    return main(argv)


def _repack(argv: list[str]) -> int | None:
    with frozen_imports():
        from lmshards.preprocess.repack_cli import main

    return main(argv)


def _inspect(argv: list[str]) -> int | None:
    with frozen_imports():
        from lmshards.preprocess.inspect_cli import main

    return main(argv)


def _stats(argv: list[str]) -> int | None:
    with frozen_imports():
        from lmshards.corpus_tools.stats.cli import main

    return main(argv)


def _train(argv: list[str]) -> int | None:
    with frozen_imports():
        from lmshards.train.commands.cli import main

    return main(argv)


def _preview(argv: list[str]) -> int | None:
    with frozen_imports():
        from lmshards.train.commands.preview_cli import main

    return main(argv)


def _export(argv: list[str]) -> int | None:
    with frozen_imports():
        from lmshards.train.commands.export_cli import main

    return main(argv)


def _fill_mask(argv: list[str]) -> int | None:
    with frozen_imports():
        from lmshards.train.commands.fill_mask_cli import main

    return main(argv)


def _env(argv: list[str]) -> int | None:
    with frozen_imports():
        from lmshards.train.commands.env_cli import main

    return main(argv)


def _report(argv: list[str]) -> int | None:
    with frozen_imports():
        from lmshards.command.report import main

    return main(argv)


def _demo(argv: list[str]) -> int | None:
    with frozen_imports():
        from lmshards.command.demo import main

    return main(argv)


# command (one or two words) -> how it runs. Commands sharing a first word form a group (`lmshards tokenizer`).
SUBCOMMANDS: dict[str, Subcommand] = {
    "tokenizer train": Subcommand(_tokenizer_train, "train a Unigram, BPE or WordPiece tokenizer"),
    "tokenizer inspect": Subcommand(
        _tokenizer_inspect, "show how a tokenizer splits text or a corpus sample"
    ),
    "dataset export": Subcommand(
        _dataset_export, "export a Hugging Face dataset to Parquet/JSONL shards"
    ),
    "preprocess": Subcommand(
        _preprocess, "Beam pipeline: text corpus -> balanced TFRecord shards + manifest"
    ),
    "repack": Subcommand(
        _repack, "a token store -> new shard set (seq_len, shards, split, seed) without tokenizing"
    ),
    "inspect": Subcommand(_inspect, "summarize (and --verify) a preprocess output"),
    "stats": Subcommand(
        _stats, "corpus statistics of a shard set (tensorflow-transform analyzers, Beam)"
    ),
    "train": Subcommand(_train, "train a masked LM on preprocess shards"),
    "preview": Subcommand(
        _preview, "show what a masking recipe selects in the first training sequences"
    ),
    "export": Subcommand(_export, "export a training run to a Hugging Face model directory"),
    "fill-mask": Subcommand(_fill_mask, "run transformers' fill-mask on an exported model"),
    "env": Subcommand(
        _env,
        "versions, whether the backend loads, accelerators, TPU signals and what `auto` chooses here",
    ),
    "report": Subcommand(
        _report, "one self-contained HTML page of a training run's charts and numbers"
    ),
    "demo": Subcommand(_demo, "the whole story on the bundled sample corpus"),
}
_HELP_FLAGS = ("-h", "--help")


def usage(group: str = "") -> str:
    """The command list (of one group's commands, when group is given)."""
    names = [name for name in SUBCOMMANDS if not group or name.split()[0] == group]
    width = max(len(name) for name in names)
    prog = f"lmshards {group}".strip()
    lines = [f"lmshards {__version__}", "", f"usage: {prog} COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {SUBCOMMANDS[name].help}" for name in names]
    lines += ["", "Run `lmshards COMMAND --help` for a command's options."]
    return "\n".join(lines)


def find_command(args: Sequence[str]) -> tuple[str, list[str]] | None:
    """(command, its arguments) for the longest registered command that args start with, or None."""
    for words in (2, 1):
        name = " ".join(args[:words])
        if len(args) >= words and name in SUBCOMMANDS:
            return name, list(args[words:])
    return None


def unknown_command_message(args: Sequence[str]) -> str:
    """'unknown command ...' with the closest registered command, if one is close."""
    groups = {name.split()[0] for name in SUBCOMMANDS if " " in name}
    given = " ".join(args[:2]) if args[0] in groups and len(args) > 1 else args[0]
    close = difflib.get_close_matches(given, list(SUBCOMMANDS), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown command {given!r}{hint} (see `lmshards --help`)"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in _HELP_FLAGS:
        print(usage())
        return EXIT_OK
    if args[0] == "--version":
        print(__version__)
        return EXIT_OK
    found = find_command(args)
    if found is None and any(name.split()[0] == args[0] for name in SUBCOMMANDS):
        if len(args) == 1 or args[1] in _HELP_FLAGS:
            print(usage(args[0]))
            return EXIT_OK
    if found is None:
        print_error("", unknown_command_message(args))
        return EXIT_USAGE
    command, rest = found
    if argv is None:  # this process is the command line: what its imports create lives to its end
        freeze_imports_here()
    code = int(SUBCOMMANDS[command].main(rest) or EXIT_OK)
    if stopping.requested() is not None:
        # Stopped by a signal: threads a library started for the interrupted work (Beam's) may never
        # end, and the command has said its one line; nothing is left to wait for.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if argv is None:  # this process is the command line, and its command has ended
        stopping.ignore_signals()
    return code
