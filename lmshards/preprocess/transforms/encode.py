"""Beam wrappers of lmshards.preprocess.stages.encode: the tokenizer step (EncodeDocuments) and its rejected-document count."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import apache_beam as beam

from lmshards.plumbing.memory import freeze_startup_heap
from lmshards.preprocess.sources import sum_stats
from lmshards.preprocess.stages.encode import (
    TokenizedChunk,
    chunk_dtype,
    encode_accepted,
    encoded_chunk,
    limit_tokenizer_threads,
    log_rejected,
    planned_tokenizer_text,
    rejected_stats,
)
from lmshards.preprocess.stages.metrics import (
    DOCUMENTS_TOKENIZED,
    DOCUMENTS_TOKENIZER_ERROR,
    TOKENS,
    counter,
)


@dataclasses.dataclass(frozen=True)
class EncodeSettings:
    """What the encode step needs; small and picklable. The tokenizer travels as its path and digest
    and each worker reads it once: its JSON is megabytes, which Beam would pickle and compress into
    the job's graph and again into each worker's copy of the step."""

    tokenizer_path: str
    tokenizer_sha256: str
    threads: int


class _EncodeFn(beam.DoFn):
    """list[str] -> TokenizedChunk. Documents arrive non-empty (the reader skips and counts empty ones)."""

    def __init__(self, settings: EncodeSettings):
        self._settings = settings
        self._documents = counter(DOCUMENTS_TOKENIZED)
        self._tokens = counter(TOKENS)
        self._rejected = counter(DOCUMENTS_TOKENIZER_ERROR)
        self._logged = 0

    def setup(self) -> None:
        limit_tokenizer_threads(self._settings.threads)
        from tokenizers import Tokenizer  # after the thread limit, so the pool starts with it

        settings = self._settings
        text = planned_tokenizer_text(settings.tokenizer_path, settings.tokenizer_sha256)
        self._tokenizer = Tokenizer.from_str(text)
        self._dtype = chunk_dtype(self._tokenizer.get_vocab_size(with_added_tokens=True))
        freeze_startup_heap()

    def process(self, texts: list[str]) -> Iterable[TokenizedChunk]:
        if not texts:
            return
        encoded = encode_accepted(self._tokenizer, texts)
        self._logged = log_rejected(encoded, self._logged)
        chunk = encoded_chunk(encoded, self._dtype)
        self._documents.inc(chunk.num_documents)
        self._tokens.inc(chunk.num_tokens)
        self._rejected.inc(chunk.rejected)
        yield chunk  # with no documents when the tokenizer rejected them all: it still counts them


class CountRejected(beam.PTransform):
    """PCollection[TokenizedChunk] -> PCollection[ReadStats], exactly one: the documents the tokenizer
    rejected (documents_tokenizer_error), to add to what reading counted."""

    def expand(self, chunks):
        return (
            chunks
            | "Rejected" >> beam.Map(lambda chunk: rejected_stats([chunk]))  # ReadStats
            | "SumRejected" >> beam.CombineGlobally(sum_stats)  # ReadStats, one
        )


class EncodeDocuments(beam.PTransform):
    """PCollection[list[str]] -> PCollection[TokenizedChunk], one per batch (see CountRejected)."""

    def __init__(self, settings: EncodeSettings):
        super().__init__()
        self._settings = settings

    def expand(self, batches):
        return batches | "Encode" >> beam.ParDo(_EncodeFn(self._settings))  # TokenizedChunk
