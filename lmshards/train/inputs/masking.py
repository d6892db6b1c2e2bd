"""Dynamic masked-LM masking in TensorFlow ops for the tf.data pipeline, with fixed output shapes (XLA/TPU-ready).

A recipe selects the positions to predict, never special or padding tokens:

- `token` (BERT/RoBERTa): each token is selected with probability `mlm_probability`.
- `whole_word` (BERT's whole-word masking): each word is selected with probability `mlm_probability`,
  with all its tokens. Words come from the tokenizer's own markers (lmshards.train.inputs.word_starts).
- `span` (SpanBERT): runs of whole words. Span lengths in words follow a geometric law (p 0.2)
  restricted to 1..10 words and renormalised, as SpanBERT's code draws them (mean 3.8 words).
  Spans are laid out along the row's words as alternating gaps (geometric, at least one word, so
  spans never touch and every run of selected words is one span) and spans, started in the layout's
  stationary state: every word is in a span with probability `mlm_probability`, wherever it sits in
  the row. Unlike SpanBERT, which fills an exact per-sequence budget and cuts the last span (even
  inside a word) to fit it, the count per sequence varies, as with `token`; the expected fraction of
  selected tokens is `mlm_probability` and whole words and the length law are kept exactly.

Every recipe selects `mlm_probability` of the maskable tokens in expectation. Of the selected tokens,
80% become the mask id, 10% a random non-special token and 10% stay, decided per token for every
recipe (as Google's whole-word masking and Hugging Face's collator do). At most `max_predictions`
per sequence are kept, so labels have a fixed shape: `token` keeps the first ones; `whole_word` and
`span` keep the first whole words that fit, so no word is ever partly selected. max_predictions_for
sizes the cap so that this is rare.
Randomness is stateless and seeded by (seed, step): a resumed run masks exactly like an
uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from lmshards.plumbing.errors import LmshardsError
from lmshards.train.inputs.word_starts import WordStartTables
from lmshards.train.masking_recipes import (
    MASKING_RECIPES,
    SPAN,
    TOKEN,
    WHOLE_WORD,
    WORD_RECIPES,
    check_recipe,
    max_predictions_for,
    mean_span_words,
    span_length_probabilities,
)

MASK_FRACTION = 0.8
RANDOM_FRACTION = 0.1


@dataclasses.dataclass(frozen=True)
class MaskingSpec:
    """What masking needs from the manifest's tokenizer, and the recipe.

    word_starts, next_word_starts: per token id, whether a word starts at / right after the token
    (lmshards.train.inputs.word_starts); required by whole_word and span.
    """

    vocab_size: int
    mask_id: int
    special_ids: tuple[int, ...]  # never selected, never drawn as random replacements
    mlm_probability: float
    max_predictions: int
    recipe: str = TOKEN
    word_starts: tuple[bool, ...] | None = dataclasses.field(default=None, repr=False)
    next_word_starts: tuple[bool, ...] | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        if self.recipe not in MASKING_RECIPES:
            raise ValueError(f"Unknown masking recipe {self.recipe!r}; one of {MASKING_RECIPES}.")
        if self.recipe in WORD_RECIPES:
            sizes = {
                len(t) if t is not None else None for t in (self.word_starts, self.next_word_starts)
            }
            if sizes != {self.vocab_size}:
                raise ValueError(
                    f"Masking recipe {self.recipe!r} needs word-start tables of {self.vocab_size} ids."
                )


def build_masking_spec(
    *,
    recipe: str,
    vocab_size: int,
    mask_id: int,
    special_ids: Sequence[int],
    mlm_probability: float,
    seq_len: int,
    word_starts: WordStartTables | None = None,
) -> MaskingSpec:
    """A MaskingSpec for a recipe, with max_predictions sized for it.

    word_starts: lmshards.train.inputs.word_starts.word_start_tables(tokenizer.json text); needed by whole_word and span.

    Raises:
      LmshardsError: unknown recipe, mlm_probability out of range for the recipe, or word-start
        tables missing or not of the tokenizer's vocabulary size.
    """
    check_recipe(recipe, mlm_probability)
    tables: dict[str, tuple[bool, ...]] = {}
    if recipe in WORD_RECIPES:
        if word_starts is None:
            raise LmshardsError(
                f"--masking {recipe} needs the tokenizer's word starts; none were given."
            )
        if len(word_starts.starts) != vocab_size:
            raise LmshardsError(
                f"The tokenizer defines {len(word_starts.starts)} token ids but the shards' vocabulary has "
                f"{vocab_size}: the tokenizer is not the one the shards were made with."
            )
        tables = {
            "word_starts": tuple(map(bool, word_starts.starts)),
            "next_word_starts": tuple(map(bool, word_starts.next_starts)),
        }
    return MaskingSpec(
        vocab_size=vocab_size,
        mask_id=mask_id,
        special_ids=tuple(sorted(set(special_ids))),
        mlm_probability=mlm_probability,
        max_predictions=max_predictions_for(seq_len, mlm_probability, recipe),
        recipe=recipe,
        **tables,
    )


def mask_batch(
    input_ids: tf.Tensor,
    attention_mask: tf.Tensor,
    spec: MaskingSpec,
    seed: tf.Tensor,
    segment_ids: tf.Tensor | None = None,
) -> dict[str, tf.Tensor]:
    """Masks a batch. input_ids, attention_mask: int [batch, seq_len]; seed: int64 [2].

    segment_ids: int [batch, seq_len] of a packed block (each token's document, 0 for padding): a
    word starts at every segment's first token, so no word, and no span, runs from one document into
    the next. A span reaching a segment's end is cut there, as at the end of a block; the layout is
    stationary, so each segment's spans still start in its stationary state.

    Returns int32 `token_ids`, `padding_mask` [batch, seq_len], `mask_positions`, `mask_ids`
    [batch, max_predictions] and float32 `mask_weights` (1.0 where a position holds a prediction).
    """
    ids = tf.cast(input_ids, tf.int32)
    padding_mask = tf.cast(attention_mask, tf.int32)
    batch, seq_len = tf.shape(ids)[0], tf.shape(ids)[1]
    select_seed, kind_seed, random_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, 3)
    )

    # Only the selection needs draws per token; everything after works on [batch, max_predictions].
    special = tf.gather(tf.constant(_special_table(spec)), ids)
    candidate = (padding_mask > 0) & ~special
    boundaries = tf.zeros_like(candidate) if segment_ids is None else _segment_starts(segment_ids)
    selected = _SELECTORS[spec.recipe](ids, candidate, boundaries, spec, select_seed)

    # The first max_predictions selected positions of each row, ascending, padded with -1: tf.where
    # lists them row-major, and to_tensor cuts each row at max_predictions (far cheaper than top_k).
    where = tf.cast(tf.where(selected), tf.int32)  # (row, position) pairs
    ranked = tf.RaggedTensor.from_value_rowids(where[:, 1], where[:, 0], nrows=batch)
    ranked = ranked.to_tensor(default_value=-1, shape=[None, spec.max_predictions])
    valid = ranked >= 0
    positions = tf.maximum(ranked, 0)
    mask_ids = tf.where(valid, tf.gather(ids, positions, batch_dims=1), 0)

    shape = tf.shape(positions)
    kind = tf.random.stateless_uniform(shape, kind_seed)
    regular_ids = tf.constant(_regular_ids(spec), tf.int32)
    random_ids = tf.gather(
        regular_ids,
        tf.random.stateless_uniform(shape, random_seed, maxval=len(regular_ids), dtype=tf.int32),
    )
    new_ids = tf.where(
        kind < MASK_FRACTION,
        spec.mask_id,
        tf.where(kind < MASK_FRACTION + RANDOM_FRACTION, random_ids, mask_ids),
    )
    # Padding slots write into an extra column that is then dropped, so they never clash with a real position.
    target = tf.where(valid, positions, seq_len)
    rows = tf.broadcast_to(tf.range(batch)[:, None], shape)
    token_ids = tf.tensor_scatter_nd_update(
        tf.pad(ids, [[0, 0], [0, 1]]), tf.stack([rows, target], axis=-1), new_ids
    )[:, :seq_len]
    return {
        "token_ids": token_ids,
        "padding_mask": padding_mask,
        "mask_positions": positions,
        "mask_ids": mask_ids,
        "mask_weights": tf.cast(valid, tf.float32),
    }


def _segment_starts(segment_ids: tf.Tensor) -> tf.Tensor:
    """bool [batch, seq_len]: the token's segment differs from the one before it."""
    previous = tf.concat([segment_ids[:, :1], segment_ids[:, :-1]], axis=1)
    return tf.not_equal(segment_ids, previous)


def _select_tokens(
    ids: tf.Tensor, candidate: tf.Tensor, boundaries: tf.Tensor, spec: MaskingSpec, seed: tf.Tensor
) -> tf.Tensor:
    """bool [batch, seq_len]: each candidate token with probability mlm_probability."""
    return (tf.random.stateless_uniform(tf.shape(ids), seed) < spec.mlm_probability) & candidate


def _select_whole_words(
    ids: tf.Tensor, candidate: tf.Tensor, boundaries: tf.Tensor, spec: MaskingSpec, seed: tf.Tensor
) -> tf.Tensor:
    """bool [batch, seq_len]: each word with probability mlm_probability, all its tokens."""
    words = _word_ids(_word_starts(ids, candidate, spec) | boundaries)
    # A row has at most seq_len words: the draw at position w decides word w.
    chosen = tf.random.stateless_uniform(tf.shape(ids), seed) < spec.mlm_probability
    selected = tf.gather(chosen, words, batch_dims=1) & candidate
    return _whole_words_within(selected, words, spec.max_predictions)


def _select_spans(
    ids: tf.Tensor, candidate: tf.Tensor, boundaries: tf.Tensor, spec: MaskingSpec, seed: tf.Tensor
) -> tf.Tensor:
    """bool [batch, seq_len]: spans of whole words, laid out over the row's maskable words."""
    starts = _word_starts(ids, candidate, spec) | boundaries
    # Index among the row's maskable words, so special and padding tokens take no room in the layout.
    maskable_words = tf.maximum(_word_ids(starts & candidate), 0)
    covered = _in_spans(maskable_words, spec.mlm_probability, seed)
    return _whole_words_within(covered & candidate, _word_ids(starts), spec.max_predictions)


def _word_starts(ids: tf.Tensor, candidate: tf.Tensor, spec: MaskingSpec) -> tf.Tensor:
    """bool [batch, seq_len]: a word starts here. Special and padding tokens are words of their own,
    and a word starts at the first position (a packed block may begin inside a word)."""
    starts = tf.gather(tf.constant(np.asarray(spec.word_starts, bool)), ids) | ~candidate
    next_starts = tf.gather(tf.constant(np.asarray(spec.next_word_starts, bool)), ids) | ~candidate
    after = tf.concat([tf.ones_like(next_starts[:, :1]), next_starts[:, :-1]], axis=1)
    return starts | after


def _word_ids(starts: tf.Tensor) -> tf.Tensor:
    """int32 [batch, seq_len]: index of each position's word in its row (-1 before the first start)."""
    return tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1


def _whole_words_within(selected: tf.Tensor, words: tf.Tensor, max_predictions: int) -> tf.Tensor:
    """Keeps the selected words whose tokens all fall within the first max_predictions selected tokens of the row."""
    batch, seq_len = tf.shape(words)[0], tf.shape(words)[1]
    rank = tf.cumsum(tf.cast(selected, tf.int32), axis=1)  # selected tokens so far in the row
    # Ranks grow along the row, so a word's largest rank is the one at its last token.
    segments = words + tf.range(batch)[:, None] * seq_len
    last_rank = tf.math.unsorted_segment_max(rank, segments, batch * seq_len)
    return selected & (tf.gather(last_rank, segments) <= max_predictions)


def _in_spans(words: tf.Tensor, mlm_probability: float, seed: tf.Tensor) -> tf.Tensor:
    """bool [batch, seq_len]: word index `words` lies in a span of the row's layout.

    Layout per row, in word indices: a leading span (the stationary state: the row starts inside a
    span with probability mlm_probability, with the residual length of one), then cycles of a gap of
    at least one word and a span. Gaps are geometric with mean E[span](1 - p)/p, so a fraction p of the
    words is in spans at every index.
    """
    batch, seq_len = tf.shape(words)[0], tf.shape(words)[1]
    cycles = (
        seq_len // 2 + 1
    )  # each cycle covers at least two words, so the layout passes the last word
    lead_seed, gap_seed, length_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))

    lead_draws = tf.random.stateless_uniform([batch, 2], lead_seed)
    lead = tf.where(
        lead_draws[:, 0] < mlm_probability, _draw_words(_residual_cdf(), lead_draws[:, 1]), 0
    )
    lengths = _draw_words(_length_cdf(), tf.random.stateless_uniform([batch, cycles], length_seed))
    gap_success = mlm_probability / (mean_span_words() * (1 - mlm_probability))
    failures = tf.math.log1p(-tf.random.stateless_uniform([batch, cycles], gap_seed)) / math.log1p(
        -gap_success
    )
    gaps = tf.cast(tf.minimum(tf.floor(failures), tf.cast(seq_len, tf.float32)), tf.int32) + 1

    span_lengths = tf.concat([lead[:, None], lengths], axis=1)  # [batch, cycles + 1]
    gaps_before = tf.concat([tf.zeros_like(lead)[:, None], gaps], axis=1)
    span_starts = tf.cumsum(gaps_before, axis=1) + tf.cumsum(span_lengths, axis=1, exclusive=True)
    # The last span starting at or before each word (span 0 starts at word 0).
    span = tf.searchsorted(span_starts, words, side="right", out_type=tf.int32) - 1
    return words < tf.gather(span_starts + span_lengths, span, batch_dims=1)


def _draw_words(cdf: np.ndarray, uniform: tf.Tensor) -> tf.Tensor:
    """int32 lengths 1..len(cdf) by inverse CDF, one per uniform draw (any shape)."""
    flat = tf.reshape(uniform, [1, -1])
    index = tf.searchsorted(
        tf.constant(cdf[None, :], tf.float32), flat, side="right", out_type=tf.int32
    )
    return tf.reshape(index, tf.shape(uniform)) + 1


@functools.cache
def _length_cdf() -> np.ndarray:
    return _cdf(span_length_probabilities())


@functools.cache
def _residual_cdf() -> np.ndarray:
    """Words left of the span a position falls in, counting it: P(j) = P(length >= j) / E[length]."""
    at_least = span_length_probabilities()[::-1].cumsum()[::-1]
    return _cdf(at_least / at_least.sum())


def _cdf(probabilities: np.ndarray) -> np.ndarray:
    cdf = np.cumsum(probabilities)
    cdf[-1] = 1.0  # no draw in [0, 1) may fall past the last length through rounding
    return cdf.astype(np.float32)


def _special_table(spec: MaskingSpec) -> list[bool]:
    """is_special[id] for every id of the vocabulary: one gather instead of a comparison per special id."""
    special = set(spec.special_ids)
    return [i in special for i in range(spec.vocab_size)]


def _regular_ids(spec: MaskingSpec) -> list[int]:
    special = set(spec.special_ids)
    return [i for i in range(spec.vocab_size) if i not in special]


_SELECTORS: dict[
    str, Callable[[tf.Tensor, tf.Tensor, tf.Tensor, MaskingSpec, tf.Tensor], tf.Tensor]
] = {
    TOKEN: _select_tokens,
    WHOLE_WORD: _select_whole_words,
    SPAN: _select_spans,
}
