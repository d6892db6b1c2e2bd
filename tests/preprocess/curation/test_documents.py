"""The document steps on the default runner (lmshards/preprocess/curation/documents.py): the same kept
texts, audit bytes and manifest section as the staged Beam stage (stage.py's CurateDocuments)."""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path

import apache_beam as beam
import pytest

from lmshards.plumbing.progress import PROGRESS_EVERY_S
from lmshards.preprocess.curation.dedup import MinHashSettings
from lmshards.preprocess.curation.documents import DocumentCuration
from lmshards.preprocess.curation.stage import CurateDocuments, CurationSettings
from lmshards.preprocess.curation.steps import select_steps
from lmshards.preprocess.sources import ReadOptions, ReadStats
from lmshards.preprocess.stages.read import ReadProgress, plan_sized_ranges
from lmshards.preprocess.transforms.read import ReadDocuments
from lmshards.schemas.constants import CURATION_DIR_NAME
from lmshards.schemas.manifest import funnel_problems
from tests.helpers.curation_steps import registered

# Empty lines count as records (the audit names them) but give no document.
LINES = ["a b c", "", "x", "mail@host is here", "one two", "", "p q r s", "z", "u@v w x"]


def _dump(element, directory: str) -> None:
    """Keeps a Beam output as a pickle file (what a step returns does not come back otherwise)."""
    (Path(directory) / uuid.uuid4().hex).write_bytes(pickle.dumps(element))


def _dumped(directory: Path) -> list:
    return [pickle.loads(p.read_bytes()) for p in directory.iterdir()]


def _settings(steps) -> CurationSettings:
    return CurationSettings(
        dedup="none",
        minhash=MinHashSettings(ngram=5, bands=2, rows=2, min_words=0),
        decontaminate_ngram=13,
        eval_sets=None,
        batch_size=2,
        range_bytes=16,
        steps=steps,
    )


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    registered(monkeypatch)
    path = tmp_path / "in.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    steps = select_steps(quality=("short",), values={"mask": "at"}, switches={})
    return str(path), steps


def test_judged_in_process_as_the_staged_stage_judges(corpus, tmp_path):
    path, steps = corpus
    options = ReadOptions()
    _, ranges = plan_sized_ranges([path], options, range_bytes=16)
    assert len(ranges) > 2  # the numbering crosses ranges
    local = DocumentCuration(
        steps, output=str(tmp_path / "local"), directory=str(tmp_path / "spill")
    )
    progress = ReadProgress(1, PROGRESS_EVERY_S)
    kept = [
        text
        for sized in ranges
        for batch in local.read_range(
            sized, options, batch_size=2, stats=ReadStats(), progress=progress
        )
        for text in batch
    ]
    info = local.finish()
    assert kept == ["a b c", "mail<at>host is here", "p q r s", "u<at>v w x"]
    (audit,) = info.audit
    lines = (tmp_path / "local" / audit["path"]).read_text().splitlines()
    assert [line.split('"index": ')[1].split(",")[0] for line in lines] == ["2", "4", "7"]
    assert '"detail": "words 1 < 3"' in lines[0] and '"step": "short"' in lines[0]
    assert info.removed["short:too_few_words"] == {"documents": 3, "bytes": 9}
    short, mask = info.steps
    assert (short["documents_in"], short["documents_out"], mask["documents_out"]) == (7, 4, 4)
    assert mask["counts"] == {"at": 2} and mask["bytes_out"] == mask["bytes_in"] + 6
    assert info.version == 2  # a document step ran: releases reading only 1 refuse it
    assert funnel_problems(info, written=4) == []
    assert funnel_problems(info, written=5) != []

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    with beam.Pipeline() as p:
        read = p | ReadDocuments([path], options, range_bytes=16, batch_size=2, numbered=True)
        out = read | CurateDocuments(_settings(steps), str(tmp_path / "beam"))
        out.info | "Info" >> beam.Map(_dump, str(dumps))
        out.batches | "Kept" >> beam.Map(_dump, str(dumps))
    outputs = _dumped(dumps)
    beam_info = next(x for x in outputs if not isinstance(x, list))
    assert sorted(t for x in outputs if isinstance(x, list) for t in x) == sorted(kept)
    assert beam_info == info
    assert (tmp_path / "beam" / audit["path"]).read_bytes() == (
        tmp_path / "local" / audit["path"]
    ).read_bytes()
    assert audit["path"].startswith(CURATION_DIR_NAME + "/")


def test_ranges_of_a_file_out_of_order_are_refused(corpus, tmp_path):
    path, steps = corpus
    _, ranges = plan_sized_ranges([path], ReadOptions(), range_bytes=16)
    local = DocumentCuration(steps, output=str(tmp_path / "o"), directory=str(tmp_path / "s"))
    with pytest.raises(ValueError, match="out of its file's order"):
        list(
            local.read_range(
                ranges[1],
                ReadOptions(),
                batch_size=2,
                stats=ReadStats(),
                progress=ReadProgress(1, PROGRESS_EVERY_S),
            )
        )
