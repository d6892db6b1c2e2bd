"""Decontamination: training documents that share a word n-gram with an eval document are removed.

N-grams are of curation's words (lower-cased NFC letters and digits), hashed to 64 bits, so a
chance match between a training and an eval n-gram is about 2^-64 per pair. The eval sets' n-grams
(small next to the corpus) go to every worker as one side input: n-gram hash -> the smallest
(eval file, record) holding it (records.CurationDoc.record), so the eval record an audit line names is the same every run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import apache_beam as beam
import numpy as np

from lmshards.preprocess.curation.records import CONTAMINATED, CurationDoc, DocRef, Removal
from lmshards.preprocess.curation.text import ngram_hashes, word_hashes, words

# ---------------------------------------------------------------- logic


def document_ngrams(text: str, n: int) -> np.ndarray:
    """The distinct 64-bit word n-gram hashes of text (empty when it has fewer than n words)."""
    return np.unique(ngram_hashes(word_hashes(words(text)), n, bits=64))


def eval_entries(doc: CurationDoc, n: int) -> Iterator[tuple[int, DocRef]]:
    for value in document_ngrams(doc.text, n).tolist():
        yield value, doc.record_ref


def contamination(doc: CurationDoc, index: Mapping[int, DocRef], n: int) -> DocRef | None:
    """The smallest eval record sharing an n-gram with doc, or None."""
    found = [index[v] for v in document_ngrams(doc.text, n).tolist() if v in index]
    return min(found) if found else None


def longest_words(texts: Iterable[str]) -> int:
    """The most words any of texts has (0 for none)."""
    return max((len(words(t)) for t in texts), default=0)


# ---------------------------------------------------------------- Beam


class EvalIndex(beam.PTransform):
    """Eval CurationDoc -> one dict: n-gram hash -> the smallest eval DocRef holding it."""

    def __init__(self, ngram: int):
        super().__init__()
        self._ngram = ngram

    def expand(self, docs):
        return (
            docs
            | "NGrams" >> beam.FlatMap(eval_entries, self._ngram)  # (hash, DocRef)
            | "Smallest" >> beam.CombinePerKey(min)  # (hash, DocRef)
            | "ToDict" >> beam.combiners.ToDict()  # {hash: DocRef}
        )


class _DecontaminateFn(beam.DoFn):
    """CurationDoc -> itself, or its Removal when it shares an n-gram with an eval record."""

    def __init__(self, ngram: int):
        self._ngram = ngram

    def process(
        self, doc: CurationDoc, index: Mapping[int, DocRef]
    ) -> Iterable[CurationDoc | Removal]:
        found = contamination(doc, index, self._ngram)
        if found is None:
            yield doc
        else:
            yield Removal(
                doc.source, doc.record, CONTAMINATED, doc.utf8_bytes(), eval=found, url=doc.url
            )


class Decontaminate(beam.PTransform):
    """CurationDoc -> CurationDoc | Removal (told apart by type), against the EvalIndex side input."""

    def __init__(self, ngram: int, index: beam.PCollection):
        super().__init__()
        self._ngram, self._index = ngram, index

    def expand(self, docs):
        return docs | "Check" >> beam.ParDo(
            _DecontaminateFn(self._ngram), beam.pvalue.AsSingleton(self._index)
        )  # CurationDoc | Removal
