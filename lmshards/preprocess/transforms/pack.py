"""Beam wrappers of lmshards.preprocess.stages.pack: grouping by packing group and packing (PackGroups)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import NamedTuple

import apache_beam as beam

from lmshards.preprocess.stages.encode import TokenizedChunk
from lmshards.preprocess.stages.pack import (
    PackedGroup,
    Packer,
    split_totals,
    sum_totals,
)
from lmshards.preprocess.stages.split import ChunkPiece, GroupKey, routed_chunks
from lmshards.schemas.constants import PACKING_CONCAT


class _PackFn(beam.DoFn):
    """(GroupKey, Iterable[TokenizedChunk | ChunkPiece]) -> PackedGroup; logs "packed k groups" as
    they finish."""

    def __init__(self, *, seq_len: int, remainder: str, pad_id: int | None, packing: str):
        self._packer = Packer(seq_len=seq_len, remainder=remainder, pad_id=pad_id, packing=packing)

    def process(
        self, element: tuple[GroupKey, Iterable[TokenizedChunk | ChunkPiece]]
    ) -> Iterable[PackedGroup]:
        key, chunks = element
        packed = self._packer.pack(key, routed_chunks(chunks))
        # Half the bytes as uint16 until the shard stage spills them (on Dask a task of its own, which holds them).
        yield dataclasses.replace(packed, blocks=packed.blocks.narrowed())

    def finish_bundle(self) -> None:
        self._packer.counters.flush()


class PackOutputs(NamedTuple):
    groups: beam.PCollection  # PackedGroup
    totals: beam.PCollection  # (split, SplitTotals), one per split that has documents


class PackGroups(beam.PTransform):
    """(GroupKey, TokenizedChunk) -> PackOutputs: every packing group packed, and each split's totals."""

    def __init__(
        self, *, seq_len: int, remainder: str, pad_id: int | None, packing: str = PACKING_CONCAT
    ):
        super().__init__()
        self._fn = _PackFn(seq_len=seq_len, remainder=remainder, pad_id=pad_id, packing=packing)

    def expand(self, chunks) -> PackOutputs:
        groups = (
            chunks
            | "GroupByPackingGroup" >> beam.GroupByKey()  # (GroupKey, Iterable[TokenizedChunk])
            | "Pack" >> beam.ParDo(self._fn)  # PackedGroup
        )
        totals = (
            groups
            | "GroupTotals" >> beam.Map(split_totals)  # (split, SplitTotals)
            | "SumTotals" >> beam.CombinePerKey(sum_totals)  # (split, SplitTotals), one per split
        )
        return PackOutputs(groups=groups, totals=totals)
