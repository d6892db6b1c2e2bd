"""The commands the README and docs/ show are commands that work.

Every `lmshards ...` command in a ```bash block of README.md and docs/*.md parses with its real
command's parser (every flag exists, every value is accepted), in-process and without running it. A command
on gs:// or marked with NOT_RUN_MARKER is only checked for its paths; what runs behind gcloud (on a TPU VM)
is not read. Every relative link reaches its file and heading. In each block, a path
a command reads must be the one an earlier command wrote (never a directory above or below it). The README's
"Your own corpus in five commands" runs as written, end to end, on the bundled corpus.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lmshards.command.cli import SUBCOMMANDS, find_command
from lmshards.plumbing.errors import LmshardsError
from lmshards.schemas.manifest import read_manifest
from tests.conftest import REPO

DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# A trailing comment that exempts a command from parsing: for a line that cannot run here (network, a TPU VM).
NOT_RUN_MARKER = "# not run by the docs test"
REMOTE = ("gs://", "s3://", "gcloud")
FIVE_COMMANDS = "## Your own corpus in five commands"
FIVE_COMMAND_NAMES = ["tokenizer train", "preprocess", "inspect", "train", "export", "fill-mask"]
# Read from inside an earlier output without being a collision: the tokenizer copy, the token store, a
# checkpoint, the stats directory.
INSIDE_AN_OUTPUT = ("tokenizer", "tokens", "checkpoints", "stats")
# The positional argument each command reads (its first word after the command).
READS_POSITIONAL = {
    "inspect",
    "stats",
    "preview",
    "export",
    "fill-mask",
    "report",
    "tokenizer inspect",
}
READ_FLAGS = ("--shards", "--tokenizer", "--tokens", "--checkpoint")
SEPARATORS = (";", "&&", "||", "|", "&")
KEYWORDS = ("until", "while", "if", "then", "do", "!")
_FENCE = re.compile(r"^```(\w*)\s*$")
_WEIGHT = re.compile(r":\d+(\.\d+)?$")
PREDICTION_LINE = re.compile(r"^\s*(\d\.\d{4})\s+\d+\s", re.MULTILINE)


@dataclass(frozen=True)
class DocCommand:
    file: str
    line: int  # where the command starts in the file, 1-based
    block: int  # the bash block it belongs to, counted over the file
    words: tuple[str, ...]  # `lmshards` and its arguments, as the shell splits them
    marked: bool  # carries NOT_RUN_MARKER

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}: {shlex.join(self.words)}"

    @property
    def remote(self) -> bool:
        return any(word.startswith(REMOTE) or word in REMOTE for word in self.words)


def bash_blocks(text: str) -> Iterator[tuple[int, list[str]]]:
    """(first line number, lines) of every ```bash block."""
    lines = text.splitlines()
    inside: str | None = None
    start = 0
    block: list[str] = []
    for number, line in enumerate(lines, 1):
        fence = _FENCE.match(line.strip())
        if fence and inside is None:
            inside, start, block = fence.group(1), number + 1, []
        elif line.strip() == "```" and inside is not None:
            if inside == "bash":
                yield start, block
            inside = None
        elif inside is not None:
            block.append(line)


def _complete(line: str) -> bool:
    try:
        shell_words(line)
    except ValueError:  # a quote still open: the string goes on on the next line
        return False
    return True


def shell_lines(start: int, lines: list[str]) -> Iterator[tuple[int, str]]:
    """(line number, logical line): backslash continuations and multi-line quotes joined."""
    pending, first = "", start
    for number, line in enumerate(lines, start):
        if not pending:
            first = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        if not _complete(pending + line):
            pending += line + "\n"
            continue
        yield first, pending + line
        pending = ""


def shell_words(line: str) -> list[str]:
    """The words of a shell line as bash splits them, with `;`, `&&` and `||` words of their own."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    return list(lexer)


def lmshards_commands(words: list[str]) -> Iterator[list[str]]:
    """The `lmshards ...` commands of one shell line, split at ;, && and ||, leading keywords
    (`until`, `if`, ...) and VAR=value assignments dropped."""
    command: list[str] = []
    for word in [*words, ";"]:
        if word not in SEPARATORS:
            command.append(word)
            continue
        while command and (command[0] in KEYWORDS or re.fullmatch(r"[A-Z_]+=\S*", command[0])):
            command.pop(0)
        if command and command[0] == "lmshards":
            yield command
        command = []


def doc_commands() -> list[DocCommand]:
    found = []
    for path in DOC_FILES:
        name = str(path.relative_to(REPO))
        for block, (start, lines) in enumerate(bash_blocks(path.read_text(encoding="utf-8"))):
            for number, line in shell_lines(start, lines):
                marked = NOT_RUN_MARKER in line
                words = shell_words(line)
                if words and words[0] in REMOTE:  # the command runs on another machine
                    continue
                for command in lmshards_commands(words):
                    found.append(DocCommand(name, number, block, tuple(command), marked))
    return found


# --- parsing each command with its real parser, without running it -----------------------------------


def _parse_preprocess(argv: list[str]) -> None:
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    from lmshards.plumbing.cli import normalize_switches
    from lmshards.preprocess import cli, runners
    from lmshards.preprocess.pipeline_options import config_from_options

    parser = cli.build_parser()
    argv = normalize_switches(argv, parser.switches(), command=cli.COMMAND)
    _, others = parser.parse_known_args(argv)
    runners.resolve_runner(
        PipelineOptions(argv).view_as(StandardOptions).runner or runners.FNAPI_RUNNER
    )
    cli.check_flags(parser, others)
    config_from_options(PipelineOptions(argv))


def _parse_repack(argv: list[str]) -> None:
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    from lmshards.preprocess import repack_cli, runners
    from lmshards.preprocess.repack import RepackConfig

    parser = repack_cli.build_parser()
    args, others = parser.parse_known_args(argv)
    runners.resolve_runner(
        PipelineOptions(others).view_as(StandardOptions).runner or runners.FNAPI_RUNNER
    )
    repack_cli.check_other_beam_command_flags(parser, others)
    RepackConfig(**{k: v for k, v in vars(args).items() if k != "verbose"})


def _parse_stats(argv: list[str]) -> None:
    from lmshards.corpus_tools.stats import cli

    cli.parse_args(cli.build_parser(), argv)


def _with_parser(module: str, builder: str) -> Callable[[list[str]], None]:
    def parse(argv: list[str]) -> None:
        getattr(__import__(module, fromlist=[builder]), builder)().parse_args(argv)

    return parse


def _with_function(module: str, function: str) -> Callable[[list[str]], None]:
    def parse(argv: list[str]) -> None:
        getattr(__import__(module, fromlist=[function]), function)(argv)

    return parse


PARSERS: dict[str, Callable[[list[str]], None]] = {
    "tokenizer train": _with_parser("lmshards.corpus_tools.tokenizer.cli", "train_parser"),
    "tokenizer inspect": _with_parser("lmshards.corpus_tools.tokenizer.cli", "inspect_parser"),
    "dataset export": _with_parser("lmshards.corpus_tools.dataset.cli", "build_parser"),
    "preprocess": _parse_preprocess,
    "repack": _parse_repack,
    "inspect": _with_parser("lmshards.preprocess.inspect_cli", "build_parser"),
    "stats": _parse_stats,
    "train": _with_function("lmshards.train.commands.cli", "parse_config"),
    "preview": _with_parser("lmshards.train.commands.preview_cli", "build_parser"),
    "export": _with_function("lmshards.train.commands.export_cli", "parse_args"),
    "fill-mask": _with_function("lmshards.train.commands.fill_mask_cli", "parse_args"),
    "env": _with_parser("lmshards.train.commands.env_cli", "build_parser"),
    "report": _with_parser("lmshards.command.report", "build_parser"),
    "demo": _with_function("lmshards.command.demo", "parse_args"),
}
COMMANDS = doc_commands()
LOCAL = [c for c in COMMANDS if not c.remote and not c.marked]


def test_every_subcommand_has_a_parse_check():
    assert set(PARSERS) == set(SUBCOMMANDS)


def test_the_docs_show_commands_and_mark_few():
    assert len(LOCAL) >= 30, [c.where for c in LOCAL]
    marked = [c.where for c in COMMANDS if c.marked]
    assert len(marked) <= 3, marked
    for command in COMMANDS:
        assert find_command(command.words[1:]) is not None, f"unknown command: {command.where}"


@pytest.mark.parametrize("command", LOCAL, ids=lambda c: f"{c.file}:{c.line}")
def test_command_parses_with_its_parser(command: DocCommand, capsys):
    found = find_command(command.words[1:])
    assert found is not None, f"unknown command: {command.where}"
    name, argv = found
    try:
        PARSERS[name](argv)
    except SystemExit as e:
        pytest.fail(f"{command.where}\n  refused (exit {e.code}): {capsys.readouterr().err}")
    except LmshardsError as e:
        pytest.fail(f"{command.where}\n  refused: {e}")


# --- links between the pages ---------------------------------------------------------------------

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lowercased, punctuation dropped, spaces as hyphens."""
    anchors = set()
    inside_fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            inside_fence = not inside_fence
        elif not inside_fence and line.startswith("#"):
            title = line.lstrip("#").strip().replace("`", "").lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("page", DOC_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_reach_a_file_and_heading(page: Path):
    text = page.read_text(encoding="utf-8")
    broken = []
    for target in _LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md":
            if anchor not in heading_anchors(linked.read_text(encoding="utf-8")):
                broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert broken == []


# --- paths: what a command reads is what an earlier one wrote ---------------------------------------


def _reads(words: tuple[str, ...]) -> list[str]:
    found = find_command(words[1:])
    assert found is not None
    name, argv = found
    paths = []
    if name in READS_POSITIONAL and argv and not argv[0].startswith("-"):
        paths.append(argv[0])
    for flag, value in zip(argv, argv[1:]):
        if flag in READ_FLAGS:
            paths.append(_WEIGHT.sub("", value.removeprefix("path=")))
    return [p.rstrip("/") for p in paths]


def _writes(words: tuple[str, ...]) -> list[str]:
    return [v.rstrip("/") for f, v in zip(words, words[1:]) if f == "--output"]


def collisions(commands: list[DocCommand]) -> list[str]:
    """Paths read above or below (not at) a path an earlier command of the same block wrote."""
    problems = []
    written: dict[tuple[str, int], list[str]] = {}
    for command in commands:
        block = (command.file, command.block)
        for read in _reads(command.words):
            for output in written.get(block, []):
                inside = read.startswith(output + "/") and (
                    read[len(output) + 1 :].split("/")[0] not in INSIDE_AN_OUTPUT
                )
                if inside or output.startswith(read + "/"):
                    problems.append(
                        f"{command.where}\n  reads {read}, an earlier command wrote {output}"
                    )
        written.setdefault(block, []).extend(_writes(command.words))
    return problems


def test_collisions_are_found():
    made = [
        DocCommand("x.md", 1, 0, ("lmshards", "preprocess", "--output", "out/"), False),
        DocCommand("x.md", 2, 0, ("lmshards", "train", "--shards", "out/shards"), False),
        DocCommand("x.md", 3, 0, ("lmshards", "inspect", "out/tokens"), False),
        DocCommand("x.md", 4, 0, ("lmshards", "train", "--shards", "out:0.5"), False),
    ]
    assert len(collisions(made)) == 1 and "reads out/shards" in collisions(made)[0]


def test_documented_paths_follow_each_other():
    assert collisions(COMMANDS) == []


# --- the README's walk-through, run as written ------------------------------------------------------


def five_commands() -> list[list[str]]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split(FIVE_COMMANDS, 1)[1].split("\n## ", 1)[0]
    start, lines = next(bash_blocks(section))
    return [
        command
        for _, line in shell_lines(start, lines)
        for command in lmshards_commands(shell_words(line))
    ]


def _flag(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def _run(command: list[str], cwd: Path) -> tuple[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "lmshards", *command[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (
        f"{shlex.join(command)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    )
    return done.stdout, done.stderr


def test_five_commands_are_the_whole_story():
    names = [(find_command(c[1:]) or ("?",))[0] for c in five_commands()]
    assert names == FIVE_COMMAND_NAMES


@pytest.mark.slow
def test_five_commands_run_as_written_on_the_bundled_corpus(tmp_path):
    """From a copy of the checkout's sample corpus, each command exactly as the README prints it."""
    (tmp_path / "data").mkdir()
    shutil.copytree(REPO / "data" / "sample", tmp_path / "data" / "sample")
    tokenizer, preprocess, inspect, train, export, fill_mask = five_commands()

    _run(tokenizer, tmp_path)
    tokenizer_dir = tmp_path / _flag(tokenizer, "--output")
    info = json.loads((tokenizer_dir / "lmshards_tokenizer.json").read_text())
    assert info["vocab_size"] == int(_flag(tokenizer, "--vocab_size"))

    _run(preprocess, tmp_path)
    shards = tmp_path / _flag(preprocess, "--output")
    manifest = read_manifest(str(shards))
    assert manifest.seq_len == 128  # the default a real corpus keeps
    validation = manifest.splits["validation"].totals.records
    assert validation >= 32, validation  # at least one batch of the trainer's default size

    assert inspect[1:] == ["inspect", _flag(preprocess, "--output"), "--verify"]
    shards_written = sum(len(split.shards) for split in manifest.splits.values())
    assert f"verify: OK, {shards_written} shards match the manifest" in _run(inspect, tmp_path)[1]

    _run(train, tmp_path)
    run = tmp_path / _flag(train, "--output")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_loss = [r["loss"] for r in rows if "loss" in r]
    eval_loss = [r["eval_loss"] for r in rows if "eval_loss" in r]
    assert len(train_loss) >= 3 and train_loss[-1] < train_loss[0] - 0.5, train_loss
    assert len(eval_loss) >= 2 and eval_loss[-1] < eval_loss[0], eval_loss
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["global_step"] == int(_flag(train, "--steps"))

    _run(export, tmp_path)
    model = tmp_path / _flag(export, "--output")
    assert (model / "config.json").is_file() and (model / "model.safetensors").is_file()
    assert fill_mask[2] == _flag(export, "--output")

    printed, _ = _run(fill_mask, tmp_path)
    assert printed.split()[:3] == ["score", "token", "token_str"]
    # One line per prediction: score, token id, token string, sequence (which may hold a newline token).
    scores = [float(s) for s in PREDICTION_LINE.findall(printed)]
    assert len(scores) == 5 and all(0 < s <= 1 for s in scores), printed
    assert scores == sorted(scores, reverse=True), printed
