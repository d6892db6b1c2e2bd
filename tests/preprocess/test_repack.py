"""`preprocess --keep_tokens` and `lmshards repack`: the repacked shards and manifest are exactly those
preprocess writes from the text with the same options, and every output rule of preprocess holds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.plumbing.errors import OutputError
from lmshards.plumbing.flag_types import FlagRangeError
from lmshards.plumbing.outputs import owned_entries
from lmshards.preprocess.failures import RunFailure
from lmshards.preprocess.options import PreprocessConfig
from lmshards.preprocess.pipeline import run_pipeline
from lmshards.preprocess.repack import RepackConfig, run_repack
from lmshards.preprocess.stages.tokens import TokenStoreError, read_store_manifest
from lmshards.schemas.layouts import PREPROCESS_OUTPUT
from lmshards.schemas.manifest import read_manifest

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
IN_PROCESS = ["--direct_running_mode=in_memory"]
# The store's run: several packing groups and both splits on the ~550-document golden corpus.
BASE = dict(validation_fraction=0.2, packing_group_tokens=2000, seq_len=64)
# Manifest keys that differ between a repack and the equal preprocess run.
REPACK_ONLY = ("created_at", "repacked_from")


def _preprocess(output: Path, **options) -> PreprocessConfig:
    config = PreprocessConfig(
        inputs=(str(GOLDEN / "corpus" / "*.txt"),),
        tokenizer=str(GOLDEN / "tokenizer.json"),
        output=str(output),
        **{**BASE, **options},
    )
    run_pipeline(config, IN_PROCESS)
    return config


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _manifest(root: Path, drop=REPACK_ONLY) -> dict:
    data = json.loads((root / "manifest.json").read_text())
    return {k: v for k, v in data.items() if k not in drop}


@pytest.fixture(scope="module")
def store_run(tmp_path_factory) -> Path:
    """A preprocess output that keeps its tokens."""
    output = tmp_path_factory.mktemp("store") / "out"
    _preprocess(output, keep_tokens=True)
    return output


def _assert_same_as_preprocess(repacked: Path, text_run: Path) -> None:
    got, want = _files(repacked), _files(text_run)
    assert sorted(got) == sorted(want)
    assert [name for name in want if name != "manifest.json" and got[name] != want[name]] == []
    assert _manifest(repacked) == _manifest(text_run)


def test_keep_tokens_changes_no_shard_and_only_adds_the_tokens_field(store_run, tmp_path):
    plain = tmp_path / "plain"
    _preprocess(plain)
    kept = {k: v for k, v in _files(store_run).items() if not k.startswith("tokens/")}
    assert kept.keys() == _files(plain).keys()
    assert all(v == _files(plain)[k] for k, v in kept.items() if k != "manifest.json")
    with_tokens = _manifest(store_run, drop=("created_at",))
    assert with_tokens.pop("tokens") == "tokens"
    assert with_tokens == _manifest(plain, drop=("created_at",))
    store = read_store_manifest(str(store_run / "tokens"))
    manifest = read_manifest(str(store_run))
    assert store.documents == sum(s.totals.documents for s in manifest.splits.values())
    assert store.tokens == sum(s.totals.tokens_in for s in manifest.splits.values())
    assert store.reading == manifest.reading and store.inputs == manifest.inputs
    assert store.tokenizer.fingerprint == manifest.tokenizer.fingerprint
    assert store.id_dtype == "uint16"
    # Target: no larger than the shard set beside it.
    shard_bytes = sum(sh.bytes for s in manifest.splits.values() for sh in s.shards)
    assert store.data_bytes < shard_bytes


# One case per repack option; seq_len 8 is far below most documents' length, 256 above all of them.
@pytest.mark.parametrize(
    "options",
    [
        {"seq_len": 8},
        {"seq_len": 256},
        {"shard_multiple": 3},
        {"num_shards": 5, "shard_multiple": 1},
        {"validation_fraction": 0.5},
        {"seed": 11},
        {"remainder": "pad", "seq_len": 48},
        {"packing_group_tokens": 700},
        {"target_shard_mb": 0.004, "shard_multiple": 1},
        {"packing": "best_fit", "remainder": "pad"},
        {"packing": "best_fit", "remainder": "pad", "seq_len": 8},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_repack_writes_what_preprocess_writes_from_the_text(store_run, tmp_path, options):
    _preprocess(tmp_path / "text", **options)
    manifest = run_repack(
        RepackConfig(tokens=str(store_run), output=str(tmp_path / "repacked"), **options),
        IN_PROCESS,
    )
    _assert_same_as_preprocess(tmp_path / "repacked", tmp_path / "text")
    assert manifest.repacked_from == str(store_run / "tokens")
    assert manifest.tokens is None


def test_num_shards_0_sizes_the_shards_by_bytes_again(tmp_path):
    _preprocess(tmp_path / "store", keep_tokens=True, num_shards=5)
    _preprocess(tmp_path / "text", target_shard_mb=0.004)
    run_repack(
        RepackConfig(
            tokens=str(tmp_path / "store"),
            output=str(tmp_path / "repacked"),
            num_shards=0,
            target_shard_mb=0.004,
        ),
        IN_PROCESS,
    )
    _assert_same_as_preprocess(tmp_path / "repacked", tmp_path / "text")


def test_the_store_itself_or_the_set_holding_it_and_unchanged_options_give_the_store_runs_shards(
    store_run, tmp_path
):
    run_repack(
        RepackConfig(tokens=str(store_run / "tokens"), output=str(tmp_path / "a")), IN_PROCESS
    )
    run_repack(RepackConfig(tokens=str(store_run), output=str(tmp_path / "b")), IN_PROCESS)
    original = {k: v for k, v in _files(store_run).items() if not k.startswith("tokens/")}
    for repacked in (tmp_path / "a", tmp_path / "b"):
        files = _files(repacked)
        assert files.keys() == original.keys()
        assert all(files[k] == v for k, v in original.items() if k != "manifest.json")


def test_a_repacked_set_can_be_repacked_from_the_same_store_again_with_overwrite(
    store_run, tmp_path
):
    out = tmp_path / "out"
    run_repack(RepackConfig(tokens=str(store_run), output=str(out), seq_len=32), IN_PROCESS)
    with pytest.raises(OutputError, match="is not empty; pass --overwrite"):
        run_repack(RepackConfig(tokens=str(store_run), output=str(out), seq_len=16), IN_PROCESS)
    run_repack(
        RepackConfig(tokens=str(store_run), output=str(out), seq_len=16, overwrite=True), IN_PROCESS
    )
    assert read_manifest(str(out)).seq_len == 16
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="notes.txt"):
        run_repack(RepackConfig(tokens=str(store_run), output=str(out), overwrite=True), IN_PROCESS)
    assert (out / "manifest.json").exists()  # refused before deleting anything


def test_preprocess_overwrite_owns_the_token_store_it_wrote(store_run):
    owned, foreign = owned_entries(str(store_run), kind=PREPROCESS_OUTPUT)
    assert foreign == () and owned[0] == "manifest.json" and "tokens" in owned


def test_an_output_inside_the_store_or_its_set_is_refused(store_run):
    for inside in (store_run / "repacked", store_run / "tokens" / "repacked"):
        with pytest.raises(OutputError, match="is inside --tokens"):
            run_repack(RepackConfig(tokens=str(store_run), output=str(inside)), IN_PROCESS)


def _copy(store_run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(store_run, copy)
    return copy


def test_an_incomplete_store_is_refused_naming_it(store_run, tmp_path):
    copy = _copy(store_run, tmp_path)
    (copy / "tokens" / "manifest.json").unlink()  # what an interrupted --keep_tokens run leaves
    with pytest.raises(TokenStoreError, match=f"{copy / 'tokens'}.*incomplete"):
        run_repack(RepackConfig(tokens=str(copy), output=str(tmp_path / "out")), IN_PROCESS)
    assert not (tmp_path / "out").exists()


def test_a_missing_or_truncated_part_is_refused_before_any_work_naming_it(store_run, tmp_path):
    copy = _copy(store_run, tmp_path)
    (part,) = (copy / "tokens").glob("part-*.parquet")
    part.write_bytes(part.read_bytes()[:-10])
    with pytest.raises(TokenStoreError, match=f"{part}.*damaged or truncated"):
        run_repack(RepackConfig(tokens=str(copy), output=str(tmp_path / "out")), IN_PROCESS)
    part.unlink()
    with pytest.raises(TokenStoreError, match=f"{part}.*missing"):
        run_repack(RepackConfig(tokens=str(copy), output=str(tmp_path / "out")), IN_PROCESS)
    assert not (tmp_path / "out").exists()


def test_a_part_damaged_in_place_fails_the_run_naming_it_and_leaves_no_output(store_run, tmp_path):
    copy = _copy(store_run, tmp_path)
    (part,) = (copy / "tokens").glob("part-*.parquet")
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: found only when the run reads it
    part.write_bytes(bytes(data))
    out = tmp_path / "out"
    with pytest.raises(TokenStoreError, match=f"{part}.*damaged"):
        run_repack(RepackConfig(tokens=str(copy), output=str(out)), IN_PROCESS)
    assert not (out / "manifest.json").exists() and list(out.rglob("*.tfrecord")) == []


def test_a_run_interrupted_by_a_full_disk_leaves_no_manifest(store_run, tmp_path, monkeypatch):
    import errno

    import lmshards.preprocess.stages.shard

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(lmshards.preprocess.stages.shard, "write_shard", full_disk)
    out = tmp_path / "out"
    with pytest.raises(RunFailure, match="the disk is full"):
        run_repack(RepackConfig(tokens=str(store_run), output=str(out)), IN_PROCESS)
    assert not (out / "manifest.json").exists()


def test_a_store_of_another_tokenizer_than_expected_is_refused(
    store_run, tmp_path, sample_tokenizer
):
    with pytest.raises(TokenStoreError, match="--tokenizer .* has fingerprint .* was made with"):
        run_repack(
            RepackConfig(
                tokens=str(store_run), output=str(tmp_path / "a"), tokenizer=str(sample_tokenizer)
            ),
            IN_PROCESS,
        )
    copy = _copy(store_run, tmp_path)
    shutil.copy(sample_tokenizer, copy / "tokens" / "tokenizer" / "tokenizer.json")
    with pytest.raises(TokenStoreError, match="tokenizer/ was replaced"):
        run_repack(RepackConfig(tokens=str(copy), output=str(tmp_path / "b")), IN_PROCESS)
    # The expected tokenizer itself passes.
    run_repack(
        RepackConfig(
            tokens=str(store_run),
            output=str(tmp_path / "c"),
            tokenizer=str(GOLDEN / "tokenizer.json"),
        ),
        IN_PROCESS,
    )


def test_bad_option_values_are_refused_as_preprocess_refuses_them(store_run, tmp_path):
    with pytest.raises(
        FlagRangeError, match=r"--seq_len 4 is out of range: it must be a whole number in \[8, "
    ):
        run_repack(RepackConfig(tokens=str(store_run), output=str(tmp_path / "a"), seq_len=4))
    with pytest.raises(FlagRangeError, match=r"--validation_fraction 1.5 is out of range"):
        run_repack(
            RepackConfig(tokens=str(store_run), output=str(tmp_path / "a"), validation_fraction=1.5)
        )


def test_the_cli_repacks_and_reports_errors_in_one_line(store_run, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["repack", "--tokens", str(store_run), "--output", str(out), "--seq_len", "32"]
    assert lmshards_main([*argv, *IN_PROCESS]) == 0
    assert capsys.readouterr().out.startswith(f"lmshards repack: wrote {out} in ")
    assert read_manifest(str(out)).seq_len == 32
    assert lmshards_main(["repack", "--tokens", str(out), "--output", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("lmshards repack: error: The shard set ") and "keeps no token store" in err
    )


def test_inspect_shows_whether_a_set_keeps_tokens_and_describes_a_store(
    store_run, tmp_path, capsys
):
    run_repack(RepackConfig(tokens=str(store_run), output=str(tmp_path / "r")), IN_PROCESS)
    capsys.readouterr()
    assert lmshards_main(["inspect", str(store_run)]) == 0
    assert "  tokens: kept in tokens/" in capsys.readouterr().out
    assert lmshards_main(["inspect", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert (
        "  tokens: not kept" in out and f"repacked from the token store {store_run}/tokens" in out
    )
    assert lmshards_main(["inspect", str(store_run / "tokens"), "--verify"]) == 0
    out = capsys.readouterr().out
    store = read_store_manifest(str(store_run / "tokens"))
    assert f"{store.documents:,} documents, {store.tokens:,} tokens (uint16) in 1 files" in out
    assert f"verified 1 token files, {store.tokens:,} tokens: OK" in out


def test_stats_of_a_token_store_counts_its_documents_and_every_token(store_run, tmp_path, capsys):
    import numpy as np
    import pyarrow.parquet as pq

    store = store_run / "tokens"
    # The store holds only its own files: its stats go where --output says.
    assert lmshards_main(["stats", str(store)]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("lmshards stats:")]
    assert "is a token store" in line and "--output" in line
    assert not (store / "stats").exists()

    assert lmshards_main(["stats", str(store), "--output", str(tmp_path / "st")]) == 0
    assert "token store" in capsys.readouterr().out
    stats = json.loads((tmp_path / "st" / "stats.json").read_text())
    manifest = read_store_manifest(str(store))
    # Counted from the Parquet files directly, not through the store's reader.
    tables = [pq.read_table(store / info.path) for info in manifest.files]
    ids = np.concatenate(
        [np.concatenate(t["input_ids"].to_numpy(zero_copy_only=False)) for t in tables]
    )
    lengths = np.concatenate([[len(x) for x in t["input_ids"].to_pylist()] for t in tables])
    counts = np.bincount(ids, minlength=manifest.tokenizer.vocab_size)
    assert stats["kind"] == "token_store" and stats["manifest_mismatches"] == []
    assert (stats["documents"], stats["tokens"]) == (manifest.documents, manifest.tokens)
    assert stats["tokens"] == int(counts.sum()) and stats["vocab_used"] == int((counts > 0).sum())
    top = stats["top_tokens"][0]
    assert top["count"] == int(counts.max()) and top["id"] == int(np.argmax(counts))
    assert top["text"] is not None  # named with the store's own tokenizer copy
    per_doc = stats["tokens_per_document"]
    assert (per_doc["min"], per_doc["max"]) == (int(lengths.min()), int(lengths.max()))
    assert per_doc["longer_than"]["128"] == int((lengths > 128).sum())
    assert sum(c for _, c in per_doc["histogram"]) == manifest.documents
    page = (tmp_path / "st" / "stats.html").read_text()
    assert "documents longer than 128 tokens" in page
    # The longest documents, named by part file and row, longest first (ties: file, then row).
    named = [
        (-len(ids), info.path, row)
        for info, table in zip(manifest.files, tables, strict=True)
        for row, ids in enumerate(table["input_ids"].to_pylist())
    ]
    longest = [{"file": f, "record": r, "tokens": -n} for n, f, r in sorted(named)[:5]]
    assert per_doc["longest"] == longest and longest[0]["tokens"] == int(lengths.max())
    first = longest[0]
    assert f"<code>{first['file']}</code></td><td>{first['record']:,}</td>" in page


@pytest.mark.slow
def test_other_runners_write_a_store_in_several_parts_and_repack_the_same_bytes(
    store_run, tmp_path
):
    """A store written by 2 worker processes (one part per bundle), repacked on them and on Dask."""
    distributed = pytest.importorskip("dask.distributed")
    from lmshards.preprocess.dask_runner import LOCALHOST

    workers = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    config = PreprocessConfig(
        inputs=(str(GOLDEN / "corpus" / "*.txt"),),
        tokenizer=str(GOLDEN / "tokenizer.json"),
        output=str(tmp_path / "store"),
        keep_tokens=True,
        range_mb=0.005,
        documents_per_tokenizer_call=50,
        **BASE,
    )
    run_pipeline(config, workers)
    assert len(read_store_manifest(str(tmp_path / "store" / "tokens")).files) >= 2
    _preprocess(tmp_path / "text", seq_len=24)
    run_repack(
        RepackConfig(tokens=str(tmp_path / "store"), output=str(tmp_path / "mp"), seq_len=24),
        workers,
    )
    _assert_same_as_preprocess(tmp_path / "mp", tmp_path / "text")
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, host=LOCALHOST, dashboard_address=":0"
    ) as cluster:
        run_repack(
            RepackConfig(tokens=str(store_run), output=str(tmp_path / "dask"), seq_len=24),
            ["--runner", "DaskRunner", "--dask_client_address", cluster.scheduler_address],
        )
    _assert_same_as_preprocess(tmp_path / "dask", tmp_path / "text")


def test_a_store_on_gcs_repacks_to_gcs(gcs_emulator, tmp_path):
    from lmshards.plumbing import fs

    bucket = gcs_emulator
    for path in sorted((GOLDEN / "corpus").glob("*.txt")):
        fs.write_bytes_atomic(f"{bucket}/corpus/{path.name}", path.read_bytes())
    fs.write_bytes_atomic(f"{bucket}/tok/tokenizer.json", (GOLDEN / "tokenizer.json").read_bytes())
    config = PreprocessConfig(
        inputs=(f"{bucket}/corpus/*.txt",),
        tokenizer=f"{bucket}/tok",
        output=f"{bucket}/store",
        keep_tokens=True,
        **BASE,
    )
    run_pipeline(config, IN_PROCESS)
    assert not any(".lmshards-tmp" in p for p in fs.listdir(f"{bucket}/store/tokens"))
    remote = run_repack(
        RepackConfig(tokens=f"{bucket}/store", output=f"{bucket}/repacked", seq_len=16), IN_PROCESS
    )
    local = run_repack(
        RepackConfig(tokens=f"{bucket}/store", output=str(tmp_path / "local"), seq_len=16),
        IN_PROCESS,
    )
    assert remote.splits == local.splits  # every shard's bytes (sha256), records and totals
    assert remote.repacked_from == f"{bucket}/store/tokens"


def test_repack_refuses_an_output_another_live_writer_holds(store_run, tmp_path, capsys):
    from lmshards.plumbing import lease

    output = tmp_path / "out"
    run_repack(RepackConfig(tokens=str(store_run), output=str(output)), IN_PROCESS)
    before = _files(output)
    with lease.output_lease(str(output), command="other"):  # a live holder: this process
        argv = ["repack", "--tokens", str(store_run), "--output", str(output), "--overwrite"]
        assert lmshards_main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"lmshards repack: error: --output {str(output)!r} is being written by ")
    assert _files(output) == before  # nothing read, written or deleted
