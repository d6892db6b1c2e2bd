"""Small curation steps for tests, registered with `registered(monkeypatch)` (the product ships none)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from lmshards.preprocess.curation import steps as framework
from lmshards.preprocess.curation.steps import DOCUMENT, Judgement, Step, StepFlag


class MinWords:
    """Removes documents of fewer than min_words words; counts the kept ones as "long"."""

    def __init__(self, options: Mapping[str, Any]):
        self._min = options["min_words"]

    def judge(self, texts: Sequence[str]) -> list[Judgement]:
        out = []
        for text in texts:
            words = len(text.split())
            if words < self._min:
                out.append(Judgement(None, "too_few_words", f"words {words} < {self._min}"))
            else:
                out.append(Judgement(text, counts={"long": 1}))
        return out


class Mask:
    """Replaces '@' by '<at>' and counts them (a PII-like step that changes text)."""

    def __init__(self, options: Mapping[str, Any]):
        pass

    def judge(self, texts: Sequence[str]) -> list[Judgement]:
        return [Judgement(t.replace("@", "<at>"), counts={"at": t.count("@")}) for t in texts]


SHORT = Step(
    name="short",
    kind=DOCUMENT,
    summary="drops documents of few words",
    reasons=("too_few_words",),
    flags=(StepFlag("short_min_words", "min_words", int, 3, "words at least", 1, 100),),
    build=MinWords,
)
MASK = Step(
    name="mask",
    kind=DOCUMENT,
    summary="masks @",
    reasons=(),
    flags=(StepFlag("mask", "mask", str, "", "what to mask", choices=("", "at")),),
    build=Mask,
    switch="mask",
)


def registered(monkeypatch: pytest.MonkeyPatch) -> tuple[Step, ...]:
    """Registers SHORT and MASK before the product's steps (the registry's STEPS) for this test."""
    steps = (SHORT, MASK, *framework.STEPS)
    monkeypatch.setattr(framework, "STEPS", steps)
    return steps
