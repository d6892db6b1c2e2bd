"""The JAX backend's checkpoint files: atomic saves, `keep`, and the TensorFlow backend's fallback rules."""

from __future__ import annotations

import numpy as np
import pytest

from lmshards.plumbing.errors import LmshardsError
from lmshards.train.backends import jax_checkpoint as ckpt


def arrays(step: int) -> ckpt.Arrays:
    return {
        "trainable": [np.full((3, 4), step, np.float32), np.arange(5, dtype=np.float32)],
        "non_trainable": [np.array([step, 7], np.uint32)],
        "optimizer": [np.array(step, np.int64), np.zeros((3, 4), np.float32)],
    }


def specs(a: ckpt.Arrays) -> ckpt.Specs:
    return {g: [(x.shape, str(x.dtype)) for x in a[g]] for g in a}


LIKE = specs(arrays(0))


def save_steps(directory, steps, keep=10):
    for step in steps:
        ckpt.save(str(directory), arrays(step), step=step, keep=keep)


def test_round_trip_and_keep(tmp_path):
    save_steps(tmp_path, [1, 2, 3, 4], keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-3.npz", "ckpt-4.npz"]
    path, restored = ckpt.restore_newest(str(tmp_path), like=LIKE)
    assert (path.endswith("ckpt-4.npz"), ckpt.checkpoint_step(path)) == (True, 4)
    for group, values in arrays(4).items():
        for got, want in zip(restored[group], values, strict=True):
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype
    assert ckpt.has_checkpoints(str(tmp_path))


def test_model_only_restore_reads_the_model_groups(tmp_path):
    save_steps(tmp_path, [5])
    like = {g: LIKE[g] for g in ckpt.MODEL_GROUPS}
    _, restored = ckpt.restore_newest(str(tmp_path), like=like)
    assert set(restored) == set(ckpt.MODEL_GROUPS)


def test_no_checkpoints(tmp_path):
    assert ckpt.restore_newest(str(tmp_path / "missing"), like=LIKE) is None
    assert not ckpt.has_checkpoints(str(tmp_path))


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(tmp_path, damage, caplog):
    save_steps(tmp_path, [10, 20])
    newest = tmp_path / "ckpt-20.npz"
    data = bytearray(newest.read_bytes())
    if damage == "flip":
        data[200] ^= 0x10  # inside the first array's bytes: its CRC-32 no longer matches
    newest.write_bytes(
        bytes(
            data[: len(data) // 2] if damage == "truncate" else b"" if damage == "empty" else data
        )
    )
    path, restored = ckpt.restore_newest(str(tmp_path), like=LIKE)
    assert ckpt.checkpoint_step(path) == 10
    assert restored["optimizer"][0] == 10
    assert "Skipping checkpoint" in caplog.text and "ckpt-20.npz" in caplog.text


def test_a_checkpoint_of_another_model_is_skipped(tmp_path):
    save_steps(tmp_path, [1])
    other = arrays(2)
    other["trainable"][0] = np.zeros((4, 4), np.float32)
    ckpt.save(str(tmp_path), other, step=2, keep=10)
    assert ckpt.checkpoint_step(ckpt.restore_newest(str(tmp_path), like=LIKE)[0]) == 1


def test_none_restores_names_each_and_the_fix(tmp_path):
    save_steps(tmp_path, [1, 2])
    for p in tmp_path.iterdir():
        p.write_bytes(b"not a zip")
    with pytest.raises(LmshardsError, match=r"ckpt-2\.npz.*ckpt-1\.npz.*--restart"):
        ckpt.restore_newest(str(tmp_path), like=LIKE)


def test_an_unfinished_save_is_ignored(tmp_path, caplog):
    save_steps(tmp_path, [3])
    (tmp_path / "ckpt-4.npz.tmp-0123abcd").write_bytes(b"half")
    assert ckpt.checkpoint_step(ckpt.restore_newest(str(tmp_path), like=LIKE)[0]) == 3
    assert "incomplete checkpoint" in caplog.text
