"""Judging documents through the steps and counting the funnel (lmshards/preprocess/curation/judging.py),
with small steps registered by the test (the product ships none of them)."""

from __future__ import annotations

import pytest

from lmshards.preprocess.curation.judging import (
    JUDGE_GROUP,
    JUDGE_GROUP_CHARS,
    BuiltStep,
    StepFunnel,
    build_document_steps,
    judge_documents,
    judge_groups,
    sum_funnels,
)
from lmshards.preprocess.curation.records import CurationDoc, Removal
from lmshards.preprocess.curation.steps import Judgement, select_steps
from tests.helpers.curation_steps import registered


def _docs(*texts: str) -> list[CurationDoc]:
    return [CurationDoc("in.txt", i, text, 10 + i) for i, text in enumerate(texts)]


@pytest.fixture(autouse=True)
def _steps(monkeypatch):
    registered(monkeypatch)


def test_judging_removes_audits_changes_and_counts_exactly():
    selected = select_steps(quality=("short",), values={"mask": "at", "min_words": 2}, switches={})
    built = build_document_steps(selected)
    judged = judge_documents(built, _docs("a@b c", "one", "x y@z@", "é"))
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
    built = build_document_steps(select_steps(quality=("short",), values={}, switches={}))
    texts = ["a b c", "a", "a b c d", "b", "c d e"]
    whole = judge_documents(built, _docs(*texts)).funnel
    parts = StepFunnel()
    for i in range(len(texts)):
        parts += judge_documents(built, _docs(*texts)[i : i + 1]).funnel
    assert parts == whole
    assert whole.steps["short"].documents_out == 3


def test_a_batch_of_many_groups_is_judged_as_its_documents_one_by_one():
    selected = select_steps(quality=("short",), values={"mask": "at", "min_words": 2}, switches={})
    built = build_document_steps(selected)
    texts = [
        ("a@b c", "one", "x y@z@ w", "é", "p q")[i % 5] + f" {i}" * (i % 3) for i in range(150)
    ]
    docs = _docs(*texts)
    assert len(docs) > 4 * JUDGE_GROUP
    whole = judge_documents(built, docs)
    alone = [judge_documents(built, [doc]) for doc in docs]
    assert whole.kept == [doc for one in alone for doc in one.kept]  # in order
    assert sorted(whole.removals, key=lambda r: r.index) == [
        r for one in alone for r in one.removals
    ]
    assert whole.funnel == sum_funnels(one.funnel for one in alone)
    assert 0 < len(whole.removals) < len(docs)


def test_judge_groups_end_at_their_documents_or_characters_and_keep_the_order():
    short, long = "x" * 10, "y" * (JUDGE_GROUP_CHARS // 2 + 1)
    docs = _docs(*([short] * (JUDGE_GROUP + 5) + [long, long, long, "z" * (2 * JUDGE_GROUP_CHARS)]))
    groups = list(judge_groups(docs))
    assert [doc for group in groups for doc in group] == list(docs)
    assert [len(group) for group in groups] == [JUDGE_GROUP, 6, 1, 1, 1]  # 5 short and a long fit
    assert all(
        len(group) == 1 or sum(len(doc.text) for doc in group) <= JUDGE_GROUP_CHARS
        for group in groups
    )


def test_a_step_giving_an_undeclared_reason_is_a_bug_named():
    class Bad:
        def judge(self, texts):
            return [Judgement(None, "odd") for _ in texts]

    step = BuiltStep("bad", ("fine",), Bad())
    with pytest.raises(ValueError, match="gave reason 'odd'"):
        judge_documents([step], _docs("a"))
