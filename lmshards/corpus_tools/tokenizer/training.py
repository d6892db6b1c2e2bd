"""The whole `lmshards tokenizer train` command: check the options, sample the corpus, train, save.

The corpus is streamed twice and never held in memory: pass 1 draws the sample, pass 2 writes the
sampled documents to a local temporary file the trainer reads (see sampling.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import resource
import tempfile
import time

from lmshards.corpus_tools.tokenizer.config import (
    TokenizerTrainingConfig,
    TokenizerTrainingError,
    validate,
)
from lmshards.corpus_tools.tokenizer.models import train_tokenizer
from lmshards.corpus_tools.tokenizer.sampling import (
    SampleStats,
    iter_sample,
    read_sample,
    sample_limit,
    write_sample,
)
from lmshards.corpus_tools.tokenizer.save import check_can_save, save_tokenizer
from lmshards.plumbing.outputs import check_replaceable
from lmshards.preprocess import sources
from lmshards.schemas.layouts import OUTPUT_KINDS, TOKENIZER_OUTPUT

logger = logging.getLogger(__name__)

_SAMPLE_FILE = "sample.jsonl"


@dataclasses.dataclass(frozen=True)
class TrainResult:
    output: str
    fingerprint: str
    vocab_size: int
    special_token_ids: dict[str, int]
    sample: SampleStats
    seconds: float  # sampling (two reads of the inputs) and training
    sampling_seconds: float
    peak_rss_bytes: int


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def train_and_write(config: TokenizerTrainingConfig) -> TrainResult:
    """Samples the corpus, trains, and writes the tokenizer directory to config.output.

    Raises:
      TokenizerTrainingError / sources.InputError / OutputError: bad options, a non-empty output
        without overwrite, unreadable inputs, an empty corpus, or a vocab_size too small for the sample.
    """
    validate(config)
    check_can_save()
    check_replaceable(
        config.output, kind=TOKENIZER_OUTPUT, overwrite=config.overwrite, others=OUTPUT_KINDS
    )
    start = time.monotonic()
    discovery = sources.discover_inputs(config.inputs)
    files = discovery.files
    options = config.read_options()
    read_stats = sources.ReadStats()
    limit, sample = sample_limit(
        sources.iter_documents(config.inputs, options, read_stats, discovery=discovery),
        seed=config.seed,
        max_documents=config.max_documents,
        max_bytes=config.byte_cap,
    )
    if sample.documents_sampled == 0 and sample.documents_seen:
        raise TokenizerTrainingError(
            f"--max_bytes {config.max_bytes} is smaller than every one of the {sample.documents_seen:,} documents; "
            "raise it."
        )
    if sample.documents_sampled == 0:
        raise TokenizerTrainingError(
            f"No documents to train on: the {len(files)} input file(s) of --input {list(config.inputs)} "
            f"hold no non-empty document ({read_stats.documents_empty} empty, "
            f"{read_stats.documents_invalid_json} invalid JSON lines). Check --input and --text_field/--text_column."
        )
    logger.info(
        "Sample: %d of %d documents, %d of %d bytes",
        sample.documents_sampled,
        sample.documents_seen,
        sample.bytes_sampled,
        sample.bytes_seen,
    )
    with tempfile.TemporaryDirectory(prefix="lmshards-tokenizer-sample-") as tmp:
        sample_path = os.path.join(tmp, _SAMPLE_FILE)
        write_sample(
            iter_sample(
                sources.iter_documents(config.inputs, options, discovery=discovery),
                seed=config.seed,
                limit=limit,
            ),
            sample_path,
        )
        sampled = time.monotonic()
        tok = train_tokenizer(
            lambda: read_sample(sample_path),
            model=config.model,
            vocab_size=config.vocab_size,
            preset=config.preset,
            lowercase=config.lowercase,
        )
    seconds = time.monotonic() - start
    rss = peak_rss_bytes()
    saved = save_tokenizer(
        tok,
        config.output,
        preset=config.preset,
        overwrite=config.overwrite,
        info={
            "options": dataclasses.asdict(config),
            "inputs": [dataclasses.asdict(f) for f in files],
            "read_stats": read_stats.recorded(),
            "sample": dataclasses.asdict(sample),
            "seconds": {
                "sampling": round(sampled - start, 3),
                "training": round(seconds - (sampled - start), 3),
            },
            "peak_rss_bytes": rss,
        },
    )
    return TrainResult(
        output=config.output,
        fingerprint=saved["fingerprint"],
        vocab_size=saved["vocab_size"],
        special_token_ids=saved["special_token_ids"],
        sample=sample,
        seconds=seconds,
        sampling_seconds=sampled - start,
        peak_rss_bytes=rss,
    )
