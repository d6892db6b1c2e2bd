"""The default runner's in-process path: the same bytes as the Beam stages, spills removed, errors kept."""

from __future__ import annotations

import hashlib
import io
import json
import threading
import time
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter

from lmshards.command.cli import main as lmshards_main
from lmshards.plumbing.errors import TokenizerError
from lmshards.preprocess import in_process, runners
from lmshards.preprocess.cli import summary
from lmshards.preprocess.launch import write_known_files
from lmshards.preprocess.options import PreprocessConfig
from lmshards.preprocess.pipeline import build_pipeline, in_process_job, plan_preprocess, shard_set
from lmshards.preprocess.sources import InputError
from lmshards.preprocess.stages import shard as shard_stage
from lmshards.preprocess.stages.encode import TokenizedChunk
from lmshards.preprocess.stages.metrics import METRICS_NAMESPACE, finished_line
from lmshards.preprocess.stages.tokens import iter_store, read_store_manifest
from lmshards.preprocess.transforms import shard as shard_transforms
from lmshards.schemas.constants import POSITIONS
from lmshards.schemas.layouts import SPILL_DIR_PREFIX, TEMP_DIR_NAME
from lmshards.schemas.manifest import read_manifest
from lmshards.schemas.records import decode_examples, read_records
from tests.helpers.long_documents import write_long_documents

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
INPUTS = ["--input", str(GOLDEN / "docs.jsonl"), "--input", str(GOLDEN / "corpus" / "en.txt")]
COMMON = ["--seq_len", "48", "--validation_fraction", "0.1", "--packing_group_tokens", "1500"]
BEAM_STAGES = ["--direct_running_mode=multi_threading"]  # in-process, but the staged Beam pipeline
OPTION_SETS = {
    "concat_pad": ["--remainder", "pad", "--shard_multiple", "4", "--seed", "5"],
    "best_fit": ["--packing", "best_fit", "--shard_multiple", "2"],
    "keep_tokens": ["--keep_tokens", "--num_shards", "3", "--shard_multiple", "1"],
    # With documents of 3 to 40 blocks (LONG_DOCUMENTS), every one cut into pieces.
    "best_fit_long_documents": ["--packing", "best_fit", "--seq_len", "16", "--keep_tokens"],
}
LONG_DOCUMENTS = "best_fit_long_documents"


def _preprocess(output: Path, flags: list[str]) -> dict:
    argv = ["preprocess", *INPUTS, "--tokenizer", str(GOLDEN / "tokenizer.json")]
    assert lmshards_main([*argv, "--output", str(output), *COMMON, *flags]) == 0
    manifest = json.loads((output / "manifest.json").read_text(encoding="utf-8"))
    manifest.pop("created_at")
    return manifest


def _shard_hashes(output: Path) -> dict[str, str]:
    return {
        p.relative_to(output).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(output.glob("*/*.tfrecord"))
    }


@pytest.mark.parametrize("name", sorted(OPTION_SETS))
def test_the_default_runner_writes_the_bytes_of_the_beam_stages(name, tmp_path):
    flags = OPTION_SETS[name]
    if name == LONG_DOCUMENTS:
        long = write_long_documents(tmp_path / "long.txt", GOLDEN / "tokenizer.json", seq_len=16)
        flags = [*flags, "--input", str(long)]
    fast = _preprocess(tmp_path / "fast", flags)
    staged = _preprocess(tmp_path / "staged", [*flags, *BEAM_STAGES])
    assert fast == staged  # every shard's SHA-256, the totals, the reading counts
    if name == LONG_DOCUMENTS:
        assert sum(s["totals"]["documents_split"] for s in fast["splits"].values()) >= 38
        positions = [
            decode_examples(list(read_records(p.open("rb"))), (POSITIONS,))[POSITIONS]
            for p in sorted((tmp_path / "fast").glob("*/*.tfrecord"))
        ]
        assert max(int(p.max()) for p in positions if p.size) == 15  # below seq_len 16
    assert _shard_hashes(tmp_path / "fast") == _shard_hashes(tmp_path / "staged")
    assert sum(s["totals"]["records"] for s in fast["splits"].values()) > 20
    assert not (tmp_path / "fast" / TEMP_DIR_NAME).exists()
    if "--keep_tokens" in flags:
        stores = [str(tmp_path / out / "tokens") for out in ("fast", "staged")]
        manifests = [read_store_manifest(store) for store in stores]
        assert manifests[0].documents == manifests[1].documents > 0
        assert manifests[0].tokens == manifests[1].tokens
        assert manifests[0].reading == manifests[1].reading
        documents = [sorted(_stored_documents(store)) for store in stores]
        assert documents[0] == documents[1]


def _job(tmp_path: Path):
    config = PreprocessConfig(
        inputs=(str(GOLDEN / "docs.jsonl"),),
        tokenizer=str(GOLDEN / "tokenizer.json"),
        output=str(tmp_path / "out"),
        seq_len=32,
        packing_group_tokens=500,
        tokenizer_threads=1,
    )
    return in_process_job(plan_preprocess(config))


def _spills(job) -> list[Path]:
    return list((Path(job.config.output) / TEMP_DIR_NAME).glob(f"{SPILL_DIR_PREFIX}*"))


def test_a_failing_write_removes_the_spill_files(tmp_path, monkeypatch):
    job = _job(tmp_path)
    written = []

    def failing_write(*args, **kwargs):
        written.append(list((Path(job.config.output) / TEMP_DIR_NAME).rglob("shard-*")))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shard_stage, "write_shard_bytes", failing_write)
    with pytest.raises(OSError, match="No space left"):
        in_process.run_in_process(job)
    assert written and written[0]  # the shards' spill files were there when the write failed
    assert _spills(job) == []


def test_staged_shards_past_the_window_are_ordered_through_local_files_into_the_same_bytes(
    tmp_path, monkeypatch
):
    flags = OPTION_SETS["concat_pad"]
    fast = _preprocess(tmp_path / "fast", flags)
    spilled = []
    spill = shard_stage._spill_windows

    def recording_spill(*args, **kwargs):
        spilled.append(spill(*args, **kwargs))
        return spilled[-1]

    monkeypatch.setattr(shard_transforms, "SHARD_WINDOW_BYTES", 4096)  # a few records a window
    monkeypatch.setattr(shard_stage, "_spill_windows", recording_spill)
    assert _preprocess(tmp_path / "staged", [*flags, *BEAM_STAGES]) == fast
    assert _shard_hashes(tmp_path / "staged") == _shard_hashes(tmp_path / "fast")
    assert spilled  # at least one shard went through its windows' files
    assert max(len(windows) for windows in spilled) > 2


def test_each_shard_is_written_as_it_is_serialized_never_held_whole(tmp_path, monkeypatch):
    flags = OPTION_SETS["concat_pad"]
    whole = _preprocess(tmp_path / "whole", flags)
    pieces: dict[tuple[str, int], list[bytes]] = {}
    write = shard_stage.write_shard_bytes

    def recording_write(output, key, data, **kwargs):
        mine = pieces.setdefault(key, [])
        return write(output, key, (mine.append(bytes(p)) or p for p in data), **kwargs)

    monkeypatch.setattr(shard_stage, "SERIALIZE_ROWS", 3)
    monkeypatch.setattr(shard_stage, "write_shard_bytes", recording_write)
    assert _preprocess(tmp_path / "streamed", flags) == whole  # the same shards, byte for byte
    shards = {
        (split, i): tmp_path / "streamed" / shard["path"]
        for split, info in whole["splits"].items()
        for i, shard in enumerate(info["shards"])
    }
    assert pieces.keys() == shards.keys() and len(shards) > 2
    for key, data in pieces.items():
        records = [len(list(read_records(io.BytesIO(p)))) for p in data]
        assert records and max(records) <= 3  # pieces of at most SERIALIZE_ROWS records
        assert b"".join(data) == shards[key].read_bytes()


def test_an_error_in_the_reader_thread_reaches_the_caller_and_stops_every_thread(
    tmp_path, monkeypatch
):
    job = _job(tmp_path)
    before = threading.active_count()

    def bad_range(*args, **kwargs):
        yield ["a first document"]
        raise InputError("input 'x.txt' changed while it was read")

    monkeypatch.setattr(in_process, "read_sized_range", bad_range)
    with pytest.raises(InputError, match="changed while it was read"):
        in_process.run_in_process(job)
    assert threading.active_count() == before
    assert _spills(job) == []


def test_spilled_chunks_and_rows_read_back_as_written(tmp_path):
    dtype = in_process.narrow_dtype(vocab_size=30_000, seq_len=128)
    assert dtype == np.dtype("<u2")
    assert in_process.narrow_dtype(vocab_size=70_000, seq_len=128) == np.dtype("<i4")
    chunks = [
        TokenizedChunk(
            hashes=np.array([2**63 + 5, 7], np.uint64),
            lengths=np.array([3, 1], np.int32),
            tokens=np.array([1, 29_999, 4, 8], np.int32),
        ),
        TokenizedChunk(
            hashes=np.array([1], np.uint64),
            lengths=np.array([2], np.int32),
            tokens=np.array([0, 65], np.int32),
        ),
    ]
    path = str(tmp_path / "group")
    for chunk in chunks:
        in_process.append_chunk(path, chunk, dtype)
    back = in_process.read_chunks(path, dtype)
    whole = TokenizedChunk.concat(chunks)
    for field in ("hashes", "lengths", "tokens"):
        np.testing.assert_array_equal(getattr(back, field), getattr(whole, field))
    assert back.tokens.dtype == dtype

    rows = np.arange(2 * 3 * 4, dtype=dtype).reshape(2, 3, 4)
    path = str(tmp_path / "shard")
    in_process.append_rows(path, np.array([9, 2]), rows)
    in_process.append_rows(path, np.array([4]), rows[:1] + 1)
    positions, got = in_process.read_rows_in_order(path, dtype, (3, 4))  # by position
    assert positions.tolist() == [2, 4, 9]
    np.testing.assert_array_equal(got, np.stack([rows[1], rows[0] + 1, rows[0]]))
    positions, got = in_process.read_rows_in_order(str(tmp_path / "none"), dtype, (3, 4))
    assert positions.size == 0 and got.shape == (0, 3, 4)


def test_batches_are_merged_up_to_a_size_and_none_is_lost():
    batches = [["ab", "c"], ["defg"], ["h"], ["ijklmn"], ["o"], ["pqrst", "u", "vwxyz", "!"]]
    merger = in_process.BatchMerger(max_chars=5)
    merged = [merger.add(batch) for batch in batches]
    assert merged == [
        [],
        [["ab", "c", "defg"]],
        [],
        [["h", "ijklmn"]],
        [],
        [["o", "pqrst"], ["u", "vwxyz"]],  # a large batch is cut
    ]
    assert merger.rest() == ["!"] and merger.rest() is None


@pytest.mark.parametrize("max_chars", [0, 1, 7, 40])
def test_batch_merging_cuts_where_the_running_count_reaches_the_size(max_chars):
    """Each list ends with the document whose characters bring it to max_chars (empty documents
    included), as the rule reads document by document."""
    rng = np.random.default_rng(max_chars)
    texts = ["x" * int(n) for n in rng.integers(0, 12, size=400)]
    cuts = np.sort(rng.choice(400, size=60, replace=False)).tolist()
    batches = [texts[a:b] for a, b in zip([0, *cuts], [*cuts, 400])]
    expected, out, chars = [], [], 0
    for text in texts:
        out.append(text)
        chars += len(text)
        if chars >= max_chars:
            expected.append(out)
            out, chars = [], 0
    merger = in_process.BatchMerger(max_chars=max_chars)
    got = [merged for batch in batches for merged in merger.add(batch)]
    assert got == expected and merger.rest() == (out or None)


def test_the_run_takes_the_startup_heap_out_of_the_collectors_reach_before_it_tokenizes(
    tmp_path, monkeypatch
):
    """Each tokenizer call makes an object per document; without the freeze, the collector's full
    passes walk every object Beam's imports made, with the GIL held (2.8 s on the benchmark corpus)."""
    calls: list[str] = []
    encode = in_process.encode_accepted

    def encode_noted(tokenizer, texts):
        calls.append("encode")
        return encode(tokenizer, texts)

    monkeypatch.setattr(in_process, "freeze_startup_heap", lambda: calls.append("freeze"))
    monkeypatch.setattr(in_process, "encode_accepted", encode_noted)
    _preprocess(tmp_path / "out", [])
    assert calls[0] == "freeze" and calls.count("freeze") == 1 and "encode" in calls


def test_ordered_map_gives_results_in_order_and_runs_only_a_few_ahead():
    """Packing's pool: later groups that finish first wait for the earlier ones, and no more than
    ahead + 1 groups are submitted and not yet taken (their packed blocks are held in memory)."""
    from concurrent.futures import ThreadPoolExecutor

    lock, submitted, taken, most = threading.Lock(), [0], [0], [0]

    def slow_for_evens(i: int) -> int:
        with lock:
            submitted[0] += 1
            most[0] = max(most[0], submitted[0] - taken[0])
        time.sleep(0.02 if i % 2 == 0 else 0.0)
        return i * i

    got = []
    with ThreadPoolExecutor(2) as pool:
        for result in in_process.ordered_map(pool, slow_for_evens, range(12), ahead=2):
            with lock:
                taken[0] += 1
            got.append(result)
    assert got == [i * i for i in range(12)]
    assert most[0] <= 3


def test_batches_encoded_out_of_order_by_several_threads_are_routed_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(in_process, "ENCODE_BATCH_CHARS", 200)  # many small batches
    small = ["--documents_per_tokenizer_call", "4", "--keep_tokens"]
    one = _preprocess(tmp_path / "one", [*small, "--tokenizer_threads", "1"])
    encode, started, finished = in_process.encode_accepted, [], []

    def some_slowly(tokenizer, texts):
        started.append(texts[0])
        if len(texts[0]) % 3 == 0:  # this batch's encode thread falls behind the others
            time.sleep(0.02)
        encoded = encode(tokenizer, texts)
        finished.append(texts[0])
        return encoded

    monkeypatch.setattr(in_process, "encode_accepted", some_slowly)
    three = _preprocess(tmp_path / "three", [*small, "--tokenizer_threads", "3"])
    assert len(finished) > 50 and finished != started  # batches did finish out of order
    assert three == one
    assert _shard_hashes(tmp_path / "three") == _shard_hashes(tmp_path / "one")
    stored = [_stored_documents(str(tmp_path / run / "tokens")) for run in ("one", "three")]
    assert len(stored[0]) > 400 and stored[0] == stored[1]  # in the order they were read


def _stored_documents(store: str) -> list[tuple[int, tuple[int, ...]]]:
    """(hash, ids) of each document of a token store, in the store's order."""
    return [
        (int(h), tuple(doc.tolist()))
        for chunk in iter_store(store, read_store_manifest(store))
        for h, doc in zip(chunk.hashes, np.split(chunk.tokens, np.cumsum(chunk.lengths)[:-1]))
    ]


def test_a_tokenizer_changed_after_planning_is_refused(tmp_path):
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text((GOLDEN / "tokenizer.json").read_text(encoding="utf-8"), encoding="utf-8")
    config = PreprocessConfig(
        inputs=(str(GOLDEN / "docs.jsonl"),),
        tokenizer=str(tokenizer),
        output=str(tmp_path / "out"),
        seq_len=32,
        tokenizer_threads=1,
    )
    job = in_process_job(plan_preprocess(config))
    tokenizer.write_text(tokenizer.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    with pytest.raises(TokenizerError, match="changed while the run started"):
        in_process.run_in_process(job)
    assert _spills(job) == []


# Both paths on the same inputs: the same counters, closing lines and manifest, not only bytes.
PATH_CASES = {
    "concat_drop": {},
    "concat_pad_keep_tokens": {"remainder": "pad", "keep_tokens": True},
    "best_fit_keep_tokens": {"packing": "best_fit", "remainder": "pad", "keep_tokens": True},
}


def _run_path(output: Path, options: dict, beam_args: list[str]) -> tuple[dict, dict, list[str]]:
    """(manifest JSON without created_at, counters, closing lines) of a run on the given runner."""
    config = PreprocessConfig(
        inputs=tuple(INPUTS[1::2]),
        tokenizer=str(GOLDEN / "tokenizer.json"),
        output=str(output),
        seq_len=48,
        validation_fraction=0.1,
        packing_group_tokens=1500,
        shard_multiple=2,
        **options,
    )
    plan = plan_preprocess(config)
    pipeline = beam.Pipeline(options=runners.pipeline_options(beam_args))
    build_pipeline(pipeline, plan)
    write_known_files(shard_set(plan))
    result = pipeline.run()
    result.wait_until_finish()
    query = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))
    counters = {c.key.metric.name: c.committed for c in query["counters"] if c.committed}
    manifest = read_manifest(str(output))
    lines = [summary(manifest, "OUT", 1.0), finished_line(manifest, 1.0)]
    data = json.loads((output / "manifest.json").read_text(encoding="utf-8"))
    data.pop("created_at")
    return data, counters, lines


@pytest.mark.parametrize("case", sorted(PATH_CASES))
def test_both_paths_count_report_and_record_the_same(case, tmp_path):
    in_process_run = _run_path(tmp_path / "fast", PATH_CASES[case], [])
    staged_run = _run_path(tmp_path / "staged", PATH_CASES[case], BEAM_STAGES)
    manifest, counters, lines = in_process_run
    assert staged_run == in_process_run
    records = sum(s["totals"]["records"] for s in manifest["splits"].values())
    shards = sum(len(s["shards"]) for s in manifest["splits"].values())
    assert counters["records_written"] == counters["blocks"] == records > 20
    assert counters["shards_written"] == shards
    assert counters["groups_packed"] >= 2
    padding = sum(s["totals"]["padding_tokens"] for s in manifest["splits"].values())
    assert counters.get("padding_tokens", 0) == padding
    if PATH_CASES[case].get("keep_tokens"):
        store = read_store_manifest(str(tmp_path / "fast" / "tokens"))
        assert counters["token_parts_written"] == len(store.files) >= 1
    else:
        assert "token_parts_written" not in counters
    assert f"wrote {shards:,} shards, {records:,} records" in lines[1]
