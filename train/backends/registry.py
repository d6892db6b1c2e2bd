"""Backend names -> their modules. Adding a backend is one module in train/backends/ and one line here.

Without TensorFlow or JAX: the command line takes its --backend choices from here before anything loads.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from typing import TYPE_CHECKING

from plumbing.errors import LmshardsError

if TYPE_CHECKING:
    from train.backends.base import Backend


@dataclasses.dataclass(frozen=True)
class BackendEntry:
    """module: exposes BACKEND, a train.backends.base.Backend subclass; keras_backend: the KERAS_BACKEND it needs."""

    module: str
    keras_backend: str


TENSORFLOW = "tensorflow"
JAX = "jax"
DEFAULT_BACKEND = TENSORFLOW
BACKENDS: dict[str, BackendEntry] = {
    TENSORFLOW: BackendEntry("train.backends.tensorflow", keras_backend="tensorflow"),
    JAX: BackendEntry("train.backends.jax", keras_backend="jax"),
}


def backend_names() -> tuple[str, ...]:
    return tuple(BACKENDS)


def entry(name: str) -> BackendEntry:
    """Raises LmshardsError naming the choices for an unknown backend."""
    if name not in BACKENDS:
        raise LmshardsError(f"Unknown --backend {name!r}; choose one of {', '.join(BACKENDS)}.")
    return BACKENDS[name]


def select_keras_backend(name: str) -> None:
    """Sets KERAS_BACKEND for backend `name`. Call before keras is first imported (Keras reads it once).

    Raises:
      LmshardsError: keras is already imported with another backend.
    """
    wanted = entry(name).keras_backend
    if "keras" in sys.modules:
        current = sys.modules["keras"].backend.backend()
        if current != wanted:
            raise LmshardsError(
                f"--backend {name} needs Keras's {wanted} backend, but Keras is already loaded with {current}. "
                f"Run it in a new process (or set KERAS_BACKEND={wanted})."
            )
        return
    os.environ["KERAS_BACKEND"] = wanted


def load_backend(name: str) -> Backend:
    """A new instance of backend `name`; imports its framework (TensorFlow, JAX)."""
    select_keras_backend(name)
    return importlib.import_module(entry(name).module).BACKEND()
