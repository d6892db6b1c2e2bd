"""The `lmshards` command: dispatches each subcommand to its side, imported lazily.

Dataflow workers have no training stack and the trainer has no Beam, so a subcommand
imports only the package that serves it.
"""

from __future__ import annotations

import importlib
import sys
from typing import Sequence

from schemas.version import __version__

# subcommand -> (module with `main(argv) -> int`, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "tokenizer": ("preprocess.tokenizer_cli", "train or inspect a tokenizer"),
    "dataset": ("preprocess.dataset_cli", "export a Hugging Face dataset to Parquet/JSONL shards"),
    "preprocess": ("preprocess.cli", "Beam pipeline: text corpus -> balanced TFRecord shards + manifest"),
    "inspect": ("preprocess.inspect_cli", "summarize (and --verify) a preprocess output"),
    "train": ("train.cli", "train a masked LM on preprocess shards"),
    "export": ("train.export_cli", "export a training run to a Hugging Face model directory"),
    "fill-mask": ("train.fill_mask_cli", "run transformers' fill-mask on an exported model"),
    "demo": ("lmshards.demo", "the whole story on the bundled sample corpus"),
}


def usage() -> str:
    width = max(len(name) for name in SUBCOMMANDS)
    lines = [f"lmshards {__version__}", "", "usage: lmshards COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    lines += ["", "Run `lmshards COMMAND --help` for a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0
    if args[0] == "--version":
        print(__version__)
        return 0
    command, rest = args[0], args[1:]
    if command not in SUBCOMMANDS:
        print(f"lmshards: unknown command {command!r}.\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[command][0])
    return int(module.main(rest) or 0)
