"""How curation numbers documents and records across read ranges (lmshards/preprocess/curation/stage.py)."""

from __future__ import annotations

from lmshards.preprocess.stages.read import RangeCount, range_offsets


def test_documents_and_records_are_numbered_in_file_order_across_ranges():
    counts = [RangeCount("b", 1, 4, 6), RangeCount("a", 0, 3, 3), RangeCount("b", 0, 2, 5)]
    assert range_offsets(counts) == {("a", 0): (0, 0), ("b", 0): (0, 0), ("b", 1): (2, 5)}
