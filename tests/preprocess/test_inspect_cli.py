"""`lmshards inspect`: the summary, --json, and --verify: parallel, with progress, the input id check,
and manifests that point outside the shard set."""

from __future__ import annotations

import json
import re
import shutil
import time

import numpy as np
import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.preprocess import inspect_cli
from lmshards.schemas import manifest as mf
from lmshards.schemas.constants import TRAIN_SPLIT
from lmshards.schemas.manifest import read_manifest
from tests.helpers.shard_factory import write_packed_shards, write_sample_shards, write_shards

PROGRESS_RE = re.compile(
    r"verify: (\d+)/(\d+) shards, ([\d,.]+) of ([\d,.]+) MB \(\d+%\), ([\d,.]+) MB/s, ETA (.+)$"
)
DONE_RE = re.compile(
    r"verify: OK, (\d+) shards match the manifest .* in ([\d.]+) s \(([\d,.]+) MB, ([\d,.]+) MB/s\)$"
)


def inspect_main(argv: list[str]) -> int:
    return lmshards_main(["inspect", *argv])


@pytest.fixture(scope="module")
def small_output(tmp_path_factory, sample_dir, sample_tokenizer):
    """Shards and a manifest as the contract defines them, of one sample file."""
    out = tmp_path_factory.mktemp("inspect") / "out"
    write_sample_shards(
        out, sample_tokenizer, [sample_dir / "zh" / "lunyu_shijing.txt"], seq_len=64
    )
    return out


def test_summary_and_json(small_output, capsys):
    assert inspect_main([str(small_output)]) == 0
    text = capsys.readouterr().out
    manifest = read_manifest(str(small_output))
    train = manifest.split("train")
    assert f"{train.records:,} records in {len(train.shards)} shards" in text
    assert manifest.tokenizer.fingerprint in text and "seq_len 64" in text
    assert inspect_main([str(small_output / "manifest.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(
        (small_output / "manifest.json").read_text()
    )


def test_verify_passes_then_names_a_shard_with_one_flipped_byte(small_output, tmp_path, capsys):
    assert inspect_main([str(small_output), "--verify"]) == 0
    assert "verify: OK" in capsys.readouterr().err

    broken = tmp_path / "broken"
    shutil.copytree(small_output, broken)
    shard = max((broken / "validation").iterdir(), key=lambda p: p.stat().st_size)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x20
    shard.write_bytes(bytes(data))
    assert inspect_main([str(broken), "--verify"]) == 1
    err = capsys.readouterr().err
    mismatches = [line for line in err.splitlines() if line.startswith("MISMATCH")]
    assert mismatches and all(shard.name in line for line in mismatches)
    assert "sha256" in err and "checksum mismatch" in err


def test_missing_manifest_is_a_clear_error(tmp_path, capsys):
    assert inspect_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("lmshards inspect: error: ")
        and "incomplete or not a preprocess output" in err
    )


# ---------------------------------------------------------------- parallel verify


@pytest.fixture
def damaged_output(small_output, tmp_path):
    """A copy with three train shards damaged: truncated, one bit flipped, deleted. Returns (dir, names)."""
    out = tmp_path / "damaged"
    shutil.copytree(small_output, out)
    truncated, flipped, missing = sorted((out / TRAIN_SPLIT).iterdir())[1:4]
    truncated.write_bytes(truncated.read_bytes()[:-7])
    data = bytearray(flipped.read_bytes())
    data[len(data) // 3] ^= 0x01
    flipped.write_bytes(bytes(data))
    missing.unlink()
    return out, (truncated.name, flipped.name, missing.name)


def test_parallel_verify_finds_exactly_what_sequential_verify_finds(damaged_output):
    out, (truncated, flipped, missing) = damaged_output
    manifest = read_manifest(str(out))
    sequential = inspect_cli.verify(manifest, str(out), threads=1)
    for threads in (2, 3, 16):
        assert inspect_cli.verify(manifest, str(out), threads=threads) == sequential

    by_shard: dict[str, list[str]] = {}
    for line in sequential:
        path, problem = line.split(": ", 1)
        by_shard.setdefault(path.rsplit("/", 1)[1], []).append(problem)
    assert list(by_shard) == [truncated, flipped, missing]  # manifest order
    assert by_shard[missing] == ["missing"]
    assert [p.split(" ")[0] for p in by_shard[truncated]] == [
        "corrupt",
        str(_shard(manifest, truncated).bytes - 7),
        "sha256",
    ]
    assert "truncated record" in by_shard[truncated][0]
    assert len(by_shard[flipped]) == 2
    assert "checksum mismatch" in by_shard[flipped][0] and by_shard[flipped][1].startswith(
        "sha256 "
    )


def test_verify_cli_prints_mismatches_in_manifest_order_whatever_the_threads(
    damaged_output, capsys
):
    out, names = damaged_output
    outputs = []
    for threads in ("1", "4"):
        assert inspect_main([str(out), "--verify", "--threads", threads]) == 1
        err = capsys.readouterr().err
        outputs.append([line for line in err.splitlines() if line.startswith("MISMATCH")])
        assert re.search(r"verify: 6 problem\(s\) in 10 shards, in [\d.]+ s", err)
    assert outputs[0] == outputs[1]
    assert [next(n for n in names if n in line) for line in outputs[0]] == [names[0]] * 3 + [
        names[1]
    ] * 2 + [names[2]]


def test_threads_must_be_positive(small_output, capsys):
    with pytest.raises(SystemExit) as exit_:
        inspect_main([str(small_output), "--verify", "--threads", "0"])
    assert exit_.value.code == 2
    assert (
        "lmshards inspect: error: argument --threads: '0' is not a whole number in [1, 256]"
        in capsys.readouterr().err
    )


def _shard(manifest: mf.Manifest, name: str) -> mf.ShardInfo:
    return next(
        s for split in manifest.splits.values() for s in split.shards if s.path.endswith("/" + name)
    )


# ---------------------------------------------------------------- progress and timing


def test_progress_line_and_eta():
    assert (
        inspect_cli.progress_line(
            shards_done=3,
            shards_total=10,
            bytes_done=30_000_000,
            bytes_total=100_000_000,
            elapsed_s=10.0,
        )
        == "verify: 3/10 shards, 30.0 of 100.0 MB (30%), 3.00 MB/s, ETA 23 s"
    )
    assert (
        inspect_cli.progress_line(
            shards_done=0, shards_total=4, bytes_done=0, bytes_total=5_000_000, elapsed_s=2.0
        )
        == "verify: 0/4 shards, 0.0 of 5.0 MB (0%), 0.00 MB/s, ETA unknown"
    )

    now = [100.0]
    progress = inspect_cli.VerifyProgress(
        shards_total=2, bytes_total=4_000_000, clock=lambda: now[0]
    )
    progress.add_bytes(1_000_000)
    progress.shard_done()
    now[0] = 102.0
    assert progress.line() == "verify: 1/2 shards, 1.0 of 4.0 MB (25%), 0.50 MB/s, ETA 6.0 s"


def test_verify_logs_progress_while_shards_remain_and_says_how_long_it_took(
    small_output, monkeypatch, capsys
):
    """Each shard made to take >= 50 ms: with a progress line due every 20 ms, lines appear, counts only grow."""
    slow_read = inspect_cli.read_records

    def read_slowly(f):
        time.sleep(0.05)
        yield from slow_read(f)

    monkeypatch.setattr(inspect_cli, "read_records", read_slowly)
    monkeypatch.setattr(inspect_cli, "PROGRESS_EVERY_S", 0.02)
    assert inspect_main([str(small_output), "--verify", "--threads", "2"]) == 0
    lines = capsys.readouterr().err.splitlines()
    progress = [m for m in map(PROGRESS_RE.search, lines) if m]
    assert progress, lines
    manifest = read_manifest(str(small_output))
    total_mb = sum(s.bytes for split in manifest.splits.values() for s in split.shards) / 1e6
    done = [int(m[1]) for m in progress]
    assert done == sorted(done) and done[-1] <= 10 and {int(m[2]) for m in progress} == {10}
    assert {m[4] for m in progress} == {f"{total_mb:,.1f}"}
    assert all(float(m[3].replace(",", "")) <= total_mb for m in progress)
    (final,) = [m for m in map(DONE_RE.search, lines) if m]
    assert (
        int(final[1]) == 10 and float(final[2]) >= 0.05 * 10 / 2 - 0.05
    )  # 10 slow shards over 2 threads
    assert final[3] == f"{total_mb:,.1f}"


# ---------------------------------------------------------------- input ids against the vocabulary


def _tokenizer(vocab_size: int) -> mf.TokenizerInfo:
    return mf.TokenizerInfo(
        fingerprint="sha256:" + "ab" * 32,
        vocab_size=vocab_size,
        special_token_ids={"pad": 0, "mask": 1},
        all_special_ids=(0, 1),
    )


def _ids_output(out, ids: np.ndarray, *, vocab_size: int, num_shards: int) -> mf.Manifest:
    mask = np.ones_like(ids)
    return write_shards(
        out,
        {TRAIN_SPLIT: (ids, mask, num_shards)},
        seq_len=ids.shape[1],
        tokenizer=_tokenizer(vocab_size),
        inputs=(),
    )


@pytest.mark.parametrize("batch_records", [inspect_cli.DECODE_BATCH_RECORDS, 2])
def test_verify_names_the_shard_whose_input_ids_exceed_the_vocabulary(
    tmp_path, monkeypatch, capsys, batch_records
):
    monkeypatch.setattr(inspect_cli, "DECODE_BATCH_RECORDS", batch_records)
    ids = np.random.default_rng(0).integers(2, 100, size=(12, 8))
    ids[4, 3], ids[5, 0] = 100, 250  # both in shard 1 of 3 (rows 4-7), in different records
    manifest = _ids_output(tmp_path / "out", ids, vocab_size=100, num_shards=3)

    assert inspect_main([str(tmp_path / "out"), "--verify", "--threads", "3"]) == 1
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("MISMATCH")]
    bad_shard = manifest.split(TRAIN_SPLIT).shards[1].path
    assert line.startswith(
        f"MISMATCH {tmp_path / 'out' / bad_shard}: 2 input ids outside [0, vocab_size 100) "
    )
    assert re.search(r"\(lowest \d+, highest 250\)", line)
    assert f"re-run `lmshards preprocess --overwrite` into {tmp_path / 'out'}" in line
    assert manifest.tokenizer.fingerprint in line


def test_verify_accepts_the_largest_id_of_the_vocabulary(tmp_path, capsys):
    ids = np.full((4, 8), 99)
    ids[:, 0] = 0
    _ids_output(tmp_path / "out", ids, vocab_size=100, num_shards=2)
    assert inspect_main([str(tmp_path / "out"), "--verify"]) == 0
    assert "input ids < vocab_size 100" in capsys.readouterr().err


def test_shard_ids_reports_records_that_are_not_examples_of_the_features():
    rule = inspect_cli.IdRule(vocab_size=10, seq_len=4, fix="FIX")
    ids = inspect_cli.ShardIds(rule)
    ids.add([b"\x0a\x02\x0a\x00"])  # an Example whose only map entry is empty: no input_ids
    ids.add([b"junk"])  # not looked at: the first problem stands
    assert ids.problems() == [
        "a record is not a tf.train.Example of the manifest's features "
        "(record 0 has no int64 feature 'input_ids'); FIX"
    ]


# ---------------------------------------------------------------- manifests pointing outside the shard set


@pytest.mark.parametrize(
    "bad_path",
    [
        "../elsewhere/train-00000-of-00008.tfrecord",
        "/etc/train-00000-of-00008.tfrecord",
        "gs://other-bucket/train/train-00000-of-00008.tfrecord",
        "validation/../../train-00000-of-00008.tfrecord",
    ],
)
def test_verify_refuses_a_manifest_whose_shard_path_escapes_the_shard_set(
    small_output, tmp_path, capsys, bad_path
):
    out = tmp_path / "out"
    shutil.copytree(small_output, out)
    data = json.loads((out / "manifest.json").read_text())
    data["splits"][TRAIN_SPLIT]["shards"][0]["path"] = bad_path
    (out / "manifest.json").write_text(json.dumps(data))
    assert inspect_main([str(out), "--verify"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"lmshards inspect: error: Manifest shard path {bad_path!r} ")
    assert "re-run `lmshards preprocess`" in captured.err and captured.out == ""


# ---------------------------------------------------------------- packed records

PACKED_SEQ_LEN = 8
PAD_ID = 1


def _packed_features(records: int = 8) -> dict[str, np.ndarray]:
    """Good packed records: two segments of 3 tokens, then 2 of padding."""
    segments = np.tile([1, 1, 1, 2, 2, 2, 0, 0], (records, 1))
    return {
        "input_ids": np.where(segments > 0, 7, PAD_ID),
        "attention_mask": (segments > 0).astype(np.int64),
        "segment_ids": segments,
        "positions": np.tile([0, 1, 2, 0, 1, 2, 0, 0], (records, 1)),
    }


def _packed_output(out, features, **kwargs) -> mf.Manifest:
    tokenizer = mf.TokenizerInfo(
        fingerprint="f" * 16,
        vocab_size=100,
        special_token_ids={"pad": PAD_ID},
        all_special_ids=(PAD_ID,),
    )
    return write_packed_shards(out, features, seq_len=PACKED_SEQ_LEN, tokenizer=tokenizer, **kwargs)


def test_verify_passes_a_packed_set_and_says_it_checked_segments_and_positions(tmp_path, capsys):
    _packed_output(tmp_path / "out", _packed_features())
    assert inspect_main([str(tmp_path / "out"), "--verify"]) == 0
    assert "input ids < vocab_size 100, segments and positions)" in capsys.readouterr().err


# Record 5 (shard 1's record 1) broken one way, and record 7 another: only the first is named.
BAD_PACKED_RECORDS = {
    "position past seq_len": (
        ("positions", (slice(3, 6),), [8, 9, 10]),
        "position 8 at token 3 is not in [0, seq_len 8)",
    ),
    "segment not restarting at 0": (
        ("positions", (slice(3, 6),), [3, 4, 5]),
        "segment 2 starts at token 3 with position 3, not 0",
    ),
    "positions not rising by 1": (
        ("positions", (2,), 1),
        "position 1 at token 2 does not follow 1 within segment 1",
    ),
    "segment ids skipping one": (
        ("segment_ids", (slice(3, 6),), 3),
        "segment id 3 at token 3 (after 1): segment ids run 1, 2, ... from the first token, "
        "padding (0) only after the last",
    ),
    "a segment after padding": (
        ("segment_ids", (7,), 3),
        "segment id 3 at token 7 (after 0): segment ids run 1, 2, ... from the first token, "
        "padding (0) only after the last",
    ),
    "padding with a position": (
        ("positions", (7,), 4),
        "padding token 7 holds position 4, attention_mask 0, input_ids 1; padding is position 0, "
        "attention_mask 0, the pad id 1",
    ),
    "padding with another id": (
        ("input_ids", (6,), 9),
        "padding token 6 holds position 0, attention_mask 0, input_ids 9; padding is position 0, "
        "attention_mask 0, the pad id 1",
    ),
    "a real token masked": (
        ("attention_mask", (1,), 0),
        "token 1 of segment 1 has attention_mask 0, not 1",
    ),
}


@pytest.mark.parametrize("batch_records", [inspect_cli.DECODE_BATCH_RECORDS, 1])
@pytest.mark.parametrize("case", sorted(BAD_PACKED_RECORDS))
def test_verify_names_the_first_packed_record_that_breaks_the_packing_rule(
    tmp_path, monkeypatch, case, batch_records
):
    monkeypatch.setattr(inspect_cli, "DECODE_BATCH_RECORDS", batch_records)
    (name, where, value), what = BAD_PACKED_RECORDS[case]
    features = _packed_features()
    features[name][(5, *where)] = value
    features["positions"][7, 1] = 5  # a later bad record of the same shard
    manifest = _packed_output(tmp_path / "out", features)

    problems = inspect_cli.verify(manifest, str(tmp_path / "out"))
    path = tmp_path / "out" / manifest.split(TRAIN_SPLIT).shards[1].path
    assert problems == [
        f"{path}: record 1: {what} (the first such record of the shard); re-run `lmshards preprocess "
        f"--overwrite` into {tmp_path / 'out'} with the manifest's tokenizer ({'f' * 16})"
    ]


def test_packed_record_problem_passes_full_blocks_and_one_segment_blocks():
    segments = np.array([[1] * 8, [1, 2, 2, 2, 2, 2, 2, 2], [1, 0, 0, 0, 0, 0, 0, 0]])
    positions = np.array([list(range(8)), [0, *range(7)], [0] * 8])
    features = {
        "input_ids": np.where(segments > 0, 7, PAD_ID),
        "attention_mask": (segments > 0).astype(np.int64),
        "segment_ids": segments,
        "positions": positions,
    }
    assert inspect_cli.packed_record_problem(features, seq_len=8, pad_id=PAD_ID) is None


def test_a_packed_set_of_the_old_positions_is_flagged_and_fails_verify(tmp_path, capsys):
    """Format version 3 numbered a long document's later pieces on from the document's start."""
    features = _packed_features(4)
    features["segment_ids"][:] = 1
    features["attention_mask"][:] = 1
    features["input_ids"][:] = 7
    features["positions"] = np.arange(32).reshape(4, 8)  # one document of 4 blocks
    out = tmp_path / "old"
    manifest = _packed_output(out, features, format_version=3, documents_split=1)
    assert inspect_main([str(out), "--verify"]) == 1
    captured = capsys.readouterr()
    assert (
        "  positions: a long document's pieces continue past seq_len (format_version 3); "
        "`lmshards train` refuses this set until it is written again"
    ) in captured.out.splitlines()
    lines = [line for line in captured.err.splitlines() if line.startswith("MISMATCH")]
    shards = [out / shard.path for shard in manifest.split(TRAIN_SPLIT).shards]
    assert len(lines) == 2  # one per shard: records 0-1 and 2-3
    assert lines[0].startswith(
        f"MISMATCH {shards[0]}: record 1: position 8 at token 0 is not in [0, seq_len 8)"
    )
    assert lines[1].startswith(
        f"MISMATCH {shards[1]}: record 0: position 16 at token 0 is not in [0, seq_len 8)"
    )
