"""A run's model with the weights of one of its checkpoints, whichever backend trained it (export, --init_from).

Each backend's checkpoint module (lmshards.train.backend_names.BackendEntry.checkpoints) reads its own files under
any Keras backend; this module picks it from the run's run_config.json.
"""

from __future__ import annotations

import importlib

import keras_hub

from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.lease import Holder, live_holder
from lmshards.schemas.constants import SEGMENT_IDS
from lmshards.train.backend_names import BACKENDS, TENSORFLOW
from lmshards.train.config import ModelConfig, model_config_from_dict
from lmshards.train.network.model import build_masked_lm
from lmshards.train.run_dir import RunDir


class LiveRunError(LmshardsError):
    """A checkpoint of a run being trained was removed (rotated) while this command read it."""


def live_run_error(run_dir: str, holder: Holder) -> LiveRunError:
    """The error of reading a live run's checkpoint that its rotation removed: retry, never --restart."""
    return LiveRunError(
        f"{run_dir!r} is a live run: {holder.describe()} is training it (its lease says so), and it "
        "removed the checkpoint this command was reading as it keeps only its newest ones. Run this "
        "command again (it reads the newest checkpoint), or once the run has finished."
    )


def load_model_from_run(
    run_dir: str, checkpoint: str | None = None
) -> tuple[keras_hub.models.MaskedLM, ModelConfig]:
    """Rebuilds a run's model and restores its weights (not the optimizer) from a checkpoint (restore_model_from_run)."""
    model, model_config, _ = restore_model_from_run(run_dir, checkpoint)
    return model, model_config


def restore_model_from_run(
    run_dir: str, checkpoint: str | None = None
) -> tuple[keras_hub.models.MaskedLM, ModelConfig, str]:
    """Rebuilds a run's model and restores its weights (not the optimizer) from a checkpoint; returns its path too.

    Reads the checkpoints of the backend the run was trained with (run_config.json), in any Keras
    backend. A run trained on packed blocks gets its packed model back (the same variables). `checkpoint` is a checkpoint prefix (e.g. `RUN_DIR/checkpoints/ckpt-3`, or a JAX run's
    `ckpt-3.npz`); None means the newest one that restores (a damaged newer one is skipped with a warning).

    Raises:
      LiveRunError: the checkpoint read was removed by the run that is training (checkpoint rotation).
      LmshardsError: not a run directory, a damaged run_config.json, no checkpoint that restores, or a
        named checkpoint that is missing or does not restore.
    """
    run = RunDir(run_dir)
    run_config = run.read_config()
    model_config = model_config_from_dict(run_config["model"], source=run.config_path)
    model = build_masked_lm(model_config, packed=SEGMENT_IDS in run_config.get("features", {}))
    # Runs recorded before the JAX backend existed name no backend: they are TensorFlow's.
    name = run_config.get("train", {}).get("backend") or TENSORFLOW
    checkpoints = BACKENDS[name].checkpoints if name in BACKENDS else ""
    if not checkpoints:
        raise LmshardsError(
            f"{run_dir!r} was trained with --backend {name}, whose checkpoints this lmshards cannot read."
        )
    try:
        path = importlib.import_module(checkpoints).restore_weights(
            model, run.checkpoints, checkpoint
        )
    except LmshardsError as e:
        holder = live_holder(run_dir)
        if holder is None:  # nobody writes the run: its checkpoints are damaged or missing
            raise
        raise live_run_error(run_dir, holder) from e
    return model, model_config, path
