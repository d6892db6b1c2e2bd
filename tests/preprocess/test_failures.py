"""`lmshards preprocess` never loses the user's data and never leaves an output that looks complete when it is not.

Each case runs the command as a user would and then checks that the inputs are byte-identical and that a
previous good output is untouched when the run is refused: overlapping locations, --overwrite on foreign
files, unwritable outputs, a disk that fills up mid-run, inputs that give no document, unreadable inputs
and tokenizers. Also: a shard set carries its tokenizer and schema, and stays valid when moved.
"""

from __future__ import annotations

import errno
import gzip
import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from lmshards.plumbing import fs
from lmshards.plumbing.errors import ManifestError
from lmshards.plumbing.outputs import WRITE_PROBE_PREFIX
from lmshards.preprocess.cli import main
from lmshards.preprocess.failures import RunFailure, is_reported_failure, run_failure, user_error
from lmshards.preprocess.sources import InputError
from lmshards.schemas.layouts import TEMP_DIR_NAME
from lmshards.schemas.manifest import TOKENIZER_RELPATH, manifest_from_dict, read_manifest
from lmshards.schemas.tokenizer_info import fingerprint

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
TOKENIZER = GOLDEN / "tokenizer.json"  # vocabulary 400: fast to load
TEXT = (GOLDEN / "corpus" / "en.txt").read_text(encoding="utf-8")
FAST = ["--seq_len", "16", "--tokenizer_threads", "1", "--shard_multiple", "2"]
ERROR = "lmshards preprocess: error: "


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under root (relative path -> bytes): to show that nothing changed."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([*map(str, argv), *FAST])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _error_line(err: str) -> str:
    """The one error line of a failed run: the last line of stderr, with no traceback before it."""
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith(ERROR)]
    assert len(errors) == 1 and err.rstrip().splitlines()[-1] == errors[0], err
    return errors[0]


@pytest.fixture
def corpus(tmp_path) -> Path:
    """DIR holding two text files: the user's data."""
    directory = tmp_path / "corpus"
    directory.mkdir()
    (directory / "a.txt").write_text(TEXT[:20_000], encoding="utf-8")
    (directory / "b.txt").write_text(TEXT[20_000:40_000], encoding="utf-8")
    return directory


def _good_output(capsys, corpus: Path, output: Path) -> dict[str, bytes]:
    """A complete preprocess output of corpus/a.txt at output; returns its files."""
    code, _, err = _run(
        capsys, "--input", corpus / "a.txt", "--tokenizer", TOKENIZER, "--output", output
    )
    assert code == 0, err
    assert (output / "manifest.json").is_file()
    return _tree(output)


# ---------------------------------------------------------------- overlapping locations


def test_output_equal_to_the_input_is_refused_and_deletes_nothing(capsys, corpus):
    before = _tree(corpus)
    code, out, err = _run(
        capsys, "--input", corpus, "--tokenizer", TOKENIZER, "--output", corpus, "--overwrite"
    )
    assert code == 2 and out == ""
    line = _error_line(err)
    assert f"--output {str(corpus)!r}" in line and f"--input {str(corpus)!r}" in line
    assert _tree(corpus) == before


def test_output_inside_the_input_is_refused_and_a_previous_output_there_stays(capsys, corpus):
    out_dir = corpus / "out"
    previous = _good_output(capsys, corpus, out_dir)
    before = _tree(corpus)
    code, _, err = _run(
        capsys, "--input", corpus, "--tokenizer", TOKENIZER, "--output", out_dir, "--overwrite"
    )
    assert code == 2
    line = _error_line(err)
    assert "is inside --input" in line and str(out_dir) in line and str(corpus) in line
    assert _tree(corpus) == before and _tree(out_dir) == previous


def test_output_holding_an_input_file_is_refused(capsys, corpus):
    before = _tree(corpus)
    code, _, err = _run(
        capsys,
        "--input",
        corpus / "a.txt",
        "--tokenizer",
        TOKENIZER,
        "--output",
        corpus,
        "--overwrite",
    )
    assert code == 2 and "contains --input" in _error_line(err)
    assert _tree(corpus) == before


@pytest.mark.parametrize(
    "inputs,output,relation",
    [
        (["gs://bucket/corpus"], "gs://bucket/corpus", "is the same location as"),
        (["gs://bucket/corpus/*.txt"], "gs://bucket/corpus/out", "is inside"),
        (["gs://bucket/corpus/a.txt", "gs://bucket/other"], "gs://bucket", "contains"),
    ],
)
def test_overlapping_gcs_locations_are_refused_before_any_io(capsys, inputs, output, relation):
    argv = [part for path in inputs for part in ("--input", path)]
    code, _, err = _run(capsys, *argv, "--tokenizer", TOKENIZER, "--output", output, "--overwrite")
    assert code == 2
    line = _error_line(err)
    assert relation in line and repr(output) in line


def test_output_holding_the_tokenizer_is_refused(capsys, corpus, tmp_path):
    out_dir = tmp_path / "out"
    previous = _good_output(capsys, corpus, out_dir)
    # Re-running with the tokenizer copied into the previous output: --overwrite would delete it first.
    code, _, err = _run(
        capsys,
        "--input",
        corpus,
        "--tokenizer",
        out_dir / "tokenizer",
        "--output",
        out_dir,
        "--overwrite",
    )
    assert code == 2 and "contains --tokenizer" in _error_line(err)
    assert _tree(out_dir) == previous


# ---------------------------------------------------------------- --overwrite deletes only what lmshards wrote


def test_overwrite_refuses_foreign_files_and_deletes_nothing(capsys, corpus, tmp_path):
    out_dir = tmp_path / "out"
    _good_output(capsys, corpus, out_dir)
    (out_dir / "notes.txt").write_text("my notes")
    (out_dir / "train" / "keep.md").write_text("not a shard")
    before = _tree(out_dir)
    code, _, err = _run(
        capsys, "--input", corpus, "--tokenizer", TOKENIZER, "--output", out_dir, "--overwrite"
    )
    assert code == 2
    line = _error_line(err)
    assert "'notes.txt'" in line and "'train/keep.md'" in line and "did not write" in line
    assert _tree(out_dir) == before
    assert not any(Path(p).name.startswith(WRITE_PROBE_PREFIX) for p in before)


def test_overwrite_replaces_a_previous_output_completely(capsys, corpus, tmp_path):
    out_dir = tmp_path / "out"
    _good_output(capsys, corpus, out_dir)
    (out_dir / TEMP_DIR_NAME).mkdir()
    (out_dir / TEMP_DIR_NAME / "train-00003-0123").write_bytes(b"left by a killed run")
    inputs = _tree(corpus)
    code, _, err = _run(
        capsys, "--input", corpus, "--tokenizer", TOKENIZER, "--output", out_dir, "--overwrite"
    )
    assert code == 0, err
    manifest = read_manifest(str(out_dir))
    assert [Path(i.path).name for i in manifest.inputs] == ["a.txt", "b.txt"]
    listed = {s.path for split in manifest.splits.values() for s in split.shards}
    assert set(_tree(out_dir)) == listed | {"manifest.json", "schema.pbtxt", TOKENIZER_RELPATH}
    assert _tree(corpus) == inputs


# ---------------------------------------------------------------- preflight, full disk, lost permission


def test_an_unwritable_output_is_refused_before_any_work(capsys, corpus, tmp_path, monkeypatch):
    out_dir = tmp_path / "out"
    previous = _good_output(capsys, corpus, out_dir)
    real_open = os.open

    def read_only_probe(path, *args, **kwargs):
        if Path(path).name.startswith(WRITE_PROBE_PREFIX):
            raise OSError(errno.EROFS, "Read-only file system", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_probe)
    code, _, err = _run(
        capsys, "--input", corpus, "--tokenizer", TOKENIZER, "--output", out_dir, "--overwrite"
    )
    assert code == 2
    line = _error_line(err)
    assert f"--output {str(out_dir)!r} is not writable: the file system is read-only" in line
    assert "finished" not in err
    assert _tree(out_dir) == previous  # --overwrite deleted nothing


@pytest.mark.parametrize(
    "code,words", [(errno.ENOSPC, "the disk is full"), (errno.EACCES, "permission denied")]
)
def test_a_disk_error_while_writing_shards_is_one_line_exit_1_and_no_output(
    capsys, corpus, tmp_path, monkeypatch, code, words
):
    out_dir = tmp_path / "out"
    inputs = _tree(corpus)
    real_open_file = fs.open_file

    def failing_shard_writes(path, mode="rb"):
        if "w" in mode and TEMP_DIR_NAME in path:
            raise OSError(code, os.strerror(code), path)
        return real_open_file(path, mode)

    monkeypatch.setattr(fs, "open_file", failing_shard_writes)
    exit_code, out, err = _run(
        capsys, "--input", corpus, "--tokenizer", TOKENIZER, "--output", out_dir
    )
    assert exit_code == 1 and out == ""
    assert _error_line(err) == (
        f"{ERROR}Cannot write to {str(out_dir)!r}: {words} ({os.strerror(code)}); "
        f"{'free some space' if code == errno.ENOSPC else 'fix its permissions'} or choose another location, "
        "then run the command again."
    )
    assert _tree(out_dir) == {}  # no manifest, no partial shard, tokenizer copy or schema
    assert _tree(corpus) == inputs


# ---------------------------------------------------------------- inputs that give no document


def test_a_zero_byte_file_is_refused_at_planning(capsys, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.touch()
    code, _, err = _run(
        capsys, "--input", empty, "--tokenizer", TOKENIZER, "--output", tmp_path / "out"
    )
    assert code == 2
    assert "Every input file is empty" in _error_line(err) and str(empty) in err
    assert not (tmp_path / "out").exists() and empty.read_bytes() == b""


def test_a_directory_of_empty_files_is_refused_at_planning(capsys, tmp_path):
    directory = tmp_path / "empties"
    directory.mkdir()
    for i in range(200):
        (directory / f"part-{i:03d}.txt").touch()
    code, _, err = _run(
        capsys, "--input", directory, "--tokenizer", TOKENIZER, "--output", tmp_path / "out"
    )
    assert code == 2
    line = _error_line(err)
    assert (
        "Every input file is empty" in line
        and str(directory / "part-000.txt") in line
        and "200" in line
    )
    assert not (tmp_path / "out").exists()
    assert len(list(directory.iterdir())) == 200


def test_a_run_that_reads_no_document_is_an_error_and_writes_no_manifest(capsys, tmp_path):
    blank = tmp_path / "blank.txt"
    blank.write_bytes(b"   \n\t\n \n")
    out_dir = tmp_path / "out"
    code, _, err = _run(capsys, "--input", blank, "--tokenizer", TOKENIZER, "--output", out_dir)
    assert code == 2
    line = _error_line(err)
    assert "gave no documents" in line and str(blank) in line
    assert _tree(out_dir) == {}
    assert blank.read_bytes() == b"   \n\t\n \n"


# ---------------------------------------------------------------- clear errors, no tracebacks


def test_a_truncated_gz_is_one_error_line_without_beams_traceback(capsys, corpus, tmp_path):
    (corpus / "c.txt.gz").write_bytes(gzip.compress(b"a document\n" * 5000)[:-40])
    inputs = _tree(corpus)
    out_dir = tmp_path / "out"
    code, _, err = _run(capsys, "--input", corpus, "--tokenizer", TOKENIZER, "--output", out_dir)
    assert code == 2
    line = _error_line(err)
    assert str(corpus / "c.txt.gz") in line and "truncated" in line and "[while running" not in line
    assert _tree(out_dir) == {}
    assert _tree(corpus) == inputs


def test_a_tokenizer_that_cannot_be_loaded_is_named(capsys, corpus, tmp_path):
    broken = tmp_path / "tokenizer.json"
    broken.write_text(json.dumps({"model": {"type": "NoSuchModel"}}))
    inputs = _tree(corpus)
    code, _, err = _run(
        capsys, "--input", corpus, "--tokenizer", broken, "--output", tmp_path / "out"
    )
    assert code == 2
    line = _error_line(err)
    assert str(broken) in line and "cannot be loaded" in line
    assert not (tmp_path / "out").exists() and _tree(corpus) == inputs


@pytest.mark.parametrize(
    "field,value",
    [
        ("tokenizer.path", "../../etc/passwd"),
        ("tokenizer.path", "/etc/passwd"),
        ("schema", "gs://elsewhere/schema.pbtxt"),
    ],
)
def test_a_manifest_naming_a_file_outside_the_output_is_refused(
    capsys, corpus, tmp_path, field, value
):
    out_dir = tmp_path / "out"
    _good_output(capsys, corpus, out_dir)
    data = json.loads((out_dir / "manifest.json").read_text())
    if field == "schema":
        data["schema"] = value
    else:
        data["tokenizer"]["path"] = value
    (out_dir / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match=f"Manifest {field} {value!r}"):
        read_manifest(str(out_dir))

    from lmshards.preprocess.inspect_cli import main as inspect_main

    assert inspect_main([str(out_dir)]) == 2
    assert f"Manifest {field} {value!r}" in _error_line_of(capsys.readouterr().err, "inspect")


def _error_line_of(err: str, command: str) -> str:
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith(f"lmshards {command}: error: ")]
    return line


def test_worker_errors_are_traced_back_to_what_the_user_can_fix():
    # In-process runner: the same class, with Beam's step suffix.
    wrapped = InputError("'/data/x.gz': truncated; re-create it. [while running 'Read/ReadRanges']")
    error = user_error(wrapped)
    assert type(error) is InputError and str(error) == "'/data/x.gz': truncated; re-create it."
    # Worker processes, Dask, Dataflow: the worker's traceback as text.
    remote = RuntimeError(
        'Traceback (most recent call last):\n  File "/w/preprocess/read.py", line 1, in process\n'
        "lmshards.preprocess.sources.core.options.InputError: '/data/x.gz': truncated; re-create it. "
        "[while running 'Read/ReadRanges']\n"
    )
    error = user_error(remote)
    assert type(error) is InputError and str(error) == "'/data/x.gz': truncated; re-create it."
    assert (
        type(user_error(RuntimeError("lmshards.plumbing.errors.ManifestError: bad manifest")))
        is ManifestError
    )
    # Disk errors, as an exception or as text.
    full = run_failure(
        RuntimeError("OSError: [Errno 28] No space left on device: '/out/train/x'"), "/out"
    )
    assert isinstance(full, RunFailure) and str(full).startswith(
        "Cannot write to '/out': the disk is full"
    )
    assert isinstance(run_failure(OSError(errno.EDQUOT, "Disk quota exceeded"), "/out"), RunFailure)
    # Anything else is a bug: left as it is (its traceback is shown).
    assert run_failure(ValueError("unexpected"), "/out") is None
    assert run_failure(OSError(errno.ENOENT, "No such file"), "/out") is None


def test_beams_log_records_of_reported_failures_are_recognised():
    def record(
        name: str, level: int, message: str, exc: BaseException | None = None
    ) -> logging.LogRecord:
        exc_info = (type(exc), exc, None) if exc else None
        return logging.LogRecord(name, level, __file__, 1, message, (), exc_info)

    escaped = r"worker: Error processing\ntreceback\nlmshards.preprocess.sources.core.options.InputError: \'x.gz\': truncated"
    assert is_reported_failure(
        record("apache_beam.runners.portability.local_job_service", logging.ERROR, escaped)
    )
    assert is_reported_failure(
        record(
            "apache_beam.runners.common", logging.ERROR, "x [while running 'A']", InputError("x")
        )
    )
    assert is_reported_failure(
        record("apache_beam.runners.common", logging.ERROR, "[Errno 28] No space left")
    )
    assert not is_reported_failure(
        record("apache_beam.runners.common", logging.ERROR, "a bug", ValueError("bug"))
    )
    assert not is_reported_failure(
        record("lmshards.preprocess.stages.read", logging.ERROR, "InputError", InputError("x"))
    )
    assert not is_reported_failure(
        record("apache_beam.runners.common", logging.WARNING, "", InputError("x"))
    )


# ---------------------------------------------------------------- self-contained, relocatable shard sets


@pytest.fixture
def tokenizer_dir(tmp_path) -> Path:
    """A transformers-style tokenizer directory with a file that is not part of the tokenizer."""
    directory = tmp_path / "tok"
    directory.mkdir()
    shutil.copy(TOKENIZER, directory / "tokenizer.json")
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"model_max_length": 512, "pad_token": "<pad>"})
    )
    (directory / "special_tokens_map.json").write_text(json.dumps({"pad_token": "<pad>"}))
    (directory / "lmshards_tokenizer.json").write_text(json.dumps({"vocab_size": 400}))
    (directory / "README.md").write_text("how this tokenizer was made")
    return directory


def test_the_output_carries_its_tokenizer_and_schema(capsys, corpus, tmp_path, tokenizer_dir):
    out_dir = tmp_path / "out"
    code, _, err = _run(
        capsys, "--input", corpus, "--tokenizer", tokenizer_dir, "--output", out_dir
    )
    assert code == 0, err
    manifest = read_manifest(str(out_dir))
    assert (
        manifest.tokenizer.path == "tokenizer/tokenizer.json" and manifest.schema == "schema.pbtxt"
    )
    copied = _tree(out_dir / "tokenizer")
    assert copied == {
        name: (tokenizer_dir / name).read_bytes()
        for name in (
            "tokenizer.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
            "lmshards_tokenizer.json",
        )
    }
    assert (
        fingerprint(Path(manifest.tokenizer_path(str(out_dir))).read_text())
        == manifest.tokenizer.fingerprint
    )

    from lmshards.schemas.tfmd import parse_spec_from_schema, read_schema

    schema = read_schema(str(out_dir))
    ids = next(f for f in schema.feature if f.name == "input_ids")
    assert (ids.int_domain.min, ids.int_domain.max) == (0, manifest.tokenizer.vocab_size - 1)
    assert set(parse_spec_from_schema(schema)) == {"input_ids", "attention_mask"}
    # The copied tokenizer and schema belong to the output: a rerun may replace them.
    code, _, err = _run(
        capsys, "--input", corpus, "--tokenizer", tokenizer_dir, "--output", out_dir, "--overwrite"
    )
    assert code == 0, err


def test_a_tokenizer_given_as_a_file_is_copied_alone(capsys, corpus, tmp_path, tokenizer_dir):
    out_dir = tmp_path / "out"
    code, _, err = _run(
        capsys,
        "--input",
        corpus,
        "--tokenizer",
        tokenizer_dir / "tokenizer.json",
        "--output",
        out_dir,
    )
    assert code == 0, err
    assert _tree(out_dir / "tokenizer") == {"tokenizer.json": TOKENIZER.read_bytes()}


def test_a_moved_shard_set_is_still_complete(capsys, corpus, tmp_path):
    out_dir = tmp_path / "out"
    _good_output(capsys, corpus, out_dir)
    moved = tmp_path / "elsewhere" / "set"
    moved.parent.mkdir()
    out_dir.rename(moved)
    manifest = read_manifest(str(moved))
    paths = [manifest.tokenizer_path(str(moved)), *manifest.shard_paths(str(moved), "train")]
    assert all(Path(p).is_file() and Path(p).is_relative_to(moved) for p in paths)
    # Nothing in the manifest but the inputs' paths names a place outside the shard set.
    data = json.loads((moved / "manifest.json").read_text())
    data.pop("inputs")
    assert str(tmp_path) not in json.dumps(data)


def test_a_manifest_without_the_tokenizer_copy_or_schema_still_reads(capsys, corpus, tmp_path):
    out_dir = tmp_path / "out"
    _good_output(capsys, corpus, out_dir)
    data = json.loads((out_dir / "manifest.json").read_text())
    del data["tokenizer"]["path"], data["schema"]
    manifest = manifest_from_dict(data)
    assert manifest.tokenizer.path is None and manifest.schema is None
    assert manifest.tokenizer_path(str(out_dir)) is None


def test_more_shards_than_records_fail_before_any_shard_and_overwrite_clears_what_is_left(
    capsys, corpus, tmp_path
):
    out_dir = tmp_path / "out"
    args = ("--input", corpus / "a.txt", "--tokenizer", TOKENIZER, "--output", out_dir)
    code, _, err = _run(capsys, *args, "--num_shards", "10000")
    assert code == 2
    line = _error_line(err)
    assert "--num_shards 10000 is more than the" in line and "records of the train split" in line
    assert not (out_dir / "manifest.json").exists()
    assert not any((out_dir / "train").glob("*.tfrecord"))  # refused before writing a shard
    code, _, err = _run(capsys, *args, "--num_shards", "2", "--overwrite")
    assert code == 0, err
    assert len(read_manifest(str(out_dir)).split("train").shards) == 2
