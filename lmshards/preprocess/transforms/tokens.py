"""Beam wrappers of lmshards.preprocess.stages.tokens: writing and reading the token store (WriteTokenStore, ReadTokenStore)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from lmshards.preprocess.sources import ReadStats
from lmshards.preprocess.stages.encode import TokenizedChunk
from lmshards.preprocess.stages.metrics import DOCUMENTS_READ, TOKENS, counter
from lmshards.preprocess.stages.tokens import (
    PART_FLUSH_TOKENS,
    READ_PIECE_TOKENS,
    TokenFileInfo,
    TokenPartWriter,
    TokenStoreManifest,
    count_parts,
    pieces,
    read_pieces,
    write_store_manifest,
)


class _WritePartsFn(beam.DoFn):
    """TokenizedChunk -> TokenFileInfo, one part file per PART_FLUSH_TOKENS buffered in a bundle."""

    def __init__(self, store: str, id_dtype: str, flush_tokens: int):
        self._store, self._id_dtype, self._flush_tokens = store, id_dtype, flush_tokens

    def start_bundle(self) -> None:
        self._writer = TokenPartWriter(self._store, self._id_dtype, self._flush_tokens)

    def process(self, chunk: TokenizedChunk) -> Iterable[TokenFileInfo]:
        written = self._writer.add(chunk)
        count_parts(written)
        yield from written

    def finish_bundle(self):
        written = self._writer.flush()
        count_parts(written)
        for info in written:
            yield GlobalWindows.windowed_value(info)


class _WriteStoreManifestFn(beam.DoFn):
    """Writes the store's manifest once every part is written (its side inputs complete)."""

    def __init__(self, header: TokenStoreManifest, store: str):
        self._header, self._store = header, store

    def process(self, _, files: list[TokenFileInfo], reading: ReadStats) -> Iterable[str]:
        path = write_store_manifest(self._store, self._header, files=files, reading=reading)
        if path is not None:
            yield path


class WriteTokenStore(beam.PTransform):
    """TokenizedChunk -> the store manifest's path (one element, or none when no document was read).

    header: the store's manifest as known before the run (files and counts empty, the planned reading);
    reading: the readers' ReadStats (one element).
    """

    def __init__(
        self,
        header: TokenStoreManifest,
        store: str,
        *,
        reading: beam.PCollection,
        flush_tokens: int = PART_FLUSH_TOKENS,
    ):
        super().__init__()
        self._header, self._store, self._reading = header, store, reading
        self._flush_tokens = flush_tokens

    def expand(self, chunks):
        parts = chunks | "WriteParts" >> beam.ParDo(
            _WritePartsFn(self._store, self._header.id_dtype, self._flush_tokens)
        )  # TokenFileInfo
        return (
            chunks.pipeline
            | "Once" >> beam.Create([None])  # one element, to write the manifest once
            | "WriteStoreManifest"
            >> beam.ParDo(
                _WriteStoreManifestFn(self._header, self._store),
                beam.pvalue.AsList(parts),
                beam.pvalue.AsSingleton(self._reading),
            )  # str: the store manifest's path
        )


class _ReadPartFn(beam.DoFn):
    """TokenFileInfo -> its documents (checked against the manifest), in TokenizedChunk pieces."""

    def __init__(self, store: str, piece_tokens: int = READ_PIECE_TOKENS):
        self._store, self._piece_tokens = store, piece_tokens
        self._documents = counter(DOCUMENTS_READ)
        self._tokens = counter(TOKENS)

    def process(self, info: TokenFileInfo) -> Iterable[TokenizedChunk]:
        for group in read_pieces(self._store, info):
            self._documents.inc(group.num_documents)
            self._tokens.inc(group.num_tokens)
            yield from pieces(
                group, self._piece_tokens
            )  # row groups of other writers may be larger


class ReadTokenStore(beam.PTransform):
    """PBegin -> TokenizedChunk: every part file of the store, each read on any worker."""

    def __init__(self, store: str, files: Sequence[TokenFileInfo]):
        super().__init__()
        self._store, self._files = store, list(files)

    def expand(self, pbegin):
        return (
            pbegin
            | "ListParts" >> beam.Create(self._files)  # TokenFileInfo
            | "SpreadParts" >> beam.Reshuffle()  # TokenFileInfo, each on any worker
            | "ReadParts" >> beam.ParDo(_ReadPartFn(self._store))  # TokenizedChunk, in pieces
        )
