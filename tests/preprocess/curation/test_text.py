"""The normalization and hashing of curation text (lmshards/preprocess/curation/text.py)."""

from __future__ import annotations

from lmshards.preprocess.curation.text import exact_form, ngram_hashes, shingles, word_hashes, words


def test_exact_form_is_nfc_with_whitespace_collapsed():
    composed, decomposed = "caf\u00e9 au lait", "cafe\u0301 au lait"
    assert exact_form(decomposed) == exact_form(composed) == "caf\u00e9 au lait"
    assert exact_form("  a\t\tb \u00a0 c\n") == "a b c"
    assert exact_form("A b") != exact_form("a b")  # case is content for exact duplicates


def test_words_ignore_case_and_punctuation():
    assert words("Hello, WORLD! 42x") == ["hello", "world", "42x"]


def test_ngram_hashes_are_order_sensitive_and_stable():
    h = word_hashes(["a", "b", "c"])
    assert h.tolist() == [3904355907, 1908338681, 112844655]  # CRC-32: the same everywhere
    two = ngram_hashes(h, 2)
    assert len(two) == 2 and two[0] != ngram_hashes(word_hashes(["b", "a"]), 2)[0]
    assert (ngram_hashes(h, 2) < 2**32).all()
    assert len(ngram_hashes(h, 4)) == 0
    assert (ngram_hashes(h, 2, bits=64) >= 2**32).all()  # the full 64 bits for decontamination


def test_short_documents_are_one_shingle_and_wordless_ones_match_only_copies():
    assert len(shingles("just three words", 5)) == 1
    assert shingles("!!!", 5).tolist() == shingles("!!!", 5).tolist()
    assert shingles("!!!", 5).tolist() != shingles("???", 5).tolist()
