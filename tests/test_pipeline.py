"""Each preprocess stage as a Beam transform, on tiny inline data (TestPipeline + assert_that)."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from preprocess import tokenize
from preprocess.packing import doc_hash, split_of, validation_threshold
from preprocess.pipeline import PackBlocks, WriteShards, layout_splits
from schemas.records import read_records
from preprocess.tokenize import TokenizeDocuments, TokenizeSettings
from schemas.manifest import SplitTotals
from schemas.shards import parse_shard_name

DOCS = [f"Document number {i} says {'hello ' * (i % 7)}and goodbye." for i in range(60)]
GROUPS = {"train": 2, "validation": 3}


def _pipeline() -> TestPipeline:
    return TestPipeline(runner="FnApiRunner", options=PipelineOptions(["--direct_running_mode=in_memory"]))


@pytest.mark.parametrize("flush_tokens", [50, 1 << 22])  # flushes within the bundle, or only at its end
def test_tokenize_routes_every_document_to_its_split_and_group(sample_tokenizer, monkeypatch, flush_tokens):
    from tokenizers import Tokenizer

    monkeypatch.setattr(tokenize, "FLUSH_TOKENS", flush_tokens)  # the in-process runner sees it

    tokenizer = Tokenizer.from_file(str(sample_tokenizer))
    settings = TokenizeSettings(tokenizer_json=sample_tokenizer.read_text(), threads=1,
                                validation_fraction=0.3, groups=GROUPS)
    threshold = validation_threshold(0.3)
    expected = []
    for doc in DOCS:
        h = doc_hash(doc)
        split = "validation" if split_of(np.array([h], dtype=np.uint64), threshold)[0] else "train"
        expected.append((split, h % GROUPS[split], h, tuple(tokenizer.encode(doc).ids)))
    assert {e[0] for e in expected} == {"train", "validation"}

    def unpack(element):
        (split, group), (hashes, lengths, tokens) = element
        assert len(hashes) == len(lengths) and lengths.sum() == tokens.size
        ends = np.cumsum(lengths)
        return [(split, group, int(h), tuple(tokens[e - n:e].tolist())) for h, n, e in zip(hashes, lengths, ends)]

    with _pipeline() as p:
        chunks = (p | beam.Create([DOCS[:25], DOCS[25:]]) | TokenizeDocuments(settings))
        assert_that(chunks | beam.FlatMap(unpack), equal_to(expected))


def _chunk(docs: dict[int, list[int]]):
    hashes = np.array(list(docs), dtype=np.uint64)
    lengths = np.array([len(v) for v in docs.values()], dtype=np.int32)
    return hashes, lengths, np.array([t for v in docs.values() for t in v], dtype=np.int32)


@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_pack_is_independent_of_how_documents_were_batched(remainder):
    docs = {h: list(range(h * 10, h * 10 + h % 5 + 3)) for h in range(1, 12)}  # 11 docs, 3-7 tokens each
    tokens_in = sum(len(v) for v in docs.values())
    items = list(docs.items())
    one_batch = [(("train", 0), _chunk(docs))]
    reversed_batches = [(("train", 0), _chunk(dict(items[i:i + 3]))) for i in reversed(range(0, len(items), 3))]

    def blocks(element):
        split, group, packed = element
        return [(split, group, tuple(row), tuple(mask))
                for row, mask in zip(packed.ids.tolist(), packed.attention_masks().tolist())]

    expected_tokens = [t for h in sorted(docs) for t in docs[h]]
    full, tail = divmod(tokens_in, 8)
    expected = [("train", 0, tuple(expected_tokens[i * 8:(i + 1) * 8]), (1,) * 8) for i in range(full)]
    if remainder == "pad":
        expected.append(("train", 0, tuple(expected_tokens[full * 8:] + [1] * (8 - tail)), (1,) * tail + (0,) * (8 - tail)))
    totals = SplitTotals(documents=11, tokens_in=tokens_in, tokens_written=tokens_in if remainder == "pad" else full * 8,
                         tokens_dropped=0 if remainder == "pad" else tail,
                         padding_tokens=8 - tail if remainder == "pad" else 0, records=len(expected))
    for chunks in (one_batch, reversed_batches):
        with _pipeline() as p:
            packed = p | beam.Create(chunks) | PackBlocks(seq_len=8, remainder=remainder, pad_id=1)
            assert_that(packed.packed | beam.FlatMap(blocks), equal_to(expected), label="Blocks")
            assert_that(packed.totals, equal_to([("train", totals)]), label="Totals")


def test_layout_numbers_groups_in_order_and_sizes_shards():
    layouts = layout_splits([("train", 2, 30), ("train", 0, 10), ("validation", 0, 3)], record_bytes=100,
                            target_shard_bytes=1000, multiple=4, num_shards=None)
    assert layouts["train"].group_offsets == {0: 0, 2: 10}
    assert (layouts["train"].num_records, layouts["train"].num_shards) == (40, 4)
    assert (layouts["validation"].num_records, layouts["validation"].num_shards) == (3, 4)
    empty = layout_splits([("train", 0, 5)], record_bytes=1, target_shard_bytes=10, multiple=8, num_shards=None)
    assert (empty["validation"].num_records, empty["validation"].num_shards) == (0, 0)


def test_write_shards_shuffles_all_blocks_into_balanced_files(tmp_path):
    from preprocess.packing import pack_blocks

    seq_len = 8
    groups = {g: pack_blocks(np.arange(g * 1000, g * 1000 + 8 * (5 + g), dtype=np.int32), seq_len=seq_len,
                             remainder="drop") for g in range(3)}  # 5, 6 and 7 blocks
    elements = [("train", g, packed) for g, packed in groups.items()]
    out = str(tmp_path)
    with _pipeline() as p:
        infos = p | beam.Create(elements) | WriteShards(output=out, seed=5, record_bytes=1,
                                                       target_shard_bytes=1 << 20, shard_multiple=4, num_shards=None)
        assert_that(infos | beam.Map(lambda kv: (kv[0], kv[1].records)), equal_to([("train", 5), ("train", 4)] * 2))

    files = sorted((tmp_path / "train").iterdir())
    assert [parse_shard_name(f.name)[1:] for f in files] == [(0, 4, 5), (1, 4, 4), (2, 4, 5), (3, 4, 4)]
    assert not list((tmp_path / ".lmshards-tmp").iterdir())  # every temp file renamed into place
    spec = {name: tf.io.FixedLenFeature([seq_len], tf.int64) for name in ("input_ids", "attention_mask")}
    rows = []
    for f in files:
        with open(f, "rb") as fh:
            for record in read_records(fh):
                parsed = tf.io.parse_single_example(record, spec)
                rows.append(tuple(parsed["input_ids"].numpy().tolist()))
                assert parsed["attention_mask"].numpy().tolist() == [1] * seq_len
    expected = [tuple(row) for packed in groups.values() for row in packed.ids.tolist()]
    assert sorted(rows) == sorted(expected)
    assert rows != expected  # shuffled, not in group order
