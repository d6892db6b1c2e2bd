"""Packed blocks of random documents and the check that a packed model computes each document as alone.

Keras and numpy only, so it runs in this process (TensorFlow backend) and in a JAX subprocess alike.
"""

from __future__ import annotations

import numpy as np

from lmshards.train.config import ModelConfig
from lmshards.train.families import get_family
from lmshards.train.families.base import PACKED_POSITIONS_INPUT, PACKED_SEGMENTS_INPUT
from lmshards.train.network.model import build_masked_lm
from tests.helpers.masked_lm_factory import perturb

PAD_ID = 1
# Two blocks of 32: three documents and padding, and two documents (one ending the block exactly).
SEQ_LEN = 32
BLOCKS = ((7, 12, 9), (20, 12))


def packed_block_inputs(
    documents: list[list[np.ndarray]], *, seq_len: int, uses_segment_ids: bool
) -> dict[str, np.ndarray]:
    """The packed model's inputs for blocks of these documents, one after another, then padding."""
    rows = len(documents)
    ids = np.full((rows, seq_len), PAD_ID, np.int32)
    segments = np.zeros((rows, seq_len), np.int32)
    positions = np.zeros((rows, seq_len), np.int32)
    for row, docs in enumerate(documents):
        start = 0
        for segment, doc in enumerate(docs, start=1):
            ids[row, start : start + doc.size] = doc
            segments[row, start : start + doc.size] = segment
            positions[row, start : start + doc.size] = np.arange(doc.size)
            start += doc.size
    inputs = {"token_ids": ids, PACKED_SEGMENTS_INPUT: segments, PACKED_POSITIONS_INPUT: positions}
    if uses_segment_ids:
        inputs["segment_ids"] = np.zeros_like(ids)
    inputs["mask_positions"] = np.tile(np.arange(seq_len, dtype=np.int32), (rows, 1))
    return inputs


def alone_inputs(doc: np.ndarray, *, uses_segment_ids: bool) -> dict[str, np.ndarray]:
    """The plain model's inputs for one document, unpadded."""
    inputs = {
        "token_ids": doc[None].astype(np.int32),
        "padding_mask": np.ones((1, doc.size), np.int32),
    }
    if uses_segment_ids:
        inputs["segment_ids"] = np.zeros((1, doc.size), np.int32)
    inputs["mask_positions"] = np.arange(doc.size, dtype=np.int32)[None]
    return inputs


def packed_vs_alone(family: str, *, vocabulary_size: int = 300, seed: int = 0) -> dict[str, float]:
    """Largest |packed-block logit - the same document's logit alone| over every real token, and the
    largest logit (to show the scale), for a tiny perturbed model of `family` (fp32, no dropout)."""
    config = ModelConfig(
        family=family,
        vocabulary_size=vocabulary_size,
        num_layers=2,
        num_heads=2,
        hidden_dim=32,
        intermediate_dim=64,
        dropout=0.0,
        max_sequence_length=SEQ_LEN,
    )
    plain = build_masked_lm(config)
    perturb(plain, seed=seed)
    packed = build_masked_lm(config, packed=True)
    packed.set_weights(plain.get_weights())
    rng = np.random.default_rng(seed)
    documents = [[rng.integers(5, vocabulary_size, n) for n in lengths] for lengths in BLOCKS]
    uses_segment_ids = get_family(family).uses_segment_ids
    inputs = packed_block_inputs(documents, seq_len=SEQ_LEN, uses_segment_ids=uses_segment_ids)
    logits = np.asarray(packed(inputs, training=False))
    worst, scale = 0.0, 0.0
    for row, docs in enumerate(documents):
        start = 0
        for doc in docs:
            alone = np.asarray(
                plain(alone_inputs(doc, uses_segment_ids=uses_segment_ids), training=False)
            )[0]
            worst = max(worst, float(np.abs(logits[row, start : start + doc.size] - alone).max()))
            scale = max(scale, float(np.abs(alone).max()))
            start += doc.size
    return {"max_difference": worst, "max_logit": scale}
