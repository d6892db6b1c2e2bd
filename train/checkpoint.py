"""Run checkpoints: tf.train.CheckpointManager under RUN_DIR/checkpoints (local or gs://).

A save writes the data files, then the `.index` file, and only then names the new prefix in the
`checkpoint` state file, so a save killed half-way leaves files nobody points at. Restore also
checks that the prefix it picks has its index and otherwise falls back to the previous one.
"""

from __future__ import annotations

import logging

import tensorflow as tf

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "ckpt"


def is_complete(prefix: str) -> bool:
    return tf.io.gfile.exists(prefix + ".index")


class RunCheckpoints:
    """Saves `root` every so often, keeps the last `keep`, restores the newest complete one."""

    def __init__(self, root: tf.train.Checkpoint, directory: str, *, keep: int):
        self.manager = tf.train.CheckpointManager(root, directory, max_to_keep=keep, checkpoint_name=CHECKPOINT_NAME)
        self.root = root

    def restore_latest(self) -> str | None:
        """Restores the newest complete checkpoint; returns its prefix, or None if there is none."""
        state = tf.train.get_checkpoint_state(self.manager.directory)
        for prefix in reversed(state.all_model_checkpoint_paths if state else []):
            if is_complete(prefix):
                self.root.restore(prefix).assert_existing_objects_matched()
                return prefix
            log.warning("Ignoring incomplete checkpoint %s (no index file).", prefix)
        return None

    def save(self, step: int) -> str:
        return self.manager.save(checkpoint_number=step)
