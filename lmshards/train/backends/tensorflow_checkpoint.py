"""Run checkpoints under RUN_DIR/checkpoints (local or gs://): saved by tf.train.CheckpointManager,
restored from the newest checkpoint that restores.

A save writes the data files, then the `.index` file, and only then names the new prefix in the
`checkpoint` state file, so a save killed half-way leaves files nobody points at. Damage after the
fact shows on restore: every tensor in a data file carries a CRC32C that TensorFlow checks as it
reads it back (a flipped bit fails with DataLossError, a truncated file with a short read), and the
index file's blocks carry checksums. So no digest of our own is kept: restore lists the complete
checkpoints by their files (not trusting the state file, which may be unreadable), tries them
newest first and skips, with a warning, each one that does not restore.
"""

from __future__ import annotations

import logging
import posixpath
import re
from typing import TYPE_CHECKING

import tensorflow as tf

from lmshards.plumbing.errors import LmshardsError
from lmshards.train.backends import base

if TYPE_CHECKING:
    import keras_hub

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "ckpt"
# TensorFlow's state file naming the checkpoints; kept under this name when it cannot be read.
STATE_FILE = "checkpoint"
UNREADABLE_STATE_FILE = "checkpoint.unreadable"
_INDEX_RE = re.compile(rf"^{CHECKPOINT_NAME}-(\d+)\.index$")
_DATA_RE = re.compile(rf"^{CHECKPOINT_NAME}-(\d+)\.data-\d+-of-\d+$")
# What a save killed half-way leaves: TensorFlow writes a checkpoint's shards under PREFIX_temp/ before
# merging them, and the state file as checkpoint.tmp<hex> before renaming it.
_TEMP_DIR_RE = re.compile(rf"^{CHECKPOINT_NAME}-\d+_temp$")
_STATE_TEMP_RE = re.compile(rf"^{STATE_FILE}\.tmp[0-9a-f]*$")


def complete_checkpoints(directory: str) -> list[str]:
    """Prefixes of the checkpoints in directory that have their index file, newest (highest step) first."""
    steps = [
        int(m[1]) for m in (_INDEX_RE.match(posixpath.basename(p)) for p in _files(directory)) if m
    ]
    return [_prefix(directory, step) for step in sorted(steps, reverse=True)]


def incomplete_checkpoints(directory: str) -> list[str]:
    """Prefixes with data files but no index file: saves killed before they finished."""
    complete = set(complete_checkpoints(directory))
    steps = {
        int(m[1]) for m in (_DATA_RE.match(posixpath.basename(p)) for p in _files(directory)) if m
    }
    return [p for p in (_prefix(directory, s) for s in sorted(steps)) if p not in complete]


def leftovers(directory: str) -> list[str]:
    """What unfinished saves left in directory: PREFIX_temp/ directories, checkpoint.tmp* state files, and the
    data files of checkpoints that have no index file."""
    if not tf.io.gfile.isdir(directory):
        return []
    names = tf.io.gfile.listdir(directory)
    found = [
        _join(directory, name.rstrip("/"))
        for name in names
        if _TEMP_DIR_RE.match(name.rstrip("/")) or _STATE_TEMP_RE.match(name)
    ]
    orphans = set(incomplete_checkpoints(directory))
    found += [
        p
        for p in _files(directory)
        if _DATA_RE.match(posixpath.basename(p)) and _owner(p) in orphans
    ]
    return sorted(found)


def _owner(data_file: str) -> str:
    return data_file.rsplit(".data-", 1)[0]


def remove_leftovers(directory: str) -> list[str]:
    """Deletes leftovers(directory) (only the run's writer may: a save may be under way otherwise); returns them."""
    found = leftovers(directory)
    for path in found:
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        else:
            tf.io.gfile.remove(path)
    if found:
        log.warning(
            "Removed what unfinished checkpoint saves left: %s.",
            ", ".join(posixpath.basename(p) for p in found),
        )
    return found


def _files(directory: str) -> list[str]:
    return (
        tf.io.gfile.glob(_join(directory, f"{CHECKPOINT_NAME}-*"))
        if tf.io.gfile.isdir(directory)
        else []
    )


def _prefix(directory: str, step: int) -> str:
    return _join(directory, f"{CHECKPOINT_NAME}-{step}")


def _join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"


def restore_newest(
    root: tf.train.Checkpoint, directory: str, *, expect_partial: bool = False
) -> str | None:
    """Restores the newest complete checkpoint in directory that restores; returns its prefix, or None if there is none.

    expect_partial: the checkpoint may hold more than root (e.g. optimizer slots when only the model is loaded).
    Raises:
      LmshardsError: there are complete checkpoints but none of them restores.
    """
    for prefix in incomplete_checkpoints(directory):
        log.warning(
            "Ignoring incomplete checkpoint %s (no index file: its save did not finish).", prefix
        )

    def restore(prefix: str) -> None:
        status = root.restore(prefix)
        (status.expect_partial() if expect_partial else status).assert_existing_objects_matched()

    return base.restore_newest(complete_checkpoints(directory), restore, directory=directory)


class RunCheckpoints:
    """Saves `root` every so often, keeps the last `keep`, restores the newest one that restores."""

    def __init__(self, root: tf.train.Checkpoint, directory: str, *, keep: int):
        self.root = root
        self.directory = directory
        self.keep = keep
        self._manager: tf.train.CheckpointManager | None = None

    @property
    def manager(self) -> tf.train.CheckpointManager:
        # Created on first use: it reads the state file, which restore_latest may first have to set aside.
        if self._manager is None:
            self._manager = tf.train.CheckpointManager(
                self.root, self.directory, max_to_keep=self.keep, checkpoint_name=CHECKPOINT_NAME
            )
        return self._manager

    def restore_latest(self) -> str | None:
        """Restores the newest checkpoint that restores; returns its prefix, or None if there is none.

        An unreadable state file is kept as UNREADABLE_STATE_FILE (TensorFlow would otherwise fail on it
        or forget every checkpoint it named); the checkpoints are found by their files either way.
        What unfinished saves left (remove_leftovers) is deleted first.
        Raises:
          LmshardsError: there are complete checkpoints but none of them restores.
        """
        remove_leftovers(self.directory)
        unreadable = self._unreadable_state()
        if unreadable:
            log.warning(
                "The checkpoint state file %s is unreadable (%s); looking for checkpoints by their files.",
                _join(self.directory, STATE_FILE),
                unreadable,
            )
        prefix = restore_newest(self.root, self.directory)
        if unreadable:
            tf.io.gfile.rename(
                _join(self.directory, STATE_FILE),
                _join(self.directory, UNREADABLE_STATE_FILE),
                overwrite=True,
            )
        return prefix

    def _unreadable_state(self) -> str | None:
        """Why the state file cannot be read, or None when it can (or does not exist)."""
        if not tf.io.gfile.exists(_join(self.directory, STATE_FILE)):
            return None
        try:
            state = tf.train.get_checkpoint_state(self.directory)
        except (ValueError, UnicodeDecodeError, tf.errors.OpError) as e:
            return base.one_line(e)
        return None if state is not None else "not a checkpoint state"

    def save(self, step: int) -> str:
        return self.manager.save(checkpoint_number=step)


def checkpoint_root(model: keras_hub.models.MaskedLM, **extra) -> tf.train.Checkpoint:
    """The object graph every run checkpoint uses: `model` plus the trainer's `extra` objects.

    keras layers do not track their dropout SeedGenerator states, so they are saved explicitly:
    without them a resumed run would draw different dropout masks than an uninterrupted one.
    """
    seeds = [v for v in model.non_trainable_variables if v.path.endswith("seed_generator_state")]
    return tf.train.Checkpoint(model=model, dropout_seeds=seeds, **extra)


def restore_weights(
    model: keras_hub.models.MaskedLM, directory: str, checkpoint: str | None
) -> str:
    """Reads checkpoint (None: the newest that restores) under directory into model's variables; returns its prefix.

    Raises:
      LmshardsError: no checkpoint restores, or the named one is missing or does not restore.
    """
    if checkpoint is None:
        path = restore_newest(checkpoint_root(model), directory, expect_partial=True)
        if path is None:
            raise base.no_checkpoint(directory)
        return path
    if not tf.io.gfile.exists(checkpoint + ".index"):
        raise LmshardsError(
            f"Checkpoint {checkpoint!r} is missing or incomplete (no {checkpoint}.index)."
        )
    try:
        checkpoint_root(model).restore(
            checkpoint
        ).expect_partial().assert_existing_objects_matched()
    except Exception as e:  # damaged: DataLossError, a short read, ...
        raise LmshardsError(
            f"Checkpoint {checkpoint!r} does not restore ({e}); pass another --checkpoint."
        ) from e
    return checkpoint
