"""Each preprocess stage as a Beam transform, on tiny inline data (TestPipeline + assert_that), and the
wired pipeline's shape: typed elements between the stages, and no multi-output ParDo anywhere."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

import lmshards.preprocess
from lmshards.preprocess.launch import write_known_files
from lmshards.preprocess.options import PreprocessConfig
from lmshards.preprocess.pipeline import build_pipeline, plan_preprocess, shard_set
from lmshards.preprocess.stages.encode import (
    TokenizedChunk,
    chunk_dtype,
    doc_hash,
    encode_documents,
    text_sha256,
)
from lmshards.preprocess.stages.pack import PackedGroup, pack_blocks
from lmshards.preprocess.stages.shard import (
    ASSIGNED_ROWS_PREFIX,
    PACKED_ROWS_PREFIX,
    ShardPiece,
    SpilledGroup,
)
from lmshards.preprocess.stages.split import ChunkPiece, split_of, validation_threshold
from lmshards.preprocess.transforms.encode import EncodeDocuments, EncodeSettings
from lmshards.preprocess.transforms.pack import PackGroups
from lmshards.preprocess.transforms.shard import WriteShards
from lmshards.preprocess.transforms.split import SplitDocuments, SplitSettings
from lmshards.schemas.manifest import ShardInfo, SplitTotals
from lmshards.schemas.records import read_records
from lmshards.schemas.shards import parse_shard_name

DOCS = [f"Document number {i} says {'hello ' * (i % 7)}and goodbye." for i in range(60)]
GROUPS = {"train": 2, "validation": 3}


def _pipeline() -> TestPipeline:
    return TestPipeline(
        runner="FnApiRunner", options=PipelineOptions(["--direct_running_mode=in_memory"])
    )


def _documents(key, chunk: TokenizedChunk) -> list[tuple]:
    ends = np.cumsum(chunk.lengths)
    return [
        (*key, int(h), tuple(chunk.tokens[e - n : e].tolist()))
        for h, n, e in zip(chunk.hashes, chunk.lengths, ends)
    ]


# Emitted per chunk (no buffering), flushed within the bundle, or only at its end.
@pytest.mark.parametrize("flush_tokens", [0, 50, 1 << 22])
def test_encode_and_split_route_every_document_to_its_split_and_group(
    sample_tokenizer, flush_tokens
):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(sample_tokenizer))
    threshold = validation_threshold(0.3)
    expected = []
    for doc in DOCS:
        h = doc_hash(doc)
        split = "validation" if split_of(np.array([h], dtype=np.uint64), threshold)[0] else "train"
        expected.append((split, h % GROUPS[split], h, tuple(tokenizer.encode(doc).ids)))
    assert {e[0] for e in expected} == {"train", "validation"}

    with _pipeline() as p:
        chunks = (
            p
            | beam.Create([DOCS[:25], DOCS[25:]])
            | EncodeDocuments(_encode_settings(sample_tokenizer))
            | SplitDocuments(
                SplitSettings(validation_fraction=0.3, groups=GROUPS, flush_tokens=flush_tokens)
            )
        )
        assert_that(chunks | beam.FlatMap(lambda kv: _documents(*kv)), equal_to(expected))


@pytest.mark.parametrize(
    ("vocab_size", "dtype"), [(30_000, np.uint16), (1 << 16, np.uint16), ((1 << 16) + 1, np.int32)]
)
def test_the_staged_encode_step_sends_ids_as_uint16_when_the_vocab_fits(vocab_size, dtype):
    # The chunks cross the packing groups' GroupByKey (Dataflow's billed shuffle): two bytes an id.
    assert chunk_dtype(vocab_size) == dtype


def test_staged_chunks_hold_the_ids_of_the_in_process_path(sample_tokenizer):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(sample_tokenizer))
    wide = encode_documents(tokenizer, DOCS)
    with _pipeline() as p:
        chunks = (
            p
            | beam.Create([DOCS])
            | EncodeDocuments(_encode_settings(sample_tokenizer))
            | beam.Map(lambda c: (str(c.tokens.dtype), c.tokens.tolist(), c.hashes.tolist()))
        )
        assert_that(chunks, equal_to([("uint16", wide.tokens.tolist(), wide.hashes.tolist())]))


def _encode_settings(tokenizer_json: Path) -> EncodeSettings:
    return EncodeSettings(
        tokenizer_path=str(tokenizer_json),
        tokenizer_sha256=text_sha256(tokenizer_json.read_text()),
        threads=1,
    )


def test_the_staged_encode_step_carries_the_tokenizers_path_and_refuses_one_changed_since(
    sample_tokenizer, tmp_path
):
    """A tokenizer's JSON is megabytes: the step's pickled form holds its path and digest instead, and
    a worker that finds another text there stops the run rather than encode with it."""
    copy = tmp_path / "tokenizer.json"
    copy.write_bytes(sample_tokenizer.read_bytes())
    settings = _encode_settings(copy)
    assert len(pickle.dumps(EncodeDocuments(settings))) < 2000 < len(copy.read_bytes())
    copy.write_text(copy.read_text() + "\n")
    with pytest.raises(Exception, match="changed while the run started"):
        with _pipeline() as p:
            p | beam.Create([DOCS[:3]]) | EncodeDocuments(settings)


def _chunk(docs: dict[int, list[int]]) -> TokenizedChunk:
    return TokenizedChunk(
        hashes=np.array(list(docs), dtype=np.uint64),
        lengths=np.array([len(v) for v in docs.values()], dtype=np.int32),
        tokens=np.array([t for v in docs.values() for t in v], dtype=np.int32),
    )


@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_pack_is_independent_of_how_documents_were_batched(remainder):
    docs = {
        h: list(range(h * 10, h * 10 + h % 5 + 3)) for h in range(1, 12)
    }  # 11 docs, 3-7 tokens each
    tokens_in = sum(len(v) for v in docs.values())
    items = list(docs.items())
    one_batch = [(("train", 0), _chunk(docs))]
    reversed_batches = [
        (("train", 0), _chunk(dict(items[i : i + 3]))) for i in reversed(range(0, len(items), 3))
    ]

    def blocks(packed: PackedGroup):
        return [
            (packed.split, packed.group, tuple(row), tuple(mask))
            for row, mask in zip(
                packed.blocks.ids.tolist(), packed.blocks.attention_masks().tolist()
            )
        ]

    expected_tokens = [t for h in sorted(docs) for t in docs[h]]
    full, tail = divmod(tokens_in, 8)
    expected = [
        ("train", 0, tuple(expected_tokens[i * 8 : (i + 1) * 8]), (1,) * 8) for i in range(full)
    ]
    if remainder == "pad":
        expected.append(
            (
                "train",
                0,
                tuple(expected_tokens[full * 8 :] + [1] * (8 - tail)),
                (1,) * tail + (0,) * (8 - tail),
            )
        )
    totals = SplitTotals(
        documents=11,
        tokens_in=tokens_in,
        tokens_written=tokens_in if remainder == "pad" else full * 8,
        tokens_dropped=0 if remainder == "pad" else tail,
        padding_tokens=8 - tail if remainder == "pad" else 0,
        records=len(expected),
    )
    for chunks in (one_batch, reversed_batches):
        with _pipeline() as p:
            packed = p | beam.Create(chunks) | PackGroups(seq_len=8, remainder=remainder, pad_id=1)
            assert_that(packed.groups | beam.FlatMap(blocks), equal_to(expected), label="Blocks")
            assert_that(packed.totals, equal_to([("train", totals)]), label="Totals")


def test_pack_sums_totals_per_split_over_groups():
    chunks = [
        (("train", 0), _chunk({1: [1] * 9})),
        (("train", 1), _chunk({2: [2] * 8, 3: [3] * 3})),
        (("validation", 0), _chunk({4: [4] * 5})),
    ]
    with _pipeline() as p:
        totals = (
            p | beam.Create(chunks) | PackGroups(seq_len=4, remainder="drop", pad_id=None)
        ).totals
        assert_that(
            totals,
            equal_to(
                [
                    (
                        "train",
                        SplitTotals(
                            documents=3,
                            tokens_in=20,
                            tokens_written=16,
                            tokens_dropped=4,
                            records=4,
                        ),
                    ),
                    (
                        "validation",
                        SplitTotals(
                            documents=1, tokens_in=5, tokens_written=4, tokens_dropped=1, records=1
                        ),
                    ),
                ]
            ),
        )


def test_write_shards_shuffles_all_blocks_into_balanced_files(tmp_path):
    seq_len = 8
    groups = [
        PackedGroup(
            split="train",
            group=g,
            documents=1,
            blocks=pack_blocks(
                np.arange(g * 1000, g * 1000 + 8 * (5 + g), dtype=np.int32),
                seq_len=seq_len,
                remainder="drop",
            ),
        )
        for g in range(3)
    ]  # 5, 6 and 7 blocks
    out = str(tmp_path)
    with _pipeline() as p:
        infos = (
            p
            | beam.Create(groups)
            | WriteShards(
                output=out,
                seed=5,
                record_bytes=1,
                target_shard_bytes=1 << 20,
                shard_multiple=4,
                num_shards=None,
            )
        )
        assert_that(
            infos | beam.Map(lambda kv: (kv[0], kv[1].records)),
            equal_to([("train", 5), ("train", 4)] * 2),
        )

    files = sorted((tmp_path / "train").iterdir())
    assert [parse_shard_name(f.name)[1:] for f in files] == [
        (0, 4, 5),
        (1, 4, 4),
        (2, 4, 5),
        (3, 4, 4),
    ]
    # Every shard's temporary file was renamed into place; the groups' rows, as packed and as assigned
    # (one file each a group), wait there for the manifest step.
    left = sorted(f.name.split("-")[0] + "-" for f in (tmp_path / ".lmshards-tmp").iterdir())
    assert left == [ASSIGNED_ROWS_PREFIX] * 3 + [PACKED_ROWS_PREFIX] * 3
    spec = {
        name: tf.io.FixedLenFeature([seq_len], tf.int64) for name in ("input_ids", "attention_mask")
    }
    rows = []
    for f in files:
        with open(f, "rb") as fh:
            for record in read_records(fh):
                parsed = tf.io.parse_single_example(record, spec)
                rows.append(tuple(parsed["input_ids"].numpy().tolist()))
                assert parsed["attention_mask"].numpy().tolist() == [1] * seq_len
    expected = [tuple(row) for g in groups for row in g.blocks.ids.tolist()]
    assert sorted(rows) == sorted(expected)
    assert rows != expected  # shuffled, not in group order


# ---------------------------------------------------------------- the wired pipeline


class _Outputs(beam.pipeline.PipelineVisitor):
    """full label -> the PCollections an applied transform produced, and every applied transform."""

    def __init__(self):
        self.outputs: dict[str, list[beam.PCollection]] = {}
        self.applied = []

    def enter_composite_transform(self, node) -> None:
        self.visit_transform(node)

    def visit_transform(self, node) -> None:
        self.applied.append(node)
        self.outputs[node.full_label] = list(node.outputs.values())


def _staged_pipeline() -> TestPipeline:
    """In-process, but not the default runner's set-up: the pipeline runs as its Beam stages."""
    return TestPipeline(
        runner="FnApiRunner", options=PipelineOptions(["--direct_running_mode=multi_threading"])
    )


def _shape(element) -> str:
    """A short name of an element's shape: 'list[str]', '(tuple, TokenizedChunk)', 'PackedGroup', ..."""
    if isinstance(element, tuple) and len(element) == 2:
        key, value = element
        key_name = (
            f"({type(key[0]).__name__}, {type(key[1]).__name__})"
            if isinstance(key, tuple)
            else type(key).__name__
        )
        return f"({key_name}, {_shape(value)})"
    if isinstance(element, list):
        return f"list[{'/'.join(sorted({type(e).__name__ for e in element}))}]"
    return type(element).__name__


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory, sample_tokenizer, sample_dir):
    work = tmp_path_factory.mktemp("wired")
    text = (sample_dir / "en" / "persuasion.txt").read_text(encoding="utf-8")
    (work / "in.txt").write_text(text[:60_000], encoding="utf-8")
    config = PreprocessConfig(
        inputs=(str(work / "in.txt"),),
        tokenizer=str(sample_tokenizer),
        output=str(work / "out"),
        seq_len=32,
        validation_fraction=0.2,
        packing_group_tokens=2000,
        tokenizer_threads=1,
    )
    return plan_preprocess(config)


def test_elements_between_stages_are_typed(small_plan):
    pipeline = _staged_pipeline()
    build_pipeline(pipeline, small_plan)
    visitor = _Outputs()
    pipeline.visit(visitor)
    stage_outputs = {
        "Read/Documents": "list[str]",
        "Read/SumStats": "ReadStats",
        "Tokenize": TokenizedChunk.__name__,
        "Split": f"((str, int), {ChunkPiece.__name__})",
        "Pack/Pack": PackedGroup.__name__,
        "Pack/SumTotals": "(str, SplitTotals)",
        "Shard/SpillGroups": SpilledGroup.__name__,
        "Shard/AssignShards": f"((str, int), {ShardPiece.__name__})",
        "Shard": f"(str, {ShardInfo.__name__})",
        "Manifest": "str",
    }
    for label, shape in stage_outputs.items():
        (pcoll,) = visitor.outputs[label]
        shapes = pcoll | f"Shape{label}" >> beam.Map(_shape) | f"Distinct{label}" >> beam.Distinct()
        assert_that(shapes, equal_to([shape]), label=f"Check{label}")
    write_known_files(shard_set(small_plan))
    pipeline.run().wait_until_finish()
    assert (Path(small_plan.config.output) / "manifest.json").exists()


def test_no_transform_has_tagged_outputs(small_plan):
    """Beam's DaskRunner delivers a ParDo's tagged outputs into its main output: every step has one output."""
    pipeline = _staged_pipeline()
    build_pipeline(pipeline, small_plan)
    visitor = _Outputs()
    pipeline.visit(visitor)
    pardos = [node for node in visitor.applied if isinstance(node.transform, beam.ParDo)]
    assert len(pardos) > 10
    for node in pardos:
        assert list(node.outputs) == [None], node.full_label  # only the main output
        assert not node.transform.output_tags, node.full_label


def test_no_preprocess_module_uses_tagged_outputs():
    """The same, for code not on the default path (e.g. a branch only some inputs take)."""
    root = Path(lmshards.preprocess.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = (
                node.attr
                if isinstance(node, ast.Attribute)
                else node.id
                if isinstance(node, ast.Name)
                else None
            )
            if name in ("with_outputs", "TaggedOutput"):
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert offenders == []
