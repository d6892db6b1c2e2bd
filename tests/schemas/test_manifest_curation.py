"""The manifest's curation section (lmshards/schemas/manifest.py): the funnel of version 2 read back as
written, version 1 sets read as before, and a version this release does not know refused."""

from __future__ import annotations

import dataclasses
import json

import pytest

from lmshards.plumbing.errors import ManifestError
from lmshards.schemas.manifest import CurationInfo, curation_from_dict

ROW = {
    "name": "language",
    "options": {"languages": "en", "language_threshold": 0.65},
    "documents_in": 10,
    "bytes_in": 500,
    "documents_out": 6,
    "bytes_out": 300,
    "removed": {"language": {"documents": 4, "bytes": 200}},
    "counts": {"de": 4, "en": 6},
}
V1 = CurationInfo(
    dedup="exact",
    options={},
    documents_in=10,
    bytes_in=500,
    removed={"exact": {"documents": 1, "bytes": 50}},
    clusters=1,
    eval_files=(),
    audit=({"path": "curation/removed-a-000000.jsonl", "lines": 1},),
)


def _dict(info: CurationInfo) -> dict:
    data = dataclasses.asdict(info)
    if not data["steps"]:  # as Manifest.to_dict writes it
        del data["steps"]
    return json.loads(json.dumps(data))


def test_the_funnel_reads_back_as_written():
    v2 = dataclasses.replace(
        V1,
        dedup="none",
        removed={"language:language": {"documents": 4, "bytes": 200}},
        steps=(ROW,),
        version=2,
    )
    assert curation_from_dict(_dict(v2)) == v2


def test_a_set_without_the_funnel_reads_as_before_and_an_unknown_version_is_refused():
    assert "steps" not in _dict(V1)
    assert curation_from_dict(_dict(V1)) == V1
    with pytest.raises(ManifestError, match="curation version 3 is not supported"):
        curation_from_dict({**_dict(V1), "version": 3})
