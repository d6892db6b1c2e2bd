"""The JAX backend's run checkpoints: one `ckpt-STEP.npz` per save under RUN_DIR/checkpoints (local or gs://).

numpy and the filesystem layer only, so `lmshards export` reads them in a TensorFlow process and the
JAX step never needs TensorFlow. A save writes the whole file under a temporary name and renames it
(an object store shows an object only once its upload is complete), so a save killed half-way
leaves a `.tmp-` file nobody reads. Damage after the fact shows on restore: the npz is a zip whose
members each carry a CRC-32 that is checked as they are read, and a truncated file has no central
directory; each array's shape and dtype must also match the model's. Restore tries the checkpoints
newest first and skips, with a warning, each one that does not restore (lmshards.train.backends.base.restore_newest).
"""

from __future__ import annotations

import io
import json
import logging
import posixpath
import re
from typing import TYPE_CHECKING, Any

import keras
import numpy as np

from lmshards.plumbing import bounded, fs
from lmshards.plumbing.errors import LmshardsError
from lmshards.train.backends import base

if TYPE_CHECKING:
    import keras_hub

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "ckpt"
SUFFIX = ".npz"
FORMAT = "lmshards-jax-checkpoint/1"
# The variable groups of a checkpoint, in TrainState's order; the model's weights are the first two.
GROUPS = ("trainable", "non_trainable", "optimizer")
MODEL_GROUPS = GROUPS[:2]
_META = "meta"
_FILE_RE = re.compile(rf"^{CHECKPOINT_NAME}-(\d+){re.escape(SUFFIX)}$")
_TEMP_RE = re.compile(rf"^{CHECKPOINT_NAME}-(\d+){re.escape(SUFFIX)}\.tmp-")

Arrays = dict[str, list[np.ndarray]]  # {group: arrays in the order of the Keras variables}
Specs = dict[str, list[tuple[tuple[int, ...], str]]]  # {group: [(shape, dtype)]}


def checkpoint_path(directory: str, step: int) -> str:
    return fs.join(directory, f"{CHECKPOINT_NAME}-{step}{SUFFIX}")


def checkpoint_step(path: str) -> int | None:
    """The step of a checkpoint file's name, or None when it is not one."""
    m = _FILE_RE.match(posixpath.basename(path))
    return int(m[1]) if m else None


def _names(directory: str) -> list[str]:
    return [posixpath.basename(p) for p in fs.listdir(directory)] if fs.isdir(directory) else []


def has_checkpoints(directory: str) -> bool:
    """Whether directory holds checkpoints of this format (a JAX backend run)."""
    return any(_FILE_RE.match(name) for name in _names(directory))


def complete_checkpoints(directory: str) -> list[str]:
    """Paths of the checkpoint files in directory, newest (highest step) first."""
    steps = sorted((int(m[1]) for m in map(_FILE_RE.match, _names(directory)) if m), reverse=True)
    return [checkpoint_path(directory, step) for step in steps]


def encode(arrays: Arrays, *, step: int) -> bytes:
    """The bytes of a checkpoint holding arrays (every group of GROUPS) at step."""
    members: dict[str, Any] = {
        f"{group}/{i}": np.asarray(a) for group in GROUPS for i, a in enumerate(arrays[group])
    }
    meta = {"format": FORMAT, "step": step, **{g: len(arrays[g]) for g in GROUPS}}
    members[_META] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **members)
    return buffer.getvalue()


def decode(data: bytes, *, like: Specs) -> Arrays:
    """The arrays of a checkpoint's bytes, checked against `like`: {group: [(shape, dtype)]} of each group to read.

    Raises:
      ValueError, zipfile.BadZipFile, ...: damaged bytes (a CRC mismatch, a short file) or arrays that do not fit.
    """
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        meta = bounded.load_json(z[_META].tobytes(), what="checkpoint metadata")
        if meta.get("format") != FORMAT:
            raise ValueError(f"format {meta.get('format')!r}, expected {FORMAT!r}")
        out = {}
        for group, specs in like.items():
            if meta[group] != len(specs):
                raise ValueError(f"{meta[group]} {group} arrays, the model has {len(specs)}")
            out[group] = [
                _fitted(z[f"{group}/{i}"], spec, name=f"{group}/{i}")
                for i, spec in enumerate(specs)
            ]
        return out


def _fitted(array: np.ndarray, spec: tuple[tuple[int, ...], str], *, name: str) -> np.ndarray:
    """array as the variable of spec holds it. Integers may change width: Keras keeps dropout seed states
    as uint32 on JAX and int64 on TensorFlow, and export loads a JAX run under TensorFlow."""
    shape, dtype = tuple(spec[0]), np.dtype(spec[1])
    same_kind = array.dtype == dtype or (array.dtype.kind in "iu" and dtype.kind in "iu")
    if array.shape != shape or not same_kind:
        raise ValueError(
            f"{name} is {array.dtype}{list(array.shape)}, the model's {dtype}{list(shape)}"
        )
    return array.astype(dtype, copy=False)


def _variables(model: keras.Model, optimizer: keras.optimizers.Optimizer | None) -> dict[str, list]:
    """{group: Keras variables}; without an optimizer, the model's groups only (what export loads)."""
    groups = {
        "trainable": model.trainable_variables,
        "non_trainable": model.non_trainable_variables,
    }
    if optimizer is not None:
        groups["optimizer"] = optimizer.variables
    return groups


def variable_specs(
    model: keras.Model, optimizer: keras.optimizers.Optimizer | None = None
) -> Specs:
    """{group: [(shape, dtype)]} of the model's (and the optimizer's) variables: what a checkpoint must hold."""
    return {
        group: [(tuple(v.shape), keras.backend.standardize_dtype(v.dtype)) for v in variables]
        for group, variables in _variables(model, optimizer).items()
    }


def assign_arrays(
    model: keras.Model, optimizer: keras.optimizers.Optimizer | None, arrays: Arrays
) -> None:
    """Writes checkpoint arrays into the Keras variables (any backend: export reads them under TensorFlow)."""
    for group, variables in _variables(model, optimizer).items():
        for variable, value in zip(variables, arrays[group], strict=True):
            variable.assign(value)


def warn_incomplete(directory: str) -> None:
    """Warns about each save that did not finish (a temporary file left by a killed process)."""
    for name in _names(directory):
        if _TEMP_RE.match(name):
            log.warning("Ignoring incomplete checkpoint %s (its save did not finish).", name)


def load(path: str, *, like: Specs) -> Arrays:
    """The arrays of the checkpoint file at path, checked against like (see decode)."""
    bounded.check_regular_file(path, "checkpoint file", bounded.MAX_WEIGHTS_BYTES)
    return decode(fs.read_bytes(path), like=like)


def restore_newest(directory: str, *, like: Specs) -> tuple[str, Arrays] | None:
    """(path, arrays) of the newest checkpoint in directory that restores, or None if there is none.

    Raises:
      LmshardsError: there are checkpoints but none of them restores.
    """
    warn_incomplete(directory)
    loaded = {}

    def restore(path: str) -> None:
        loaded[path] = load(path, like=like)

    path = base.restore_newest(complete_checkpoints(directory), restore, directory=directory)
    return None if path is None else (path, loaded[path])


def save(directory: str, arrays: Arrays, *, step: int, keep: int) -> str:
    """Writes the checkpoint of step atomically, then deletes all but the newest `keep`; returns its path."""
    path = checkpoint_path(directory, step)
    fs.write_bytes_atomic(path, encode(arrays, step=step))
    filesystem, _ = fs.filesystem(directory)
    for old in complete_checkpoints(directory)[keep:]:
        filesystem.rm(fs.filesystem(old)[1])
    return path


def restore_weights(
    model: keras_hub.models.MaskedLM, directory: str, checkpoint: str | None
) -> str:
    """Reads checkpoint (None: the newest that restores) under directory into model's variables; returns its path.

    Raises:
      LmshardsError: no checkpoint restores, or the named one is missing or does not restore.
    """
    like = variable_specs(model)
    if checkpoint is None:
        restored = restore_newest(directory, like=like)
        if restored is None:
            raise base.no_checkpoint(directory)
        path, arrays = restored
    else:
        path = checkpoint if checkpoint.endswith(SUFFIX) else checkpoint + SUFFIX
        if not fs.exists(path):
            raise LmshardsError(f"Checkpoint {checkpoint!r} is missing (no {path}).")
        try:
            arrays = load(path, like=like)
        except Exception as e:  # damaged: BadZipFile, a CRC mismatch, arrays of another model, ...
            raise LmshardsError(
                f"Checkpoint {checkpoint!r} does not restore ({e}); pass another --checkpoint."
            ) from e
    assign_arrays(model, None, arrays)
    return path
