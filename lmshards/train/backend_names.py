"""The backends by name: what `--backend` takes, its default, and the modules each name loads.

Data only (no framework import), so the configuration and the command line read it before anything loads;
lmshards.train.backends.registry loads a backend from it. Adding a backend is one module in lmshards/train/backends/ and one
line in BACKENDS.

>>> DEFAULT_BACKEND in backend_names()
True
>>> entry(JAX).keras_backend
'jax'
"""

from __future__ import annotations

import dataclasses

from lmshards.plumbing.errors import LmshardsError


@dataclasses.dataclass(frozen=True)
class BackendEntry:
    """module: exposes BACKEND, a lmshards.train.backends.base.Backend subclass; keras_backend: the KERAS_BACKEND it needs;
    checkpoints: a module with `restore_weights(model, directory, checkpoint) -> str` that reads the backend's
    checkpoints into a Keras model (export, --init_from), "" when there is none; checkpoints_keras: the
    KERAS_BACKEND that module needs, "" when it reads them under any; title: the backend's name in messages.
    """

    module: str
    keras_backend: str
    checkpoints: str = ""
    checkpoints_keras: str = ""
    summary: str = ""  # what --backend's help says of it
    title: str = ""


TENSORFLOW = "tensorflow"
JAX = "jax"
DEFAULT_BACKEND = TENSORFLOW
BACKENDS: dict[str, BackendEntry] = {
    TENSORFLOW: BackendEntry(
        "lmshards.train.backends.tensorflow",
        keras_backend="tensorflow",
        checkpoints="lmshards.train.backends.tensorflow_checkpoint",
        checkpoints_keras="tensorflow",
        summary="tf.distribute: TPUStrategy, MirroredStrategy over GPUs, or the CPU",
        title="TensorFlow",
    ),
    JAX: BackendEntry(
        "lmshards.train.backends.jax",
        keras_backend="jax",
        checkpoints="lmshards.train.backends.jax_checkpoint",
        summary="Keras on JAX, data parallel over every device of every host",
        title="JAX",
    ),
}


def backend_names() -> tuple[str, ...]:
    return tuple(BACKENDS)


def backends_help() -> str:
    """Every backend with its summary, for --backend's help."""
    return "; ".join(f"{name} ({e.summary})" if e.summary else name for name, e in BACKENDS.items())


def title(name: str) -> str:
    """The backend's name in messages, e.g. 'TensorFlow'."""
    return BACKENDS[name].title or name if name in BACKENDS else name


def entry(name: str) -> BackendEntry:
    """Raises LmshardsError naming the choices for an unknown backend."""
    if name not in BACKENDS:
        raise LmshardsError(f"Unknown --backend {name!r}; choose one of {', '.join(BACKENDS)}.")
    return BACKENDS[name]
