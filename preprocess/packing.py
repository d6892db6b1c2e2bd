"""Pure functions of the tokenize -> split -> pack stages: document hashes, splits, groups, blocks.

Nothing here depends on Beam, so the pipeline's determinism rests on code that unit tests cover:
a document's split and packing group depend only on its text, and a group's blocks only on the
set of documents in it (they are ordered by hash before packing).
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from schemas.constants import TRAIN_SPLIT, VALIDATION_SPLIT

REMAINDER_DROP = "drop"
REMAINDER_PAD = "pad"
REMAINDER_CHOICES = (REMAINDER_DROP, REMAINDER_PAD)

# Size of a packing group: large enough that the one partial block per group is a negligible
# loss (< seq_len / 1M of the tokens), small enough that one group fits a worker's memory.
DEFAULT_GROUP_TOKENS = 1 << 20
# Rough UTF-8 bytes per token, used only to choose the number of groups before tokenizing.
BYTES_PER_TOKEN_ESTIMATE = 4

_HASH_SPACE = 1 << 64


def doc_hash(text: str) -> int:
    """A stable 64-bit hash of a document's text (BLAKE2b), the same on every machine and Python."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def validation_threshold(validation_fraction: float) -> int:
    """Documents whose hash is below this go to validation: about `validation_fraction` of them."""
    return min(int(validation_fraction * _HASH_SPACE), _HASH_SPACE - 1)


def split_of(hashes: np.ndarray, threshold: int) -> np.ndarray:
    """Boolean array: True where the document (by uint64 hash) belongs to the validation split."""
    return hashes < np.uint64(threshold)


def split_name(is_validation: bool) -> str:
    return VALIDATION_SPLIT if is_validation else TRAIN_SPLIT


def num_groups(total_bytes: int, fraction: float, group_tokens: int = DEFAULT_GROUP_TOKENS) -> int:
    """Packing groups for a split holding `fraction` of `total_bytes` of text: >= 1, each ~group_tokens."""
    estimated_tokens = total_bytes * fraction / BYTES_PER_TOKEN_ESTIMATE
    return max(1, int(estimated_tokens // group_tokens))


@dataclasses.dataclass(frozen=True)
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
            masks[-1, self.last_length:] = 0
        return masks


def pack_blocks(tokens: np.ndarray, *, seq_len: int, remainder: str, pad_id: int | None = None) -> PackedBlocks:
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
            ids=padded.reshape(full + 1, seq_len), last_length=tail, tokens_in=total,
            tokens_written=total, tokens_dropped=0, padding_tokens=seq_len - tail,
        )
    written = full * seq_len
    return PackedBlocks(
        ids=tokens[:written].reshape(full, seq_len), last_length=seq_len, tokens_in=total,
        tokens_written=written, tokens_dropped=total - written, padding_tokens=0,
    )


def gather_documents(lengths: np.ndarray, tokens: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The tokens of documents `order` (indices; sizes in `lengths`, concatenated in `tokens`), concatenated."""
    lengths = lengths.astype(np.int64)
    starts = np.cumsum(lengths) - lengths
    new_lengths = lengths[order]
    new_starts = np.cumsum(new_lengths) - new_lengths
    # For every output position: its source position = source start - destination start + position.
    shift = np.repeat(starts[order] - new_starts, new_lengths)
    return tokens[shift + np.arange(int(new_lengths.sum()), dtype=np.int64)]


def order_by_hash(hashes: np.ndarray, lengths: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """The documents' tokens (concatenated in `tokens`, sizes in `lengths`) reordered by hash.

    Equal hashes are identical texts with identical tokens, so the result does not depend on the
    order documents arrived in.
    """
    return gather_documents(lengths, tokens, np.argsort(hashes, kind="stable"))
