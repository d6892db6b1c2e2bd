"""The tokenizer ceiling times the call preprocess makes: same method, same special tokens, same ids."""

from __future__ import annotations

from bench import reference_ceiling
from bench.reference_ceiling import FAST, OFFSETS, count_tokens, encode
from lmshards.preprocess.stages.encode import encode_accepted

TEXTS = ["The first document.", "A second, longer document with more words in it."]


class _RecordingTokenizer:
    """Records every encoding call (method name, positional and keyword arguments)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def encode_batch_fast(self, *args, **kwargs) -> list:
        self.calls.append(("encode_batch_fast", args, kwargs))
        return []

    def encode_batch(self, *args, **kwargs) -> list:
        self.calls.append(("encode_batch", args, kwargs))
        return []


def test_the_ceiling_makes_preprocess_tokenizer_call():
    ceiling, preprocess = _RecordingTokenizer(), _RecordingTokenizer()
    encode(ceiling, TEXTS, FAST)
    encode_accepted(preprocess, TEXTS)
    assert ceiling.calls == preprocess.calls
    assert ceiling.calls == [("encode_batch_fast", (TEXTS,), {"add_special_tokens": True})]


def test_the_offsets_line_differs_only_in_the_method():
    tokenizer = _RecordingTokenizer()
    encode(tokenizer, TEXTS, OFFSETS)
    assert tokenizer.calls == [("encode_batch", (TEXTS,), {"add_special_tokens": True})]


def test_both_methods_count_the_ids_preprocess_writes(sample_tokenizer, tmp_path):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(sample_tokenizer))
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join([TEXTS[0], "", "   ", TEXTS[1]]) + "\n", encoding="utf-8")
    ids = [e.ids for e in encode_accepted(tokenizer, TEXTS).encodings]
    assert all(
        i[0] == tokenizer.token_to_id("<s>") and i[-1] == tokenizer.token_to_id("</s>") for i in ids
    )
    expected = (sum(map(len, ids)), sum(len(t.encode()) for t in TEXTS))  # blank lines skipped
    assert count_tokens(tokenizer, [str(corpus)], FAST) == expected
    assert count_tokens(tokenizer, [str(corpus)], OFFSETS) == expected


def test_an_unknown_method_is_a_usage_error(capsys):
    assert reference_ceiling.main(["--method", "slow", "t.json", "f.txt"]) == 2
    assert "--method fast|offsets" in capsys.readouterr().out
