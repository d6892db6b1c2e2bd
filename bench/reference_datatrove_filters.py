"""The reference for bench_curation_datatrove.py: datatrove's quality filters and PII formatter, each
on every document of one JSON Lines file.

Runs under datatrove's own Python (its own virtual environment; it is not a dependency of lmshards).
Each step sees every document (not only those an earlier step kept) with its defaults, the PII
formatter with one placeholder per kind (lmshards' own). Each filter is called directly (doc ->
keep or (False, reason)), so the CPU seconds are the rule's, not datatrove's executor's; a first call
before the clock starts loads spaCy's English tokenizer. Writes one JSON line per step: its name, CPU
seconds, and per document the verdict ("" kept, else the reason; PII: the text it wrote).

Usage: PYTHON reference_datatrove_filters.py DOCS.jsonl OUT.jsonl EMAIL_PLACEHOLDER IP_PLACEHOLDER
"""

from __future__ import annotations

import importlib.metadata  # noqa: F401  (datatrove 0.10.1 uses importlib.metadata without importing it)
import json
import sys
import time

from datatrove.data import Document
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
from datatrove.pipeline.formatters import PIIFormatter


def main(docs_path: str, out_path: str, email: str, ip: str) -> None:
    with open(docs_path, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    filters = {
        "gopher_quality": GopherQualityFilter(),
        "gopher_repetition": GopherRepetitionFilter(),
        "c4_quality": C4QualityFilter(),
        "fineweb_quality": FineWebQualityFilter(),
    }
    pii = PIIFormatter(email_replacement=email, ip_replacement=ip)
    with open(out_path, "w", encoding="utf-8") as out:
        for name, step in filters.items():
            step.filter(Document(text="A warm-up sentence. It loads the tokenizer.", id="warm"))
            verdicts = []
            start = time.process_time()
            for i, text in enumerate(texts):
                verdict = step.filter(Document(text=text, id=str(i)))
                verdicts.append(
                    ""
                    if verdict is True
                    else verdict[1]
                    if isinstance(verdict, tuple)
                    else "removed"
                )
            seconds = time.process_time() - start
            out.write(json.dumps({"step": name, "cpu_s": seconds, "verdicts": verdicts}) + "\n")
        start = time.process_time()
        redacted = [pii.format(text) for text in texts]
        seconds = time.process_time() - start
        out.write(json.dumps({"step": "pii", "cpu_s": seconds, "verdicts": redacted}) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:5])
