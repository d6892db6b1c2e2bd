"""Pure logic of the encode stage: document hashes, TokenizedChunk, encoding a batch."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from lmshards.plumbing.errors import TokenizerError
from lmshards.preprocess.stages.encode import (
    TokenizedChunk,
    doc_hash,
    doc_hashes,
    encode_documents,
    planned_tokenizer_text,
    text_sha256,
)


def chunk_of(docs: dict[int, list[int]]) -> TokenizedChunk:
    """hash -> token ids, as one TokenizedChunk in dict order."""
    return TokenizedChunk(
        hashes=np.array(list(docs), dtype=np.uint64),
        lengths=np.array([len(v) for v in docs.values()], dtype=np.int32),
        tokens=np.array([t for v in docs.values() for t in v], dtype=np.int32),
    )


def documents_of(chunk: TokenizedChunk) -> list[tuple[int, list[int]]]:
    ends = np.cumsum(chunk.lengths)
    return [
        (int(h), chunk.tokens[e - n : e].tolist())
        for h, n, e in zip(chunk.hashes, chunk.lengths, ends)
    ]


def test_doc_hash_is_stable_and_text_only():
    assert doc_hash("hello") == doc_hash("hello")
    assert doc_hash("hello") != doc_hash("hello ")
    # Pinned value: the split of a document must never change between versions or machines.
    assert doc_hash("hello") == int.from_bytes(
        hashlib.blake2b(b"hello", digest_size=8).digest(), "little"
    )


DOCS = {7: [70, 71], 3: [30], 9: [90, 91, 92], 5: [50, 51], 2: []}


def test_doc_hashes_of_a_batch_are_each_texts_doc_hash():
    texts = ["hello", "", "héllo wörld", "lone \ud800 surrogate", "x" * 100_000, "hello"]
    hashes = doc_hashes(texts)
    assert hashes.dtype == np.uint64 and hashes.flags.writeable
    assert hashes.tolist() == [
        int.from_bytes(
            hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little"
        )
        for t in texts
    ]
    assert hashes.tolist() == [doc_hash(t) for t in texts]
    assert hashes[0] == hashes[-1] != hashes[1]
    assert doc_hashes([]).shape == (0,)


def test_take_reorders_whole_documents():
    chunk = chunk_of(DOCS)
    taken = chunk.take(np.array([2, 0, 4, 3]))
    assert documents_of(taken) == [(9, [90, 91, 92]), (7, [70, 71]), (2, []), (5, [50, 51])]
    assert (
        taken.hashes.dtype == np.uint64
        and taken.lengths.dtype == np.int32
        and taken.tokens.dtype == np.int32
    )
    assert (taken.num_documents, taken.num_tokens) == (4, 7)


def test_split_and_concat_are_inverse():
    chunk = chunk_of(DOCS)
    pieces = chunk.split([0, 1, 1, 4, 5])
    assert [documents_of(p) for p in pieces] == [
        [(7, [70, 71])],
        [],
        [(3, [30]), (9, [90, 91, 92]), (5, [50, 51])],
        [(2, [])],
    ]
    assert all(p.tokens.base is not None for p in pieces)  # views, not copies
    assert documents_of(TokenizedChunk.concat(pieces)) == documents_of(chunk)


def test_encode_documents_matches_the_tokenizer_one_by_one(sample_tokenizer):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(sample_tokenizer))
    texts = ["A first document.", "Second, with more words in it.", "Третий документ", "第四"]
    chunk = encode_documents(tokenizer, texts)
    assert documents_of(chunk) == [(doc_hash(t), tokenizer.encode(t).ids) for t in texts]


def test_the_planned_tokenizer_is_read_again_whole_or_refused(tmp_path):
    path = tmp_path / "tokenizer.json"
    text = '{"model": {"vocab": {"é": 0}}}'
    path.write_text(text, encoding="utf-8")
    digest = text_sha256(text)
    assert planned_tokenizer_text(str(path), digest) == text
    for changed in (text.encode() + b"\n", b"\xff\xfe not UTF-8"):
        path.write_bytes(changed)
        with pytest.raises(TokenizerError, match="changed while the run started"):
            planned_tokenizer_text(str(path), digest)
