"""Beam wrappers of lmshards.preprocess.stages.split: routing documents to their split and packing group (SplitDocuments)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from lmshards.preprocess.stages.encode import TokenizedChunk
from lmshards.preprocess.stages.split import (
    FLUSH_TOKENS,
    ChunkPiece,
    GroupKey,
    GroupRouter,
    write_routed,
)
from lmshards.schemas.constants import SPLITS


@dataclasses.dataclass(frozen=True)
class SplitSettings:
    validation_fraction: float
    groups: dict[str, int]  # split -> number of packing groups
    # Tokens buffered across a bundle before emitting; 0 emits each chunk's pieces as it comes.
    flush_tokens: int = FLUSH_TOKENS
    # Where each flush's chunks wait for their packing group (write_routed; the staged pipeline: the
    # output's temporary directory, for a local output); None sends them through the GroupByKey.
    directory: str | None = None


class _RouteFn(beam.DoFn):
    """TokenizedChunk -> (GroupKey, TokenizedChunk), a few large chunks per group and bundle; with
    SplitSettings.directory, (GroupKey, ChunkPiece) instead, the chunks left in a file.

    Chunks are buffered per group across the bundle (up to flush_tokens tokens) because Beam's cost
    is per element: one element per group and batch would be tens of thousands of tiny elements on
    a large corpus.
    """

    def __init__(self, settings: SplitSettings):
        self._settings = settings

    def start_bundle(self) -> None:
        self._router = GroupRouter(
            validation_fraction=self._settings.validation_fraction,
            groups=self._settings.groups,
            flush_tokens=self._settings.flush_tokens,
        )

    def process(
        self, chunk: TokenizedChunk
    ) -> Iterable[tuple[GroupKey, TokenizedChunk | ChunkPiece]]:
        yield from self._hand_on(self._router.add(chunk))

    def finish_bundle(self):
        for element in self._hand_on(self._router.flush()):
            yield GlobalWindows.windowed_value(element)

    def _hand_on(
        self, routed: list[tuple[GroupKey, TokenizedChunk]]
    ) -> Sequence[tuple[GroupKey, TokenizedChunk | ChunkPiece]]:
        directory = self._settings.directory
        return routed if directory is None or not routed else write_routed(routed, directory)


class SplitDocuments(beam.PTransform):
    """PCollection[TokenizedChunk] -> PCollection[(GroupKey, TokenizedChunk | ChunkPiece)]."""

    def __init__(self, settings: SplitSettings):
        super().__init__()
        missing = set(SPLITS) - set(settings.groups)
        if missing:
            raise ValueError(f"no packing group count for splits {sorted(missing)}")
        self._settings = settings

    def expand(self, chunks):
        return chunks | "Route" >> beam.ParDo(
            _RouteFn(self._settings)
        )  # (GroupKey, TokenizedChunk)
