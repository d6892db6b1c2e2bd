"""What a curation step is: a name, the reasons it can give, its flags, and a pure verdict function.

A document step (language, quality filters, PII) judges a batch of documents at a time and says, for
each, the text that goes on (None: removed) and, for a removal, the rule and the measured value
against its threshold. The framework (the registry and flags in lmshards.preprocess.curation.steps, the
judging loop and funnel in lmshards.preprocess.curation.judging) counts, audits and runs steps on Beam
and on the in-process path; a step module holds only its logic and one `STEP`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

DOCUMENT = "document"  # judged one document at a time (in batches): language, quality, PII
CORPUS = "corpus"  # needs the whole corpus: decontaminate, dedup
KINDS = (DOCUMENT, CORPUS)


@dataclasses.dataclass(frozen=True)
class StepFlag:
    """One flag of a step: `--{flag}` on the command line, `field` in the step's options."""

    flag: str  # without the dashes, e.g. "gopher_min_words"
    field: str  # the key in the options the step is built from and the manifest records
    type: type  # int, float, str or bool
    default: Any
    help: str
    minimum: float | None = None  # inclusive
    maximum: float | None = None  # inclusive
    choices: tuple[Any, ...] | None = None


class Judgement(NamedTuple):
    """A document step's word on one document."""

    text: str | None  # the text that goes on (changed by PII, C4 line removal); None: removed
    reason: str = ""  # removed: the rule that removed it, one of the step's reasons
    detail: str = (
        ""  # removed: the measured value against the threshold, "mean_word_length 2.10 < 3"
    )
    counts: Mapping[
        str, int
    ] = {}  # what the step counted on this document: {"en": 1}, {"email": 2}


class DocumentStep(Protocol):
    """A built document step: heavy things (a language model) are loaded when it is built."""

    def judge(self, texts: Sequence[str]) -> list[Judgement]:
        """One Judgement per text, in order."""
        ...


@dataclasses.dataclass(frozen=True)
class Step:
    """A registry entry: everything the framework needs to know about one step."""

    name: str  # the name on the command line and in the audit and manifest
    kind: str  # DOCUMENT or CORPUS
    summary: str  # one line for --help and the docs
    reasons: tuple[str, ...]  # the audit reasons it can give
    flags: tuple[StepFlag, ...] = ()
    build: Callable[[Mapping[str, Any]], DocumentStep] | None = None  # DOCUMENT: options -> step
    # The field that turns the step on when set to other than its default (a field of its flags, or of
    # PreprocessConfig for CORPUS steps); "": the step is named in --quality_filters.
    switch: str = ""
    # Checks of its options together, beyond each flag's range: raises ValueError whose message names
    # the flags and the fix (the framework ends the run with it, exit 2).
    check: Callable[[Mapping[str, Any]], None] | None = None
    # Reads what its options name (a word list) before work starts and returns options to add to the
    # ones it is built from and the manifest records (the list's fingerprint); raises ValueError
    # naming the flag and the fix. Run while planning, never while flags are checked (no I/O there).
    prepare: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    # Whether, with these options, the step may change the text of a document it keeps (PII, C4's line
    # removal). A read that already knows which documents the steps keep runs only these again (the
    # default runner's second read with a corpus step). Left out: it may (always safe).
    changes_text: Callable[[Mapping[str, Any]], bool] | None = None


def never_changes_text(options: Mapping[str, Any]) -> bool:
    """changes_text of a step that only removes documents (a filter)."""
    return False
