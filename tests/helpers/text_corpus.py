"""Small corpora for the reader's tests, and a direct, unstreamed statement of what reading must give."""

from __future__ import annotations

import codecs
import random
from pathlib import Path

from lmshards.preprocess.sources import (
    ReadOptions,
    ReadStats,
    expand_inputs,
    plan_ranges,
    read_range,
)

BOM = codecs.BOM_UTF8
WS = b" \t\r\n\f\v\x00"  # bytes of a blank line

PIECES = [
    b"alpha",
    b"beta gamma",
    b"",
    b"   ",
    b"\t",
    "h\u00e9llo w\u00f6rld".encode(),
    "\u65e5\u672c\u8a9e".encode(),
    "\U0001f642 ok".encode(),
    b"bad \xff\xfe byte",
    b"cut \xe2\x82",
    b"nul\x00here",
    b"\x00",
    b"mid\rline",
    b"\xef\xbf\xbd literal",
]


def expected_documents(data: bytes, separator: str) -> list[str]:
    """What the reader must yield for a whole text file: a direct, unstreamed statement of the rules."""
    data = data.removeprefix(BOM)
    lines = [line.removesuffix(b"\r") for line in data.split(b"\n")]
    if data.endswith(b"\n"):
        lines.pop()
    if separator == "line":
        raw_docs = lines
    else:
        raw_docs, current = [], []
        for line in lines + [b""]:
            if line.strip(WS):
                current.append(line)
            elif current:
                raw_docs.append(b"\n".join(current))
                current = []
    texts = [d.decode("utf-8", errors="replace").replace("\x00", "") for d in raw_docs]
    return [t for t in texts if t and not t.isspace()]


def random_corpus(
    seed: int, *, lines: int, crlf: bool, bom: bool, final_newline: bool = True
) -> bytes:
    rng = random.Random(seed)
    out = [b" ".join(rng.choice(PIECES) for _ in range(rng.randint(1, 4))) for _ in range(lines)]
    eol = b"\r\n" if crlf else b"\n"
    data = eol.join(out) + (eol if final_newline else b"")
    return (BOM if bom else b"") + data


def read_in_ranges(
    path: Path, options: ReadOptions, range_bytes: int
) -> tuple[list[str], ReadStats]:
    stats = ReadStats()
    files = expand_inputs([str(path)])
    docs = [
        d
        for r in plan_ranges(files, options=options, range_bytes=range_bytes)
        for d in read_range(r, options, stats)
    ]
    return docs, stats


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file below root (hidden ones too) -> its bytes: what must be unchanged after reading."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def write_parquet(path: Path, columns: dict, row_group_size: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), str(path), row_group_size=row_group_size)
    return path
