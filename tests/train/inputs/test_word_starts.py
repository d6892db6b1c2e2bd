"""Word-start tables: each tokenizer family's markers, CJK, punctuation, whitespace, added tokens, and
agreement with the tokenizer's own pre-tokenizer on the bundled sample."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from lmshards.plumbing.errors import TokenizerError
from lmshards.train.inputs.word_starts import WordStartTables, word_start_tables

BYTE_LEVEL = pre_tokenizers.ByteLevel(add_prefix_space=False)


def flags(tok: Tokenizer, tokens: list[str]) -> dict[str, tuple[bool, bool]]:
    """token -> (starts, next_starts) from the tables of tok."""
    tables = word_start_tables(tok.to_str())
    assert len(tables.starts) == len(tables.next_starts) == tok.get_vocab_size()
    return {
        t: (bool(tables.starts[tok.token_to_id(t)]), bool(tables.next_starts[tok.token_to_id(t)]))
        for t in tokens
    }


def byte_level(text: str) -> str:
    """The byte-level spelling of text, as GPT-2/RoBERTa vocabularies store it."""
    return "".join(piece for piece, _ in BYTE_LEVEL.pre_tokenize_str(text))


def test_byte_level_bpe():
    cjk = byte_level("中")  # 'ä¸Ń': three bytes
    tokens = [
        "Ġhello",
        "hello",
        "Ġ",
        "ĠĠ",
        "Ċ",
        ",",
        "Ġ(",
        "'t",
        cjk,
        cjk[:2],
        cjk[2],
        "Ġ" + cjk,
        "xä¸Ń",
    ]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(["<s>", *tokens])}, merges=[]))
    tok.pre_tokenizer, tok.decoder = BYTE_LEVEL, decoders.ByteLevel()
    tok.add_special_tokens(["<s>"])
    assert (
        flags(tok, ["<s>", *tokens])
        == {
            "<s>": (True, True),  # added tokens are words of their own
            "Ġhello": (True, False),  # space marker: starts a word
            "hello": (
                False,
                False,
            ),  # continues one (or follows a newline / punctuation: see next_starts)
            "Ġ": (True, False),  # a bare marker begins the word its next piece spells
            "ĠĠ": (True, True),  # a run of spaces is a word
            "Ċ": (True, True),  # so is a newline
            ",": (True, True),  # punctuation-only: own word
            "Ġ(": (True, True),
            "'t": (False, False),  # a contraction stays with its word
            cjk: (True, True),  # a CJK character is a word
            cjk[:2]: (True, False),  # its lead bytes start it
            cjk[2]: (False, False),  # its last byte continues it
            "Ġ" + cjk: (True, True),
            "xä¸Ń": (False, True),  # ends with a CJK character
        }
    )


def test_metaspace_unigram_with_byte_fallback():
    pieces = [
        "<unk>",
        "<s>",
        "▁the",
        "the",
        "▁",
        "中",
        "中文",
        "▁(",
        "。",
        "<0xE9>",
        "<0xBD>",
        "<0x2C>",
        "n't",
    ]
    tok = Tokenizer(models.Unigram([(p, -1.0) for p in pieces], unk_id=0, byte_fallback=True))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    tok.add_special_tokens(["<unk>", "<s>"])
    assert flags(tok, pieces) == {
        "<unk>": (True, True),
        "<s>": (True, True),
        "▁the": (True, False),
        "the": (False, False),
        "▁": (True, False),  # bare marker before a piece without one, e.g. '▁' '中'
        "中": (True, True),
        "中文": (True, True),
        "▁(": (True, True),
        "。": (True, True),
        "<0xE9>": (
            True,
            False,
        ),  # lead byte of a CJK character the vocabulary lacks (U+9000..U+9FFF)
        "<0xBD>": (False, False),  # continuation byte
        "<0x2C>": (True, True),  # ','
        "n't": (False, False),
    }


def test_custom_metaspace_replacement_and_llama_style_replace_decoder():
    pieces = ["<unk>", "_the", "the", "▁the"]
    tok = Tokenizer(models.Unigram([(p, -1.0) for p in pieces], unk_id=0))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="_")
    tok.add_special_tokens(["<unk>"])
    assert flags(tok, pieces[1:]) == {
        "_the": (True, False),
        "the": (False, False),
        "▁the": (False, False),
    }

    llama = Tokenizer(
        models.BPE(vocab={"<unk>": 0, "▁the": 1, "the": 2}, merges=[], byte_fallback=True)
    )
    llama.normalizer = normalizers.Sequence(
        [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]
    )
    llama.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    assert flags(llama, ["▁the", "the"]) == {"▁the": (True, False), "the": (False, False)}


def test_wordpiece():
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "play",
        "##ing",
        "中",
        "##中",
        ".",
        "##.",
        "##",
    ]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.BertPreTokenizer(), decoders.WordPiece()
    tok.add_special_tokens(vocab[:5])
    assert flags(tok, vocab) == {
        **{t: (True, True) for t in vocab[:5]},
        "play": (True, False),
        "##ing": (False, False),
        "中": (True, True),
        "##中": (True, True),  # every CJK character is a word
        ".": (True, True),
        "##.": (True, True),
        "##": (False, False),
    }


def test_word_level_tokens_are_all_words():
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1, "cat": 2}, unk_token="[UNK]"))
    tables = word_start_tables(tok.to_str())
    assert tables.starts.all() and tables.next_starts.all() and len(tables.starts) == 3


def test_holes_in_the_ids_are_words_of_their_own():
    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 5}, unk_token="[UNK]"))
    tables = word_start_tables(tok.to_str())
    assert len(tables.starts) == 6
    assert tables.starts[2:5].all() and tables.next_starts[2:5].all() and not tables.starts[5]


def test_errors_name_the_problem():
    bpe = Tokenizer(models.BPE(vocab={"a": 0}, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(
        TokenizerError,
        match=r"BPE tokenizer with pre-tokenizer/decoder \['Whitespace'\].*--masking token",
    ):
        word_start_tables(bpe.to_str())
    with pytest.raises(TokenizerError, match="not valid JSON"):
        word_start_tables("{")
    with pytest.raises(TokenizerError, match="no model vocabulary"):
        word_start_tables(json.dumps({"model": {"type": "BPE"}}))


# Agreement with the tokenizer's own pre-tokenizer on real text. Encoding.word_ids gives each
# token's pre-token; a pre-token boundary that our tables do not mark as a word start would let
# whole-word masking select part of what the tokenizer itself calls a word.


def sequence_starts(tables: WordStartTables, ids: list[int]) -> np.ndarray:
    """Word starts along one encoded line, as masking computes them (the first position always starts one)."""
    ids = np.asarray(ids)
    after = np.concatenate([[True], tables.next_starts[ids[:-1]]])
    return tables.starts[ids] | after


def pretoken_starts(word_ids: list[int | None]) -> np.ndarray:
    return np.array([i == 0 or w != word_ids[i - 1] for i, w in enumerate(word_ids)])


@pytest.fixture(scope="module")
def sample_lines(sample_files) -> list[str]:
    lines = itertools.chain.from_iterable(
        f.read_text(encoding="utf-8").splitlines() for f in sample_files
    )
    return [line for line in lines if line.strip()][::4]


def test_wordpiece_words_are_the_bert_pre_tokenizer_words(sample_lines):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.BertPreTokenizer(), decoders.WordPiece()
    tok.train_from_iterator(
        sample_lines,
        trainers.WordPieceTrainer(
            vocab_size=3000,
            special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
            show_progress=False,
        ),
    )
    tables, compared = word_start_tables(tok.to_str()), 0
    for enc in tok.encode_batch(sample_lines, add_special_tokens=False):
        if enc.ids:
            np.testing.assert_array_equal(
                sequence_starts(tables, enc.ids), pretoken_starts(enc.word_ids)
            )
            compared += len(enc.ids)
    assert compared > 100_000


def test_metaspace_words_never_cross_a_space(sample_lines):
    tok = Tokenizer(models.Unigram())
    tok.normalizer, tok.pre_tokenizer = normalizers.NFKC(), pre_tokenizers.Metaspace()
    zh_light = [line for i, line in enumerate(sample_lines) if i % 4 == 0 or line.isascii()]
    tok.train_from_iterator(
        zh_light[::4],
        trainers.UnigramTrainer(
            vocab_size=3000, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False
        ),
    )
    tables, boundaries = word_start_tables(tok.to_str()), 0
    for enc in tok.encode_batch(sample_lines[::4], add_special_tokens=False):
        if enc.ids:
            pre = pretoken_starts(enc.word_ids)
            assert sequence_starts(tables, enc.ids)[pre].all()
            boundaries += pre.sum()
    assert boundaries > 10_000


def test_byte_level_words_cross_pre_tokens_only_at_contractions_digits_and_symbols(
    sample_tokenizer, sample_lines
):
    """GPT-2's pre-tokenizer also splits `don|'t`, `abc|123`, `€|5` and characters cut into byte pieces the
    tables cannot classify; each stays one word, masked together."""
    tok = Tokenizer.from_file(str(sample_tokenizer))
    tables, boundaries, crossed = word_start_tables(tok.to_str()), 0, []
    for line, enc in zip(sample_lines, tok.encode_batch(sample_lines, add_special_tokens=False)):
        if not enc.ids:
            continue
        pre = pretoken_starts(enc.word_ids)
        missed = pre & ~sequence_starts(tables, enc.ids)
        boundaries += pre.sum()
        crossed += [
            (
                line[enc.offsets[i - 1][0] : enc.offsets[i - 1][1]],
                line[enc.offsets[i][0] : enc.offsets[i][1]],
            )
            for i in np.flatnonzero(missed)
        ]
    assert boundaries > 100_000
    for before, after in crossed:  # never between two letters, except a contraction
        letters = before[-1:].isalpha() and after[:1].isalpha()
        assert not letters or after[:1] in "'’", (before, after)
    assert len(crossed) < 0.01 * boundaries
