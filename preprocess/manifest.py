"""Stage 6, manifest: written last, once every shard is in place; the only sign the output is complete."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Iterable, NamedTuple

import apache_beam as beam

from preprocess.sources import ReadStats
from preprocess.pack import sum_totals
from preprocess.shard import TEMP_DIR_NAME
from schemas import fs
from schemas.constants import SPLITS
from schemas.manifest import Manifest, ShardInfo, SplitInfo, SplitTotals, write_manifest


# ---------------------------------------------------------------- logic


def utc_timestamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_manifest(header: Manifest, *, shards: Iterable[tuple[str, ShardInfo]],
                   totals: Iterable[tuple[str, SplitTotals]], reading: ReadStats, created_at: str) -> Manifest:
    """`header` (everything known before the run) completed with what the run found.

    shards: (split, ShardInfo) of every shard written; totals: (split, SplitTotals), any number per split.
    """
    shards, totals = list(shards), list(totals)
    splits = {}
    for split in SPLITS:
        infos = tuple(sorted((info for s, info in shards if s == split), key=lambda info: info.path))
        splits[split] = SplitInfo(shards=infos, totals=sum_totals(t for s, t in totals if s == split))
    return dataclasses.replace(header, splits=splits, reading=reading.as_dict(), created_at=created_at)


def finish_output(output: str, manifest: Manifest) -> str:
    """Removes the shard writers' temporary directory, then writes the manifest. Returns its path."""
    temp = fs.join(output, TEMP_DIR_NAME)
    if fs.exists(temp):
        filesystem, stripped = fs.filesystem(temp)
        filesystem.rm(stripped, recursive=True)
    return write_manifest(output, manifest)


# ---------------------------------------------------------------- Beam


class ManifestInputs(NamedTuple):
    shards: beam.PCollection  # (split, ShardInfo), every shard written
    totals: beam.PCollection  # (split, SplitTotals)
    reading: beam.PCollection  # ReadStats, one


class _WriteManifestFn(beam.DoFn):
    """Writes the manifest when it runs: once, after its side inputs (every shard's info) are complete."""

    def __init__(self, header: Manifest, output: str):
        self._header, self._output = header, output

    def process(self, _, shards: list[tuple[str, ShardInfo]], totals: list[tuple[str, SplitTotals]],
                reading: ReadStats) -> Iterable[str]:
        manifest = build_manifest(self._header, shards=shards, totals=totals, reading=reading,
                                  created_at=utc_timestamp())
        yield finish_output(self._output, manifest)


class WriteManifest(beam.PTransform):
    """ManifestInputs -> the manifest's path (one element), written once every shard is in place."""

    def __init__(self, header: Manifest, output: str):
        super().__init__()
        self._fn = _WriteManifestFn(header, output)

    def expand(self, inputs: ManifestInputs):
        return (
            inputs.shards.pipeline
            | "Once" >> beam.Create([None])  # None: one element, to run the write once
            | "Write" >> beam.ParDo(self._fn, beam.pvalue.AsList(inputs.shards), beam.pvalue.AsList(inputs.totals),
                                    beam.pvalue.AsSingleton(inputs.reading))  # str: the manifest's path
        )
