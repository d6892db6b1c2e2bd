"""The `lmshards` command: dispatches each subcommand to its side, imported lazily.

Dataflow workers have no training stack and the trainer has no Beam, so a subcommand
imports only the package that serves it.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Sequence
from typing import NamedTuple

from plumbing.cli import EXIT_OK, EXIT_USAGE, print_error
from schemas.version import __version__


class Subcommand(NamedTuple):
    module: str  # holds `function(argv) -> exit code`, argv being the arguments after the command's words
    help: str
    function: str = "main"


# command (one or two words) -> where it lives. Commands sharing a first word form a group (`lmshards tokenizer`).
SUBCOMMANDS: dict[str, Subcommand] = {
    "tokenizer train": Subcommand(
        "corpus_tools.tokenizer.cli", "train a Unigram, BPE or WordPiece tokenizer", "train_main"
    ),
    "tokenizer inspect": Subcommand(
        "corpus_tools.tokenizer.cli",
        "show how a tokenizer splits text or a corpus sample",
        "inspect_main",
    ),
    "dataset export": Subcommand(
        "corpus_tools.dataset.cli", "export a Hugging Face dataset to Parquet/JSONL shards"
    ),
    "preprocess": Subcommand(
        "preprocess.cli", "Beam pipeline: text corpus -> balanced TFRecord shards + manifest"
    ),
    "repack": Subcommand(
        "preprocess.repack_cli",
        "a token store -> new shard set (seq_len, shards, split, seed) without tokenizing",
    ),
    "inspect": Subcommand("preprocess.inspect_cli", "summarize (and --verify) a preprocess output"),
    "stats": Subcommand(
        "corpus_tools.stats.cli",
        "corpus statistics of a shard set (tensorflow-transform analyzers, Beam)",
    ),
    "train": Subcommand("train.cli", "train a masked LM on preprocess shards"),
    "preview": Subcommand(
        "train.preview_cli", "show what a masking recipe selects in the first training sequences"
    ),
    "export": Subcommand(
        "train.export_cli", "export a training run to a Hugging Face model directory"
    ),
    "fill-mask": Subcommand(
        "train.fill_mask_cli", "run transformers' fill-mask on an exported model"
    ),
    "env": Subcommand(
        "train.env_cli",
        "versions, accelerators, TPU signals and what `auto` chooses on this machine",
    ),
    "demo": Subcommand("lmshards.demo", "the whole story on the bundled sample corpus"),
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
    entry = SUBCOMMANDS[command]
    function = getattr(importlib.import_module(entry.module), entry.function)
    return int(function(rest) or EXIT_OK)
