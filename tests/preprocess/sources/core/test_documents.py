"""Document assembly shared by every format: UTF-8 block boundaries and long-document splitting."""

from __future__ import annotations

import random

from lmshards.preprocess.sources.core import documents


def testutf8_boundary_keeps_decoding_identical():
    rng = random.Random(0)
    alphabet = [
        b"a",
        b"\n",
        "\u00e9".encode(),
        "\u20ac".encode(),
        "\U0001f642".encode(),
        b"\x80",
        b"\xbf",
        b"\xc3",
        b"\xe2\x82",
        b"\xf0\x9f",
        b"\xff",
        b"\xed\xa0\x80",
    ]
    for _ in range(300):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        whole = data.decode("utf-8", errors="replace")
        for pos in range(len(data) + 1):
            cut = documents.utf8_boundary(data, pos)
            assert pos - 3 <= cut <= pos
            assert (
                data[:cut].decode("utf-8", "replace") + data[cut:].decode("utf-8", "replace")
                == whole
            )


def test_split_long_prefers_whitespace_and_loses_nothing():
    text = "word " * 30 + "x" * 50
    pieces, rest = documents._split_long(text, 16)
    assert "".join(pieces) + rest == text
    assert all(len(p) <= 16 for p in pieces + [rest])
    assert pieces[0] == "word word word "
    assert "x" * 16 in pieces  # no whitespace: a hard cut at the limit
