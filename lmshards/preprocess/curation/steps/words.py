"""The word splitting and character sets the quality filters share.

Words: `split_words` follows the English tokenizer the reference implementation (datatrove) uses,
spaCy's, closely enough that the filters' verdicts agree on over 99% of documents (docs/benchmarks.md)
at a tenth of its cost: the text is split at whitespace; from each piece, opening punctuation is split
off its start and closing punctuation off its end, one mark a word ("..." is one), and the clitics
"n't 's 're 've 'll 'd 'm" off its end; inside it, '-', ':', '=', '/' and dashes between a letter or
digit and a letter, and '-', '+' between digits, are words of their own. Everything else stays whole:
"U.S", "3.14", "/etc", "--verify", URLs, and any piece over MAX_PIECE characters. A symbol word (only
punctuation, `is_symbol`) is left out of the counts the rules say are of words.

Languages without spaces between words (Chinese, Japanese, Thai, ...) have no word boundaries here: a
run of them between spaces is one long word, so a document of them has few words of great mean length, and the
Gopher rules remove it. The published thresholds are for English (Gopher and C4 kept English only;
FineWeb's rules were tuned on English): select such languages out first (the language step), or leave
the word-based filters off for them.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Sequence

_PREFIX = r"[(\[{<>\"'“‘`*#_&=%§+—–,:;!?]"
_SUFFIX = r"(?:\.\.+|[()\[\]{}<>\"'”’.,;:!?`*#_&%—–])"
_CLITIC = r"(?:n['’]t|['’](?:s|re|ve|ll|d|m))"
# Between a letter or digit and a letter, or a digit and a digit.
_INFIX = r"(?:(?<=[^\W_])[-–—~:<>=/](?=[^\W\d_])|(?<=\d)[-+*^](?=\d))"
_END = rf"(?={_CLITIC}?{_SUFFIX}*+$)"  # only closing punctuation left in the piece
# The words of one whitespace-free piece of text.
_PIECE = re.compile(
    rf"{_CLITIC}{_END}|{_SUFFIX}{_END}|{_INFIX}|https?://\S+?{_END}|{_PREFIX}|\S+?(?:{_END}|(?={_INFIX}))|{_SUFFIX}",
    re.IGNORECASE,
)

# The punctuation set of datatrove's utils/text.py (PUNCTUATION_SET): a word made only of these is a
# symbol, not a word (Gopher's word count and mean word length leave symbols out).
PUNCTUATION = frozenset(
    "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18"
    "\x19\x1a\x1b\x1c\x1d\x1e\x1f!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\x7f\x80\x81\x82\x83\x84\x85"
    "\x86\x87\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f\x90\x91\x92\x93\x94\x95\x96\x97\x98\x99\x9a\x9b"
    "\x9c\x9d\x9e\x9f\xab\xb4\xbb\u2013\u2014\u2019\u201c\u201d\u201e\u2026\u2236\u2501\u25ba"
    "\u3001\u3002\u3008\u3009\u300a\u300b\u300c\u300d\u3010\u3011\uff01\uff05\uff08\uff09\uff0c"
    "\uff0e\uff11\uff1a\uff1b\uff1f\uff5e"
)

# Unicode's sentence terminals (the Sentence_Terminal property, as datatrove's TERMINAL_PUNCTUATION
# lists them): FineWeb's "line ends in punctuation" rule accepts any of them.
TERMINAL_PUNCTUATION = tuple(
    "!.?\u0589\u061d\u061e\u061f\u06d4\u0700\u0701\u0702\u07f9\u0837\u0839\u083d\u083e\u0964"
    "\u0965\u104a\u104b\u1362\u1367\u1368\u166e\u1735\u1736\u17d4\u17d5\u17d6\u17d9\u17da\u1803"
    "\u1809\u1944\u1945\u1aa8\u1aa9\u1aaa\u1aab\u1b5a\u1b5b\u1b5e\u1b5f\u1b7d\u1b7e\u1c3b\u1c3c"
    "\u1c7e\u1c7f\u203c\u203d\u2047\u2048\u2049\u2e2e\u2e3c\u2e53\u2e54\u3002\ua4ff\ua60e\ua60f"
    "\ua6f3\ua6f7\ua876\ua877\ua8ce\ua8cf\ua92f\ua9c8\ua9c9\uaa5d\uaa5e\uaa5f\uaaf0\uaaf1\uabeb"
    "\ufe52\ufe56\ufe57\uff01\uff0e\uff1f\uff61\U00010a56\U00010a57\U00010f55\U00010f56\U00010f57"
    "\U00010f58\U00010f59\U00010f86\U00010f87\U00010f88\U00010f89\U00011047\U00011048\U000110be"
    "\U000110bf\U000110c0\U000110c1\U00011141\U00011142\U00011143\U000111c5\U000111c6\U000111cd"
    "\U000111de\U000111df\U00011238\U00011239\U0001123b\U0001123c\U000112a9\U0001144b\U0001144c"
    "\U000115c2\U000115c3\U000115c9\U000115ca\U000115cb\U000115cc\U000115cd\U000115ce\U000115cf"
    "\U000115d0\U000115d1\U000115d2\U000115d3\U000115d4\U000115d5\U000115d6\U000115d7\U00011641"
    "\U00011642\U0001173c\U0001173d\U0001173e\U00011944\U00011946\U00011a42\U00011a43\U00011a9b"
    "\U00011a9c\U00011c41\U00011c42\U00011ef7\U00011ef8\U00011f43\U00011f44\U00016a6e\U00016a6f"
    "\U00016af5\U00016b37\U00016b38\U00016b44\U00016e98\U0001bc9f\U0001da88"
)
SYMBOLS = "".join(sorted(PUNCTUATION | frozenset(TERMINAL_PUNCTUATION)))
# A longer piece is one word: the expression's cost grows with the square of a piece's length (a run of
# closing marks is scanned again from each place in it), and real words and URLs are shorter.
MAX_PIECE = 200
# A piece that is a word and one of these: two words, without the regular expression.
_ONE_SUFFIX = ".,;:!?)\"'"


# Characters of the texts whose words words_of keeps (about 13 bytes of words a character: ~26 MB):
# more than judging.JUDGE_GROUP_CHARS, the texts every step judges in turn, so each step after the
# first finds them split. A longer text is split by each step that asks (a book's words would be
# hundreds of MB).
WORDS_KEPT_CHARS = 2 << 20


class _KeptWords:
    """The words of the last texts split, up to WORDS_KEPT_CHARS characters of them (oldest out first).

    Shared by the threads of a process (a Dataflow SDK process runs several): a lock guards the table,
    and the splitting runs outside it.
    """

    def __init__(self, max_chars: int) -> None:
        self._max_chars = max_chars
        self._words: dict[str, tuple[str, ...]] = {}  # in order of insertion
        self._chars = 0
        self._lock = threading.Lock()

    def words(self, text: str) -> tuple[str, ...]:
        with self._lock:
            words = self._words.get(text)
        if words is not None:
            return words
        words = tuple(split_words(text))
        if len(text) <= self._max_chars:
            with self._lock:
                self._keep(text, words)
        return words

    def _keep(self, text: str, words: tuple[str, ...]) -> None:
        if text in self._words:  # another thread split it meanwhile
            return
        while self._chars + len(text) > self._max_chars:
            oldest = next(iter(self._words))
            del self._words[oldest]
            self._chars -= len(oldest)
        self._words[text] = words
        self._chars += len(text)


_KEPT = _KeptWords(WORDS_KEPT_CHARS)


def words_of(text: str) -> tuple[str, ...]:
    """split_words(text), kept for the last WORDS_KEPT_CHARS characters of texts: three steps split
    the same document."""
    return _KEPT.words(text)


def split_words(text: str) -> list[str]:
    """The words of text, in order (see the module's docstring for what a word is)."""
    words: list[str] = []
    for piece in text.split():
        if piece.isalnum() or len(piece) > MAX_PIECE:  # most pieces: one word, without the regex
            words.append(piece)
        elif piece[-1] in _ONE_SUFFIX and piece[:-1].isalnum():
            words += (piece[:-1], piece[-1])
        else:
            words += _PIECE.findall(piece)
    return words


def is_symbol(word: str) -> bool:
    """Whether word is made only of punctuation (datatrove's set and the sentence terminals)."""
    return not word.strip(SYMBOLS)


def count_content_words(words: Sequence[str]) -> int:
    """How many of words are not symbols (is_symbol), counted without a Python call per word: most
    documents a filter removes are short, and there this count is most of their cost."""
    return len(words) - list(map(str.strip, words, itertools.repeat(SYMBOLS))).count("")


def has_letter(word: str) -> bool:
    """Whether word holds at least one alphabetic character (str.isalpha, as datatrove)."""
    return any(map(str.isalpha, word))
