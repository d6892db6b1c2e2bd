"""The curation step framework (lmshards/preprocess/curation/steps/__init__.py): flags, checks
and selection, with small steps registered by the test (the product ships none of them)."""

from __future__ import annotations

import argparse

import pytest

from lmshards.preprocess.curation import steps as framework
from lmshards.preprocess.curation.records import CurationDoc
from lmshards.preprocess.curation.steps import (
    CORPUS,
    DOCUMENT,
    SelectedStep,
    StepError,
)
from tests.helpers.curation_steps import MASK, SHORT

DEDUP = framework.step_named("dedup")
REGISTRY = (SHORT, MASK, DEDUP)


def _docs(*texts: str) -> list[CurationDoc]:
    return [CurationDoc("in.txt", i, text, 10 + i) for i, text in enumerate(texts)]


def test_the_registry_lists_the_corpus_steps_last_in_their_order():
    names = [s.name for s in framework.STEPS]
    assert names[-2:] == ["decontaminate", "dedup"]
    assert framework.step_named("dedup").reasons == ("exact", "near")
    assert all(s.kind in (DOCUMENT, CORPUS) for s in framework.STEPS)
    with pytest.raises(StepError, match="Unknown curation step 'dedupe'"):
        framework.step_named("dedupe")


def test_flags_come_from_the_steps_with_their_ranges():
    parser = argparse.ArgumentParser()
    framework.add_step_arguments(parser, REGISTRY)
    args = parser.parse_args(
        ["--quality_filters", "short", "--short_min_words", "5", "--mask", "at"]
    )
    assert framework.step_values(args, REGISTRY) == {"min_words": 5, "mask": "at"}
    assert framework.parse_quality_filters(args.quality_filters, REGISTRY) == ("short",)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--short_min_words", "0"])
    assert exit_info.value.code == 2


def test_values_out_of_range_or_unknown_names_are_one_line_naming_the_fix():
    with pytest.raises(
        StepError,
        match=r"--short_min_words 0 is out of range: it must be a whole number in \[1, 100\]",
    ):
        framework.check_step_values({"min_words": 0}, REGISTRY)
    with pytest.raises(
        StepError,
        match="'shrot' is not a quality filter \\(did you mean 'short'\\?\\); choose from short",
    ):
        framework.parse_quality_filters("shrot", REGISTRY)
    with pytest.raises(StepError, match="names a filter twice"):
        framework.parse_quality_filters("short,short", REGISTRY)


def test_selection_keeps_the_registry_order_and_records_options():
    selected = framework.select_steps(
        quality=("short",), values={"mask": "at"}, switches={"dedup": True}, steps=REGISTRY
    )
    assert selected == (
        SelectedStep("short", DOCUMENT, {"min_words": 3}),
        SelectedStep("mask", DOCUMENT, {"mask": "at"}),
        SelectedStep("dedup", CORPUS, {}),
    )
    assert framework.select_steps(quality=(), values={}, switches={}, steps=REGISTRY) == ()


def test_a_flag_of_a_step_that_does_not_run_is_refused_naming_the_switch():
    framework.check_flags_apply({"min_words": 3}, (), REGISTRY)  # its default: let through
    with pytest.raises(
        StepError, match=r"^--short_min_words is ignored without the short step: add "
    ):
        framework.check_flags_apply({"min_words": 5}, (), REGISTRY)
    with pytest.raises(
        StepError, match="add --quality_filters short or leave --short_min_words out"
    ):
        framework.check_flags_apply({"min_words": 5}, (), REGISTRY)
    running = framework.select_steps(quality=("short",), values={}, switches={}, steps=REGISTRY)
    framework.check_flags_apply({"min_words": 5}, running, REGISTRY)


def test_only_pii_and_c4_line_removal_say_they_change_the_text_they_keep():
    """A step that says it never changes text is skipped by the default runner's second read."""
    from lmshards.preprocess.curation.steps import STEPS, step_named

    def changes(name: str, **options: object) -> bool:
        step = step_named(name)
        values = {f.field: f.default for f in step.flags} | options
        return step.changes_text is None or step.changes_text(values)

    documents = [s.name for s in STEPS if s.kind == "document"]
    assert [name for name in documents if changes(name)] == ["pii"]
    assert changes("c4_quality", c4_remove_lines=True)
