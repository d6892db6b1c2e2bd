"""Stage 4, pack: each packing group's documents -> blocks of exactly seq_len tokens.

A group's blocks depend only on the set of documents in it: they are ordered by hash before
packing, so neither the runner nor the order documents arrived in changes them.

Two packings (--packing): `concat` puts the documents one after another and cuts every seq_len
tokens; `best_fit` packs whole documents into blocks by best-fit decreasing over the packing group
(the bounded group: ~--packing_group_tokens tokens, its members fixed by their hashes) and pads each
block, recording every token's segment (document) and position within it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from lmshards.preprocess.stages.encode import UINT16_VALUES, TokenizedChunk
from lmshards.preprocess.stages.metrics import PackCounters
from lmshards.preprocess.stages.split import GroupKey
from lmshards.schemas.constants import (
    ATTENTION_MASK,
    INPUT_IDS,
    PACKING_BEST_FIT,
    PACKING_CHOICES,
    PACKING_CONCAT,
    POSITIONS,
    SEGMENT_IDS,
)
from lmshards.schemas.manifest import SplitTotals

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

    `ids` is int32 [num_blocks, seq_len]. Concatenated: every block is full except possibly the
    last one, whose first `last_length` tokens are real and the rest padding (attention_mask 0).
    Packed: `segment_ids` and `positions` (int32, like ids) number each token's segment within its
    block (1, 2, ...; 0 for padding) and its position within the segment (0 for padding).
    Accounting: tokens_in == tokens_written + tokens_dropped and
    tokens_written + padding_tokens == num_blocks * seq_len.
    """

    ids: np.ndarray
    last_length: int
    tokens_in: int
    tokens_written: int
    tokens_dropped: int
    padding_tokens: int
    segment_ids: np.ndarray | None = None
    positions: np.ndarray | None = None
    documents_split: int = 0  # packed: documents longer than a block, cut into block-sized pieces
    segments: int = 0  # packed: segments in all the blocks

    @property
    def num_blocks(self) -> int:
        return int(self.ids.shape[0])

    def attention_masks(self) -> np.ndarray:
        """int32 [num_blocks, seq_len]: 1 for real tokens, 0 for padding."""
        if self.segment_ids is not None:
            return (self.segment_ids > 0).astype(np.int32)
        masks = np.ones(self.ids.shape, dtype=np.int32)
        if self.num_blocks:
            masks[-1, self.last_length :] = 0
        return masks

    def narrowed(self) -> PackedBlocks:
        """These blocks with ids, segment ids and positions as uint16 when every value fits (the
        record bytes are the same: shards are written from rows of their own dtype)."""
        arrays = [a for a in (self.ids, self.segment_ids, self.positions) if a is not None]
        if any(a.size and int(a.max()) >= UINT16_VALUES for a in arrays):
            return self

        def narrow(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a.astype(np.uint16)

        return dataclasses.replace(
            self,
            ids=self.ids.astype(np.uint16),
            segment_ids=narrow(self.segment_ids),
            positions=narrow(self.positions),
        )

    def features(self) -> dict[str, np.ndarray]:
        """Record feature name -> int [num_blocks, seq_len]: what each block's record holds."""
        features = {INPUT_IDS: self.ids, ATTENTION_MASK: self.attention_masks()}
        if self.segment_ids is not None and self.positions is not None:
            features |= {SEGMENT_IDS: self.segment_ids, POSITIONS: self.positions}
        return features


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


def best_fit_bins(lengths: np.ndarray, capacity: int) -> np.ndarray:
    """Best-fit decreasing: the bin of each item (all 1 <= length <= capacity), bins numbered as opened.

    Items are placed longest first (equal lengths in their given order), each into the open bin with
    the least room that still fits it, else a new bin. Deterministic: only the lengths and their order
    decide. Open bins are kept in buckets by room, with a bitmask of the non-empty buckets, so finding
    the best one is a shift and a lowest-set-bit, not a scan.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    bins = np.empty(lengths.size, dtype=np.int64)
    by_room: list[list[int]] = [[] for _ in range(capacity + 1)]
    nonempty, opened = 0, 0
    for item in np.argsort(-lengths, kind="stable").tolist():
        length = int(lengths[item])
        fitting = nonempty >> length
        if fitting:
            room = length + (fitting & -fitting).bit_length() - 1
            bucket = by_room[room]
            chosen = bucket.pop()
            if not bucket:
                nonempty &= ~(1 << room)
        else:
            chosen, room = opened, capacity
            opened += 1
        bins[item] = chosen
        left = room - length
        if left:
            by_room[left].append(chosen)
            nonempty |= 1 << left
    return bins


def pack_best_fit(
    tokens: np.ndarray, lengths: np.ndarray, *, seq_len: int, pad_id: int
) -> PackedBlocks:
    """Packs whole documents (token runs of `lengths`, in order) into padded blocks of seq_len tokens.

    A document longer than a block is cut into block-sized pieces, each its own segment with
    positions from 0 (so no position reaches seq_len, the size of the model's position table): its
    full pieces fill blocks of their own, its last piece is packed like a short document.
    Blocks come in a fixed order: the full pieces' blocks in document order, then the best-fit bins
    as opened; a block's segments are numbered 1, 2, ... in the order they were placed. No token is
    dropped.
    """
    tokens = np.asarray(tokens, dtype=np.int32)
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    full_pieces = lengths // seq_len
    tails = lengths % seq_len
    # Full pieces: (document start + k * seq_len, seq_len), each alone in a block.
    full_docs = np.repeat(np.arange(lengths.size), full_pieces)
    full_k = np.arange(full_docs.size) - np.repeat(
        np.cumsum(full_pieces) - full_pieces, full_pieces
    )
    full_src = starts[full_docs] + full_k * seq_len
    # Tails (a document's last piece shorter than a block): best-fit decreasing after the full blocks.
    tail_docs = np.flatnonzero(tails)
    tail_lengths = tails[tail_docs]
    tail_bins = best_fit_bins(tail_lengths, seq_len) + full_docs.size
    num_blocks = full_docs.size + (
        int(tail_bins.max()) - full_docs.size + 1 if tail_docs.size else 0
    )

    # Every piece: its source start, length, block, and offset within the block (in placement order).
    piece_src = np.concatenate([full_src, starts[tail_docs] + full_pieces[tail_docs] * seq_len])
    piece_len = np.concatenate([np.full(full_docs.size, seq_len), tail_lengths])
    piece_block = np.concatenate([np.arange(full_docs.size), tail_bins])
    placed = np.concatenate(
        [
            np.arange(full_docs.size),
            full_docs.size + np.argsort(-tail_lengths, kind="stable").argsort(),
        ]
    )
    order = np.lexsort((placed, piece_block))  # by block, then as placed
    piece_src, piece_len, piece_block = piece_src[order], piece_len[order], piece_block[order]
    first_in_block = (
        np.r_[True, piece_block[1:] != piece_block[:-1]] if order.size else np.zeros(0, bool)
    )
    block_first = np.flatnonzero(first_in_block)
    segment = np.arange(order.size) - np.repeat(
        block_first, np.diff(np.r_[block_first, order.size])
    )
    offset = np.cumsum(piece_len) - piece_len
    offset -= np.repeat(offset[block_first], np.diff(np.r_[block_first, order.size]))

    total = int(piece_len.sum())
    within = np.arange(total, dtype=np.int64) - np.repeat(
        np.cumsum(piece_len) - piece_len, piece_len
    )
    dest = np.repeat(piece_block * seq_len + offset, piece_len) + within
    ids = np.full(num_blocks * seq_len, pad_id, dtype=np.int32)
    segment_ids = np.zeros(num_blocks * seq_len, dtype=np.int32)
    positions = np.zeros(num_blocks * seq_len, dtype=np.int32)
    ids[dest] = tokens[np.repeat(piece_src, piece_len) + within]
    segment_ids[dest] = np.repeat(segment + 1, piece_len)
    positions[dest] = within  # every piece is a segment of its own: positions restart at 0
    shape = (num_blocks, seq_len)
    return PackedBlocks(
        ids=ids.reshape(shape),
        last_length=seq_len,
        tokens_in=int(tokens.size),
        tokens_written=total,
        tokens_dropped=0,
        padding_tokens=num_blocks * seq_len - total,
        segment_ids=segment_ids.reshape(shape),
        positions=positions.reshape(shape),
        documents_split=int((lengths > seq_len).sum()),
        segments=int(order.size),
    )


def order_by_hash(chunk: TokenizedChunk) -> TokenizedChunk:
    """The chunk with its documents reordered by hash.

    Equal hashes are identical texts with identical tokens, so the result does not depend on the
    order documents arrived in.
    """
    return chunk.take(np.argsort(chunk.hashes, kind="stable"))


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
            documents_split=b.documents_split,
            segments=b.segments,
        )


def pack_group(
    key: GroupKey,
    chunks: Iterable[TokenizedChunk],
    *,
    seq_len: int,
    remainder: str,
    pad_id: int | None,
    packing: str = PACKING_CONCAT,
) -> PackedGroup:
    """All the chunks of packing group `key` -> its PackedGroup."""
    if packing not in PACKING_CHOICES:
        raise ValueError(f"packing must be one of {PACKING_CHOICES}, got {packing!r}")
    chunk = order_by_hash(TokenizedChunk.concat(list(chunks)))
    if packing == PACKING_BEST_FIT:
        if pad_id is None:
            raise ValueError("packing='best_fit' needs a pad_id")
        blocks = pack_best_fit(chunk.tokens, chunk.lengths, seq_len=seq_len, pad_id=pad_id)
    else:
        blocks = pack_blocks(chunk.tokens, seq_len=seq_len, remainder=remainder, pad_id=pad_id)
    split, group = key
    return PackedGroup(split=split, group=group, documents=chunk.num_documents, blocks=blocks)


def split_totals(packed: PackedGroup) -> tuple[str, SplitTotals]:
    return packed.split, packed.totals


def sum_totals(totals: Iterable[SplitTotals]) -> SplitTotals:
    """The field-by-field sum (a CombineFn function: also sums partial sums)."""
    totals = list(totals)
    fields = [f.name for f in dataclasses.fields(SplitTotals)]
    return SplitTotals(**{name: sum(getattr(t, name) for t in totals) for name in fields})


class Packer:
    """pack_group with fixed settings, counting every group it packs (PackCounters): the pack step of
    both preprocess paths (the staged pipeline's _PackFn, and lmshards.preprocess.in_process)."""

    def __init__(self, *, seq_len: int, remainder: str, pad_id: int | None, packing: str):
        self._seq_len, self._remainder, self._pad_id = seq_len, remainder, pad_id
        self._packing = packing
        self.counters = PackCounters()

    def pack(self, key: GroupKey, chunks: Iterable[TokenizedChunk]) -> PackedGroup:
        packed = self.pack_uncounted(key, chunks)
        self.count(packed)
        return packed

    def pack_uncounted(self, key: GroupKey, chunks: Iterable[TokenizedChunk]) -> PackedGroup:
        """pack_group with these settings, for a thread beside the step's: count() it on the step's
        thread (a Beam counter counts only there)."""
        return pack_group(
            key,
            chunks,
            seq_len=self._seq_len,
            remainder=self._remainder,
            pad_id=self._pad_id,
            packing=self._packing,
        )

    def count(self, packed: PackedGroup) -> None:
        blocks = packed.blocks
        self.counters.add(
            blocks=blocks.num_blocks,
            tokens_dropped=blocks.tokens_dropped,
            padding_tokens=blocks.padding_tokens,
        )
