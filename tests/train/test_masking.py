"""Masking: proportions over >1M tokens, never-mask rules, fixed shapes, stateless determinism."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from train.masking import MaskingSpec, mask_batch, max_predictions_for  # noqa: E402

VOCAB = 2000
SPECIALS = (0, 1, 2, 3, 4)
PAD, MASK = 1, 4
ROWS, SEQ_LEN, PADDED = 12_000, 128, 16  # 1.5M tokens, 1.1M maskable;, the last 16 of each row padding


def spec(p: float = 0.15, max_predictions: int | None = None) -> MaskingSpec:
    return MaskingSpec(vocab_size=VOCAB, mask_id=MASK, special_ids=SPECIALS, mlm_probability=p,
                       max_predictions=max_predictions or max_predictions_for(SEQ_LEN, p))


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, size=(ROWS, SEQ_LEN), dtype=np.int64)
    ids[:, 0], ids[:, SEQ_LEN - PADDED - 1] = 0, 2  # <s> ... </s> like a packed block
    ids[:, ::7] = rng.integers(0, 5, size=ids[:, ::7].shape)  # extra special tokens inside the text
    attention = np.ones_like(ids)
    attention[:, SEQ_LEN - PADDED:] = 0
    ids[attention == 0] = PAD
    out = {k: v.numpy() for k, v in mask_batch(ids, attention, spec(), tf.constant([7, 0], tf.int64)).items()}
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
    np.testing.assert_array_equal(out["mask_ids"][w], np.take_along_axis(ids, out["mask_positions"], 1)[w])
    assert (out["mask_ids"][~w] == 0).all() and (out["mask_positions"][~w] == 0).all()
    # Valid positions come first, strictly ascending.
    assert (np.diff(w.astype(int), axis=1) <= 0).all()
    pos = np.where(w, out["mask_positions"], SEQ_LEN + np.arange(p))
    assert (np.diff(pos, axis=1) > 0).all()
    assert out["token_ids"].dtype == np.int32 and out["padding_mask"].dtype == np.int32


def test_truncates_to_max_predictions():
    ids = np.full((4, SEQ_LEN), 100, np.int64)
    out = mask_batch(ids, np.ones_like(ids), spec(p=0.9, max_predictions=10), tf.constant([1, 2], tf.int64))
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
