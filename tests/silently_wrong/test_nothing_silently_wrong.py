"""Nothing silently wrong: what a command cannot do right it refuses in one line with its exit code,
never a traceback, never a wrong result that looks complete."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest

from lmshards.preprocess.cli import main as preprocess_main
from lmshards.preprocess.options import (
    CURATION_FLAGS,
    DEPENDENT_FLAGS,
    PreprocessConfig,
    PreprocessError,
    check_dependent_flags,
    preprocess_flags,
)

SHORT_LINES = "a b c\nd e f\ng h\n"
REPEATED = "the cat sat on the mat today\n"


def _error_line(err: str, command: str) -> str:
    """The one error line of err; fails on a traceback or more than one line."""
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith(f"lmshards {command}: error: ")]
    return line


def _preprocess(tmp_path: Path, tokenizer: Path, text: str, *flags: str) -> tuple[int, Path]:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text, encoding="utf-8")
    output = tmp_path / "out"
    argv = ["--input", str(corpus), "--tokenizer", str(tokenizer), "--output", str(output)]
    return preprocess_main([*argv, *flags]), output


# ---------------------------------------------------------------- an empty result is a failure


def test_preprocess_of_documents_all_too_short_exits_1_and_leaves_no_manifest(
    tmp_path, sample_tokenizer, capsys
):
    code, output = _preprocess(tmp_path, sample_tokenizer, SHORT_LINES, "--seq_len", "64")
    assert code == 1
    line = _error_line(capsys.readouterr().err, "preprocess")
    assert line == (
        "lmshards preprocess: error: every document was removed, so no record was written and no "
        "manifest: 3 too short to fill one 64-token record (their 14 tokens dropped by --remainder drop). "
        "Pass a smaller --seq_len or --remainder pad for short documents, or check --dedup, "
        "--decontaminate and the inputs."
    )
    assert not (output / "manifest.json").exists()


def test_preprocess_whose_curation_removes_everything_names_each_reason(
    tmp_path, sample_tokenizer, capsys
):
    eval_set = tmp_path / "eval.txt"
    eval_set.write_text(REPEATED, encoding="utf-8")
    text = REPEATED + "a b\n" * 2  # contaminated; then two copies of a document too short to keep
    code, output = _preprocess(
        tmp_path,
        sample_tokenizer,
        text,
        "--seq_len",
        "8",
        "--dedup",
        "exact",
        "--decontaminate",
        str(eval_set),
        "--decontaminate_ngram",
        "3",
    )
    assert code == 1
    line = _error_line(capsys.readouterr().err, "preprocess")
    assert (
        ": 1 removed by --decontaminate; 1 exact duplicates (--dedup); 1 too short to fill one "
        "8-token record (their 4 tokens dropped by --remainder drop). "
    ) in line
    assert not (output / "manifest.json").exists()


# ---------------------------------------------------------------- flags a command does not use


def _own_flags(parser) -> set[str]:
    return {opt for action in parser._actions for opt in action.option_strings}


def _refused(main, argv: list[str], capsys, command: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return _error_line(captured.err, command)


def test_stats_refuses_every_preprocess_flag_naming_the_command_that_takes_it(tmp_path, capsys):
    from lmshards.corpus_tools.stats.cli import build_parser
    from lmshards.corpus_tools.stats.cli import main as stats_main

    foreign = sorted(preprocess_flags() - _own_flags(build_parser()))
    assert {"--num_shards", "--keep_tokens", "--text_field", "--seq_len", "--dedup"} <= set(foreign)
    for flag in foreign:
        line = _refused(stats_main, [str(tmp_path), flag, "1"], capsys, "stats")
        assert line == (
            f"lmshards stats: error: {flag} is a flag of `lmshards preprocess`; `lmshards stats` does "
            "not take it (see `lmshards stats --help`)"
        )


def test_repack_refuses_every_preprocess_flag_it_does_not_declare(tmp_path, capsys):
    from lmshards.preprocess.repack_cli import build_parser
    from lmshards.preprocess.repack_cli import main as repack_main

    own = _own_flags(build_parser())
    foreign = sorted(preprocess_flags() - own - set(CURATION_FLAGS))  # curation: its own message
    assert {"--keep_tokens", "--text_field", "--encoding", "--input"} <= set(foreign)
    assert "--num_shards" in own  # a repack flag too: parsed as repack's
    required = ["--tokens", str(tmp_path / "store"), "--output", str(tmp_path / "new")]
    for flag in foreign:
        line = _refused(repack_main, [*required, flag, "1"], capsys, "repack")
        assert line == (
            f"lmshards repack: error: {flag} is a flag of `lmshards preprocess`; `lmshards repack` does "
            "not take it (see `lmshards repack --help`)"
        )
    assert not (tmp_path / "new").exists()


# Every flag that applies only with another option, and a value that differs from its default.
DEPENDENT = [
    (["--minhash_ngram", "3"], "--minhash_ngram is ignored without --dedup near: add --dedup near"),
    (
        ["--minhash_bands", "4", "--dedup", "exact"],
        "--minhash_bands is ignored without --dedup near",
    ),
    (["--minhash_rows", "2"], "--minhash_rows is ignored without --dedup near"),
    (["--minhash_min_words", "7"], "--minhash_min_words is ignored without --dedup near"),
    (
        ["--decontaminate_ngram", "5"],
        "--decontaminate_ngram is ignored without --decontaminate: add --decontaminate EVAL_SET",
    ),
    (["--decontaminate_text_field", "q"], "--decontaminate_text_field is ignored without"),
    (["--curate_sample", "5"], "--curate_sample is ignored without a document step"),
    (
        ["--target_shard_mb", "5", "--num_shards", "2"],
        "--target_shard_mb is ignored with --num_shards, which fixes the count: drop --num_shards",
    ),
]


def test_the_dependent_flags_listed_here_are_all_there_are():
    assert sorted(flags[0] for flags, _ in DEPENDENT) == sorted(DEPENDENT_FLAGS)


@pytest.mark.parametrize(("flags", "message"), DEPENDENT)
def test_a_flag_without_the_option_it_needs_is_refused(tmp_path, capsys, flags, message):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(REPEATED, encoding="utf-8")
    argv = ["--input", str(corpus), "--tokenizer", "tok.json", "--output", str(tmp_path / "out")]
    assert preprocess_main([*argv, *flags]) == 2
    line = _error_line(capsys.readouterr().err, "preprocess")
    assert line.startswith(f"lmshards preprocess: error: {message}")
    assert line.endswith(f" or leave {flags[0]} out.")
    assert not (tmp_path / "out").exists()


def test_a_dependent_flag_at_its_default_passes_as_the_flex_template_sends_it(tmp_path):
    config = PreprocessConfig(
        inputs=("in.txt",), tokenizer="tok.json", output="out", minhash_rows=8, num_shards=2
    )
    check_dependent_flags(config)  # --minhash_rows 8 and --target_shard_mb 128 are the defaults
    with pytest.raises(PreprocessError, match="--minhash_rows is ignored without --dedup near"):
        check_dependent_flags(dataclasses.replace(config, minhash_rows=9))


# ---------------------------------------------------------------- reading a run that is training


def _run_whose_checkpoint_is_gone(run: Path, tokenizer: Path) -> Path:
    """A TensorFlow run's directory whose only checkpoint lost its data file, as rotation leaves it."""
    from lmshards.train.config import preset_config

    model = preset_config("tiny", family="roberta", vocabulary_size=2000).to_dict()
    (run / "checkpoints").mkdir(parents=True)
    (run / "tokenizer").mkdir()
    (run / "tokenizer" / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    (run / "run_config.json").write_text(
        json.dumps({"train": {"backend": "tensorflow"}, "model": model})
    )
    (run / "checkpoints" / "ckpt-1.index").write_bytes(b"rotated away")
    return run


@pytest.mark.parametrize("live", [True, False])
def test_export_of_a_run_whose_checkpoint_rotated_away(tmp_path, sample_tokenizer, capsys, live):
    from lmshards.plumbing.lease import acquire
    from lmshards.train.commands.export_cli import main as export_main

    run = _run_whose_checkpoint_is_gone(tmp_path / "run", sample_tokenizer)
    lease = acquire(str(run), command="train") if live else None
    try:
        code = export_main([str(run), "--output", str(tmp_path / "model")])
    finally:
        if lease is not None:
            lease.release()
    assert code == 2
    line = _error_line(capsys.readouterr().err, "export")
    if live:
        assert line.startswith(
            f"lmshards export: error: {str(run)!r} is a live run: `lmshards train` on host "
        )
        assert line.endswith(
            "is training it (its lease says so), and it removed the checkpoint this command was "
            "reading as it keeps only its newest ones. Run this command again (it reads the newest "
            "checkpoint), or once the run has finished."
        )
        assert "--restart" not in line
    else:  # nobody trains it: the checkpoint is damaged, and the run's own fixes apply
        assert line.startswith(
            f"lmshards export: error: No checkpoint in {str(run / 'checkpoints')!r}"
        )
    assert not (tmp_path / "model").exists()


def _init_source(run: Path, backend: str):
    from lmshards.train.config import preset_config
    from lmshards.train.export.init_source import RUN, InitSource

    model = preset_config("tiny", family="roberta", vocabulary_size=2000)
    return InitSource(str(run), RUN, model, {}, None, backend=backend)


def test_init_from_a_run_whose_checkpoint_rotated_away_says_it_is_live(tmp_path, capsys, fake):
    from lmshards.plumbing.lease import acquire
    from lmshards.train.commands import cli
    from lmshards.train.config import preset_config

    shards = _write_set(tmp_path / "shards", seed=0)
    source = tmp_path / "source"
    (source / "checkpoints").mkdir(parents=True)
    model = preset_config("tiny", family="roberta", vocabulary_size=100).to_dict()
    (source / "run_config.json").write_text(
        json.dumps({"train": {"backend": "tensorflow"}, "model": model})
    )
    (source / "checkpoints" / "ckpt-1.index").write_bytes(b"rotated away")
    new_run = tmp_path / "new"
    argv = ["--shards", shards, "--output", str(new_run), "--backend", fake.NAME, "--steps", "3"]
    lease = acquire(str(source), command="train")
    try:
        code = cli.main([*argv, "--per_replica_batch", "4", "--init_from", str(source)])
    finally:
        lease.release()
    assert code == 2
    line = _error_line(capsys.readouterr().err, "train")
    assert line.startswith(
        f"lmshards train: error: {str(source)!r} is a live run: `lmshards train` on host "
    )
    assert line.endswith(
        "Run this command again (it reads the newest checkpoint), or once the run has finished."
    )
    assert "--restart" not in line
    assert not (new_run / "checkpoints").exists()


def test_jax_from_a_tensorflow_run_names_exports_own_command_line(tmp_path):
    from lmshards.plumbing.errors import LmshardsError
    from lmshards.train.export.init_source import load_init_weights

    with pytest.raises(LmshardsError) as refused:
        load_init_weights(_init_source(tmp_path / "run", "tensorflow"), backend="jax")
    message = str(refused.value)
    assert f"Export it (`lmshards export {tmp_path / 'run'} --output DIR`)" in message
    assert "--run" not in message


# ---------------------------------------------------------------- a shard set that changed under a run

FAKE_TOKENIZER_IDS = {"cls": 0, "pad": 1, "sep": 2, "unk": 3, "mask": 4}


def _write_set(out: Path, *, seed: int) -> str:
    """A small shard set of random ids (train 40 records, validation 8, seq_len 16); seed picks its content."""
    import numpy as np

    from lmshards.schemas.manifest import TokenizerInfo
    from tests.helpers.shard_factory import write_shards

    tokenizer = TokenizerInfo(
        fingerprint="sha256:" + "0" * 64,
        vocab_size=100,
        special_token_ids=FAKE_TOKENIZER_IDS,
        all_special_ids=(0, 1, 2, 3, 4),
    )
    rng = np.random.default_rng(seed)

    def split(records: int, num_shards: int):
        ids = rng.integers(5, tokenizer.vocab_size, size=(records, 16), dtype=np.int64)
        return ids, np.ones_like(ids), num_shards

    for old in out.rglob("*.tfrecord*"):
        old.unlink()
    write_shards(
        out,
        {"train": split(40, 2), "validation": split(8, 1)},
        seq_len=16,
        tokenizer=tokenizer,
        inputs=(),
    )
    return str(out)


def _train(shards: str, run: Path) -> int:
    from lmshards.train.commands import cli
    from tests.helpers import fake_backend

    return cli.main(
        ["--shards", shards, "--output", str(run), "--backend", fake_backend.NAME, "--steps", "6",
         "--per_replica_batch", "4", "--log_every", "3", "--eval_every", "6", "--checkpoint_every", "3",
         "--shuffle_buffer", "8", "--steps_per_execution", "3"]
    )  # fmt: skip


@pytest.fixture
def fake(monkeypatch):
    pytest.importorskip("tensorflow")
    from tests.helpers import fake_backend

    fake_backend.register(monkeypatch)
    return fake_backend


def test_train_records_the_sets_digest_and_refuses_to_resume_on_changed_content(
    tmp_path, capsys, fake
):
    from lmshards.schemas.manifest import read_manifest
    from lmshards.train.run_dir import shard_set_digest

    shards, run = _write_set(tmp_path / "shards", seed=0), tmp_path / "run"
    assert _train(shards, run) == 0
    recorded = json.loads((run / "run_config.json").read_text())["shard_digests"]
    before = shard_set_digest(read_manifest(shards))
    assert recorded == {shards: before}
    config_before = (run / "run_config.json").read_bytes()
    capsys.readouterr()

    _write_set(tmp_path / "shards", seed=1)  # the same path, other records
    after = shard_set_digest(read_manifest(shards))
    assert after != before
    assert _train(shards, run) == 2
    line = _error_line(capsys.readouterr().err, "train")
    assert line == (
        f"lmshards train: error: --shards {shards!r} changed since this run trained on it: its digest is "
        f"{before} in the run's run_config.json and {after} now, so resuming would continue on other data. "
        "Restore the set as it was to resume, or train on it as a new run (a new --output, or --restart)."
    )
    assert (run / "run_config.json").read_bytes() == config_before

    _write_set(tmp_path / "shards", seed=0)  # restored: the same shards again, another created_at
    assert _train(shards, run) == 0


@pytest.mark.parametrize("with_read_error", [True, False], ids=["read-error", "silent"])
def test_a_set_overwritten_during_training_ends_in_one_line(
    tmp_path, capsys, fake, monkeypatch, with_read_error
):
    from lmshards.schemas.manifest import read_manifest
    from lmshards.train.run_dir import shard_set_digest

    shards, run = _write_set(tmp_path / "shards", seed=0), tmp_path / "run"
    before = shard_set_digest(read_manifest(shards))
    steps = fake.FakeBackend.train_steps

    def overwritten_after_the_first_call(self, n):
        if self.step == 0:
            return steps(self, n)
        _write_set(tmp_path / "shards", seed=1)
        if with_read_error:  # tf.data meets a file that went away
            raise FileNotFoundError(f"{shards}/train/train-00000-of-00002-20.tfrecord")
        return steps(self, n)

    monkeypatch.setattr(fake.FakeBackend, "train_steps", overwritten_after_the_first_call)
    assert _train(shards, run) == 1
    after = shard_set_digest(read_manifest(shards))
    line = _error_line(capsys.readouterr().err, "train")
    stopped_at = 1 if with_read_error else 3  # the first checkpoint step: nothing saved
    assert line == (
        f"lmshards train: error: --shards {shards!r} changed while this run trained on it (digest {before} "
        f"when the run started, {after} now); training stopped at step {stopped_at}, and its checkpoints "
        "hold only steps on the set as it was. Restore the set and rerun this command to resume, or train on "
        "the new set as a new run (a new --output, or --restart)."
    )
    assert sorted(p.name for p in (run / "checkpoints").glob("ckpt-*")) == []


# ---------------------------------------------------------------- every hint names a flag that exists

# A flag in a `lmshards CMD ...` command line, and an `lmshards CMD` mention with its sentence.
FLAG_RE = re.compile(r"(?<![\w-])--[a-z][a-z0-9_]*[a-z0-9]")
COMMAND_LINE_RE = re.compile(r"`lmshards ((?:tokenizer |dataset )?[a-z][a-z-]*)([^`]*)`")
COMMAND_SENTENCE_RE = re.compile(r"`lmshards ((?:tokenizer |dataset )?[a-z][a-z-]*)`([^.;`]*)")
# The `lmshards` command's own flags (lmshards --help, lmshards --version).
TOP_LEVEL_FLAGS = {"--help", "--version"}
PACKAGE = Path(__file__).resolve().parents[2] / "lmshards"


class _Parsed(Exception):
    def __init__(self, parser):
        super().__init__(parser.prog)
        self.parser = parser


def _parser_of(command: str, monkeypatch):
    """The argparse parser `lmshards COMMAND` really parses with, caught as it starts parsing."""
    from lmshards.command.cli import SUBCOMMANDS
    from lmshards.plumbing.cli import CommandParser

    def caught(self, args=None, namespace=None):
        raise _Parsed(self)

    with monkeypatch.context() as patch:
        patch.setattr(CommandParser, "parse_known_args", caught)
        with pytest.raises(_Parsed) as parsed:
            SUBCOMMANDS[command].main(["--help"])
    return parsed.value.parser


@pytest.fixture(scope="module")
def command_flags() -> dict[str, set[str]]:
    """Every subcommand's flags: its parser's, and for the Beam commands the Beam options they pass on
    (Dask's included; stats and repack without preprocess's, which they refuse)."""
    import lmshards.preprocess.dask_runner  # noqa: F401  (declares the Dask runner's options)
    from lmshards.command.cli import SUBCOMMANDS
    from lmshards.preprocess import runners

    beam = set(runners.beam_flags())
    flags = {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        for command in SUBCOMMANDS:
            parser = _parser_of(command, monkeypatch)
            own = {opt for action in parser._actions for opt in action.option_strings}
            extra = {"preprocess": beam, "stats": beam - preprocess_flags()}
            extra["repack"] = extra["stats"]
            flags[command] = own | extra.get(command, set())
            flags[command + " renamed"] = set(parser.renamed)
            flags[command + " hints"] = {*parser.renamed.values()}
    return flags


def _messages() -> list[tuple[str, int, str]]:
    """(file, line, text) of every string in the package but docstrings; an f-string's fields read 'X'."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) in docstrings:
                    continue
                text = node.value
            else:
                continue
            found.append((str(path.relative_to(PACKAGE.parent)), node.lineno, text))
    return found


def _commands(flags: dict[str, set[str]]) -> list[str]:
    return [name for name in flags if not name.endswith((" renamed", " hints"))]


def test_every_flag_a_message_names_exists(command_flags):
    """Each `lmshards CMD --flag ...` command line and each flag in the sentence after `lmshards CMD`
    is one of CMD's flags; every other flag a message names is some command's."""
    commands = _commands(command_flags)
    anywhere = set().union(*(command_flags[c] for c in commands), TOP_LEVEL_FLAGS)
    # The names people bring from run_mlm.py and the renamed flags: refused with a hint, so named.
    anywhere |= set().union(*(command_flags[c + " renamed"] for c in commands))
    wrong = []
    for where, line, text in _messages():
        for pattern in (COMMAND_LINE_RE, COMMAND_SENTENCE_RE):
            for match in pattern.finditer(text):
                command, rest = match[1], match[2]
                if command not in commands:
                    wrong += [f"{where}:{line}: `lmshards {command}` is no command"]
                    continue
                wrong += [
                    f"{where}:{line}: {flag} is not a flag of `lmshards {command}`"
                    for flag in FLAG_RE.findall(rest)
                    if flag not in command_flags[command]
                ]
        wrong += [
            f"{where}:{line}: {flag} is no command's flag"
            for flag in FLAG_RE.findall(text)
            if flag not in anywhere
        ]
    assert not wrong, "\n".join(wrong)


def test_every_renamed_flag_hint_names_a_flag_of_the_command_it_names(command_flags):
    """The run_mlm.py/Trainer names and renamed flags: each hint's flag is a flag of the command the hint
    names (`lmshards preprocess --seq_len` given to train), else of the command refusing the old name, which
    itself is no flag of that command."""
    from lmshards.plumbing.known_names import name_hints
    from lmshards.preprocess.options import RENAMED_FLAGS

    checked = 0
    for command in _commands(command_flags):
        hints = {**name_hints(command), **(RENAMED_FLAGS if command == "preprocess" else {})}
        assert set(hints) <= command_flags[command + " renamed"]
        for old, hint in hints.items():
            if old in command_flags[command]:  # a flag of its own: the parser never hints it
                continue
            named = COMMAND_LINE_RE.search(hint)
            target = named[1] if named else command
            # `lmshards train --learning_rate` may name the old flag again, as the one to use.
            flags = FLAG_RE.findall(hint.removeprefix(old))
            # "--do_eval is not needed: ..." may name none; a renaming names the flag to use.
            assert flags or hint.startswith(f"{old} is not needed"), f"{command} {old}: {hint!r}"
            for flag in flags:
                assert flag in command_flags[target], f"{command} {old}: {hint!r}"
                checked += 1
    # The tables of preprocess and train, and preprocess's renamed --batch_size.
    assert checked >= 39
