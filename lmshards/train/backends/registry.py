"""Loads a backend by name (lmshards.train.backend_names lists them): sets Keras's backend, then imports the module.

Without TensorFlow or JAX until load_backend: the command line calls select_keras_backend before anything loads.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING

from lmshards.plumbing.errors import LmshardsError
from lmshards.train.backend_names import entry

if TYPE_CHECKING:
    from lmshards.train.backends.base import Backend


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
