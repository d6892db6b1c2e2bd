"""Checkpoints: a damaged newest checkpoint or an unreadable state file falls back to the newest one that restores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from lmshards.plumbing.errors import LmshardsError  # noqa: E402
from lmshards.train.backends.tensorflow_checkpoint import RunCheckpoints, complete_checkpoints  # noqa: E402

# Large enough that the data file is mostly tensor bytes, so a flipped byte lands inside a tensor.
SIZE = 50_000


def saved_run(directory: Path) -> tuple[tf.Variable, RunCheckpoints]:
    """Checkpoints at steps 10, 20, 30 of a variable holding step + arange(SIZE)."""
    v = tf.Variable(np.zeros(SIZE, np.float32))
    checkpoints = RunCheckpoints(tf.train.Checkpoint(v=v), str(directory), keep=3)
    for step in (10, 20, 30):
        v.assign(np.arange(SIZE, dtype=np.float32) + step)
        checkpoints.save(step)
    return v, checkpoints


def reopen(directory: Path) -> tuple[tf.Variable, RunCheckpoints]:
    v = tf.Variable(np.zeros(SIZE, np.float32))
    return v, RunCheckpoints(tf.train.Checkpoint(v=v), str(directory), keep=3)


def data_file(directory: Path, step: int) -> Path:
    (path,) = directory.glob(f"ckpt-{step}.data-*")
    return path


def flip_byte(path: Path, at: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x10
    path.write_bytes(bytes(raw))


def test_restores_the_newest(tmp_path):
    saved_run(tmp_path)
    v, checkpoints = reopen(tmp_path)
    assert checkpoints.restore_latest() == str(tmp_path / "ckpt-30") and v.numpy()[0] == 30
    assert complete_checkpoints(str(tmp_path)) == [
        str(tmp_path / f"ckpt-{s}") for s in (30, 20, 10)
    ]


def damage_truncate(directory: Path) -> None:
    path = data_file(directory, 30)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def damage_flip(directory: Path) -> None:
    path = data_file(directory, 30)
    flip_byte(path, path.stat().st_size // 2)


def damage_index(directory: Path) -> None:
    (directory / "ckpt-30.index").unlink()


@pytest.mark.parametrize(
    "damage",
    [damage_truncate, damage_flip, damage_index],
    ids=["truncated", "bit-flip", "no-index"],
)
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, damage, caplog):
    saved_run(tmp_path)
    damage(tmp_path)
    v, checkpoints = reopen(tmp_path)
    assert checkpoints.restore_latest() == str(tmp_path / "ckpt-20")
    np.testing.assert_array_equal(v.numpy(), np.arange(SIZE, dtype=np.float32) + 20)
    if damage is not damage_index:
        assert f"Skipping checkpoint {tmp_path / 'ckpt-30'}: it does not restore" in caplog.text
    if (
        damage is damage_index
    ):  # data without an index never restores: what a killed save leaves, removed
        assert not list(tmp_path.glob("ckpt-30.data-*"))
    else:  # a damaged complete checkpoint is skipped and left where it was
        assert data_file(tmp_path, 30).exists()


def test_a_bit_flip_is_caught_by_tensorflows_own_checksums(tmp_path):
    """TensorFlow keeps a CRC32C per tensor in the index and checks it on restore, so no digest of our own is needed."""
    saved_run(tmp_path)
    damage_flip(tmp_path)
    with pytest.raises(tf.errors.DataLossError, match="Checksum does not match"):
        tf.train.Checkpoint(v=tf.Variable(np.zeros(SIZE, np.float32))).restore(
            str(tmp_path / "ckpt-30")
        )


@pytest.mark.parametrize(
    "state", [b"\xff\xfe not text", b"", b"garbage {{{"], ids=["binary", "empty", "not-a-proto"]
)
def test_an_unreadable_state_file_is_set_aside_and_the_files_are_used(tmp_path, state, caplog):
    saved_run(tmp_path)
    (tmp_path / "checkpoint").write_bytes(state)
    v, checkpoints = reopen(tmp_path)
    assert checkpoints.restore_latest() == str(tmp_path / "ckpt-30") and v.numpy()[0] == 30
    assert "is unreadable" in caplog.text
    assert (tmp_path / "checkpoint.unreadable").read_bytes() == state
    # Saving goes on with a fresh state file that names the new checkpoint.
    checkpoints.save(40)
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-40")


def test_when_no_checkpoint_restores_it_is_an_error_naming_each_and_the_fix(tmp_path):
    saved_run(tmp_path)
    for step in (10, 20, 30):
        flip_byte(data_file(tmp_path, step), data_file(tmp_path, step).stat().st_size // 2)
    _, checkpoints = reopen(tmp_path)
    with pytest.raises(LmshardsError) as error:
        checkpoints.restore_latest()
    message = str(error.value)
    assert message.startswith(f"No checkpoint in {str(tmp_path)!r} restores (ckpt-30: ")
    assert "ckpt-20: " in message and "ckpt-10: " in message and "--restart" in message


def test_no_checkpoint_at_all_is_a_fresh_start(tmp_path):
    (tmp_path / "ckpt-5.data-00000-of-00001").write_bytes(b"a save killed before its index")
    _, checkpoints = reopen(tmp_path)
    assert checkpoints.restore_latest() is None


def test_what_unfinished_saves_left_is_removed_by_the_next_run(tmp_path, caplog):
    saved_run(tmp_path)
    (tmp_path / "ckpt-40_temp").mkdir()
    (tmp_path / "ckpt-40_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x" * 10)
    (tmp_path / "checkpoint.tmp5f3a9c").write_text("model_checkpoint_path: ")
    (tmp_path / "ckpt-50.data-00000-of-00001").write_bytes(
        b"y" * 10
    )  # its save died before the index
    (tmp_path / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    v, checkpoints = reopen(tmp_path)
    assert checkpoints.restore_latest() == str(tmp_path / "ckpt-30") and v.numpy()[0] == 30
    left = {p.name for p in tmp_path.iterdir()}
    assert not {"ckpt-40_temp", "checkpoint.tmp5f3a9c", "ckpt-50.data-00000-of-00001"} & left
    for (
        name,
        content,
    ) in before.items():  # every complete checkpoint, the state file and other files stay
        if name not in ("checkpoint.tmp5f3a9c", "ckpt-50.data-00000-of-00001"):
            assert (tmp_path / name).read_bytes() == content
    assert (
        "Removed what unfinished checkpoint saves left: checkpoint.tmp5f3a9c, ckpt-40_temp, ckpt-50"
        in (caplog.text)
    )
    checkpoints.save(40)  # the next save of that step is unaffected
    assert complete_checkpoints(str(tmp_path))[0] == str(tmp_path / "ckpt-40")
