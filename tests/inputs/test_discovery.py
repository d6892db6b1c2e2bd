"""Every input accounted for: a directory, a glob and a named file follow one rule for symbolic links,
hidden names and special files; loops and special files are refused before any work, naming them; the
reading report counts what discovery found; a file that changes while it is read is an error naming it."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from lmshards.preprocess import cli
from lmshards.preprocess.sources import InputError
from lmshards.preprocess.sources.files import discover_inputs
from lmshards.preprocess.stages import read

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
TOKENIZER = GOLDEN / "tokenizer.json"
TEXT = (GOLDEN / "corpus" / "en.txt").read_text(encoding="utf-8")
FAST = ["--seq_len", "16", "--tokenizer_threads", "1", "--shard_multiple", "2"]


def _tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture
def linked(tmp_path) -> Path:
    """root/real/{a,b}.txt, plus root/link_dir -> real and root/link_file.txt -> real/a.txt."""
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "real" / "a.txt").write_text("alpha\n")
    (root / "real" / "b.txt").write_text("beta\n")
    (root / "link_dir").symlink_to(root / "real", target_is_directory=True)
    (root / "link_file.txt").symlink_to(root / "real" / "a.txt")
    return root


@pytest.mark.parametrize("form", ["directory", "glob", "globstar"])
def test_links_are_followed_alike_and_a_file_reached_twice_is_read_once(linked, form):
    pattern = {"directory": str(linked), "glob": f"{linked}/*", "globstar": f"{linked}/**"}[form]
    discovery = discover_inputs([pattern])
    # link_dir/ sorts before real/: its paths are the first to reach a.txt and b.txt.
    assert [os.path.relpath(f.path, linked) for f in discovery.files] == [
        "link_dir/a.txt",
        "link_dir/b.txt",
    ]
    assert (discovery.found, discovery.duplicates) == (5, 3)


def test_a_named_link_to_a_file_is_read(linked):
    (info,) = discover_inputs([str(linked / "link_file.txt")]).files
    assert info.path == str(linked / "link_file.txt") and info.bytes == 6


@pytest.mark.parametrize("form", ["directory", "globstar"])
def test_a_link_loop_is_refused_naming_it(linked, form):
    (linked / "real" / "up").symlink_to(linked, target_is_directory=True)
    pattern = str(linked) if form == "directory" else f"{linked}/**"
    with pytest.raises(InputError, match="a symbolic link back to") as refused:
        discover_inputs([pattern])
    assert "(a loop)" in str(refused.value) and "/up'" in str(refused.value)


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("form", ["directory", "glob", "named"])
def test_a_fifo_is_refused_before_any_work_naming_it(tmp_path, form):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("alpha\n")
    pipe = _fifo(corpus / "pipe.txt")
    pattern = {"directory": str(corpus), "glob": f"{corpus}/*.txt", "named": str(pipe)}[form]
    with pytest.raises(InputError, match="is a FIFO") as refused:  # never opened: no hang
        discover_inputs([pattern])
    assert str(pipe) in str(refused.value)


def test_a_socket_is_refused_naming_it(tmp_path):
    (tmp_path / "a.txt").write_text("alpha\n")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "s.sock"))
        with pytest.raises(InputError, match="s.sock' is a socket"):
            discover_inputs([str(tmp_path)])


def test_a_dangling_link_is_refused_naming_it(tmp_path):
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "gone.txt").symlink_to(tmp_path / "nowhere.txt")
    with pytest.raises(InputError, match="gone.txt' is a symbolic link to .*which does not exist"):
        discover_inputs([str(tmp_path)])


def test_a_glob_with_an_empty_subdirectory_is_no_error(tmp_path):
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "empty").mkdir()
    discovery = discover_inputs([f"{tmp_path}/*"])
    assert [Path(f.path).name for f in discovery.files] == ["a.txt"]
    assert discovery.empty_directories == 1


def test_hidden_names_are_skipped_alike_and_read_when_spelled(tmp_path):
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / ".b.txt").write_text("hidden\n")
    (tmp_path / "_SUCCESS").write_text("")
    for pattern in (str(tmp_path), f"{tmp_path}/*"):
        discovery = discover_inputs([pattern])
        assert [Path(f.path).name for f in discovery.files] == ["a.txt"], pattern
        assert discovery.hidden == 2, pattern
    spelled = discover_inputs([f"{tmp_path}/.*.txt"])
    assert [Path(f.path).name for f in spelled.files] == [".b.txt"]
    assert [Path(f.path).name for f in discover_inputs([str(tmp_path / "_SUCCESS")]).files] == [
        "_SUCCESS"
    ]


def test_the_manifest_reading_report_accounts_for_every_entry(linked, tmp_path, capsys):
    (linked / ".DS_Store").write_text("x")
    (linked / "empty").mkdir()
    (linked / "real" / "a.txt").write_text(TEXT[:3000])
    output = tmp_path / "out"
    before = _tree(linked)
    code = cli.main(
        ["--input", str(linked), "--tokenizer", str(TOKENIZER), "--output", str(output), *FAST]
    )
    assert code == 0, capsys.readouterr().err
    manifest = json.loads((output / "manifest.json").read_text())
    reading = manifest["reading"]
    assert {
        k: reading[k] for k in ("files_found", "files_duplicate", "entries_skipped_hidden")
    } == {
        "files_found": 5,
        "files_duplicate": 3,
        "entries_skipped_hidden": 1,
    }
    assert reading["directories_empty"] == 1
    assert len(manifest["inputs"]) == reading["files_found"] - reading["files_duplicate"]
    assert _tree(linked) == before


def test_a_file_that_changes_while_it_is_read_is_an_error_naming_it(tmp_path, capsys, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT[:20_000])
    real_read = read.read_batches

    def read_then_append(r, options, **kwargs):
        yield from real_read(r, options, **kwargs)
        with open(r.path, "a", encoding="utf-8") as f:  # another program appends as the read ends
            f.write("appended\n")

    monkeypatch.setattr(read, "read_batches", read_then_append)
    output = tmp_path / "out"
    code = cli.main(
        ["--input", str(corpus), "--tokenizer", str(TOKENIZER), "--output", str(output), *FAST]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith("lmshards preprocess: error: Input file ")
    assert f"{str(corpus)!r} changed while it was read (planned: 20,000 bytes" in line
    assert not (output / "manifest.json").exists()
    assert (
        corpus.read_text() == TEXT[:20_000] + "appended\n"
    )  # ours only: lmshards wrote nothing there
