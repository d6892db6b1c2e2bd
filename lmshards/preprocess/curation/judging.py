"""Judging documents through the selected document steps, counting each step's funnel.

judge_documents is the one loop every path runs: the Beam stage (stage.py), the default runner's single
pass (documents.py) and its two-pass curation with corpus steps (local.py), and --curate_sample.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from lmshards.preprocess.curation.records import CurationDoc, Removal, utf8_bytes
from lmshards.preprocess.curation.steps import (
    DOCUMENT,
    DocumentStep,
    SelectedStep,
    Step,
    step_named,
)


@dataclasses.dataclass
class StepCounts:
    """One step's row of the funnel: documents and UTF-8 bytes in and out, removed per reason
    ([documents, bytes], bytes as the document entered the step), and what it counted per label."""

    documents_in: int = 0
    bytes_in: int = 0
    documents_out: int = 0
    bytes_out: int = 0
    removed: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)

    def __iadd__(self, other: StepCounts) -> StepCounts:
        self.documents_in += other.documents_in
        self.bytes_in += other.bytes_in
        self.documents_out += other.documents_out
        self.bytes_out += other.bytes_out
        for reason, (docs, nbytes) in other.removed.items():
            mine = self.removed.setdefault(reason, [0, 0])
            mine[0] += docs
            mine[1] += nbytes
        for label, n in other.counts.items():
            self.counts[label] = self.counts.get(label, 0) + n
        return self

    def as_dict(self, name: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """The manifest's form of the row (curation.steps), labels and reasons sorted."""
        return {
            "name": name,
            "options": dict(options),
            "documents_in": self.documents_in,
            "bytes_in": self.bytes_in,
            "documents_out": self.documents_out,
            "bytes_out": self.bytes_out,
            "removed": {
                reason: {"documents": docs, "bytes": nbytes}
                for reason, (docs, nbytes) in sorted(self.removed.items())
            },
            "counts": dict(sorted(self.counts.items())),
        }


@dataclasses.dataclass
class StepFunnel:
    """Each step's StepCounts by step name; add two with `a += b` (batches, workers)."""

    steps: dict[str, StepCounts] = dataclasses.field(default_factory=dict)

    def __iadd__(self, other: StepFunnel) -> StepFunnel:
        for name, counts in other.steps.items():
            self.steps.setdefault(name, StepCounts()).__iadd__(counts)
        return self

    def row(self, name: str) -> StepCounts:
        return self.steps.setdefault(name, StepCounts())


def sum_funnels(parts: Iterable[StepFunnel]) -> StepFunnel:
    total = StepFunnel()
    for part in parts:
        total += part
    return total


# ---------------------------------------------------------------- judging


@dataclasses.dataclass(frozen=True)
class BuiltStep:
    """A selected document step, built (its heavy parts loaded)."""

    name: str
    reasons: tuple[str, ...]
    judge: DocumentStep
    changes_text: bool = True  # with its options, it may change a text it keeps (Step.changes_text)


@dataclasses.dataclass
class JudgedBatch:
    """What the document steps made of a batch: the kept documents (text possibly changed), in order,
    one Removal per removed document, and the funnel of this batch."""

    kept: list[CurationDoc]
    removals: list[Removal]
    funnel: StepFunnel


def build_document_steps(
    selected: Sequence[SelectedStep], steps: Sequence[Step] | None = None
) -> list[BuiltStep]:
    """The selected document steps, built from their options, in order (the corpus steps are left to
    their own stages). Builds heavy things: call it where the work runs (DoFn.setup)."""
    built = []
    for chosen in selected:
        if chosen.kind != DOCUMENT:
            continue
        step = step_named(chosen.name, steps)
        assert step.build is not None, f"document step {step.name} has no build"
        changes = step.changes_text is None or step.changes_text(chosen.options)
        built.append(BuiltStep(step.name, step.reasons, step.build(chosen.options), changes))
    return built


# Documents judged by every step in turn before the next ones: few enough, and short enough in all,
# that the words one step splits are still kept (words.WORDS_KEPT_CHARS) when the next step asks.
JUDGE_GROUP = 32
JUDGE_GROUP_CHARS = 1 << 20


def judge_documents(steps: Sequence[BuiltStep], docs: Sequence[CurationDoc]) -> JudgedBatch:
    """Runs docs through each step in turn: a removed document goes no further. Judged a group at a
    time (judge_groups; a step's verdict on a document never depends on the others).

    Raises:
      ValueError: a step that does not give one Judgement per document, or a reason it did not declare
        (a bug in the step).
    """
    judged = JudgedBatch(kept=[], removals=[], funnel=StepFunnel())
    for group in judge_groups(docs):
        _judge_group(steps, group, judged)
    return judged


def judge_groups(docs: Sequence[CurationDoc]) -> Iterator[Sequence[CurationDoc]]:
    """docs in order, JUDGE_GROUP documents or JUDGE_GROUP_CHARS characters a group (whichever comes
    first; a longer document is a group of its own)."""
    start = chars = 0
    for end, doc in enumerate(docs):
        if end > start and (
            end - start == JUDGE_GROUP or chars + len(doc.text) > JUDGE_GROUP_CHARS
        ):
            yield docs[start:end]
            start, chars = end, 0
        chars += len(doc.text)
    if start < len(docs):
        yield docs[start:]


def _judge_group(
    steps: Sequence[BuiltStep], docs: Sequence[CurationDoc], judged: JudgedBatch
) -> None:
    """judge_documents on one group, its kept documents, removals and counts added to judged."""
    funnel, removals = judged.funnel, judged.removals
    kept = list(docs)
    sizes = [
        utf8_bytes(doc.text) for doc in kept
    ]  # measured once, again only where a step changed it
    for step in steps:
        row = funnel.row(step.name)
        judgements = step.judge.judge([doc.text for doc in kept])
        if len(judgements) != len(kept):
            raise ValueError(
                f"curation step {step.name} judged {len(judgements)} of {len(kept)} documents"
            )
        row.documents_in += len(kept)
        row.bytes_in += sum(sizes)
        survivors, survivor_sizes = [], []
        for doc, size, judgement in zip(kept, sizes, judgements):
            for label, n in judgement.counts.items():
                row.counts[label] = row.counts.get(label, 0) + n
            if judgement.text is None:
                if judgement.reason not in step.reasons:
                    raise ValueError(
                        f"curation step {step.name} gave reason {judgement.reason!r}, not one of "
                        f"{list(step.reasons)}"
                    )
                removed = row.removed.setdefault(judgement.reason, [0, 0])
                removed[0] += 1
                removed[1] += size
                removals.append(
                    Removal(
                        doc.source,
                        doc.record,
                        judgement.reason,
                        size,
                        step=step.name,
                        detail=judgement.detail,
                        url=doc.url,
                    )
                )
                continue
            if judgement.text != doc.text:
                doc = dataclasses.replace(doc, text=judgement.text)
                size = utf8_bytes(doc.text)
            survivors.append(doc)
            survivor_sizes.append(size)
        row.documents_out += len(survivors)
        row.bytes_out += sum(survivor_sizes)
        kept, sizes = survivors, survivor_sizes
    judged.kept.extend(kept)
