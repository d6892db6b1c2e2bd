"""The curation stage: numbered documents in, the kept documents' batches, the audit and the counts out.

Order (lmshards.preprocess.curation.steps): the document steps first (language, quality filters, PII:
each batch judged by judge_documents, the loop the in-process path runs too), then decontamination (a contaminated document is gone before it could be kept for a
cluster), then exact or near deduplication of what is left. Removals are decided on small keys
(digests, band keys, NodeKeys) and joined back to the documents by (source, index), so no step
holds more than one cluster's or one bucket's keys, and no step holds every signature.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import apache_beam as beam

from lmshards.preprocess.curation.audit import (
    CurationCounts,
    RecordRemovals,
    counts_of_document,
    curation_info,
    sum_counts,
)
from lmshards.preprocess.curation.decontaminate import Decontaminate, EvalIndex
from lmshards.preprocess.curation.dedup import ExactVerdicts, MinHashSettings, NearVerdicts
from lmshards.preprocess.curation.judging import (
    BuiltStep,
    StepFunnel,
    build_document_steps,
    judge_documents,
    sum_funnels,
)
from lmshards.preprocess.curation.records import CurationDoc, DocRef, Removal
from lmshards.preprocess.curation.steps import DOCUMENT, SelectedStep
from lmshards.preprocess.curation.steps.dedup import DEDUP_NEAR, DEDUP_NONE
from lmshards.preprocess.sources import ReadOptions
from lmshards.preprocess.stages.read import NumberedBatch
from lmshards.preprocess.transforms.read import NumberedReadOutputs, ReadDocuments
from lmshards.schemas.manifest import CurationInfo, InputFileInfo


@dataclasses.dataclass(frozen=True)
class EvalSets:
    """The eval sets to decontaminate against: their files (listed while planning) and reading."""

    files: tuple[InputFileInfo, ...]
    options: ReadOptions


@dataclasses.dataclass(frozen=True)
class CurationSettings:
    dedup: str
    minhash: MinHashSettings
    decontaminate_ngram: int
    eval_sets: EvalSets | None
    batch_size: int  # documents per batch handed to the tokenizer
    range_bytes: int
    steps: tuple[SelectedStep, ...] = ()  # every step that runs, in order, with its options

    @property
    def document_steps(self) -> tuple[SelectedStep, ...]:
        return tuple(s for s in self.steps if s.kind == DOCUMENT)

    @property
    def corpus(self) -> bool:
        """Whether a corpus step runs (--dedup exact/near, --decontaminate)."""
        return self.dedup != DEDUP_NONE or self.eval_sets is not None

    def manifest_options(self) -> dict[str, Any]:
        """The options that decide what is removed (the manifest's curation.options)."""
        options: dict[str, Any] = {}
        if self.dedup == DEDUP_NEAR:
            options |= {
                "minhash_ngram": self.minhash.ngram,
                "minhash_bands": self.minhash.bands,
                "minhash_rows": self.minhash.rows,
                "minhash_min_words": self.minhash.min_words,
            }
        if self.eval_sets is not None:
            options["decontaminate_ngram"] = self.decontaminate_ngram
        return options


class CurationOutputs(NamedTuple):
    batches: beam.PCollection  # list[str]: the kept documents
    info: beam.PCollection  # CurationInfo, one
    audit: beam.PCollection  # {"path", "lines"} of each audit file written


# ---------------------------------------------------------------- logic


def number_documents(batch: NumberedBatch) -> Iterator[CurationDoc]:
    """Each document of a batch with its index in its file and its record's number."""
    urls = batch.urls if batch.urls is not None else [None] * len(batch.texts)
    for i, (text, record, url) in enumerate(zip(batch.texts, batch.records, urls, strict=True)):
        yield CurationDoc(batch.source, batch.first + i, text, record, url)


def apply_verdicts(
    ref: DocRef, grouped: Mapping[str, Iterable[Any]]
) -> Iterator[CurationDoc | Removal]:
    """One document and the verdicts about it (at most one) -> the document, or its Removal."""
    docs = list(grouped["docs"])
    verdicts = list(grouped["verdicts"])
    for doc in docs:
        if verdicts:
            decision = verdicts[0]
            yield Removal(
                doc.source,
                doc.record,
                decision.reason,
                doc.utf8_bytes(),
                kept=decision.kept,
                similarity=decision.similarity,
                url=doc.url,
            )
        else:
            yield doc


def is_doc(element: CurationDoc | Removal) -> bool:
    return isinstance(element, CurationDoc)


def is_removal(element: CurationDoc | Removal) -> bool:
    return isinstance(element, Removal)


def _keyed(doc: CurationDoc) -> tuple[DocRef, CurationDoc]:
    return doc.ref, doc


def _text(doc: CurationDoc) -> str:
    return doc.text


def _info(
    _: None,
    counts: CurationCounts,
    clusters: int,
    eval_documents: Iterable[tuple[str, int]],
    audit: Iterable[dict[str, Any]],
    funnel: StepFunnel,
    *,
    settings: CurationSettings,
) -> CurationInfo:
    eval_files = [f.path for f in settings.eval_sets.files] if settings.eval_sets else []
    return curation_info(
        dedup=settings.dedup,
        options=settings.manifest_options(),
        counts=counts,
        clusters=clusters,
        eval_files=eval_files,
        eval_documents=dict(eval_documents),
        audit=audit,
        steps=settings.steps,
        funnel=funnel,
    )


# ---------------------------------------------------------------- Beam


class NumberDocuments(beam.PTransform):
    """NumberedReadOutputs of ReadDocuments(numbered=True) -> CurationDoc."""

    def expand(self, read: NumberedReadOutputs):
        return read.documents | "Number" >> beam.FlatMap(number_documents)  # CurationDoc


class _JudgeFn(beam.DoFn):
    """[CurationDoc] -> each kept CurationDoc, each Removal, then the batch's StepFunnel (one output,
    told apart by type); the steps are built in setup(), never pickled."""

    def __init__(self, steps: tuple[SelectedStep, ...]):
        self._steps = steps
        self._built: list[BuiltStep] = []

    def setup(self) -> None:
        self._built = build_document_steps(self._steps)

    def process(self, docs: list[CurationDoc]) -> Iterator[CurationDoc | Removal | StepFunnel]:
        judged = judge_documents(self._built, docs)
        yield from judged.kept
        yield from judged.removals
        yield judged.funnel


def _is_funnel(element: CurationDoc | Removal | StepFunnel) -> bool:
    return isinstance(element, StepFunnel)


class JudgeDocuments(beam.PTransform):
    """CurationDoc -> CurationDoc (kept, text possibly changed) | Removal | StepFunnel (per batch)."""

    def __init__(self, steps: tuple[SelectedStep, ...], batch_size: int):
        super().__init__()
        self._steps = steps
        self._batch_size = batch_size

    def expand(self, docs):
        return (
            docs
            | "Batch"
            >> beam.BatchElements(
                min_batch_size=1, max_batch_size=self._batch_size
            )  # [CurationDoc]
            | "Judge" >> beam.ParDo(_JudgeFn(self._steps))  # CurationDoc | Removal | StepFunnel
        )


class _Deduplicate(beam.PTransform):
    """CurationDoc -> CurationDoc | Removal, by exact or near verdicts joined on (source, index)."""

    def __init__(self, settings: CurationSettings):
        super().__init__()
        self._settings = settings

    def expand(self, docs):
        if self._settings.dedup == DEDUP_NEAR:
            verdicts = docs | "Near" >> NearVerdicts(self._settings.minhash)  # Verdict
        else:
            verdicts = docs | "Exact" >> ExactVerdicts()  # Verdict
        keyed = docs | "KeyDocs" >> beam.Map(_keyed)  # (DocRef, CurationDoc)
        return (
            {"docs": keyed, "verdicts": verdicts}
            | "Join" >> beam.CoGroupByKey()  # (DocRef, {"docs": [...], "verdicts": [...]})
            | "Apply" >> beam.FlatMapTuple(apply_verdicts)  # CurationDoc | Removal
        )


class CurateDocuments(beam.PTransform):
    """NumberedReadOutputs (numbered) -> CurationOutputs; the audit files are written under output."""

    def __init__(self, settings: CurationSettings, output: str):
        super().__init__()
        self._settings = settings
        self._output = output

    def expand(self, read: NumberedReadOutputs) -> CurationOutputs:
        settings = self._settings
        pipeline = read.documents.pipeline
        docs = read | "NumberDocuments" >> NumberDocuments()  # CurationDoc
        counted_in = docs | "CountIn" >> beam.Map(counts_of_document)  # CurationCounts
        removals: list[beam.PCollection] = []
        funnels = pipeline | "NoDocumentSteps" >> beam.Create([])  # StepFunnel
        if settings.document_steps:
            judged = docs | "JudgeDocuments" >> JudgeDocuments(
                settings.document_steps, settings.batch_size
            )  # CurationDoc | Removal | StepFunnel
            docs = judged | "Kept" >> beam.Filter(is_doc)  # CurationDoc
            removals.append(judged | "Judged" >> beam.Filter(is_removal))  # Removal
            funnels = judged | "Funnels" >> beam.Filter(_is_funnel)  # StepFunnel, one per batch
        eval_documents = pipeline | "NoEvalSets" >> beam.Create([])  # (eval file, documents)
        if settings.eval_sets is not None:
            eval_read = pipeline | "ReadEvalSets" >> ReadDocuments(
                list(settings.eval_sets.files),
                settings.eval_sets.options,
                range_bytes=settings.range_bytes,
                numbered=True,
            )
            eval_docs = eval_read | "NumberEvalDocuments" >> NumberDocuments()  # CurationDoc
            eval_documents = (
                eval_docs
                | "EvalSource" >> beam.Map(lambda d: d.source)
                | "CountEval" >> beam.combiners.Count.PerElement()
            )  # (eval file, documents)
            index = eval_docs | "EvalIndex" >> EvalIndex(settings.decontaminate_ngram)
            checked = docs | "Decontaminate" >> Decontaminate(settings.decontaminate_ngram, index)
            docs = checked | "Clean" >> beam.Filter(is_doc)  # CurationDoc
            removals.append(checked | "Contaminated" >> beam.Filter(is_removal))  # Removal
        if settings.dedup != DEDUP_NONE:
            decided = docs | "Deduplicate" >> _Deduplicate(settings)  # CurationDoc | Removal
            docs = decided | "Unique" >> beam.Filter(is_doc)  # CurationDoc
            removals.append(decided | "Duplicates" >> beam.Filter(is_removal))  # Removal
        funnel = funnels | "SumFunnels" >> beam.CombineGlobally(sum_funnels)  # StepFunnel, one
        removed = removals | "Removals" >> beam.Flatten()  # Removal
        recorded = removed | "Audit" >> RecordRemovals(self._output)
        audit = recorded.audit  # {"path", "lines"}
        counts = (
            (counted_in, recorded.counts)
            | "AllCounts" >> beam.Flatten()
            | "SumCounts" >> beam.CombineGlobally(sum_counts)
        )  # CurationCounts, one
        clusters = (
            recorded.kept  # KeptDoc, per removal naming one
            | "Clusters" >> beam.Distinct()
            | "CountClusters" >> beam.combiners.Count.Globally()
        )  # int, one
        info = (
            pipeline
            | "Once" >> beam.Create([None])
            | "Info"
            >> beam.Map(
                _info,
                beam.pvalue.AsSingleton(counts),
                beam.pvalue.AsSingleton(clusters),
                beam.pvalue.AsList(eval_documents),
                beam.pvalue.AsList(audit),
                beam.pvalue.AsSingleton(funnel),
                settings=settings,
            )
        )  # CurationInfo, one
        batches = (
            docs
            | "Texts" >> beam.Map(_text)  # str
            | "Batch"
            >> beam.BatchElements(
                min_batch_size=settings.batch_size, max_batch_size=settings.batch_size
            )
        )  # list[str]
        return CurationOutputs(batches=batches, info=info, audit=audit)
