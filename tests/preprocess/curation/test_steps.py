"""The curation step framework (lmshards/preprocess/curation/steps/__init__.py): flags, selection,
judging and the funnel, with small steps registered by the test (the product ships none of them)."""

from __future__ import annotations

import argparse

import pytest

from lmshards.preprocess.curation import steps as framework
from lmshards.preprocess.curation.records import CurationDoc, Removal
from lmshards.preprocess.curation.steps import (
    CORPUS,
    DOCUMENT,
    Judgement,
    SelectedStep,
    StepError,
    StepFunnel,
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


def test_judging_removes_audits_changes_and_counts_exactly():
    selected = framework.select_steps(
        quality=("short",), values={"mask": "at", "min_words": 2}, switches={}, steps=REGISTRY
    )
    built = framework.build_document_steps(selected, REGISTRY)
    judged = framework.judge_documents(built, _docs("a@b c", "one", "x y@z@", "é"))
    assert [(d.index, d.text) for d in judged.kept] == [(0, "a<at>b c"), (2, "x y<at>z<at>")]
    assert judged.removals == [
        Removal("in.txt", 11, "too_few_words", 3, step="short", detail="words 1 < 2"),
        Removal("in.txt", 13, "too_few_words", 2, step="short", detail="words 1 < 2"),
    ]
    short, mask = judged.funnel.steps["short"], judged.funnel.steps["mask"]
    assert (short.documents_in, short.bytes_in, short.documents_out, short.bytes_out) == (
        4,
        16,
        2,
        11,
    )
    assert short.removed == {"too_few_words": [2, 5]} and short.counts == {"long": 2}
    assert (mask.documents_in, mask.bytes_in, mask.documents_out, mask.bytes_out) == (2, 11, 2, 20)
    assert mask.counts == {"at": 3} and mask.removed == {}


def test_funnels_add_up_over_batches():
    built = framework.build_document_steps(
        framework.select_steps(quality=("short",), values={}, switches={}, steps=REGISTRY), REGISTRY
    )
    texts = ["a b c", "a", "a b c d", "b", "c d e"]
    whole = framework.judge_documents(built, _docs(*texts)).funnel
    parts = StepFunnel()
    for i in range(len(texts)):
        parts += framework.judge_documents(built, _docs(*texts)[i : i + 1]).funnel
    assert parts == whole
    assert whole.steps["short"].documents_out == 3


def test_a_step_giving_an_undeclared_reason_is_a_bug_named():
    class Bad:
        def judge(self, texts):
            return [Judgement(None, "odd") for _ in texts]

    step = framework.BuiltStep("bad", ("fine",), Bad())
    with pytest.raises(ValueError, match="gave reason 'odd'"):
        framework.judge_documents([step], _docs("a"))


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
