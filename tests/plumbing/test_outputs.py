"""Guards on input and output locations: overlap, lmshards-owned outputs, write preflight, disk errors."""

from __future__ import annotations

import errno
import gc
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fsspec.implementations.local import LocalFileSystem

from lmshards.plumbing import fs
from lmshards.plumbing.errors import OutputError, disk_error_message
from lmshards.plumbing.outputs import (
    WRITE_PROBE_PREFIX,
    check_no_overlap,
    check_writable,
    clear_owned_output,
    owned_entries,
)
from lmshards.schemas.constants import MANIFEST_FORMAT
from lmshards.schemas.directory_kind import is_lmshards_output
from lmshards.schemas.layouts import DATASET_EXPORT_OUTPUT, PREPROCESS_OUTPUT, TOKENIZER_OUTPUT

REPO = Path(__file__).resolve().parents[2]
OUR_MANIFEST = json.dumps({"format": MANIFEST_FORMAT}).encode()
# Other tools' files named manifest.json: a web app's, and one that is not JSON.
WEB_MANIFEST, NOT_JSON = json.dumps({"name": "app", "icons": []}).encode(), b"name: app\n"
ATOMIC_LEFTOVER = ".tmp-" + "0123456789abcdef" * 2


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every file (its bytes), symlink (its target) and directory ('dir') under root, by relative path."""
    tree: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            tree[rel] = f"link:{os.readlink(path)}"
        elif path.is_dir():
            tree[rel] = "dir"
        else:
            tree[rel] = path.read_bytes()
    return tree


def _write(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


CORPUS = {"a.txt": b"first document\n", "sub/b.txt": b"second document\n"}

PREPROCESS_FILES = {
    "manifest.json": OUR_MANIFEST,
    "schema.pbtxt": b"feature {}",
    "train/train-00000-of-00002-5.tfrecord": b"shard0",
    "train/train-00001-of-00002-4.tfrecord": b"shard1",
    "validation/validation-00000-of-00001-1.tfrecord": b"v",
    ".lmshards-tmp/train-00000-abc": b"partial",
    "tokenizer/tokenizer.json": b"{}",
    "tokenizer/lmshards_tokenizer.json": b"{}",
    "stats/stats.json": b"{}",  # `lmshards stats`' default output
    "stats/stats.html": b"<html>",
    "manifest.json" + ATOMIC_LEFTOVER: b"{",
}
TOKENIZER_FILES = {
    "tokenizer.json": b"{}",
    "tokenizer_config.json": b"{}",
    "special_tokens_map.json": b"{}",
    "lmshards_tokenizer.json": b"{}",
}
EXPORT_FILES = {
    "train-00000-of-00002.parquet": b"PAR1",
    "train-00001-of-00002.parquet": b"PAR1",
    "train-00000-of-00001.jsonl" + ATOMIC_LEFTOVER: b'{"text": ',
    "_SUCCESS.json": b"{}",
}


# ------------------------------------------------------------------------ overlap


@pytest.mark.parametrize(
    "output,source,relation",
    [
        ("gs://b/data", "gs://b/data", "is the same location as"),
        ("gs://b/data/", "gs://b/data", "is the same location as"),
        ("gs://b/data", "gcs://b//data/", "is the same location as"),
        ("gs://b/data/out", "gs://b/data", "is inside"),
        ("gs://b/data/out", "gs://b/data/*.txt", "is inside"),
        ("gs://b/data/out", "gs://b/*", "is inside"),
        ("gs://b/data2", "gs://b/data*", "is inside"),  # the glob may match data2
        ("gs://b/x/../data/out", "gs://b/data", "is inside"),
        ("gs://b", "gs://b/data/x.txt", "contains"),
        ("gs://b/data", "gs://b/data/**/*.jsonl", "is the same location as"),
        ("gs://b/", "gs://b/data/**/*.jsonl", "contains"),
    ],
)
def test_gcs_overlap_is_refused_naming_both_paths(output, source, relation):
    with pytest.raises(OutputError) as caught:
        check_no_overlap(["gs://other/corpus", source], output)
    message = str(caught.value)
    assert f"--output {output!r} {relation} --input {source!r}" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "output,source",
    [
        ("gs://b/data", "gs://b/data2"),
        ("gs://b/data2", "gs://b/data"),
        ("gs://b/data2/out", "gs://b/data/*.txt"),
        ("gs://b1/data", "gs://b2/data"),
        ("gs://b/data", "/b/data"),
        ("/b/data", "gs://b/data"),
        ("s3://b/data", "gs://b/data"),
    ],
)
def test_gcs_siblings_and_other_buckets_do_not_overlap(output, source):
    check_no_overlap([source], output)


def _local_cases(root: Path) -> list[tuple[str, str, str]]:
    """(output, input, relation) for a corpus at root/corpus with a symlink root/link -> corpus."""
    corpus = root / "corpus"
    return [
        (str(corpus), str(corpus), "is the same location as"),
        (str(corpus), f"{corpus}/", "is the same location as"),
        (f"{corpus}/", str(root / "corpus" / "sub" / ".."), "is the same location as"),
        (str(root / "link"), str(corpus), "is the same location as"),
        (str(corpus), "corpus", "is the same location as"),  # relative to the working directory
        (f"file://{corpus}", str(corpus), "is the same location as"),
        (str(corpus / "out"), str(corpus), "is inside"),
        (str(corpus / "out"), f"{corpus}/*.txt", "is inside"),
        (str(corpus / "sub" / "out"), f"{corpus}/**/*.txt", "is inside"),
        (str(root / "link" / "out"), str(corpus), "is inside"),
        ("corpus", str(corpus / "sub" / ".." / "a.txt"), "contains"),
        (str(corpus), str(corpus / "a.txt"), "contains"),
        (str(root), f"{corpus}/sub/*.txt", "contains"),
        (str(corpus / "a.txt"), str(corpus / "a.txt"), "is the same location as"),
    ]


def test_local_overlap_is_refused_and_inputs_stay_intact(tmp_path, monkeypatch):
    _write(tmp_path / "corpus", CORPUS)
    (tmp_path / "link").symlink_to(tmp_path / "corpus")
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    for output, source, relation in _local_cases(tmp_path):
        with pytest.raises(OutputError) as caught:
            check_no_overlap([source], output, output_flag="--output_dir", input_flag="--input")
        assert f"--output_dir {output!r} {relation} --input {source!r}" in str(caught.value), (
            output,
            source,
        )
    assert _tree(tmp_path) == before


def test_local_siblings_do_not_overlap(tmp_path, monkeypatch):
    _write(tmp_path / "data", CORPUS)
    monkeypatch.chdir(tmp_path)
    for output, source in [
        (tmp_path / "data2", tmp_path / "data"),
        (tmp_path / "data", tmp_path / "data2"),
        (tmp_path / "out", f"{tmp_path}/data/*.txt"),
        ("data2/out", "data"),
        (tmp_path / "data" / "a.txt.out", tmp_path / "data" / "a.txt"),
    ]:
        check_no_overlap([str(source), "  "], str(output))
    assert not (tmp_path / "data2").exists() and not (tmp_path / "out").exists()


# ------------------------------------------------------------------------ lmshards-owned outputs


@pytest.mark.parametrize(
    "kind,files,marker",
    [
        (PREPROCESS_OUTPUT, PREPROCESS_FILES, "manifest.json"),
        (TOKENIZER_OUTPUT, TOKENIZER_FILES, "lmshards_tokenizer.json"),
        (DATASET_EXPORT_OUTPUT, EXPORT_FILES, "_SUCCESS.json"),
    ],
)
def test_clear_owned_output_removes_a_previous_output_marker_first(tmp_path, kind, files, marker):
    out = tmp_path / "out"
    _write(out, files)
    (out / f"{WRITE_PROBE_PREFIX}{'ab' * 16}").write_bytes(b"probe")  # left by a killed preflight
    top = {rel.split("/", 1)[0] for rel in files} | {f"{WRITE_PROBE_PREFIX}{'ab' * 16}"}

    owned, foreign = owned_entries(str(out), kind=kind)
    assert foreign == () and set(owned) == top and owned[0] == marker

    assert clear_owned_output(str(out), kind=kind) == owned
    assert out.is_dir() and list(out.iterdir()) == []


def test_clear_owned_output_deletes_the_manifest_before_anything_else(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _write(out, PREPROCESS_FILES)
    real_rm = LocalFileSystem.rm

    def rm_then_crash(self, path, recursive=False, **kwargs):
        if os.path.basename(path) == "train":
            raise OSError(errno.EIO, "I/O error", path)
        return real_rm(self, path, recursive=recursive, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "rm", rm_then_crash)
    with pytest.raises(OSError):
        clear_owned_output(str(out), kind=PREPROCESS_OUTPUT)
    assert not (out / "manifest.json").exists()
    assert (out / "train" / "train-00000-of-00002-5.tfrecord").read_bytes() == b"shard0"


@pytest.mark.parametrize(
    "extra,foreign",
    [
        ({"notes.txt": b"mine"}, "notes.txt"),
        ({"train/notes.txt": b"mine"}, "train/notes.txt"),
        ({"train/sub/x.tfrecord": b"mine"}, "train/sub/"),
        (
            {"validation/train-00000-of-00001-3.tfrecord": b"mine"},
            "validation/train-00000-of-00001-3.tfrecord",
        ),
        ({"tokenizer/vocab.txt": b"mine"}, "tokenizer/vocab.txt"),
        ({"stats/notes.txt": b"mine"}, "stats/notes.txt"),
        ({"corpus/a.txt": b"mine"}, "corpus/"),
        ({"manifest.json.bak": b"mine"}, "manifest.json.bak"),
    ],
)
def test_clear_owned_output_refuses_foreign_files_and_deletes_nothing(tmp_path, extra, foreign):
    out = tmp_path / "out"
    _write(out, {**PREPROCESS_FILES, **extra})
    before = _tree(out)
    assert foreign in owned_entries(str(out), kind=PREPROCESS_OUTPUT).foreign
    with pytest.raises(OutputError, match="did not write") as caught:
        clear_owned_output(str(out), kind=PREPROCESS_OUTPUT)
    assert repr(foreign) in str(caught.value) and repr(str(out)) in str(caught.value)
    assert _tree(out) == before


def test_a_corpus_given_as_output_is_never_cleared(tmp_path):
    """`--input DIR --output DIR --overwrite` once deleted the whole corpus."""
    corpus = tmp_path / "corpus"
    _write(corpus, {f"doc{i:02d}.txt": f"document {i}\n".encode() for i in range(12)})
    before = _tree(corpus)
    with pytest.raises(OutputError, match=r"'doc00.txt', 'doc01.txt', .* and 7 more"):
        clear_owned_output(str(corpus), kind=PREPROCESS_OUTPUT)
    assert _tree(corpus) == before


def test_a_symlinked_split_directory_is_foreign(tmp_path):
    user = tmp_path / "user"
    _write(user, {"train-00000-of-00001-1.tfrecord": b"user's"})
    out = tmp_path / "out"
    _write(out, {"manifest.json": OUR_MANIFEST})
    (out / "train").symlink_to(user)
    (out / "schema.pbtxt").symlink_to(user / "train-00000-of-00001-1.tfrecord")
    before = _tree(tmp_path)
    assert owned_entries(str(out), kind=PREPROCESS_OUTPUT) == (
        ("manifest.json",),
        ("schema.pbtxt", "train"),
    )
    with pytest.raises(OutputError):
        clear_owned_output(str(out), kind=PREPROCESS_OUTPUT)
    assert _tree(tmp_path) == before


def test_foreign_files_of_other_kinds(tmp_path):
    tok, export = tmp_path / "tok", tmp_path / "export"
    _write(tok, {**TOKENIZER_FILES, "vocab.txt": b"a\n", "train/x": b""})
    _write(export, {**EXPORT_FILES, "data.csv": b"text\n", "manifest.json": b"{}"})
    assert owned_entries(str(tok), kind=TOKENIZER_OUTPUT).foreign == ("train/", "vocab.txt")
    assert owned_entries(str(export), kind=DATASET_EXPORT_OUTPUT).foreign == (
        "data.csv",
        "manifest.json",
    )
    before = _tree(tmp_path)
    for path, kind in ((tok, TOKENIZER_OUTPUT), (export, DATASET_EXPORT_OUTPUT)):
        with pytest.raises(OutputError, match=f"earlier lmshards {kind.name} output"):
            clear_owned_output(str(path), kind=kind, flag="--output")
    assert _tree(tmp_path) == before


def test_missing_empty_and_file_outputs(tmp_path):
    assert owned_entries(str(tmp_path / "missing"), kind=PREPROCESS_OUTPUT) == ((), ())
    assert clear_owned_output(str(tmp_path / "missing"), kind=PREPROCESS_OUTPUT) == ()
    assert not (tmp_path / "missing").exists()
    (tmp_path / "empty").mkdir()
    assert clear_owned_output(str(tmp_path / "empty"), kind=TOKENIZER_OUTPUT) == ()
    (tmp_path / "file").write_bytes(b"data")
    with pytest.raises(OutputError, match="--tokenizer_output '.*file' is a file"):
        clear_owned_output(str(tmp_path / "file"), kind=TOKENIZER_OUTPUT, flag="--tokenizer_output")
    assert (tmp_path / "file").read_bytes() == b"data"


def test_another_tools_manifest_json_is_never_deleted_as_ours(tmp_path):
    for name, data in (("web", WEB_MANIFEST), ("yaml", NOT_JSON)):
        _write(
            tmp_path / name, {"manifest.json": data, "train/train-00000-of-00001-1.tfrecord": b"x"}
        )
        assert owned_entries(str(tmp_path / name), kind=PREPROCESS_OUTPUT) == (
            ("train",),
            ("manifest.json",),
        )
    before = _tree(tmp_path)
    for name in ("web", "yaml"):
        with pytest.raises(
            OutputError, match=r"holds files lmshards did not write \('manifest.json'\)"
        ):
            clear_owned_output(str(tmp_path / name), kind=PREPROCESS_OUTPUT)
    assert _tree(tmp_path) == before


def test_is_lmshards_output(tmp_path):
    _write(tmp_path / "complete", {"manifest.json": OUR_MANIFEST})
    # A manifest.json that is not JSON may be a damaged one of ours: its directory stays out of the inputs.
    _write(tmp_path / "damaged", {"manifest.json": OUR_MANIFEST[:-3]})
    _write(tmp_path / "web_app", {"manifest.json": WEB_MANIFEST, "notes.txt": b"text\n"})
    _write(tmp_path / "partial", {".lmshards-tmp/x": b""})
    _write(tmp_path / "corpus", CORPUS)
    _write(tmp_path / "shards_only", {"train/train-00000-of-00001-1.tfrecord": b""})
    assert is_lmshards_output(str(tmp_path / "complete")) and is_lmshards_output(
        str(tmp_path / "partial")
    )
    assert is_lmshards_output(str(tmp_path / "damaged"))
    assert not is_lmshards_output(str(tmp_path / "web_app"))
    assert not is_lmshards_output(str(tmp_path / "corpus"))
    assert not is_lmshards_output(str(tmp_path / "shards_only"))
    assert not is_lmshards_output(str(tmp_path / "missing"))


def _gcs_write(prefix: str, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        fs.write_bytes_atomic(f"{prefix}/{rel}", data)


def _gcs_tree(prefix: str) -> dict[str, bytes]:
    filesystem, root = fs.filesystem(prefix)
    filesystem.invalidate_cache()
    return {name[len(root) + 1 :]: filesystem.cat_file(name) for name in filesystem.find(root)}


@pytest.mark.gcs
def test_clear_owned_output_on_gcs(gcs_emulator):
    out = f"{gcs_emulator}/owned/out"
    _gcs_write(out, PREPROCESS_FILES)
    assert is_lmshards_output(out) and not is_lmshards_output(f"{out}/train")
    owned, foreign = owned_entries(out, kind=PREPROCESS_OUTPUT)
    assert foreign == () and owned[0] == "manifest.json"
    assert set(owned) == {rel.split("/", 1)[0] for rel in PREPROCESS_FILES}

    assert clear_owned_output(out, kind=PREPROCESS_OUTPUT) == owned
    assert _gcs_tree(out) == {}


@pytest.mark.gcs
def test_clear_owned_output_on_gcs_refuses_foreign_objects(gcs_emulator):
    out = f"{gcs_emulator}/owned/mixed"
    sibling = f"{gcs_emulator}/owned/mixed2"
    _gcs_write(out, {**TOKENIZER_FILES, "corpus/a.txt": b"user's", "notes.txt": b"user's"})
    _gcs_write(sibling, {"tokenizer.json": b"other"})
    before = _gcs_tree(f"{gcs_emulator}/owned")
    with pytest.raises(OutputError, match=r"\('corpus/', 'notes.txt'\)"):
        clear_owned_output(out, kind=TOKENIZER_OUTPUT)
    assert _gcs_tree(f"{gcs_emulator}/owned") == before


# ------------------------------------------------------------------------ preflight


def _probes(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(WRITE_PROBE_PREFIX)]


def test_check_writable_creates_the_directory_and_leaves_no_probe(tmp_path):
    _write(tmp_path / "out", CORPUS)
    before = _tree(tmp_path / "out")
    check_writable(str(tmp_path / "out"))
    assert _tree(tmp_path / "out") == before
    check_writable(str(tmp_path / "new" / "nested") + "/")
    assert (tmp_path / "new" / "nested").is_dir() and list(
        (tmp_path / "new" / "nested").iterdir()
    ) == []


def test_check_writable_refuses_a_file(tmp_path):
    (tmp_path / "out").write_bytes(b"user's")
    with pytest.raises(OutputError, match="--output_dir '.*out' is a file"):
        check_writable(str(tmp_path / "out"), flag="--output_dir")
    assert (tmp_path / "out").read_bytes() == b"user's"


def _fail_on_probe(monkeypatch, name: str, code: int) -> None:
    """Makes os.<name> raise OSError(code) for the write probe only (tests run as root, where chmod stops nothing)."""
    real = getattr(os, name)

    def failing(target, *args, **kwargs):
        path = target if isinstance(target, str) else ""
        if name != "open" or WRITE_PROBE_PREFIX in path:
            raise OSError(code, os.strerror(code), path or None)
        return real(target, *args, **kwargs)

    monkeypatch.setattr(os, name, failing)


@pytest.mark.parametrize(
    "call,code,words",
    [
        ("open", errno.EROFS, "the file system is read-only"),
        ("open", errno.EACCES, "permission denied"),
        ("fsync", errno.ENOSPC, "the disk is full"),
        ("fsync", errno.EDQUOT, "the disk quota is exceeded"),
    ],
)
def test_check_writable_reports_disk_errors_in_one_line(tmp_path, monkeypatch, call, code, words):
    out = tmp_path / "out"
    _write(out, CORPUS)
    before = _tree(out)
    _fail_on_probe(monkeypatch, call, code)
    with pytest.raises(OutputError) as caught:
        check_writable(str(out))
    monkeypatch.undo()
    message = str(caught.value)
    assert message.startswith(
        f"--output {str(out)!r} is not writable: {words} ({os.strerror(code)}); "
    )
    assert "\n" not in message
    assert _tree(out) == before  # the probe, written before fsync failed, is gone too


def test_check_writable_other_os_errors(tmp_path, monkeypatch):
    _fail_on_probe(monkeypatch, "open", errno.EIO)
    with pytest.raises(
        OutputError, match="a test file cannot be created and removed there .*Input/output error"
    ):
        check_writable(str(tmp_path))
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_check_writable_on_a_read_only_directory(tmp_path):
    out = tmp_path / "ro"
    _write(out, CORPUS)
    before = _tree(out)
    out.chmod(0o555)
    try:
        try:
            (out / "root-can-write").write_bytes(b"")
        except PermissionError:
            pass
        else:
            pytest.skip(
                "running as root: chmod does not stop writes (covered by the monkeypatched EACCES case)"
            )
        with pytest.raises(OutputError, match="is not writable: permission denied"):
            check_writable(str(out))
        with pytest.raises(OutputError, match="permission denied"):
            check_writable(str(out / "sub"))
    finally:
        out.chmod(0o755)
        (out / "root-can-write").unlink(missing_ok=True)
    assert _tree(out) == before


# Bind-mounts $1 read-only in a private mount namespace (root in a user namespace), then runs python.
_READ_ONLY_BIND = (
    'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 77; shift; exec "$@"'
)
_CHECK_WRITABLE = """
import sys
from lmshards.plumbing.errors import OutputError
from lmshards.plumbing.outputs import check_writable
for location in sys.argv[1:]:
    try:
        check_writable(location)
        print("writable")
    except OutputError as e:
        print(e)
"""


def test_check_writable_on_a_read_only_file_system(tmp_path):
    """A real read-only bind mount, where unprivileged user and mount namespaces are allowed."""
    unshare = shutil.which("unshare")
    if not unshare or subprocess.run([unshare, "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("no user/mount namespaces here (covered by the monkeypatched EROFS case)")
    out = tmp_path / "ro"
    _write(out, CORPUS)
    before = _tree(out)
    proc = subprocess.run(
        [
            unshare,
            "-rm",
            "sh",
            "-c",
            _READ_ONLY_BIND,
            "sh",
            str(out),
            sys.executable,
            "-c",
            _CHECK_WRITABLE,
            str(out),
            str(out / "sub"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    if proc.returncode == 77:
        pytest.skip(f"cannot bind-mount read-only here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    fix = "the file system is read-only (Read-only file system); choose a location on a writable file system."
    assert proc.stdout.splitlines() == [
        f"--output {str(out)!r} is not writable: {fix}",
        f"--output {str(out / 'sub')!r} is not writable: {fix}",
    ]
    assert _tree(out) == before


@pytest.mark.gcs
def test_check_writable_on_gcs(gcs_emulator):
    out = f"{gcs_emulator}/writable/out"
    _gcs_write(out, {"keep.txt": b"user's"})
    check_writable(out)
    check_writable(f"{gcs_emulator}/writable/new/")
    assert _gcs_tree(f"{gcs_emulator}/writable") == {"out/keep.txt": b"user's"}
    with pytest.raises(OutputError, match="is a file"):
        check_writable(f"{out}/keep.txt")


@pytest.mark.gcs
def test_check_writable_on_a_missing_bucket(gcs_emulator):
    location = "gs://lmshards-no-such-bucket/out"
    with pytest.raises(OutputError) as caught:
        check_writable(location)
    message = str(caught.value)
    assert message.startswith(
        f"--output {location!r} is not writable: bucket 'lmshards-no-such-bucket' does not exist"
    )
    assert "\n" not in message


def test_disk_error_message():
    path = "/data/out"
    full = OSError(errno.ENOSPC, "No space left on device")
    assert disk_error_message(full, path) == (
        "Cannot write to '/data/out': the disk is full (No space left on device); free some space or "
        "choose another location, then run the command again."
    )
    try:
        try:
            raise OSError(errno.EROFS, "Read-only file system")
        except OSError as e:
            raise RuntimeError("writing shard 3 failed") from e
    except RuntimeError as wrapped:
        assert "the file system is read-only" in disk_error_message(wrapped, path)
    beam_text = RuntimeError(
        "Traceback ...\nOSError: [Errno 122] Disk quota exceeded: '/data/out/x' [while running 'WriteShard']"
    )
    assert "the disk quota is exceeded" in disk_error_message(beam_text, path)
    assert "permission denied" in disk_error_message(
        PermissionError(errno.EACCES, "Permission denied"), path
    )
    assert disk_error_message(FileNotFoundError(errno.ENOENT, "No such file"), path) is None
    assert disk_error_message(ValueError("bad value"), path) is None


def test_a_users_file_named_like_a_shard_survives_overwrite_unless_the_manifest_lists_it(tmp_path):
    out = tmp_path / "out"
    listed = {
        "format": MANIFEST_FORMAT,
        "splits": {
            "train": {"shards": [{"path": "train/train-00000-of-00002-5.tfrecord"}]},
            "validation": {"shards": [{"path": "validation/validation-00000-of-00001-1.tfrecord"}]},
        },
    }
    # The manifest lists one train shard: the other name is a user's file that only looks like a shard.
    _write(out, {**PREPROCESS_FILES, "manifest.json": json.dumps(listed).encode()})
    before = _tree(out)
    assert owned_entries(str(out), kind=PREPROCESS_OUTPUT).foreign == (
        "train/train-00001-of-00002-4.tfrecord",
    )
    with pytest.raises(OutputError, match="'train/train-00001-of-00002-4.tfrecord'"):
        clear_owned_output(str(out), kind=PREPROCESS_OUTPUT)
    assert _tree(out) == before


def test_the_leftovers_of_a_run_that_failed_before_its_manifest_are_cleared(tmp_path):
    out = tmp_path / "out"
    leftovers = {k: v for k, v in PREPROCESS_FILES.items() if not k.startswith("manifest.json")}
    _write(out, leftovers)
    assert owned_entries(str(out), kind=PREPROCESS_OUTPUT).foreign == ()
    clear_owned_output(str(out), kind=PREPROCESS_OUTPUT)
    assert list(out.iterdir()) == []


class _Interrupted(Exception):
    pass


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_a_file_written_in_pieces_appears_only_complete(where, tmp_path, request):
    base = str(tmp_path) if where == "local" else request.getfixturevalue("gcs_emulator")
    done, broken = fs.join(base, "pieces", "done.txt"), fs.join(base, "pieces", "broken.txt")
    with fs.open_atomic(done) as f:
        f.write(b"one ")
        assert not fs.exists(done)  # not before the end
        f.write(b"two")
    assert fs.read_bytes(done) == b"one two"
    with pytest.raises(_Interrupted), fs.open_atomic(broken) as f:
        f.write(b"half")
        raise _Interrupted
    del f
    gc.collect()  # a dropped file object must not finalize the upload either
    assert not fs.exists(broken)
    assert [entry.rsplit("/", 1)[-1] for entry in fs.listdir(fs.join(base, "pieces"))] == [
        "done.txt"
    ]
