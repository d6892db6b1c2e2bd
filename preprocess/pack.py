"""Stage 4, pack: each packing group's documents -> blocks of exactly seq_len tokens.

A group's blocks depend only on the set of documents in it: they are ordered by hash before
packing, so neither the runner nor the order documents arrived in changes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import NamedTuple

import apache_beam as beam
import numpy as np

from preprocess.encode import TokenizedChunk
from preprocess.metrics import StageProgress, counter
from preprocess.split import GroupKey
from schemas.manifest import SplitTotals

REMAINDER_DROP = "drop"
REMAINDER_PAD = "pad"
REMAINDER_CHOICES = (REMAINDER_DROP, REMAINDER_PAD)

# Size of a packing group: large enough that the one partial block per group is a negligible
# loss (< seq_len / 1M of the tokens), small enough that one group fits a worker's memory.
DEFAULT_GROUP_TOKENS = 1 << 20
# Rough UTF-8 bytes per token, used only to choose the number of groups before tokenizing.
BYTES_PER_TOKEN_ESTIMATE = 4


# ---------------------------------------------------------------- logic


def num_groups(total_bytes: int, fraction: float, group_tokens: int = DEFAULT_GROUP_TOKENS) -> int:
    """Packing groups for a split holding `fraction` of `total_bytes` of text: >= 1, each ~group_tokens."""
    estimated_tokens = total_bytes * fraction / BYTES_PER_TOKEN_ESTIMATE
    return max(1, int(estimated_tokens // group_tokens))


@dataclasses.dataclass(frozen=True, eq=False)
class PackedBlocks:
    """A packing group cut into blocks.

    `ids` is int32 [num_blocks, seq_len]; every block is full except possibly the last one, whose
    first `last_length` tokens are real and the rest padding (attention_mask 0).
    Accounting: tokens_in == tokens_written + tokens_dropped and
    tokens_written + padding_tokens == num_blocks * seq_len.
    """

    ids: np.ndarray
    last_length: int
    tokens_in: int
    tokens_written: int
    tokens_dropped: int
    padding_tokens: int

    @property
    def num_blocks(self) -> int:
        return int(self.ids.shape[0])

    def attention_masks(self) -> np.ndarray:
        """int32 [num_blocks, seq_len]: 1 for real tokens, 0 for padding."""
        masks = np.ones(self.ids.shape, dtype=np.int32)
        if self.num_blocks:
            masks[-1, self.last_length :] = 0
        return masks


def pack_blocks(
    tokens: np.ndarray, *, seq_len: int, remainder: str, pad_id: int | None = None
) -> PackedBlocks:
    """Cuts concatenated documents into blocks of exactly seq_len tokens.

    A document longer than a block continues in the next block. Only the final partial block is
    special: dropped (`remainder="drop"`) or filled with `pad_id` (`remainder="pad"`).
    """
    if remainder not in REMAINDER_CHOICES:
        raise ValueError(f"remainder must be one of {REMAINDER_CHOICES}, got {remainder!r}")
    tokens = np.asarray(tokens, dtype=np.int32)
    total = int(tokens.size)
    full, tail = divmod(total, seq_len)
    if tail and remainder == REMAINDER_PAD:
        if pad_id is None:
            raise ValueError("remainder='pad' needs a pad_id")
        padded = np.full((full + 1) * seq_len, pad_id, dtype=np.int32)
        padded[:total] = tokens
        return PackedBlocks(
            ids=padded.reshape(full + 1, seq_len),
            last_length=tail,
            tokens_in=total,
            tokens_written=total,
            tokens_dropped=0,
            padding_tokens=seq_len - tail,
        )
    written = full * seq_len
    return PackedBlocks(
        ids=tokens[:written].reshape(full, seq_len),
        last_length=seq_len,
        tokens_in=total,
        tokens_written=written,
        tokens_dropped=total - written,
        padding_tokens=0,
    )


def order_by_hash(chunk: TokenizedChunk) -> np.ndarray:
    """The chunk's tokens with its documents reordered by hash.

    Equal hashes are identical texts with identical tokens, so the result does not depend on the
    order documents arrived in.
    """
    return chunk.take(np.argsort(chunk.hashes, kind="stable")).tokens


@dataclasses.dataclass(frozen=True, eq=False)
class PackedGroup:
    """One packing group of one split, packed."""

    split: str
    group: int
    documents: int
    blocks: PackedBlocks

    @property
    def totals(self) -> SplitTotals:
        """This group's share of its split's counts."""
        b = self.blocks
        return SplitTotals(
            documents=self.documents,
            tokens_in=b.tokens_in,
            tokens_written=b.tokens_written,
            tokens_dropped=b.tokens_dropped,
            padding_tokens=b.padding_tokens,
            records=b.num_blocks,
        )


def pack_group(
    key: GroupKey,
    chunks: Iterable[TokenizedChunk],
    *,
    seq_len: int,
    remainder: str,
    pad_id: int | None,
) -> PackedGroup:
    """All the chunks of packing group `key` -> its PackedGroup."""
    chunk = TokenizedChunk.concat(list(chunks))
    blocks = pack_blocks(order_by_hash(chunk), seq_len=seq_len, remainder=remainder, pad_id=pad_id)
    split, group = key
    return PackedGroup(split=split, group=group, documents=chunk.num_documents, blocks=blocks)


def split_totals(packed: PackedGroup) -> tuple[str, SplitTotals]:
    return packed.split, packed.totals


def sum_totals(totals: Iterable[SplitTotals]) -> SplitTotals:
    """The field-by-field sum (a CombineFn function: also sums partial sums)."""
    totals = list(totals)
    fields = [f.name for f in dataclasses.fields(SplitTotals)]
    return SplitTotals(**{name: sum(getattr(t, name) for t in totals) for name in fields})


# ---------------------------------------------------------------- Beam


class _PackFn(beam.DoFn):
    """(GroupKey, Iterable[TokenizedChunk]) -> PackedGroup; logs "packed k groups" as they finish."""

    def __init__(self, *, seq_len: int, remainder: str, pad_id: int | None):
        self._seq_len, self._remainder, self._pad_id = seq_len, remainder, pad_id
        self._groups = counter("groups_packed")
        self._blocks = counter("blocks")
        self._dropped = counter("tokens_dropped")
        self._padding = counter("padding_tokens")

    def setup(self) -> None:
        self._progress = StageProgress("packed", "groups")

    def process(self, element: tuple[GroupKey, Iterable[TokenizedChunk]]) -> Iterable[PackedGroup]:
        key, chunks = element
        packed = pack_group(
            key, chunks, seq_len=self._seq_len, remainder=self._remainder, pad_id=self._pad_id
        )
        self._groups.inc()
        self._blocks.inc(packed.blocks.num_blocks)
        self._dropped.inc(packed.blocks.tokens_dropped)
        self._padding.inc(packed.blocks.padding_tokens)
        self._progress.add(packed.blocks.num_blocks)
        yield packed

    def finish_bundle(self) -> None:
        self._progress.flush()


class PackOutputs(NamedTuple):
    groups: beam.PCollection  # PackedGroup
    totals: beam.PCollection  # (split, SplitTotals), one per split that has documents


class PackGroups(beam.PTransform):
    """(GroupKey, TokenizedChunk) -> PackOutputs: every packing group packed, and each split's totals."""

    def __init__(self, *, seq_len: int, remainder: str, pad_id: int | None):
        super().__init__()
        self._fn = _PackFn(seq_len=seq_len, remainder=remainder, pad_id=pad_id)

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
