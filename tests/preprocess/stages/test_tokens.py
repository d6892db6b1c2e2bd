"""The token store's parts and manifest, without Beam: exact round trips, id widths, damage named by file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from lmshards.preprocess.stages.encode import TokenizedChunk
from lmshards.preprocess.stages.tokens import (
    UINT16,
    UINT32,
    TokenStoreError,
    TokenStoreManifest,
    decode_part,
    decode_pieces,
    encode_part,
    finish_store,
    id_dtype_for,
    locate_store,
    pieces,
    read_part,
    read_store_manifest,
    write_part,
)
from lmshards.schemas.manifest import InputFileInfo, TokenizerInfo


def _chunk(max_id: int, documents: int = 50, seed: int = 0) -> TokenizedChunk:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 300, size=documents).astype(np.int32)
    return TokenizedChunk(
        hashes=rng.integers(0, 1 << 64, size=documents, dtype=np.uint64),
        lengths=lengths,
        tokens=rng.integers(0, max_id + 1, size=int(lengths.sum())).astype(np.int32),
    )


def _equal(a: TokenizedChunk, b: TokenizedChunk) -> None:
    assert a.hashes.dtype == b.hashes.dtype == np.uint64
    assert b.lengths.dtype == np.int32
    np.testing.assert_array_equal(a.hashes, b.hashes)
    np.testing.assert_array_equal(a.lengths, b.lengths)
    np.testing.assert_array_equal(a.tokens, b.tokens)


@pytest.mark.parametrize(
    "vocab_size,dtype", [(400, UINT16), (65536, UINT16), (65537, UINT32), (250_002, UINT32)]
)
def test_the_id_width_is_the_narrowest_that_holds_the_vocabulary(vocab_size, dtype):
    assert id_dtype_for(vocab_size) == dtype


@pytest.mark.parametrize("vocab_size", [65536, 250_002])
def test_a_part_round_trips_every_hash_length_and_id_exactly(tmp_path, vocab_size):
    dtype = id_dtype_for(vocab_size)
    chunk = _chunk(vocab_size - 1)
    info = write_part(str(tmp_path), chunk, dtype)
    assert (info.documents, info.tokens) == (chunk.num_documents, chunk.num_tokens)
    assert (tmp_path / info.path).stat().st_size == info.bytes
    assert not (tmp_path / ".lmshards-tmp").exists() or not any(
        (tmp_path / ".lmshards-tmp").iterdir()
    )
    read = read_part(str(tmp_path), info)
    _equal(chunk, read)
    assert read.tokens.dtype == dtype  # read at the store's width; packing widens to int32


@pytest.mark.parametrize("vocab_size,arrow_type", [(400, "uint16"), (250_002, "uint32")])
def test_readers_of_the_parquet_see_the_id_width_and_one_row_per_document(vocab_size, arrow_type):
    import pyarrow as pa
    import pyarrow.parquet as pq

    chunk = _chunk(vocab_size - 1)
    table = pq.read_table(pa.BufferReader(encode_part(chunk, id_dtype_for(vocab_size))))
    assert str(table.schema.field("input_ids").type.value_type) == arrow_type
    assert str(table.schema.field("doc_hash").type) == "uint64"
    assert table.num_rows == chunk.num_documents


def test_damaged_bytes_are_an_error_naming_the_file(tmp_path):
    chunk = _chunk(399)
    info = write_part(str(tmp_path), chunk, UINT16)
    path = tmp_path / info.path
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(TokenStoreError, match=f"{path}.*damaged.*sha256"):
        decode_part(bytes(data), info, str(path))
    # Bytes that match their sha256 but hold other counts (a manifest from another run).
    wrong = dataclasses.replace(info, documents=info.documents + 1)
    with pytest.raises(TokenStoreError, match="holds 50 documents"):
        decode_part(path.read_bytes(), wrong, str(path))
    path.unlink()
    with pytest.raises(TokenStoreError, match=f"{path}.*missing"):
        read_part(str(tmp_path), info)


def _store_manifest(files) -> TokenStoreManifest:
    return TokenStoreManifest(
        tool_version="0",
        tokenizer=TokenizerInfo("sha256:x", 400, {"pad": 1}, (0, 1)),
        id_dtype=UINT16,
        documents=sum(f.documents for f in files),
        tokens=sum(f.tokens for f in files),
        files=tuple(files),
        inputs=(InputFileInfo("a.txt", 10),),
        reading={"documents": 50},
        options={"seq_len": 128},
    )


def test_the_manifest_lists_only_the_committed_parts_and_round_trips(tmp_path):
    kept = write_part(str(tmp_path), _chunk(399, seed=1), UINT16)
    orphan = write_part(str(tmp_path), _chunk(399, seed=2), UINT16)  # a retried writer's
    manifest = _store_manifest([kept])
    finish_store(str(tmp_path), manifest)
    assert not (tmp_path / orphan.path).exists() and (tmp_path / kept.path).exists()
    assert read_store_manifest(str(tmp_path)) == manifest
    assert locate_store(str(tmp_path)) == str(tmp_path)


def test_a_store_without_its_manifest_or_with_a_bad_one_is_an_error_naming_it(tmp_path):
    write_part(str(tmp_path), _chunk(399), UINT16)
    with pytest.raises(TokenStoreError, match="No manifest.json in token store .*incomplete"):
        read_store_manifest(str(tmp_path))
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(TokenStoreError, match=f"{tmp_path / 'manifest.json'}.*not valid JSON"):
        read_store_manifest(str(tmp_path))
    data = json.loads(_store_manifest([]).to_json())
    data["documents"] = 5  # not the sum over its files
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(TokenStoreError, match="not the sums over its files"):
        read_store_manifest(str(tmp_path))


def test_locate_store_says_which_kind_of_directory_it_was_given(tmp_path: Path):
    with pytest.raises(TokenStoreError, match="neither a token store nor a shard set"):
        locate_store(str(tmp_path))
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "lmshards.manifest"}))
    with pytest.raises(TokenStoreError, match="keeps no token store.*--keep_tokens"):
        locate_store(str(tmp_path))
    (tmp_path / "tokens").mkdir()
    with pytest.raises(TokenStoreError, match="tokens.* has no manifest.json: it is incomplete"):
        locate_store(str(tmp_path))


@pytest.mark.parametrize("max_tokens", [1, 299, 1000, 10**9])
def test_pieces_cut_between_documents_and_keep_every_one_in_order(max_tokens):
    chunk = _chunk(399, documents=80)
    parts = pieces(chunk, max_tokens)
    _equal(chunk, TokenizedChunk.concat(parts))
    assert all(p.num_documents >= 1 for p in parts)
    assert all(p.num_tokens <= max_tokens or p.num_documents == 1 for p in parts)
    if max_tokens >= chunk.num_tokens:
        assert len(parts) == 1


def test_a_part_is_read_a_row_group_at_a_time_and_still_whole(tmp_path, monkeypatch):
    import lmshards.preprocess.stages.tokens

    monkeypatch.setattr(lmshards.preprocess.stages.tokens, "ROW_GROUP_TOKENS", 2000)
    chunk = _chunk(399, documents=200)
    info = write_part(str(tmp_path), chunk, UINT16)
    groups = list(decode_pieces((tmp_path / info.path).read_bytes(), info, info.path))
    assert len(groups) >= chunk.num_tokens // 2000 - 1
    _equal(chunk, TokenizedChunk.concat(groups))
