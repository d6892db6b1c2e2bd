"""One CLI convention for every `lmshards` subcommand, checked over the whole registry.

`--help` shows every default and marks required flags; a misspelled flag is one error line,
`lmshards <command>: error: ...`, exit 2, naming the flag that was meant. Commands run in-process.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

import pytest

from lmshards.command.cli import SUBCOMMANDS, main
from lmshards.plumbing.cli import CommandParser
from lmshards.preprocess import runners
from tests.conftest import REPO

COMMANDS = list(SUBCOMMANDS)
# A value that every flag and positional without choices parses (paths, names, ints, floats).
_ANY_VALUE = "1"


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `lmshards ARGV`; argparse's SystemExit counts as the exit code."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = 0 if e.code is None else e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def parsers(monkeypatch) -> list[CommandParser]:
    """Every CommandParser that parses arguments during the test, in order."""
    seen: list[CommandParser] = []
    original = CommandParser.parse_known_args

    def recording(self, args=None, namespace=None):
        seen.append(self)
        return original(self, args, namespace)

    monkeypatch.setattr(CommandParser, "parse_known_args", recording)
    return seen


def _command_parser(
    command: str, parsers: list[CommandParser], capsys
) -> tuple[CommandParser, str]:
    """The parser behind `lmshards COMMAND` and its --help text."""
    code, out, err = _run([*command.split(), "--help"], capsys)
    assert code == 0, err
    assert parsers, (
        f"`lmshards {command}` does not parse its arguments with lmshards.plumbing.cli.CommandParser"
    )
    return parsers[0], out


def _flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)
    ]


def _has_default(action: argparse.Action) -> bool:
    default = action.default
    unset = any(default is value for value in (None, False, argparse.SUPPRESS)) or default in (
        [],
        (),
    )
    return not action.required and not unset


def _required_args(parser: argparse.ArgumentParser) -> list[str]:
    """Values for every positional, required flag and required either-or group: parsing then reaches unknown flags."""
    needed = [a for a in parser._actions if a.required or not a.option_strings]
    needed += [
        group._group_actions[0] for group in parser._mutually_exclusive_groups if group.required
    ]
    args: list[str] = []
    for action in needed:
        value = (
            [str(list(action.choices)[0]) if action.choices else _ANY_VALUE]
            if action.nargs != 0
            else []
        )
        args += [action.option_strings[0], *value] if action.option_strings else value
    return args


def _misspelled(parser: argparse.ArgumentParser) -> tuple[str, str]:
    """(a flag of the command, the same flag with a middle letter dropped), the typo not a prefix of any flag."""
    known = [opt for a in _flags(parser) for opt in a.option_strings if opt.startswith("--")]
    for flag in sorted(known, key=len, reverse=True):
        middle = 2 + (len(flag) - 2) // 2
        typo = flag[:middle] + flag[middle + 1 :]
        if not any(other.startswith(typo) for other in known):
            return flag, typo
    raise AssertionError(f"no flag of {parser.prog} to misspell: {known}")


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_every_default_and_marks_required_flags(command, parsers, capsys):
    parser, out = _command_parser(command, parsers, capsys)
    assert out.startswith(f"usage: lmshards {command} ")
    text = " ".join(out.split())  # help wraps lines anywhere
    flags = _flags(parser)
    with_default = [a.option_strings[0] for a in flags if _has_default(a)]
    required = [a.option_strings[0] for a in flags if a.required]
    assert text.count("(default:") >= len(with_default), (with_default, out)
    for flag in required:
        assert re.search(rf"{re.escape(flag)}(?: \S+)? \(required\)", text), (flag, out)


@pytest.mark.parametrize("command", COMMANDS)
def test_misspelled_flag_is_one_error_line_naming_the_flag(command, parsers, capsys):
    parser, _ = _command_parser(command, parsers, capsys)
    flag, typo = _misspelled(parser)
    code, out, err = _run([*command.split(), *_required_args(parser), typo], capsys)
    assert code == 2, (out, err)
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"lmshards {command}: error: "), err
    assert typo in last and f"did you mean {flag!r}?" in last, last


def test_top_level_help_lists_every_command(capsys):
    code, out, _ = _run(["--help"], capsys)
    assert code == 0
    listed = [line.split("  ")[1].strip() for line in out.splitlines() if line.startswith("  ")]
    assert [name for name in listed if name in SUBCOMMANDS] == COMMANDS


def test_a_group_without_its_command_lists_the_group(capsys):
    code, out, _ = _run(["tokenizer", "--help"], capsys)
    assert code == 0
    assert "tokenizer train" in out and "tokenizer inspect" in out and "dataset export" not in out


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["trian"], "; did you mean 'train'?"),
        (["fill_mask", "x"], "; did you mean 'fill-mask'?"),
        (["tokenizer", "trian"], "; did you mean 'tokenizer train'?"),
        (["xyzzy"], ""),
    ],
)
def test_unknown_command_is_one_error_line_with_a_close_match(argv, hint, capsys):
    code, out, err = _run(argv, capsys)
    given = " ".join(argv[:2]) if argv[0] == "tokenizer" else argv[0]
    assert code == 2 and out == ""
    assert err == f"lmshards: error: unknown command {given!r}{hint} (see `lmshards --help`)\n"


def test_train_help_does_not_import_tensorflow():
    """`lmshards train --help` answers without loading the training stack (checked in a fresh interpreter)."""
    code = (
        "import json, sys\n"
        "from lmshards.command.cli import main\n"
        "try:\n"
        "    main(['train', '--help'])\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'keras_hub'))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_verbose_and_overwrite_are_the_same_switches_everywhere(command, parsers, capsys):
    from lmshards.plumbing.cli import VERBOSE_HELP

    parser, _ = _command_parser(command, parsers, capsys)
    actions = {a.option_strings[0]: a for a in _flags(parser)}
    assert "--verbose" in actions, command
    assert actions["--verbose"].nargs == 0 and actions["--verbose"].help == VERBOSE_HELP
    if "--overwrite" in actions:
        assert actions["--overwrite"].nargs == 0, command


def test_run_mlm_names_point_at_flags_that_exist(parsers, capsys):
    from lmshards.plumbing.known_names import OTHER_COMMAND, RUN_MLM_NAMES

    for command, names in RUN_MLM_NAMES.items():
        for old, new in names.items():
            target = OTHER_COMMAND.get((command, old), command)
            parsers.clear()
            parser, _ = _command_parser(target, parsers, capsys)
            known = {opt for a in parser._actions for opt in a.option_strings}
            known |= set(getattr(parser, "extra_flags", ()))
            if target == "preprocess":  # Beam's flags join its typo hints once a word is not ours
                known |= set(runners.beam_flags())
            assert new in known, (command, old, new)
            assert old not in known, (command, old)


@pytest.mark.parametrize(
    "flag, hint",
    [
        ("--save_strategy", "--save_strategy is --checkpoint_every in lmshards train"),
        ("--evaluation_strategy", "--evaluation_strategy is --eval_every in lmshards train"),
        ("--warmup_ratio", "--warmup_ratio is --warmup_steps in lmshards train"),
        ("--gradient_accumulation_steps", "is --per_replica_batch in lmshards train"),
        ("--per_device_eval_batch_size", "is --per_replica_batch in lmshards train"),
        ("--logging_dir", "--logging_dir is --output in lmshards train"),
        (
            "--line_by_line",
            "--line_by_line belongs to `lmshards preprocess --doc_separator`, not lmshards train",
        ),
        ("--do_train", "--do_train is not needed: `lmshards train` always trains"),
        (
            "--report_to",
            "--report_to is not needed: `lmshards train` always writes TensorBoard logs",
        ),
    ],
)
def test_run_mlm_flags_given_to_train_name_what_to_use(flag, hint, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["train", "--shards", "s", "--output", "o", "--steps", "5", flag, "x"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and hint in err and "--strategy'" not in err


def test_the_readme_table_of_run_mlm_names_is_the_hint_table():
    from lmshards.plumbing.known_names import NOT_NEEDED, OTHER_COMMAND, RUN_MLM_NAMES

    text = (REPO / "README.md").read_text(encoding="utf-8")
    table = text.split("## Coming from run_mlm.py", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`--"):
            for name in cells[0].split(", "):
                rows[name.strip("`")] = cells[1]
    expected = {
        old for table in (RUN_MLM_NAMES, NOT_NEEDED) for names in table.values() for old in names
    }
    assert set(rows) == expected
    for command, names in RUN_MLM_NAMES.items():
        for old, new in names.items():
            target = OTHER_COMMAND.get((command, old), command)
            assert f"`{target} {new}" in rows[old] or f"`{target} {new}`" in rows[old], (
                old,
                rows[old],
            )
    for names in NOT_NEEDED.values():
        assert all(rows[old] == "—" for old in names)
