"""Masking recipes: proportions, whole words, span lengths, never-mask rules, fixed shapes, stateless determinism.

The statistical tests run on the bundled sample corpus, tokenized by a byte-level BPE, a Metaspace
Unigram (with byte fallback) and a WordPiece tokenizer trained here, packed into 128-token rows.
"""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

from lmshards.plumbing.errors import LmshardsError  # noqa: E402
from lmshards.train.inputs.masking import (  # noqa: E402
    MASKING_RECIPES,
    SPAN,
    TOKEN,
    WHOLE_WORD,
    WORD_RECIPES,
    MaskingSpec,
    build_masking_spec,
    mask_batch,
    max_predictions_for,
)
from lmshards.train.inputs.word_starts import WordStartTables, word_start_tables  # noqa: E402
from lmshards.train.masking_recipes import SPAN_MAX_WORDS  # noqa: E402

SEQ_LEN = 128
PROBABILITIES = (0.15, 0.3, 0.5)
SEEDS = ((7, 0), (7, 1))  # (run seed, step): two steps of one run
FRACTION_TOLERANCE = 0.005
# SpanBERT's law, written out here: geometric(0.2) over 1..10 words, renormalised.
SPAN_LAW = np.array([0.2 * 0.8 ** (k - 1) for k in range(1, 11)]) / sum(
    0.2 * 0.8 ** (k - 1) for k in range(1, 11)
)
SPAN_MEAN = float(np.arange(1, 11) @ SPAN_LAW)  # 3.80 words


# ----- Synthetic batch: the token recipe over 1.5M tokens -----

VOCAB = 2000
SPECIALS = (0, 1, 2, 3, 4)
PAD, MASK = 1, 4
ROWS, PADDED = 12_000, 16  # 1.5M tokens, 1.1M maskable; the last 16 of each row padding


def spec(p: float = 0.15, max_predictions: int | None = None) -> MaskingSpec:
    return MaskingSpec(
        vocab_size=VOCAB,
        mask_id=MASK,
        special_ids=SPECIALS,
        mlm_probability=p,
        max_predictions=max_predictions or max_predictions_for(SEQ_LEN, p),
    )


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, size=(ROWS, SEQ_LEN), dtype=np.int64)
    ids[:, 0], ids[:, SEQ_LEN - PADDED - 1] = 0, 2  # <s> ... </s> like a packed block
    ids[:, ::7] = rng.integers(0, 5, size=ids[:, ::7].shape)  # extra special tokens inside the text
    attention = np.ones_like(ids)
    attention[:, SEQ_LEN - PADDED :] = 0
    ids[attention == 0] = PAD
    out = {
        k: v.numpy()
        for k, v in mask_batch(ids, attention, spec(), tf.constant([7, 0], tf.int64)).items()
    }
    return ids, attention, out


def selected_mask(out) -> np.ndarray:
    sel = np.zeros(out["token_ids"].shape, bool)
    rows = np.repeat(np.arange(sel.shape[0]), out["mask_positions"].shape[1])
    valid = out["mask_weights"].reshape(-1) > 0
    sel[rows[valid], out["mask_positions"].reshape(-1)[valid]] = True
    return sel


def test_proportions_over_a_million_tokens(batch):
    ids, attention, out = batch
    candidates = (attention == 1) & ~np.isin(ids, SPECIALS)
    assert candidates.sum() > 1_000_000
    sel = selected_mask(out)
    assert abs(sel.sum() / candidates.sum() - 0.15) < 0.005
    new = out["token_ids"][sel]
    masked = (new == MASK).mean()
    unchanged = (new == ids[sel]).mean()
    random = 1 - masked - unchanged
    assert abs(masked - 0.8) < 0.005 and abs(random - 0.1) < 0.005 and abs(unchanged - 0.1) < 0.005


def test_never_masks_padding_or_special_tokens(batch):
    ids, attention, out = batch
    sel = selected_mask(out)
    assert not (sel & (attention == 0)).any()
    assert not (sel & np.isin(ids, SPECIALS)).any()
    # Outside selected positions nothing changes; random replacements are never special tokens.
    np.testing.assert_array_equal(out["token_ids"][~sel], ids[~sel])
    assert not np.isin(out["token_ids"][sel & (out["token_ids"] != MASK)], SPECIALS[:-1]).any()
    np.testing.assert_array_equal(out["padding_mask"], attention)


def test_labels_are_the_original_ids_at_fixed_shape_positions(batch):
    ids, _, out = batch
    p = max_predictions_for(SEQ_LEN, 0.15)
    for key in ("mask_positions", "mask_ids", "mask_weights"):
        assert out[key].shape == (ROWS, p)
    w = out["mask_weights"] > 0
    np.testing.assert_array_equal(
        out["mask_ids"][w], np.take_along_axis(ids, out["mask_positions"], 1)[w]
    )
    assert (out["mask_ids"][~w] == 0).all() and (out["mask_positions"][~w] == 0).all()
    # Valid positions come first, strictly ascending.
    assert (np.diff(w.astype(int), axis=1) <= 0).all()
    pos = np.where(w, out["mask_positions"], SEQ_LEN + np.arange(p))
    assert (np.diff(pos, axis=1) > 0).all()
    assert out["token_ids"].dtype == np.int32 and out["padding_mask"].dtype == np.int32


def test_truncates_to_max_predictions():
    ids = np.full((4, SEQ_LEN), 100, np.int64)
    out = mask_batch(
        ids, np.ones_like(ids), spec(p=0.9, max_predictions=10), tf.constant([1, 2], tf.int64)
    )
    sel = selected_mask({k: v.numpy() for k, v in out.items()})
    assert (sel.sum(axis=1) == 10).all()
    assert (out["token_ids"].numpy() != 100).sum(axis=1).max() <= 10


def test_same_seed_same_masks_other_step_other_masks():
    ids = np.random.default_rng(1).integers(5, VOCAB, size=(8, SEQ_LEN))
    att = np.ones_like(ids)

    def run(step):
        return mask_batch(ids, att, spec(), tf.constant([3, step], tf.int64))["token_ids"].numpy()

    np.testing.assert_array_equal(run(5), run(5))
    assert (run(5) != run(6)).any()


# Outputs of the token recipe before the other recipes existed: a run masks exactly as before.
PINNED_IDS = [
    [0, 12, 48, 32, 37, 38, 44, 6, 31, 13, 27, 56, 35, 8, 34, 12, 46, 57, 58, 39, 2, 1, 1, 1],
    [0, 41, 59, 20, 52, 12, 24, 48, 18, 3, 30, 33, 56, 49, 51, 35, 59, 58, 12, 16, 21, 35, 50, 31],
    [0, 24, 56, 37, 44, 17, 37, 49, 53, 52, 58, 12, 47, 30, 42, 20, 5, 9, 58, 54, 21, 28, 18, 13],
]
PINNED = [
    (
        0.15,
        (7, 3),
        13,
        {
            "token_ids": [
                [
                    0,
                    12,
                    48,
                    32,
                    37,
                    38,
                    44,
                    6,
                    31,
                    4,
                    27,
                    56,
                    35,
                    8,
                    34,
                    12,
                    46,
                    57,
                    58,
                    39,
                    2,
                    1,
                    1,
                    1,
                ],
                [
                    0,
                    41,
                    59,
                    20,
                    52,
                    12,
                    4,
                    48,
                    18,
                    3,
                    30,
                    33,
                    56,
                    49,
                    51,
                    35,
                    59,
                    21,
                    12,
                    16,
                    21,
                    35,
                    4,
                    31,
                ],
                [
                    0,
                    24,
                    56,
                    37,
                    44,
                    4,
                    37,
                    49,
                    53,
                    4,
                    58,
                    12,
                    4,
                    30,
                    42,
                    20,
                    5,
                    9,
                    58,
                    54,
                    21,
                    28,
                    18,
                    4,
                ],
            ],
            "mask_positions": [
                [9, 17, 19] + [0] * 10,
                [6, 17, 22] + [0] * 10,
                [5, 9, 12, 23] + [0] * 9,
            ],
            "mask_ids": [
                [13, 57, 39] + [0] * 10,
                [24, 58, 50] + [0] * 10,
                [17, 52, 47, 13] + [0] * 9,
            ],
        },
    ),
    (
        0.5,
        (1, 2),
        23,
        {
            "token_ids": [
                [0, 4, 48, 54, 4, 4, 44, 6, 4, 27, 4, 56, 4, 4, 34, 12, 46, 4, 58, 4, 2, 1, 1, 1],
                [
                    0,
                    38,
                    59,
                    4,
                    4,
                    12,
                    24,
                    48,
                    18,
                    3,
                    4,
                    33,
                    44,
                    49,
                    51,
                    35,
                    4,
                    55,
                    4,
                    16,
                    21,
                    35,
                    50,
                    4,
                ],
                [0, 24, 4, 37, 4, 4, 37, 49, 4, 4, 58, 5, 4, 30, 42, 4, 4, 4, 58, 4, 4, 28, 4, 13],
            ],
            "mask_positions": [
                [1, 3, 4, 5, 8, 9, 10, 12, 13, 14, 17, 19] + [0] * 11,
                [1, 3, 4, 8, 10, 12, 16, 17, 18, 23] + [0] * 13,
                [2, 4, 5, 6, 8, 9, 11, 12, 15, 16, 17, 19, 20, 22] + [0] * 9,
            ],
            "mask_ids": [
                [12, 32, 37, 38, 31, 13, 27, 35, 8, 34, 57, 39] + [0] * 11,
                [41, 20, 52, 18, 30, 56, 59, 58, 12, 31] + [0] * 13,
                [56, 44, 17, 37, 53, 52, 12, 47, 20, 5, 9, 54, 21, 18] + [0] * 9,
            ],
        },
    ),
    (
        0.5,
        (1, 2),
        4,
        {  # truncated: the first 4 selections of the row above
            "token_ids": [
                [
                    0,
                    4,
                    48,
                    54,
                    4,
                    4,
                    44,
                    6,
                    31,
                    13,
                    27,
                    56,
                    35,
                    8,
                    34,
                    12,
                    46,
                    57,
                    58,
                    39,
                    2,
                    1,
                    1,
                    1,
                ]
            ],
            "mask_positions": [[1, 3, 4, 5]],
            "mask_ids": [[12, 32, 37, 38]],
        },
    ),
]


@pytest.mark.parametrize("p, seed, max_predictions, expected", PINNED)
def test_token_recipe_masks_as_before(p, seed, max_predictions, expected):
    ids = np.array(PINNED_IDS[: len(expected["token_ids"])])
    attention = (ids != 1).astype(np.int64)
    pinned = MaskingSpec(
        vocab_size=60,
        mask_id=4,
        special_ids=(0, 1, 2, 3, 4),
        mlm_probability=p,
        max_predictions=max_predictions,
    )
    out = mask_batch(ids, attention, pinned, tf.constant(seed, tf.int64))
    for key, value in expected.items():
        np.testing.assert_array_equal(out[key].numpy(), value, err_msg=key)
    np.testing.assert_array_equal(out["mask_weights"].numpy(), np.array(expected["mask_ids"]) > 0)


def test_max_predictions_grow_with_the_probability_and_leave_room_for_words():
    assert [max_predictions_for(128, p) for p in PROBABILITIES] == [32, 55, 85]  # token: as before
    assert max_predictions_for(512, 0.15) == 101
    for recipe in MASKING_RECIPES:
        caps = [max_predictions_for(SEQ_LEN, p, recipe) for p in PROBABILITIES]
        assert caps == sorted(caps) and caps[-1] <= SEQ_LEN
        assert all(c >= max_predictions_for(SEQ_LEN, p) for c, p in zip(caps, PROBABILITIES))
        assert max_predictions_for(16, 0.5, recipe) == 16


def test_build_masking_spec():
    tables = WordStartTables(starts=np.arange(10) % 2 == 0, next_starts=np.zeros(10, bool))
    common = dict(vocab_size=10, mask_id=4, special_ids=[4, 0, 4], seq_len=SEQ_LEN)
    built = build_masking_spec(recipe=SPAN, mlm_probability=0.3, word_starts=tables, **common)
    assert built.special_ids == (0, 4) and built.max_predictions == max_predictions_for(
        SEQ_LEN, 0.3, SPAN
    )
    assert built.word_starts == tuple(tables.starts) and built.next_word_starts == (False,) * 10
    token = build_masking_spec(recipe=TOKEN, mlm_probability=0.15, **common)
    assert token.word_starts is None and token.max_predictions == 32
    with pytest.raises(
        LmshardsError,
        match="--masking 'words' is not a masking recipe; use one of token, whole_word, span",
    ):
        build_masking_spec(recipe="words", mlm_probability=0.15, **common)
    for recipe, p in ((TOKEN, 0.0), (WHOLE_WORD, 1.0), (SPAN, 0.8)):
        with pytest.raises(LmshardsError, match=f"--mlm_probability {p} must be above 0 and below"):
            build_masking_spec(recipe=recipe, mlm_probability=p, word_starts=tables, **common)
    with pytest.raises(
        LmshardsError, match="--masking whole_word needs the tokenizer's word starts"
    ):
        build_masking_spec(recipe=WHOLE_WORD, mlm_probability=0.15, **common)
    with pytest.raises(
        LmshardsError, match="defines 10 token ids but the shards' vocabulary has 12"
    ):
        build_masking_spec(
            recipe=WHOLE_WORD,
            mlm_probability=0.15,
            word_starts=tables,
            **{**common, "vocab_size": 12},
        )
    with pytest.raises(ValueError, match="needs word-start tables of 10 ids"):
        MaskingSpec(
            vocab_size=10,
            mask_id=4,
            special_ids=(4,),
            mlm_probability=0.15,
            max_predictions=8,
            recipe=SPAN,
        )


def test_words_start_at_the_row_start_and_around_special_tokens():
    """Id 10 continues a word, 11 starts one: a row starting with 10, or a 10 after </s>, is a word of its own."""
    starts = np.zeros(20, bool)
    starts[[0, 1, 2, 4, 11]] = True
    tables = WordStartTables(starts=starts, next_starts=np.isin(np.arange(20), [0, 1, 2, 4]))
    row = [
        10,
        11,
        10,
        10,
        2,
        10,
        10,
        0,
        11,
        1,
        1,
    ]  # words: [10] [11 10 10] [</s>] [10 10] [<s>] [11] pad pad
    ids = np.array([row] * 400)
    attention = (ids != 1).astype(np.int64)
    whole = build_masking_spec(
        recipe=WHOLE_WORD,
        vocab_size=20,
        mask_id=4,
        special_ids=(0, 1, 2, 4),
        mlm_probability=0.5,
        seq_len=len(row),
        word_starts=tables,
    )
    sel = selected_mask(
        {
            k: v.numpy()
            for k, v in mask_batch(ids, attention, whole, tf.constant([1, 1], tf.int64)).items()
        }
    )
    for word in ([1, 2, 3], [5, 6]):
        assert (sel[:, word] == sel[:, word[:1]]).all()
    assert not sel[:, [4, 7, 9, 10]].any()
    # Neighbouring words are drawn independently.
    for a, b in ((0, 1), (3, 5), (5, 8)):
        assert (sel[:, a] != sel[:, b]).any() and (sel[:, a] == sel[:, b]).any()


@pytest.mark.parametrize("recipe", [WHOLE_WORD, SPAN])
def test_a_word_never_runs_from_one_segment_into_the_next(recipe):
    """Without segments, 11 10 10 | 10 10 is one word; in a packed block whose second segment starts at
    position 3 (a document cut inside a word), it is two, selected independently, and padding never."""
    starts = np.zeros(20, bool)
    starts[[0, 1, 2, 4, 11]] = True
    tables = WordStartTables(starts=starts, next_starts=np.isin(np.arange(20), [0, 1, 2, 4]))
    row = [11, 10, 10, 10, 10, 11, 10, 1, 1]
    ids = np.array([row] * 2000)
    attention = (ids != 1).astype(np.int64)
    segments = np.array([[1, 1, 1, 2, 2, 2, 2, 0, 0]] * 2000)
    masking = build_masking_spec(
        recipe=recipe,
        vocab_size=20,
        mask_id=4,
        special_ids=(0, 1, 2, 4),
        mlm_probability=0.4,
        seq_len=len(row),
        word_starts=tables,
    )

    def selected(segment_ids):
        out = mask_batch(ids, attention, masking, tf.constant([3, 1], tf.int64), segment_ids)
        return selected_mask({k: v.numpy() for k, v in out.items()})

    plain, packed = selected(None), selected(tf.constant(segments))
    assert (plain[:, 0:5] == plain[:, :1]).all()  # one word without segments
    for word in ([0, 1, 2], [3, 4], [5, 6]):
        assert (packed[:, word] == packed[:, word[:1]]).all()
    assert (packed[:, 2] != packed[:, 3]).any()
    assert not packed[:, 7:].any()


# ----- The sample corpus, three tokenizer families -----


@dataclasses.dataclass(frozen=True)
class Corpus:
    """Packed rows of the sample corpus under one tokenizer, with what masking needs to know about it."""

    ids: (
        np.ndarray
    )  # int64 [rows, SEQ_LEN]: documents as <cls> ... <sep>, back to back; some rows end in padding
    attention: np.ndarray
    vocab_size: int
    mask_id: int
    special_ids: tuple[int, ...]
    tables: WordStartTables

    @property
    def candidate(self) -> np.ndarray:
        return (self.attention == 1) & ~np.isin(self.ids, self.special_ids)

    def spec(self, recipe: str, p: float, max_predictions: int | None = None) -> MaskingSpec:
        built = build_masking_spec(
            recipe=recipe,
            vocab_size=self.vocab_size,
            mask_id=self.mask_id,
            special_ids=self.special_ids,
            mlm_probability=p,
            seq_len=SEQ_LEN,
            word_starts=self.tables,
        )
        return dataclasses.replace(built, max_predictions=max_predictions or built.max_predictions)


@dataclasses.dataclass(frozen=True)
class Masked:
    selected: np.ndarray  # bool [rows, SEQ_LEN]
    token_ids: np.ndarray
    mask_ids: np.ndarray
    mask_weights: np.ndarray


def sample_lines(sample_files) -> list[str]:
    lines = itertools.chain.from_iterable(
        f.read_text(encoding="utf-8").splitlines() for f in sample_files
    )
    return [line for line in lines if line.strip()]


def unigram(lines: list[str]) -> Tokenizer:
    """SentencePiece-style Unigram with byte fallback, as `lmshards tokenizer train --model unigram` builds it."""
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.Unigram())
    tok.normalizer, tok.pre_tokenizer = normalizers.NFKC(), pre_tokenizers.Metaspace()
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    # Few Chinese lines: fewer required characters keeps training fast; the rest falls back to bytes.
    light = [line for i, line in enumerate(lines) if line.isascii() or i % 40 == 0]
    tok.train_from_iterator(
        light[::8],
        trainers.UnigramTrainer(
            vocab_size=3000,
            special_tokens=specials + byte_pieces,
            unk_token="<unk>",
            show_progress=False,
        ),
    )
    data = json.loads(tok.to_str())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] in specials]
    data["model"]["byte_fallback"] = True
    return Tokenizer.from_str(json.dumps(data))


def wordpiece(lines: list[str]) -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.BertPreTokenizer(), decoders.WordPiece()
    tok.train_from_iterator(
        lines[::2],
        trainers.WordPieceTrainer(
            vocab_size=4000,
            special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
            show_progress=False,
        ),
    )
    return tok


FAMILIES = {  # name -> (every n-th line to encode, (cls, sep, pad, mask, unk))
    "byte_level_bpe": (3, ("<s>", "</s>", "<pad>", "<mask>", "<unk>")),
    "unigram": (4, ("<s>", "</s>", "<pad>", "<mask>", "<unk>")),
    "wordpiece": (3, ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]")),
}


def pack(tok: Tokenizer, lines: list[str], roles: tuple[str, ...]) -> Corpus:
    cls, sep, pad, mask, unk = (tok.token_to_id(t) for t in roles)
    docs = tok.encode_batch(lines, add_special_tokens=False)
    stream = np.concatenate([[cls, *doc.ids, sep] for doc in docs]).astype(np.int64)
    ids = stream[: len(stream) // SEQ_LEN * SEQ_LEN].reshape(-1, SEQ_LEN)
    attention = np.ones_like(ids)
    # Every fourth row ends in padding, as the last block of a shard does.
    ends = np.random.default_rng(0).integers(SEQ_LEN // 4, SEQ_LEN, size=len(ids))
    attention[
        np.arange(SEQ_LEN) >= np.where(np.arange(len(ids)) % 4 == 0, ends, SEQ_LEN)[:, None]
    ] = 0
    ids[attention == 0] = pad
    return Corpus(
        ids=ids,
        attention=attention,
        vocab_size=tok.get_vocab_size(),
        mask_id=mask,
        special_ids=tuple(sorted({cls, sep, pad, mask, unk})),
        tables=word_start_tables(tok.to_str()),
    )


@pytest.fixture(scope="module", params=list(FAMILIES))
def corpus(request, sample_files, sample_tokenizer) -> Corpus:
    lines = sample_lines(sample_files)
    every, roles = FAMILIES[request.param]
    tok = {
        "byte_level_bpe": lambda: Tokenizer.from_file(str(sample_tokenizer)),
        "unigram": lambda: unigram(lines),
        "wordpiece": lambda: wordpiece(lines),
    }[request.param]()
    built = pack(tok, lines[::every], roles)
    assert built.candidate.sum() > 300_000
    return built


@pytest.fixture(scope="module")
def masked(corpus):
    """masked(recipe, p, seed=SEEDS[0], max_predictions=None) -> Masked, computed once per corpus."""
    cache: dict[tuple, Masked] = {}

    def run(
        recipe: str, p: float, seed: tuple[int, int] = SEEDS[0], max_predictions: int | None = None
    ) -> Masked:
        key = (recipe, p, seed, max_predictions)
        if key not in cache:
            out = mask_batch(
                corpus.ids,
                corpus.attention,
                corpus.spec(recipe, p, max_predictions),
                tf.constant(seed, tf.int64),
            )
            out = {k: v.numpy() for k, v in out.items()}
            cache[key] = Masked(
                selected=selected_mask(out),
                token_ids=out["token_ids"],
                mask_ids=out["mask_ids"],
                mask_weights=out["mask_weights"],
            )
        return cache[key]

    return run


def word_ids(corpus: Corpus) -> np.ndarray:
    """int [rows, SEQ_LEN]: each position's word in its row, from the tables in numpy (special/padding tokens are words)."""
    outside = ~corpus.candidate
    starts = corpus.tables.starts[corpus.ids] | outside
    starts[:, 0] = True
    starts[:, 1:] |= corpus.tables.next_starts[corpus.ids[:, :-1]] | outside[:, :-1]
    return np.cumsum(starts, axis=1) - 1


def assert_whole_words(selected: np.ndarray, words: np.ndarray) -> None:
    flat = (words + np.arange(len(words))[:, None] * SEQ_LEN).ravel()
    size = np.bincount(flat)
    chosen = np.bincount(flat, weights=selected.ravel())
    partial = (chosen > 0) & (chosen < size)
    assert not partial.any(), f"{partial.sum()} words partly selected"


@pytest.mark.parametrize("recipe", MASKING_RECIPES)
def test_selected_fraction_matches_mlm_probability(corpus, masked, recipe):
    maskable = corpus.candidate.sum()
    for p in PROBABILITIES:
        fraction = sum(masked(recipe, p, seed).selected.sum() for seed in SEEDS) / (
            len(SEEDS) * maskable
        )
        assert abs(fraction - p) < FRACTION_TOLERANCE, (p, fraction)


@pytest.mark.parametrize("recipe", MASKING_RECIPES)
def test_truncation_at_max_predictions_is_rare(corpus, masked, recipe):
    for p in PROBABILITIES:
        kept = masked(recipe, p).selected.sum(axis=1)
        drawn = masked(recipe, p, max_predictions=SEQ_LEN).selected.sum(axis=1)
        assert (kept <= drawn).all() and (kept < drawn).mean() < 0.005, p


@pytest.mark.parametrize("recipe", MASKING_RECIPES)
def test_never_selects_special_or_padding_tokens_and_replaces_80_10_10(corpus, masked, recipe):
    out = masked(recipe, 0.5)
    sel = out.selected
    assert not (sel & ~corpus.candidate).any()
    np.testing.assert_array_equal(out.token_ids[~sel], corpus.ids[~sel])
    np.testing.assert_array_equal(
        out.mask_ids[out.mask_weights > 0], corpus.ids[sel]
    )  # row-major, like sel
    new, old = out.token_ids[sel], corpus.ids[sel]
    assert len(new) > 100_000
    masked_share, unchanged = (new == corpus.mask_id).mean(), (new == old).mean()
    assert abs(masked_share - 0.8) < 0.005 and abs(unchanged - 0.1) < 0.005
    assert abs(1 - masked_share - unchanged - 0.1) < 0.005
    assert not np.isin(new[new != corpus.mask_id], corpus.special_ids).any()


@pytest.mark.parametrize("recipe", WORD_RECIPES)
def test_no_word_is_ever_partly_selected(corpus, masked, recipe):
    words = word_ids(corpus)
    for p in PROBABILITIES:
        assert_whole_words(masked(recipe, p).selected, words)


@pytest.mark.parametrize("recipe", WORD_RECIPES)
def test_truncation_drops_whole_words_past_the_cap(corpus, masked, recipe):
    words = word_ids(corpus)
    drawn = masked(recipe, 0.5, max_predictions=SEQ_LEN).selected
    kept = masked(recipe, 0.5, max_predictions=6).selected
    assert_whole_words(kept, words)
    # Exactly the drawn words whose last token is among the first 6 drawn tokens of the row.
    rank = np.cumsum(drawn, axis=1)
    flat = (words + np.arange(len(words))[:, None] * SEQ_LEN).ravel()
    last_rank = np.zeros(flat.max() + 1)
    np.maximum.at(last_rank, flat, rank.ravel())
    np.testing.assert_array_equal(kept, drawn & (last_rank[flat].reshape(drawn.shape) <= 6))
    assert (kept.sum(axis=1) <= 6).all() and (
        kept.sum(axis=1) < np.minimum(drawn.sum(axis=1), 6)
    ).any()


def span_runs(corpus: Corpus, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, length, row words) of each run of selected maskable words, in the row's maskable-word indices."""
    starts = np.diff(word_ids(corpus), axis=1, prepend=-1) > 0
    first = starts & corpus.candidate  # first token of each maskable word
    index = np.cumsum(first, axis=1) - 1
    flags = np.zeros(
        (len(selected), SEQ_LEN + 2), bool
    )  # a False column each side closes every run
    rows, cols = np.nonzero(first)
    flags[rows, index[rows, cols] + 1] = selected[rows, cols]
    edges = np.diff(flags.astype(np.int8), axis=1)
    run_rows, run_starts = np.nonzero(edges == 1)
    _, run_ends = np.nonzero(edges == -1)
    return run_starts, run_ends - run_starts, first.sum(axis=1)[run_rows]


def test_span_lengths_follow_the_geometric_law(corpus, masked):
    for p in PROBABILITIES:
        start, length, row_words = span_runs(
            corpus, masked(SPAN, p, max_predictions=SEQ_LEN).selected
        )
        assert length.max() <= SPAN_MAX_WORDS
        # Spans that the row start or end may have cut are left out; which those are depends on
        # where a span starts, never on its length.
        whole = (start > 0) & (start + SPAN_MAX_WORDS <= row_words)
        lengths = length[whole]
        assert len(lengths) > 5_000
        assert abs(lengths.mean() / SPAN_MEAN - 1) < 0.05, (p, lengths.mean())
        shares = np.bincount(lengths, minlength=SPAN_MAX_WORDS + 1)[1:] / len(lengths)
        assert np.abs(shares - SPAN_LAW).max() < 0.02, (p, shares.round(3))


def test_spans_are_as_likely_at_the_row_edges_as_inside(corpus, masked):
    """The span layout starts in its stationary state: no edge of a row is masked less."""
    full = corpus.attention.all(axis=1)
    for p in PROBABILITIES:
        sel = np.concatenate([masked(SPAN, p, seed).selected[full] for seed in SEEDS])
        cand = np.concatenate([corpus.candidate[full]] * len(SEEDS))
        for edge in (slice(0, 16), slice(SEQ_LEN - 16, SEQ_LEN)):
            assert abs(sel[:, edge].sum() / cand[:, edge].sum() - p) < 0.02, (p, edge)


@pytest.mark.parametrize("recipe", MASKING_RECIPES)
def test_stateless_seeds_same_masks_for_a_seed_others_differ(corpus, recipe):
    ids, attention = corpus.ids[:64], corpus.attention[:64]
    spec_ = corpus.spec(recipe, 0.15)

    def run(seed):
        return mask_batch(ids, attention, spec_, tf.constant(seed, tf.int64))

    first, again = run((3, 5)), run((3, 5))
    for key in first:
        np.testing.assert_array_equal(first[key].numpy(), again[key].numpy())
        assert first[key].shape[-1] == (
            spec_.max_predictions if key.startswith("mask_") else SEQ_LEN
        )
    for other in ((3, 6), (4, 5)):
        assert (run(other)["token_ids"].numpy() != first["token_ids"].numpy()).any()
