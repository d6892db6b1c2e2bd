"""Reading a run's metrics.jsonl (lmshards.schemas.layouts.METRICS_JSONL): what `train` resumes from and `report` draws.

Without TensorFlow: `lmshards report` reads a run with no training stack.
"""

from __future__ import annotations

import logging
from typing import Any

from lmshards.plumbing import bounded, fs

log = logging.getLogger(__name__)


def read_metrics(path: str) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl (local or gs://): one JSON object per line; [] when there is none.

    A damaged file (a line cut short by a crash, or overwritten) keeps every complete record; the
    lines that are not a JSON object with a "step" are left out with a warning naming them.
    """
    if not fs.exists(path):
        return []
    records, damaged = [], []
    text = bounded.read_text(path, what="metrics file", max_bytes=bounded.MAX_JSONL_BYTES)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = bounded.load_json(
                line, what=f"{path}:{number}", max_bytes=bounded.MAX_JSON_LINE_BYTES
            )
        except ValueError:  # not JSON, or over a read limit
            record = None
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            records.append(record)
        else:
            damaged.append(number)
    if damaged:
        log.warning(
            "%s is damaged: line(s) %s are not metrics records and are left out; the other %d records are kept.",
            path,
            ", ".join(map(str, damaged)),
            len(records),
        )
    return records
