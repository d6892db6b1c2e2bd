"""Beam wrappers of lmshards.preprocess.stages.manifest: the manifest step (WriteManifest), run once after every shard is written."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import apache_beam as beam

from lmshards.preprocess.sources import ReadStats
from lmshards.preprocess.stages.manifest import finish_shard_set
from lmshards.schemas.manifest import (
    CurationInfo,
    Manifest,
    ShardInfo,
    SplitTotals,
)


class ManifestInputs(NamedTuple):
    shards: beam.PCollection  # (split, ShardInfo), every shard written
    totals: beam.PCollection  # (split, SplitTotals)
    reading: beam.PCollection  # ReadStats, one


class _WriteManifestFn(beam.DoFn):
    """Writes the manifest when it runs: once, after its side inputs (every shard's info) are complete."""

    def __init__(self, header: Manifest, output: str, patterns: Sequence[str]):
        self._header, self._output, self._patterns = header, output, tuple(patterns)

    def process(
        self,
        _,
        shards: list[tuple[str, ShardInfo]],
        totals: list[tuple[str, SplitTotals]],
        reading: ReadStats,
        *before,  # the paths written before, when WriteManifest has them (unused: only the wait counts)
        curation: CurationInfo | None = None,  # when curation ran
    ) -> Iterable[str]:
        yield finish_shard_set(
            self._output,
            self._header,
            patterns=self._patterns,
            shards=shards,
            totals=totals,
            reading=reading,
            curation=curation,
        )


class WriteManifest(beam.PTransform):
    """ManifestInputs -> the manifest's path (one element), written once every shard is in place.

    patterns: the --input values, named in the error when no document was read (then no manifest is written).
    before: paths written before the manifest when given (the token store's manifest, --keep_tokens).
    curation: CurationInfo, one, when a curation stage ran (the manifest's curation section).
    """

    def __init__(
        self,
        header: Manifest,
        output: str,
        *,
        patterns: Sequence[str],
        before: beam.PCollection | None = None,
        curation: beam.PCollection | None = None,
    ):
        super().__init__()
        self._fn = _WriteManifestFn(header, output, patterns)
        self._before = before
        self._curation = curation

    def expand(self, inputs: ManifestInputs):
        return (
            inputs.shards.pipeline
            | "Once" >> beam.Create([None])  # None: one element, to run the write once
            | "Write"
            >> beam.ParDo(
                self._fn,
                beam.pvalue.AsList(inputs.shards),
                beam.pvalue.AsList(inputs.totals),
                beam.pvalue.AsSingleton(inputs.reading),
                *([beam.pvalue.AsList(self._before)] if self._before is not None else []),
                **(
                    {"curation": beam.pvalue.AsSingleton(self._curation)}
                    if self._curation is not None
                    else {}
                ),
            )  # str: the manifest's path
        )
