"""Pure logic of the split stage: the train/validation rule and the routing into packing groups."""

from __future__ import annotations

import numpy as np
import pytest

from lmshards.plumbing.fs import READ_PIECES
from lmshards.preprocess.stages.encode import TokenizedChunk, doc_hash
from lmshards.preprocess.stages.split import (
    ROUTED_PREFIX,
    ChunkPiece,
    GroupRouter,
    route_documents,
    routed_chunks,
    split_of,
    validation_threshold,
    write_routed,
)
from lmshards.preprocess.transforms.split import SplitSettings, _RouteFn


def test_split_fraction_is_respected_on_100k_hashes():
    hashes = np.fromiter((doc_hash(f"document {i}") for i in range(100_000)), dtype=np.uint64)
    for fraction in (0.005, 0.1, 0.5):
        share = split_of(hashes, validation_threshold(fraction)).mean()
        assert abs(share - fraction) < 4 * np.sqrt(fraction * (1 - fraction) / hashes.size) + 1e-4
    assert not split_of(hashes, validation_threshold(0.0)).any()
    # Deterministic: the same hashes split the same way.
    threshold = validation_threshold(0.1)
    assert np.array_equal(split_of(hashes, threshold), split_of(hashes.copy(), threshold))


def test_route_sends_each_document_whole_to_its_split_and_group():
    rng = np.random.default_rng(0)
    hashes = rng.integers(0, 2**63, size=200, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    lengths = rng.integers(0, 6, size=200).astype(np.int32)
    tokens = np.arange(int(lengths.sum()), dtype=np.int32)
    chunk = TokenizedChunk(hashes=hashes, lengths=lengths, tokens=tokens)
    groups = {"train": 3, "validation": 2}
    threshold = validation_threshold(0.3)
    ends = np.cumsum(lengths)
    expected = {}
    for h, n, e in zip(hashes.tolist(), lengths.tolist(), ends.tolist()):
        split = "validation" if h < threshold else "train"
        expected.setdefault((split, h % groups[split]), []).append((h, tokens[e - n : e].tolist()))

    routed = list(route_documents(chunk, threshold=threshold, groups=groups))
    keys = [key for key, _ in routed]
    assert keys == sorted(
        expected, key=lambda k: (k[0] == "validation", k[1])
    )  # train groups, then validation's
    for key, piece in routed:
        ends = np.cumsum(piece.lengths)
        got = [
            (int(h), piece.tokens[e - n : e].tolist())
            for h, n, e in zip(piece.hashes, piece.lengths, ends)
        ]
        assert got == expected[key]  # whole documents, in arrival order


@pytest.mark.parametrize("route_tokens", [1, 37, 500, 1 << 30])
def test_the_router_joins_chunks_without_changing_any_flush(monkeypatch, route_tokens):
    """However many added chunks are routed in one pass, each flush holds every group's documents
    in the order they were added: what routing each chunk alone and joining its pieces gives."""
    monkeypatch.setattr("lmshards.preprocess.stages.split.ROUTE_TOKENS", route_tokens)
    rng = np.random.default_rng(2)
    groups = {"train": 5, "validation": 2}
    threshold = validation_threshold(0.2)
    router = GroupRouter(validation_fraction=0.2, groups=groups, flush_tokens=300)
    got, expected, pending = [], [], {}

    def expect_flush() -> None:
        expected.append([(k, TokenizedChunk.concat(v)) for k, v in sorted(pending.items())])
        pending.clear()

    for _ in range(60):
        n = int(rng.integers(0, 30))
        lengths = rng.integers(0, 9, size=n).astype(np.int32)
        chunk = TokenizedChunk(
            hashes=rng.integers(0, 2**63, size=n, dtype=np.uint64) * np.uint64(2),
            lengths=lengths,
            tokens=rng.integers(0, 1000, size=int(lengths.sum())).astype(np.int32),
        )
        for key, piece in route_documents(chunk, threshold=threshold, groups=groups):
            pending.setdefault(key, []).append(piece)
        flushed = router.add(chunk)
        if flushed:
            got.append(flushed)
            expect_flush()
    got.append(router.flush())
    expect_flush()
    assert len(got) > 3  # flushes came between chunks, not only at the end
    assert [[key for key, _ in flush] for flush in got] == [
        [key for key, _ in flush] for flush in expected
    ]
    for flush, want in zip(got, expected):
        for (_, a), (_, b) in zip(flush, want):
            for field in ("hashes", "lengths", "tokens"):
                np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_unbuffered_routing_emits_nothing_when_the_bundle_ends():
    """flush_tokens=0, for runners that drop finish_bundle's output (Dask): every piece leaves in process()."""
    chunk = TokenizedChunk(
        hashes=np.arange(1, 41, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15),
        lengths=np.full(40, 2, dtype=np.int32),
        tokens=np.arange(80, dtype=np.int32),
    )
    fn = _RouteFn(
        SplitSettings(
            validation_fraction=0.25, groups={"train": 3, "validation": 2}, flush_tokens=0
        )
    )
    fn.setup()
    fn.start_bundle()
    emitted = [*fn.process(chunk), *fn.process(chunk)]
    assert list(fn.finish_bundle()) == []
    assert sum(piece.num_documents for _, piece in emitted) == 80
    buffered = _RouteFn(
        SplitSettings(validation_fraction=0.25, groups={"train": 3, "validation": 2})
    )
    buffered.setup()
    buffered.start_bundle()
    assert [*buffered.process(chunk), *buffered.process(chunk)] == []
    assert sum(wv.value[1].num_documents for wv in buffered.finish_bundle()) == 80


def test_routed_chunks_wait_in_a_file_and_come_back_as_they_were(tmp_path):
    """A staged route step with a directory writes each flush's chunks into one file and hands on only a
    ChunkPiece for each; the pack step reads them back (pieces and chunks alike, READ_PIECES at once)."""
    rng = np.random.default_rng(1)

    def chunk(n: int, dtype: str) -> TokenizedChunk:
        lengths = rng.integers(0, 9, size=n).astype(np.int32)
        tokens = rng.integers(0, 60_000, size=int(lengths.sum())).astype(dtype)
        hashes = rng.integers(0, 2**63, size=n, dtype=np.uint64) * np.uint64(2)
        return TokenizedChunk(hashes=hashes, lengths=lengths, tokens=tokens)

    routed = [(("train", g % 7), chunk(int(rng.integers(0, 40)), "uint16")) for g in range(150)]
    pieces = write_routed(routed[:100], str(tmp_path)) + write_routed(routed[100:], str(tmp_path))
    assert [key for key, _ in pieces] == [key for key, _ in routed]
    assert all(isinstance(piece, ChunkPiece) for _, piece in pieces)
    files = sorted(tmp_path.iterdir())
    assert len(files) == 2 and all(f.name.startswith(ROUTED_PREFIX) for f in files)
    wide = chunk(5, "int32")  # a chunk that came through the GroupByKey passes as it came
    back = list(routed_chunks([piece for _, piece in pieces] + [wide]))
    assert len(back) == len(routed) + 1 > 2 * READ_PIECES
    for got, (_, want) in zip(back, [*routed, (None, wide)]):
        assert np.array_equal(got.hashes, want.hashes) and got.hashes.dtype == np.uint64
        assert np.array_equal(got.lengths, want.lengths) and got.lengths.dtype == np.int32
        assert np.array_equal(got.tokens, want.tokens) and got.tokens.dtype == want.tokens.dtype
