"""What flows through curation: documents with their identity, removals, and the audit's lines.

A document's identity is (source, index): its input file as listed in the manifest's `inputs`,
and its 0-based number among the documents read from that file (see lmshards.preprocess.stages.read). The audit
names a document by (source, record) instead: the 0-based number of the raw record it came from,
the line of a line-document or JSON Lines file (every line counts, empty and skipped ones too), the
row of a Parquet file, the document of a blank-line or marker file. The pieces of a record split
for --max_document_chars share its record, hence the identity by index.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, NamedTuple

from lmshards.plumbing import bounded
from lmshards.preprocess.curation.steps.decontaminate import CONTAMINATED
from lmshards.preprocess.curation.steps.dedup import EXACT, NEAR
from lmshards.preprocess.curation.text import digest, exact_form

REASONS = (
    CONTAMINATED,
    EXACT,
    NEAR,
)  # the order curation applies them in (the corpus steps' reasons)

DocRef = tuple[str, int]  # (source file, 0-based document index in it), or its record's number


# How a cluster's documents are ordered; its smallest is kept: the longest normalized text first,
# then the smallest digest of it, then (source, index) among exact copies (record last: the
# audit's name of the document, decided by index).
class NodeKey(NamedTuple):
    """A document's place in its cluster's keep order; the fields compare in this order."""

    neg_length: int  # -len(exact_form): the longest normalized text sorts first
    digest: bytes  # of the exact form: equal digests are exact copies
    source: str
    doc_index: int  # its 0-based place in the source (index would shadow tuple.index)
    record: int  # the raw record it came from (what the audit names it by)


def utf8_bytes(text: str) -> int:
    """The UTF-8 size of a document as read (lone surrogates passed through), what curation counts."""
    return len(text.encode("utf-8", "surrogatepass"))


@dataclasses.dataclass(frozen=True)
class CurationDoc:
    source: str
    index: int
    text: str
    record: int  # the raw record it came from (what the audit names it by)
    url: str | None = None  # its record's URL (WARC, JSON Lines --url_field): for the audit only

    @property
    def ref(self) -> DocRef:
        return self.source, self.index

    @property
    def record_ref(self) -> DocRef:
        return self.source, self.record

    def utf8_bytes(self) -> int:
        return utf8_bytes(self.text)


def node_key(doc: CurationDoc) -> NodeKey:
    """The document's place in the keep order (the smallest of a cluster is kept)."""
    form = exact_form(doc.text)
    return NodeKey(-len(form), digest(form), doc.source, doc.index, doc.record)


@dataclasses.dataclass(frozen=True)
class Removal:
    """One removed document (named by its record): why, and which kept document or eval record
    (named by theirs) caused it."""

    source: str
    index: int  # the document's record
    reason: str  # one of REASONS
    bytes: int  # UTF-8 bytes of the document as read
    kept: DocRef | None = None  # exact / near: the document kept in its place
    eval: DocRef | None = None  # contaminated: the eval record it shares an n-gram with
    similarity: float | None = None  # near: estimated Jaccard similarity to the kept document
    # A document step's removal: the step, and the measured value against its threshold
    # ("mean_word_length 2.10 < 3"). Empty for the corpus steps, whose reasons name them.
    step: str = ""
    detail: str = ""
    url: str | None = None  # the removed document's record's URL, where its format has one

    @property
    def key(self) -> str:
        """What the manifest counts this removal under (curation.removed): removed_key."""
        return removed_key(self.step, self.reason)

    def audit_line(self) -> str:
        """The JSON line the audit holds for this removal (sorted keys: the same bytes everywhere)."""
        data: dict[str, Any] = {
            "source": self.source,
            "index": self.index,
            "reason": self.reason,
            "bytes": self.bytes,
        }
        if self.kept is not None:
            data["kept"] = {"source": self.kept[0], "index": self.kept[1]}
        if self.eval is not None:
            data["eval"] = {"source": self.eval[0], "index": self.eval[1]}
        if self.similarity is not None:
            data["similarity"] = self.similarity
        if self.step:  # only where set: the corpus steps' lines keep their bytes
            data["step"] = self.step
            data["detail"] = self.detail
        if self.url is not None:  # only where known: plain inputs' audit lines keep their bytes
            data["url"] = self.url
        return json.dumps(data, sort_keys=True, ensure_ascii=False)


def removal_from_line(line: str) -> Removal:
    """Parses one audit line. Raises ValueError (or KeyError/TypeError) on a malformed one."""
    data = bounded.load_json(line, what="audit line", max_bytes=bounded.MAX_JSON_LINE_BYTES)
    kept, eval_ = data.get("kept"), data.get("eval")
    removal = Removal(
        source=str(data["source"]),
        index=int(data["index"]),
        reason=str(data["reason"]),
        bytes=int(data["bytes"]),
        kept=(str(kept["source"]), int(kept["index"])) if kept else None,
        eval=(str(eval_["source"]), int(eval_["index"])) if eval_ else None,
        similarity=float(data["similarity"]) if "similarity" in data else None,
        step=str(data.get("step", "")),
        detail=str(data.get("detail", "")),
        url=str(data["url"]) if "url" in data else None,
    )
    if not removal.step and removal.reason not in REASONS:
        raise ValueError(f"reason {removal.reason!r} is not one of {list(REASONS)}")
    return removal


def removed_key(step: str, reason: str) -> str:
    """The manifest's key of a removal: the reason of a corpus step (they are unique), "step:reason"
    of a document step (two steps may give the same reason)."""
    return f"{step}:{reason}" if step else reason
