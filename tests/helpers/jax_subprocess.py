"""Runs Python code in a fresh process on Keras's JAX backend with N XLA host (CPU) devices.

JAX fixes its device count when it is first imported, so each device count needs its own process.
`without_tensorflow` makes `import tensorflow` fail there, as on a machine without it installed
(keras-hub then skips it): what runs is shown to need no TensorFlow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

NO_TENSORFLOW = """
import importlib.abc, sys
class _NoTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_text"):
            raise ImportError(f"No module named {name!r} (blocked: this process must not need TensorFlow)")
        return None
sys.meta_path.insert(0, _NoTensorFlow())
"""


def jax_env(devices: int) -> dict[str, str]:
    """The environment of a process on the JAX backend with `devices` CPU devices."""
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
    }


def run_jax(
    code: str, *, devices: int, without_tensorflow: bool = True, timeout: float = 300
) -> Any:
    """Runs code, which prints one JSON value as its last line; returns that value."""
    prelude = NO_TENSORFLOW if without_tensorflow else ""
    done = subprocess.run(
        [sys.executable, "-c", prelude + code],
        env=jax_env(devices),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise AssertionError(f"exit {done.returncode}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
