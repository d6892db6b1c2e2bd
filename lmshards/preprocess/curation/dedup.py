"""Exact and near-duplicate clusters: which documents go, and which document each one leaves behind.

exact: documents with the same exact_form (NFC, whitespace collapsed) form a cluster.
near: documents whose MinHash signatures share a band key are candidate pairs; the clusters are the
connected components of those pairs (computed in Beam, see components.py). Exact copies have equal
signatures, so near includes exact, and a removal is "exact" when its text equals the kept one's.

Every cluster keeps its smallest document in the NodeKey order (records.node_key: longest normalized
text, then smallest digest, then (source, index)), so the choice depends on the documents alone,
never on the runner, the worker count or the order they were read in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import apache_beam as beam
import numpy as np

from lmshards.preprocess.curation.components import ConnectedComponents
from lmshards.preprocess.curation.minhash import BandKey, band_keys, hash_family, signature
from lmshards.preprocess.curation.records import EXACT, NEAR, CurationDoc, DocRef, NodeKey, node_key
from lmshards.preprocess.curation.text import shingles

# (document to remove, (reason, the kept document's record ref)): what a dedup step decides.
Verdict = tuple[DocRef, tuple[str, DocRef]]


@dataclasses.dataclass(frozen=True)
class MinHashSettings:
    ngram: int
    bands: int
    rows: int

    @property
    def permutations(self) -> int:
        return self.bands * self.rows


# ---------------------------------------------------------------- logic


def node_ref(node: NodeKey) -> DocRef:
    return node.source, node.index


def node_record(node: NodeKey) -> DocRef:
    return node.source, node.record


def verdict(node: NodeKey, root: NodeKey) -> Verdict:
    """The removal of `node` from the cluster whose kept document is `root`."""
    reason = EXACT if node.digest == root.digest else NEAR  # equal digests: the same exact_form
    return node_ref(node), (reason, node_record(root))


def exact_verdicts(nodes: Iterable[NodeKey]) -> Iterator[Verdict]:
    """One exact cluster (equal exact_form digests) -> a verdict for all but its smallest node."""
    ordered = sorted(set(nodes))
    for node in ordered[1:]:
        yield verdict(node, ordered[0])


def bucket_edges(nodes: Iterable[NodeKey]) -> Iterator[tuple[NodeKey, NodeKey]]:
    """The documents of one band bucket -> each joined to the bucket's smallest (a star, not all pairs)."""
    ordered = sorted(set(nodes))
    for node in ordered[1:]:
        yield node, ordered[0]


def document_band_keys(
    doc: CurationDoc, settings: MinHashSettings, offsets: np.ndarray
) -> list[BandKey]:
    sig = signature(shingles(doc.text, settings.ngram), offsets)
    return band_keys(sig, bands=settings.bands, rows=settings.rows)


# ---------------------------------------------------------------- Beam


def _exact_entry(doc: CurationDoc) -> tuple[bytes, NodeKey]:
    node = node_key(doc)
    return node.digest, node


class ExactVerdicts(beam.PTransform):
    """CurationDoc -> Verdict for every document whose exact copy is kept."""

    def expand(self, docs):
        return (
            docs
            | "Key" >> beam.Map(_exact_entry)  # (digest, NodeKey)
            | "Group" >> beam.GroupByKey()  # (digest, [NodeKey])
            | "Decide" >> beam.FlatMap(lambda item: exact_verdicts(item[1]))  # Verdict
        )


class _BandKeysFn(beam.DoFn):
    """CurationDoc -> (BandKey, NodeKey), one per band; the hash family is made once per worker."""

    def __init__(self, settings: MinHashSettings):
        self._settings = settings

    def setup(self) -> None:
        self._family = hash_family(self._settings.permutations)

    def process(self, doc: CurationDoc) -> Iterable[tuple[BandKey, NodeKey]]:
        node = node_key(doc)
        for key in document_band_keys(doc, self._settings, self._family):
            yield key, node


class NearVerdicts(beam.PTransform):
    """CurationDoc -> Verdict for every document of a near-duplicate cluster but its kept one."""

    def __init__(self, settings: MinHashSettings):
        super().__init__()
        self._settings = settings

    def expand(self, docs):
        return (
            docs
            | "BandKeys" >> beam.ParDo(_BandKeysFn(self._settings))  # (BandKey, NodeKey)
            | "Buckets" >> beam.GroupByKey()  # (BandKey, [NodeKey])
            | "Edges" >> beam.FlatMap(lambda item: bucket_edges(item[1]))  # (NodeKey, NodeKey)
            | "Components" >> ConnectedComponents()  # (NodeKey, root NodeKey)
            | "Decide" >> beam.MapTuple(verdict)  # Verdict
        )
