"""Keep-order keys and audit lines (lmshards/preprocess/curation/records.py)."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest

from lmshards.preprocess.curation.records import (
    CurationDoc,
    Removal,
    node_key,
    removal_from_line,
)


def test_audit_lines_round_trip_with_sorted_keys():
    removal = Removal("a.txt", 4, "near", 12, kept=("a.txt", 1))
    line = removal.audit_line()
    assert line == (
        '{"bytes": 12, "index": 4, "kept": {"index": 1, "source": "a.txt"}, '
        '"reason": "near", "source": "a.txt"}'
    )
    assert removal_from_line(line) == removal
    with pytest.raises(ValueError):
        removal_from_line(json.dumps({"source": "a", "index": 0, "reason": "odd", "bytes": 1}))


def test_an_audit_line_names_the_url_only_where_the_record_has_one():
    removal = Removal("c.warc.gz", 3, "exact", 9, kept=("c.warc.gz", 1), url="http://b.example/")
    line = removal.audit_line()
    without = dataclasses.replace(removal, url=None).audit_line()
    assert line == without[:-1] + ', "url": "http://b.example/"}'  # sorted: "url" comes last
    assert removal_from_line(line) == removal
    assert removal_from_line(without).url is None


def test_every_pair_of_exact_copies_has_equal_keys():
    texts = ["x  y", "x y", " x\ny "]
    keys = [node_key(CurationDoc("f", i, t, i))[1] for i, t in enumerate(texts)]
    assert all(a == b for a, b in itertools.combinations(keys, 2))
