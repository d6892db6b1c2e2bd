"""Beam wrappers of lmshards.preprocess.stages.shard: spilling, assigning and writing the shards (WriteShards)."""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
import numpy as np

from lmshards.plumbing import fs
from lmshards.preprocess.stages.pack import PackedGroup
from lmshards.preprocess.stages.shard import (
    SHARD_WINDOW_BYTES,
    WIDE_ROW_DTYPE,
    ShardBatch,
    ShardKey,
    ShardPiece,
    ShardWriter,
    SpilledGroup,
    SplitLayout,
    assign_to_file,
    empty_shards,
    group_to_shards,
    layout_splits,
    rows_in_files,
    shard_batches,
    spill_group,
)
from lmshards.schemas.layouts import TEMP_DIR_NAME
from lmshards.schemas.manifest import ShardInfo


class _SpillFn(beam.DoFn):
    """PackedGroup -> SpilledGroup (spill_group); fused with packing, so the rows stay in the worker."""

    def __init__(self, output: str, dtype: np.dtype):
        self._output, self._dtype = output, dtype

    def process(self, packed: PackedGroup) -> Iterable[SpilledGroup]:
        yield spill_group(packed, dtype=self._dtype, directory=fs.join(self._output, TEMP_DIR_NAME))


class _AssignFn(beam.DoFn):
    """SpilledGroup -> (ShardKey, ShardPiece) per shard the group feeds (assign_to_file); for an output
    on an object store, (ShardKey, ShardBatch) (group_to_shards: see rows_in_files)."""

    def __init__(self, output: str, seed: int):
        self._output, self._seed = output, seed

    def process(
        self, spilled: SpilledGroup, layouts: dict[str, SplitLayout]
    ) -> Iterable[tuple[ShardKey, ShardPiece | ShardBatch]]:
        layout = layouts[spilled.size.split]
        if not rows_in_files(self._output):
            yield from group_to_shards(spilled, layout, seed=self._seed)
            return
        directory = fs.join(self._output, TEMP_DIR_NAME)
        yield from assign_to_file(spilled, layout, seed=self._seed, directory=directory)


class _WriteShardFn(beam.DoFn):
    """(ShardKey, Iterable[ShardPiece | ShardBatch]) -> (split, ShardInfo), the file complete under its
    name; logs "wrote k of N shards" as they finish."""

    def __init__(self, output: str):
        self._writer = ShardWriter(output, SHARD_WINDOW_BYTES)

    def process(
        self,
        element: tuple[ShardKey, Iterable[ShardPiece | ShardBatch]],
        layouts: dict[str, SplitLayout],
    ) -> Iterable[tuple[str, ShardInfo]]:
        key, elements = element
        yield key[0], self._writer.write(key, shard_batches(elements), layouts)

    def finish_bundle(self) -> None:
        self._writer.counters.flush()


class WriteShards(beam.PTransform):
    """PackedGroup -> (split, ShardInfo): a seeded global shuffle into balanced shards."""

    def __init__(
        self,
        *,
        output: str,
        seed: int,
        dtype: np.dtype = WIDE_ROW_DTYPE,
        record_bytes: int,
        target_shard_bytes: float,
        shard_multiple: int,
        num_shards: int | None,
    ):
        super().__init__()
        self._output, self._seed, self._dtype = output, seed, dtype
        self._layout_args = dict(
            record_bytes=record_bytes,
            target_shard_bytes=target_shard_bytes,
            multiple=shard_multiple,
            num_shards=num_shards,
        )

    def expand(self, packed):
        spilled = packed | "SpillGroups" >> beam.ParDo(
            _SpillFn(self._output, self._dtype)
        )  # SpilledGroup
        layouts = (
            spilled
            | "GroupSizes" >> beam.Map(lambda group: group.size)  # GroupSize
            | "AllGroupSizes" >> beam.combiners.ToList()  # list[GroupSize], one element
            | "Layout"
            >> beam.Map(layout_splits, **self._layout_args)  # {split: SplitLayout}, one element
        )
        layouts_side = beam.pvalue.AsSingleton(layouts)
        records = spilled | "AssignShards" >> beam.ParDo(
            _AssignFn(self._output, self._seed), layouts_side
        )  # (ShardKey, ShardPiece), or (ShardKey, ShardBatch) for a remote output
        every_shard = layouts | "EveryShard" >> beam.FlatMap(
            empty_shards
        )  # (ShardKey, ShardBatch), empty
        return (
            (records, every_shard)
            | "WithEmptyShards" >> beam.Flatten()  # (ShardKey, ShardPiece | ShardBatch)
            | "GroupByShard" >> beam.GroupByKey()  # (ShardKey, Iterable[ShardPiece | ShardBatch])
            | "WriteShard"
            >> beam.ParDo(_WriteShardFn(self._output), layouts_side)  # (split, ShardInfo)
        )
