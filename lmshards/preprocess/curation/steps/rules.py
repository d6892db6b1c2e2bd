"""A document step made of rules: each text kept unchanged, or removed by the first rule it fails."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lmshards.preprocess.curation.steps.base import Judgement

# text, options -> None (kept) or (reason, detail): the rule's name and the measured value against
# its threshold, e.g. ("min_words", "words 12 < 50").
Removal = Callable[[str, Mapping[str, Any]], "tuple[str, str] | None"]


class RuleStep:
    """A built rule step: `functools.partial(RuleStep, removal)` is a Step's build."""

    def __init__(self, removal: Removal, options: Mapping[str, Any]) -> None:
        self.removal = removal
        self.options = dict(options)

    def judge(self, texts: Sequence[str]) -> list[Judgement]:
        judgements = []
        for text in texts:
            removed = self.removal(text, self.options)
            judgements.append(Judgement(text) if removed is None else Judgement(None, *removed))
        return judgements
