"""Documents longer than a block: a text file of documents of a chosen number of blocks each."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
ENGLISH = sorted((REPO / "data" / "sample" / "en").glob("*.txt"))


def long_documents(
    tokenizer_path: str | Path, *, seq_len: int, blocks: Iterable[int], seed: int = 0
) -> list[str]:
    """One document of English sample text per count in `blocks`, of k blocks and 2 to seq_len - 2
    tokens more (special tokens included): k + 1 pieces, whatever one token more or less at the cut."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    text = " ".join(" ".join(p.read_text(encoding="utf-8").split()) for p in ENGLISH)
    encoding = tokenizer.encode(text, add_special_tokens=False)
    specials = len(tokenizer.encode("", add_special_tokens=True).ids)
    rng = np.random.default_rng(seed)
    documents = []
    for k in blocks:
        tokens = k * seq_len + int(rng.integers(2, seq_len - 1)) - specials
        first = int(rng.integers(0, len(encoding.ids) - tokens))
        start, end = encoding.offsets[first][0], encoding.offsets[first + tokens][0]
        if end <= start:
            raise ValueError(f"the sample text is too short for a document of {k} blocks")
        documents.append(text[start:end].strip())
    return documents


def write_long_documents(path: Path, tokenizer_path: str | Path, *, seq_len: int) -> Path:
    """A text file (one document a line) of documents of 3 to 40 blocks of seq_len tokens."""
    path.write_text(
        "\n".join(long_documents(tokenizer_path, seq_len=seq_len, blocks=range(3, 41))) + "\n",
        encoding="utf-8",
    )
    return path
