"""`lmshards preprocess` end to end: the bundled sample corpus, real runners, real files, gs:// via the emulator."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import zstandard

from lmshards.plumbing import fs
from lmshards.preprocess.cli import main as preprocess_main
from lmshards.preprocess.options import PreprocessConfig
from lmshards.preprocess.pipeline import run_pipeline
from lmshards.preprocess.sources import InputError, ReadOptions, iter_documents
from lmshards.preprocess.stages.encode import doc_hash
from lmshards.preprocess.stages.split import split_of, validation_threshold
from lmshards.schemas.manifest import read_manifest
from lmshards.schemas.records import read_records
from lmshards.schemas.shards import parse_shard_name

IN_PROCESS = ["--direct_running_mode=in_memory"]
VALIDATION_FRACTION = 0.05
GROUP_TOKENS = 200_000  # several packing groups on the ~1.5M-token sample


def _config(inputs, tokenizer, output, **overrides) -> PreprocessConfig:
    values = dict(
        inputs=tuple(str(i) for i in inputs),
        tokenizer=str(tokenizer),
        output=str(output),
        validation_fraction=VALIDATION_FRACTION,
        packing_group_tokens=GROUP_TOKENS,
    )
    return PreprocessConfig(**{**values, **overrides})


def _sample_glob(sample_dir: Path) -> str:
    return str(sample_dir / "*" / "*.txt")


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory, sample_dir, sample_tokenizer):
    """The sample corpus preprocessed by the in-process runner: (config, manifest)."""
    config = _config(
        [_sample_glob(sample_dir)], sample_tokenizer, tmp_path_factory.mktemp("run") / "out"
    )
    return config, run_pipeline(config, IN_PROCESS)


def _files(output: str) -> dict[str, bytes]:
    root = Path(output)
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _manifest_without_time(output: str) -> dict:
    data = json.loads((Path(output) / "manifest.json").read_text())
    data.pop("created_at")
    return data


@pytest.mark.slow
def test_token_accounting_matches_an_independent_count(sample_run, sample_dir, sample_tokenizer):
    from tokenizers import Tokenizer

    config, manifest = sample_run
    tokenizer = Tokenizer.from_file(str(sample_tokenizer))
    docs = list(iter_documents([_sample_glob(sample_dir)], ReadOptions()))
    lengths = np.array(
        [
            len(e.ids)
            for i in range(0, len(docs), 2000)
            for e in tokenizer.encode_batch(docs[i : i + 2000])
        ]
    )
    is_validation = split_of(
        np.array([doc_hash(d) for d in docs], dtype=np.uint64),
        validation_threshold(VALIDATION_FRACTION),
    )
    for name, selected in (("train", ~is_validation), ("validation", is_validation)):
        totals = manifest.split(name).totals
        assert totals.documents == int(selected.sum()) > 0
        assert totals.tokens_in == int(lengths[selected].sum())
        assert totals.tokens_in == totals.tokens_written + totals.tokens_dropped
        assert (
            totals.tokens_written == totals.records * config.seq_len and totals.padding_tokens == 0
        )
        # At most one partial block dropped per packing group.
        assert totals.tokens_dropped < config.seq_len * max(1, totals.tokens_in // GROUP_TOKENS + 1)
    assert manifest.reading["documents"] == len(docs)
    assert manifest.tokenizer.vocab_size == tokenizer.get_vocab_size(with_added_tokens=True)
    assert manifest.tokenizer.special_token_ids["pad"] == tokenizer.token_to_id("<pad>")


@pytest.mark.slow
def test_shards_are_balanced_and_parse_with_the_run_mlm_spec(sample_run):
    import tensorflow as tf

    config, manifest = sample_run
    spec = {
        name: tf.io.FixedLenFeature([config.seq_len], tf.int64)
        for name in ("input_ids", "attention_mask")
    }
    for name in ("train", "validation"):
        split = manifest.split(name)
        records = [s.records for s in split.shards]
        assert len(records) % 8 == 0 and len(records) >= 8
        assert max(records) - min(records) <= 1
        paths = manifest.shard_paths(config.output, name)
        assert [parse_shard_name(p)[3] for p in paths] == records
        dataset = (
            tf.data.TFRecordDataset(paths).batch(512).map(lambda x: tf.io.parse_example(x, spec))
        )
        count = 0
        for batch in dataset:
            ids = batch["input_ids"].numpy()
            assert ids.shape[1] == config.seq_len and ids.max() < manifest.tokenizer.vocab_size
            assert (batch["attention_mask"].numpy() == 1).all()
            count += ids.shape[0]
        assert count == split.records == split.totals.records
    assert sorted(p.name for p in Path(config.output).iterdir()) == [
        "manifest.json",
        "schema.pbtxt",
        "tokenizer",
        "train",
        "validation",
    ]


@pytest.mark.slow
def test_output_bytes_do_not_depend_on_runner_workers_ranges_or_batches(
    sample_run, tmp_path, sample_dir, sample_tokenizer
):
    config, _ = sample_run
    other = _config(
        [_sample_glob(sample_dir)],
        sample_tokenizer,
        tmp_path / "out",
        range_mb=0.25,
        documents_per_tokenizer_call=97,
    )
    run_pipeline(other, ["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    assert _files(other.output).keys() == _files(config.output).keys()
    for relpath, data in _files(config.output).items():
        if relpath != "manifest.json":
            assert _files(other.output)[relpath] == data, relpath
    assert _manifest_without_time(other.output) == _manifest_without_time(config.output)


@pytest.mark.slow
def test_compressed_inputs_give_the_same_shards_as_their_plain_text(
    tmp_path, sample_dir, sample_tokenizer
):
    """.zst (several frames), .xz and .ndjson inputs are read as their text: the same shard bytes as the
    plain files they were made from."""
    import lzma

    text = (sample_dir / "en" / "persuasion.txt").read_bytes()
    lines = (
        (sample_dir / "en" / "libreoffice_help_guide.txt").read_text(encoding="utf-8").splitlines()
    )
    records = "".join(json.dumps({"text": line}) + "\n" for line in lines).encode()
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    plain.mkdir()
    packed.mkdir()
    (plain / "a.txt").write_bytes(text)
    (plain / "b.jsonl").write_bytes(records)
    half = len(text) // 2
    zstd = zstandard.ZstdCompressor()
    (packed / "a.txt.zst").write_bytes(zstd.compress(text[:half]) + zstd.compress(text[half:]))
    (packed / "b.ndjson.xz").write_bytes(lzma.compress(records))
    outputs = []
    for corpus in (plain, packed):
        config = _config([corpus], sample_tokenizer, tmp_path / f"out-{corpus.name}")
        outputs.append((config.output, run_pipeline(config, IN_PROCESS)))
    (plain_out, plain_manifest), (packed_out, packed_manifest) = outputs
    assert plain_manifest.splits == packed_manifest.splits
    assert {k: v for k, v in _files(plain_out).items() if k != "manifest.json"} == {
        k: v for k, v in _files(packed_out).items() if k != "manifest.json"
    }


@pytest.mark.slow
def test_refuses_non_empty_output_and_overwrite_replaces_it(
    sample_run, tmp_path, sample_tokenizer, capsys
):
    config, _ = sample_run
    before = _files(config.output)
    argv = ["--input", config.inputs[0], "--tokenizer", config.tokenizer, "--output", config.output]
    assert preprocess_main(argv) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert _files(config.output) == before

    out = tmp_path / "out"
    shutil.copytree(config.output, out)
    (out / "notes.txt").write_text("the user's own file")
    small = tmp_path / "small.txt"
    small.write_text("\n".join(f"line {i} of a small corpus with some words" for i in range(400)))
    argv = [
        "--input",
        str(small),
        "--tokenizer",
        config.tokenizer,
        "--output",
        str(out),
        "--overwrite",
        "--seq_len",
        "16",
        *IN_PROCESS,
    ]
    copied = _files(str(out))
    assert preprocess_main(argv) == 2  # --overwrite replaces only what lmshards wrote
    assert "'notes.txt'" in capsys.readouterr().err
    assert _files(str(out)) == copied

    (out / "notes.txt").unlink()
    assert preprocess_main(argv) == 0
    assert "records" in capsys.readouterr().out
    manifest = read_manifest(str(out))
    assert [i.path for i in manifest.inputs] == [str(small)]
    kept = set(_files(str(out))) - {"manifest.json", "schema.pbtxt", "tokenizer/tokenizer.json"}
    assert kept == {s.path for split in manifest.splits.values() for s in split.shards}


@pytest.mark.slow
def test_a_run_that_fails_midway_leaves_no_manifest(tmp_path, sample_tokenizer):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "good.txt").write_text("a good document\n" * 50)
    (inputs / "bad.txt.gz").write_bytes(
        gzip.compress(b"a document\n" * 1000)[:-40]
    )  # truncated: fails when read
    config = _config([inputs], sample_tokenizer, tmp_path / "out")
    with pytest.raises(InputError, match="bad.txt.gz"):
        run_pipeline(config, IN_PROCESS)
    assert _files(config.output) == {}  # no manifest, and the partial output removed


@pytest.mark.slow
def test_a_worker_process_error_ends_in_one_clean_line(tmp_path, sample_tokenizer, capsys):
    """With worker processes the error comes back as the worker's traceback text; the last line is still clean.

    (Beam's worker processes print that traceback to the terminal themselves, outside the launcher's logging.)
    """
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "good.txt").write_text("a good document\n" * 50)
    (inputs / "bad.txt.gz").write_bytes(gzip.compress(b"a document\n" * 1000)[:-40])
    argv = [
        "--input",
        str(inputs),
        "--tokenizer",
        str(sample_tokenizer),
        "--output",
        str(tmp_path / "out"),
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=2",
    ]
    assert preprocess_main(argv) == 2
    last = capsys.readouterr().err.rstrip().splitlines()[-1]
    assert last.startswith(
        f"lmshards preprocess: error: {str(inputs / 'bad.txt.gz')!r}: corrupt or truncated"
    )
    assert "[while running" not in last
    assert _files(str(tmp_path / "out")) == {}


@pytest.fixture
def bad_inputs(tmp_path, sample_tokenizer, sample_dir):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"model": {"type": "BPE"')
    short = tmp_path / "short_tokenizer"
    short.mkdir()
    shutil.copy(sample_tokenizer, short / "tokenizer.json")
    (short / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 64}))
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    zstd_txt = tmp_path / "zstd.txt"
    zstd_txt.write_bytes(zstandard.ZstdCompressor().compress(b"hello\n" * 100))
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(("Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e.\n" * 50).encode("latin-1"))
    csv = tmp_path / "table.csv"
    csv.write_text("id,text\n1,hello\n")
    return {
        "zstd_txt": zstd_txt,
        "latin1": latin1,
        "csv": csv,
        "corrupt": corrupt,
        "short": short,
        "a_file": a_file,
        "good": str(sample_tokenizer),
        "input": str(sample_dir / "en" / "persuasion.txt"),
        "out": str(tmp_path / "out"),
    }


@pytest.mark.parametrize(
    "case,flags,named",
    [
        ("corrupt tokenizer", {"--tokenizer": "{corrupt}"}, "{corrupt}"),
        ("seq_len too small", {"--seq_len": "4"}, "--seq_len: '4' is not a whole number in [8, "),
        (
            "seq_len above model max",
            {"--tokenizer": "{short}", "--seq_len": "128"},
            "model_max_length 64",
        ),
        ("output is a file", {"--output": "{a_file}"}, "{a_file}"),
        ("missing glob", {"--input": "{out}/nowhere/*.txt"}, "nowhere/*.txt"),
        ("zstd under .txt", {"--input": "{zstd_txt}"}, "rename it to zstd.txt.zst"),
        ("latin-1 text", {"--input": "{latin1}"}, "--encoding latin-1"),
        ("csv", {"--input": "{csv}"}, "is CSV"),
        ("bad encoding", {"--encoding": "klingon"}, "--encoding 'klingon'"),
        ("empty marker regex", {"--doc_marker_regex": "x*"}, "matches an empty line"),
    ],
)
def test_bad_input_is_a_clear_error_before_any_work(bad_inputs, capsys, case, flags, named):
    args = {"--input": "{input}", "--tokenizer": "{good}", "--output": "{out}", **flags}
    argv = [part.format(**bad_inputs) for flag, value in args.items() for part in (flag, value)]
    try:
        code = preprocess_main(argv)
    except SystemExit as e:  # a flag's range is argparse's error, before anything else runs
        code = e.code
    assert code == 2, case
    err = capsys.readouterr().err
    assert named.format(**bad_inputs) in err and "Traceback" not in err
    assert not Path(bad_inputs["out"]).exists()


@pytest.mark.gcs
@pytest.mark.slow
def test_gcs_inputs_tokenizer_and_output(gcs_emulator, sample_dir, sample_tokenizer):
    bucket = gcs_emulator
    for path in (sample_dir / "en" / "persuasion.txt", sample_dir / "zh" / "lunyu_shijing.txt"):
        fs.write_bytes_atomic(f"{bucket}/corpus/{path.parent.name}/{path.name}", path.read_bytes())
    fs.write_bytes_atomic(f"{bucket}/tok/tokenizer.json", sample_tokenizer.read_bytes())
    config = _config(
        [f"{bucket}/corpus/*/*.txt"], f"{bucket}/tok", f"{bucket}/out", target_shard_mb=0.05
    )
    manifest = run_pipeline(config, IN_PROCESS)
    assert read_manifest(config.output) == manifest
    assert [i.path for i in manifest.inputs] == [
        f"{bucket}/corpus/en/persuasion.txt",
        f"{bucket}/corpus/zh/lunyu_shijing.txt",
    ]
    for name in ("train", "validation"):
        split = manifest.split(name)
        assert len(split.shards) % 8 == 0 and split.records > 0
        for shard, path in zip(split.shards, manifest.shard_paths(config.output, name)):
            data = fs.read_bytes(path)
            assert len(data) == shard.bytes and hashlib.sha256(data).hexdigest() == shard.sha256
            with fs.open_file(path, "rb") as f:
                assert sum(1 for _ in read_records(f)) == shard.records
    assert len(manifest.split("train").shards) > 8  # sized by bytes, rounded up to a multiple of 8
    assert not any(".lmshards-tmp" in p for p in fs.listdir(config.output))


def test_worker_log_lines_of_ours_are_kept_and_shortened_beam_chatter_dropped():
    import logging

    from lmshards.preprocess.cli import _from_preprocess_or_error

    def record(level: int, entry: str) -> logging.LogRecord:
        return logging.LogRecord("beam", level, __file__, 1, "Worker: %s", (entry,), None)

    progress = record(
        logging.INFO,
        'severity: INFO timestamp { seconds: 1 } message: "read 12 documents, 0.1 MB '
        '(6 documents/s, 0.05 MB/s)" instruction_id: "bundle_5" log_location: '
        '"/repo/preprocess/read.py:147" thread: "Thread-13"',
    )
    assert _from_preprocess_or_error(progress)
    assert progress.getMessage() == "worker: read 12 documents, 0.1 MB (6 documents/s, 0.05 MB/s)"
    chatter = record(
        logging.WARNING,
        'message: "No semi_persistent_directory found" log_location: '
        '"/venv/apache_beam/runners/worker/sdk_worker_main.py:421"',
    )
    assert not _from_preprocess_or_error(chatter)
    assert _from_preprocess_or_error(
        record(logging.ERROR, 'message: "boom" log_location: "/venv/apache_beam/x.py:1"')
    )
