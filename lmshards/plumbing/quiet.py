"""Third-party noise kept off a command's output: lmshards prints its own progress lines.

- Hugging Face libraries draw tqdm bars on stderr while they load weights, list files or map datasets;
  in a log or a CI transcript each one is dozens of carriage-return lines with no information.
- TensorFlow prints CUDA, oneDNN and CPU-feature lines from C++ while it loads, and its own log lines after.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence

from lmshards.plumbing import stopping

# Set before TensorFlow is imported: TensorFlow's C++ logs (INFO to ERROR; FATAL still shows) and gRPC's.
QUIET_ENVIRONMENT = {"TF_CPP_MIN_LOG_LEVEL": "3", "GRPC_VERBOSITY": "ERROR"}
# Python loggers that TensorFlow and absl write their notices through (deprecations, retracing, ...).
QUIET_LOGGERS = ("tensorflow", "absl")

# Read when each library is imported: huggingface_hub (and transformers through it) and datasets.
PROGRESS_ENVIRONMENT = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
}


def hide_third_party_progress_bars() -> None:
    """Turns off the progress bars of huggingface_hub, transformers and datasets in this process.

    Libraries imported later read the environment; those imported already are told directly.
    """
    os.environ.update(PROGRESS_ENVIRONMENT)
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    if "datasets" in sys.modules:
        from datasets.utils.tqdm import disable_progress_bars as disable_datasets_bars

        disable_datasets_bars()


def quiet_tensorflow(*, verbose: bool) -> None:
    """Unless verbose, keeps TensorFlow's, absl's and gRPC's own log lines off stderr. Call before importing TensorFlow.

    Variables the user set stay as they are.
    """
    if verbose:
        return
    for name, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def load_tensorflow_quietly(
    *, verbose: bool, modules: Sequence[str] = ("keras", "tensorflow")
) -> None:
    """Imports TensorFlow (and the modules built on it) with their start-up lines kept off stderr unless verbose.

    For commands that need TensorFlow only deep inside a library call (export, preview, stats): once it
    is imported here, and its devices found, that call prints nothing of TensorFlow's own.
    """
    quiet_tensorflow(verbose=verbose)
    with native_stderr_discarded(verbose=verbose):
        for module in modules:
            importlib.import_module(module)
        if "tensorflow" in sys.modules:
            # Device discovery runs on first use and logs from C++ past TF_CPP_MIN_LOG_LEVEL (a host with
            # NVIDIA's driver libraries but no usable GPU prints "failed call to cuInit"): do it here.
            sys.modules["tensorflow"].config.list_physical_devices()


@contextlib.contextmanager
def native_stderr_discarded(*, verbose: bool) -> Iterator[None]:
    """Discards what is written to file descriptor 2 inside the block (unless verbose); replays it if the block fails.

    For `import tensorflow`: the CUDA and CPU-feature lines its libraries print while loading come
    from their own C++ logging, before TF_CPP_MIN_LOG_LEVEL is read.
    """
    with stopping.deferred():  # a SIGTERM in the middle of loading native code would abort instead
        if verbose:
            yield
            return
        with _discarded():
            yield


@contextlib.contextmanager
def _discarded() -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except BaseException:
            _restore_stderr(saved)
            captured.seek(0)
            sys.stderr.write(captured.read().decode("utf-8", "replace"))
            raise
        _restore_stderr(saved)


def _restore_stderr(saved: int) -> None:
    sys.stderr.flush()
    os.dup2(saved, 2)
    os.close(saved)
