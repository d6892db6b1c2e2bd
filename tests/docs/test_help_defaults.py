"""Every default `lmshards preprocess --help` and `lmshards train --help` show is the one their docs' flag
tables give (docs/preprocess.md, docs/train.md), and every flag with a default is in its table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lmshards.command.cli import main as lmshards_main

DOCS = Path(__file__).resolve().parents[2] / "docs"
# (command, its docs page, the heading of the section holding its flag table)
TABLES = [
    ("preprocess", "preprocess.md", "## `lmshards preprocess`"),
    ("train", "train.md", "## `lmshards train`"),
]
_FLAG_START = re.compile(r"\n(?=  -)")  # each option of argparse's help starts on a line of its own
_SHOWN_DEFAULT = re.compile(r"\(default: ([^()]*)\)")
_TABLE_ROW = re.compile(r"^\| `(--[\w-]+)` \| ([^|]*) \|", re.M)


def help_defaults(text: str) -> dict[str, str]:
    """{flag: the default its --help shows} for every option whose help says "(default: X)"."""
    found = {}
    for block in _FLAG_START.split(text.split("\noptions:\n", 1)[1]):
        flag = re.match(r"\s*(?:-\w, )?(--[\w-]+)", block)
        shown = _SHOWN_DEFAULT.search(" ".join(block.split()))
        if flag and shown:
            found[flag[1]] = shown[1]
    return found


def table_defaults(page: str, heading: str) -> dict[str, str]:
    """{flag: default column} of the flag tables in the section of `page` under `heading`."""
    section = page.split(heading, 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for flag, default in _TABLE_ROW.findall(section):
        rows.setdefault(flag, default.strip())
    return rows


def same_default(shown: str, documented: str) -> bool:
    """`128.0` is `128`; backticks and a trailing note in parentheses ("0 (auto)") are the docs' own."""
    documented = re.sub(r" \([^()]*\)$", "", documented.replace("`", ""))
    try:
        return float(shown) == float(documented)
    except ValueError:
        return shown == documented


def _help(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        lmshards_main([command, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(("command", "page", "heading"), TABLES)
def test_each_default_in_help_is_the_one_the_docs_table_gives(command, page, heading, capsys):
    shown = help_defaults(_help(command, capsys))
    documented = table_defaults((DOCS / page).read_text(encoding="utf-8"), heading)
    assert len(shown) >= 20  # the parse found the help's defaults
    assert sorted(set(shown) - set(documented)) == []  # every flag with a default is in the table
    wrong = {f: (v, documented[f]) for f, v in shown.items() if not same_default(v, documented[f])}
    assert wrong == {}


def test_the_comparison_itself():
    assert same_default("128.0", "128") and same_default("0", "0 (auto)")
    assert same_default("--text_field / --text_column", "`--text_field` / `--text_column`")
    assert not same_default("1", "10") and not same_default("line", "`blank_line`")
    text = "usage: x\n\noptions:\n  --a A        x (default:\n                 3); a range\n  --b B        y\n"
    assert help_defaults(text) == {"--a": "3"}


def test_steps_per_execution_auto_is_the_same_in_help_docs_and_code(capsys):
    from lmshards.train.devices import STEPS_PER_EXECUTION

    auto = (
        f"{STEPS_PER_EXECUTION['tpu']} on TPUs, {STEPS_PER_EXECUTION['gpu']} on GPUs, "
        f"{STEPS_PER_EXECUTION['cpu']} on CPUs"
    )
    assert auto == "32 on TPUs, 8 on GPUs, 10 on CPUs"
    assert auto in " ".join(_help("train", capsys).split())
    assert auto in " ".join((DOCS / "train.md").read_text(encoding="utf-8").split())
