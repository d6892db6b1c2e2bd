"""Shared fixtures: the bundled sample corpus, a tokenizer trained from it, and a GCS emulator."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from tests.helpers.gcs_emulator import BUCKET, running_emulator

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO / "data" / "sample"

# Tests never reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(autouse=True)
def _no_worker_package_switch_leaks():
    """A Dataflow run in-process sets LMSHARDS_WORKER_PACKAGE for Beam's stager (and leaves it set, as
    the process ends anyway); a later test that builds lmshards must not get the worker distribution."""
    before = os.environ.get("LMSHARDS_WORKER_PACKAGE")
    yield
    if before is None:
        os.environ.pop("LMSHARDS_WORKER_PACKAGE", None)
    else:
        os.environ["LMSHARDS_WORKER_PACKAGE"] = before


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    return SAMPLE_DIR


@pytest.fixture(scope="session")
def sample_files() -> list[Path]:
    return sorted(SAMPLE_DIR.glob("*/*.txt"))


def _train_small_tokenizer(path: Path, files: list[Path]) -> Path:
    """A RoBERTa-style byte-level BPE (vocab 2000) trained on the sample: fast, no unknown tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trainer = trainers.BpeTrainer(
        vocab_size=2000,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    lines = itertools.chain.from_iterable(f.read_text(encoding="utf-8").splitlines() for f in files)
    tok.train_from_iterator(lines, trainer=trainer)
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>"))
    )
    tok.save(str(path))
    return path


@pytest.fixture(scope="session")
def sample_tokenizer(tmp_path_factory, sample_files) -> Path:
    """Path of a tokenizer.json trained on the bundled sample corpus (once per test session)."""
    return _train_small_tokenizer(
        tmp_path_factory.mktemp("tokenizer") / "tokenizer.json", sample_files
    )


@pytest.fixture(scope="session")
def gcs_emulator_session(tmp_path_factory):
    """A GCS emulator on 127.0.0.1 with bucket `lmshards-test`, started once per test session."""
    with running_emulator(str(tmp_path_factory.mktemp("gcs"))):
        yield f"gs://{BUCKET}"


@pytest.fixture(scope="module")
def gcs_emulator(gcs_emulator_session, request):
    """A gs:// prefix of the emulator's bucket that belongs to one test module, e.g. 'gs://lmshards-test/test_read'.

    Test modules share one emulator; their own prefixes keep their globs from seeing each other's objects.
    """
    return f"{gcs_emulator_session}/{request.module.__name__.rsplit('.', 1)[-1]}"
