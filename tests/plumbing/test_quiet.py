"""Third-party start-up lines kept off stderr: TensorFlow's import and its device discovery."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

pytest.importorskip("tensorflow")

# Device discovery on a host with NVIDIA's driver libraries but no usable GPU logs "failed call to
# cuInit" from C++, past TF_CPP_MIN_LOG_LEVEL. This machine has no such driver: the program makes
# discovery write that line on first use, as it does there.
PROGRAM = """
import os, sys
from lmshards.plumbing.quiet import load_tensorflow_quietly, native_stderr_discarded
with native_stderr_discarded(verbose=False):
    import tensorflow as tf
real, found = tf.config.list_physical_devices, []
def discovering(*args):
    if not found:
        os.write(2, b"E0000 cuda_driver.cc:152] failed call to cuInit: UNKNOWN ERROR (303)\\n")
        found.append(True)
    return real(*args)
tf.config.list_physical_devices = discovering
load_tensorflow_quietly(verbose=False)
tf.config.list_physical_devices("GPU")  # the command's own first look at the devices
print("ok", file=sys.stderr)
"""


def test_device_discovery_lines_are_discarded_with_the_import():
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "ok\n", done.stderr
