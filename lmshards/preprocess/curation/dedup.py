"""Exact and near-duplicate clusters: which documents go, and which document each one leaves behind.

exact: documents with the same exact_form (NFC, whitespace collapsed) form a cluster.
near: documents whose MinHash signatures share a band key are candidate pairs; the clusters are the
connected components of those pairs (computed in Beam, see components.py). Exact copies have equal
signatures, so near includes exact, and a removal is "exact" when its text equals the kept one's.
A near removal carries the similarity of its signature to the kept document's, estimated by a join of
the cluster pairs with the signatures (each document's signature is computed once).
Documents of fewer than min_words words take no part in near dedup: they are only exact-deduplicated
(among themselves, since exact copies have the same words), so a short document is never near-removed
and never the kept document of a near removal.

Every cluster keeps its smallest document in the NodeKey order (records.node_key: longest normalized
text, then smallest digest, then (source, index)), so the choice depends on the documents alone,
never on the runner, the worker count or the order they were read in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np

from lmshards.preprocess.curation.components import ConnectedComponents
from lmshards.preprocess.curation.minhash import (
    DEFAULT_MIN_WORDS,
    BandKey,
    band_keys,
    estimated_similarity,
    hash_family,
    signature,
)
from lmshards.preprocess.curation.records import EXACT, NEAR, CurationDoc, DocRef, NodeKey, node_key
from lmshards.preprocess.curation.text import shingles, words

SignatureBytes = bytes  # a MinHash signature as little-endian uint64 values


class Decision(NamedTuple):
    """Why a document goes: its reason, the kept document's record ref, and for a near removal the
    estimated similarity of the two."""

    reason: str
    kept: DocRef
    similarity: float | None = None


# (document to remove, Decision): what a dedup step decides.
Verdict = tuple[DocRef, Decision]


@dataclasses.dataclass(frozen=True)
class MinHashSettings:
    ngram: int
    bands: int
    rows: int
    min_words: int = DEFAULT_MIN_WORDS  # documents of fewer words are only exact-deduplicated

    @property
    def permutations(self) -> int:
        return self.bands * self.rows


# ---------------------------------------------------------------- logic


def node_ref(node: NodeKey) -> DocRef:
    return node.source, node.doc_index


def node_record(node: NodeKey) -> DocRef:
    return node.source, node.record


def verdict(node: NodeKey, root: NodeKey, similarity: float | None = None) -> Verdict:
    """The removal of `node` from the cluster whose kept document is `root`; `similarity` (of
    their signatures) is kept for a near removal only."""
    if node.digest == root.digest:  # equal digests: the same exact_form
        return node_ref(node), Decision(EXACT, node_record(root))
    return node_ref(node), Decision(NEAR, node_record(root), similarity)


def takes_part_in_near(doc: CurationDoc, min_words: int) -> bool:
    """Whether near dedup considers doc: it has at least min_words words (the words of its shingles)."""
    return min_words == 0 or len(words(doc.text)) >= min_words


def signature_bytes(sig: np.ndarray) -> SignatureBytes:
    return sig.astype("<u8").tobytes()


def signature_of(data: SignatureBytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<u8")


def with_root_signature(
    root: NodeKey, grouped: Mapping[str, Iterable[Any]]
) -> Iterator[tuple[NodeKey, tuple[NodeKey, SignatureBytes]]]:
    """A root, its signature and its cluster's other nodes -> (node, (root, root's signature))."""
    (sig,) = grouped["signatures"]
    for node in grouped["nodes"]:
        yield node, (root, sig)


def near_verdicts_of(node: NodeKey, grouped: Mapping[str, Iterable[Any]]) -> Iterator[Verdict]:
    """A node, its signature and its (root, root's signature) -> its verdict, with the similarity."""
    (sig,) = grouped["signatures"]
    for root, root_sig in grouped["roots"]:
        similarity = estimated_similarity(signature_of(sig), signature_of(root_sig))
        yield verdict(node, root, similarity)


def exact_verdicts(nodes: Iterable[NodeKey]) -> Iterator[Verdict]:
    """One exact cluster (equal exact_form digests) -> a verdict for all but its smallest node."""
    ordered = sorted(set(nodes))
    for node in ordered[1:]:
        yield verdict(node, ordered[0])  # equal digests: reason exact


def bucket_edges(nodes: Iterable[NodeKey]) -> Iterator[tuple[NodeKey, NodeKey]]:
    """The documents of one band bucket -> each joined to the bucket's smallest (a star, not all pairs)."""
    ordered = sorted(set(nodes))
    for node in ordered[1:]:
        yield node, ordered[0]


def document_signature(
    doc: CurationDoc, settings: MinHashSettings, offsets: np.ndarray
) -> np.ndarray:
    return signature(shingles(doc.text, settings.ngram), offsets)


def node_band_keys(
    item: tuple[NodeKey, SignatureBytes], settings: MinHashSettings
) -> Iterator[tuple[BandKey, NodeKey]]:
    """(NodeKey, signature) -> (BandKey, NodeKey), one per band."""
    node, sig = item
    for key in band_keys(signature_of(sig), bands=settings.bands, rows=settings.rows):
        yield key, node


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


class _SignatureFn(beam.DoFn):
    """CurationDoc -> (NodeKey, signature); the hash family is made once per worker."""

    def __init__(self, settings: MinHashSettings):
        self._settings = settings

    def setup(self) -> None:
        self._family = hash_family(self._settings.permutations)

    def process(self, doc: CurationDoc) -> Iterable[tuple[NodeKey, SignatureBytes]]:
        yield node_key(doc), signature_bytes(document_signature(doc, self._settings, self._family))


def _short(doc: CurationDoc, min_words: int) -> bool:
    return not takes_part_in_near(doc, min_words)


class NearVerdicts(beam.PTransform):
    """CurationDoc -> Verdict for every document of a near-duplicate cluster but its kept one (and
    for every exact copy among the documents under min_words words)."""

    def __init__(self, settings: MinHashSettings):
        super().__init__()
        self._settings = settings

    def expand(self, docs):
        min_words = self._settings.min_words
        near = docs | "Long" >> beam.Filter(takes_part_in_near, min_words)  # CurationDoc
        short = docs | "Short" >> beam.Filter(_short, min_words)  # CurationDoc
        return (
            near | "Near" >> _NearClusterVerdicts(self._settings),
            short | "ShortExact" >> ExactVerdicts(),
        ) | "AllVerdicts" >> beam.Flatten()  # Verdict


class _NearClusterVerdicts(beam.PTransform):
    """CurationDoc -> Verdict of every document of a MinHash cluster but its kept one."""

    def __init__(self, settings: MinHashSettings):
        super().__init__()
        self._settings = settings

    def expand(self, docs):
        signatures = docs | "Signatures" >> beam.ParDo(_SignatureFn(self._settings))
        # (NodeKey, signature)
        by_root = (
            signatures
            | "BandKeys" >> beam.FlatMap(node_band_keys, self._settings)  # (BandKey, NodeKey)
            | "Buckets" >> beam.GroupByKey()  # (BandKey, [NodeKey])
            | "Edges" >> beam.FlatMap(lambda item: bucket_edges(item[1]))  # (NodeKey, NodeKey)
            | "Components" >> ConnectedComponents()  # (NodeKey, root NodeKey)
            | "ByRoot" >> beam.MapTuple(lambda node, root: (root, node))  # (root, NodeKey)
        )
        roots = (
            {"nodes": by_root, "signatures": signatures}
            | "JoinRoots" >> beam.CoGroupByKey()  # (root, {"nodes": [...], "signatures": [sig]})
            | "RootSignature" >> beam.FlatMapTuple(with_root_signature)  # (NodeKey, (root, sig))
        )
        return (
            {"roots": roots, "signatures": signatures}
            | "JoinNodes" >> beam.CoGroupByKey()  # (NodeKey, {"roots": [...], "signatures": [sig]})
            | "Decide" >> beam.FlatMapTuple(near_verdicts_of)  # Verdict
        )
