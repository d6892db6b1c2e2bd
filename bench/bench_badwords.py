"""What C4's bad-words rule costs: lmshards' matcher against C4's own regular expression.

Both sides judge the same pages with the same list: the page lowercased, a listed entry flanked by
non-word characters or the page's ends (C4's code, tensorflow_datasets c4_utils; datatrove's
C4BadWordsFilter). The reference is that expression, one alternation of every entry; lmshards looks
the page's words up in a dict of the entries' leading words. The bench checks that both remove the
same pages, then reports each side's CPU seconds (median of --repeats, alternating) and their ratio.

The list is --list (one entry a line, e.g. LDNOOBW's en) or, without it, a made-up one of --singles
words and --phrases phrases of 2-4 words built from the pages' own words with a word no page holds
appended (so that no page is removed and every page is read to its end: the dearest case).

Usage (from the repository root, with the venv active):
  python -m bench.bench_badwords --docs docs.jsonl [--list en] [--limit 3000]
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import re
import statistics
import time
from collections.abc import Callable, Sequence

from lmshards.preprocess.curation.steps.c4_badwords import WordMatcher, parse_word_list

NO_PAGE_HOLDS = "qzxqzx"


def read_pages(path: str, limit: int) -> list[str]:
    """The first `limit` pages of a JSON Lines file ({"text": ...}) or a text file (a page a line)."""
    pages: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if len(pages) == limit:
                break
            text = json.loads(line)["text"] if path.endswith(".jsonl") else line
            if text.strip():
                pages.append(text)
    return pages


def made_up_list(pages: Sequence[str], singles: int, phrases: int, seed: int = 1) -> list[str]:
    """Entries no page holds whose leading words are the pages' own (so lmshards compares each)."""
    counts = collections.Counter(w for p in pages[:300] for w in re.findall(r"\w+", p.lower()))
    vocabulary = [w for w, _ in counts.most_common(8000)]
    rng = random.Random(seed)
    words = [f"{rng.choice(vocabulary)}{NO_PAGE_HOLDS}" for _ in range(singles)]
    for _ in range(phrases):
        words.append(" ".join([*rng.sample(vocabulary, rng.randint(1, 3)), NO_PAGE_HOLDS]))
    return sorted(set(words))


def c4_expression(words: Sequence[str]) -> Callable[[str], bool]:
    """C4's code's test: whether the lowercased page holds a listed entry between non-word characters."""
    pattern = re.compile(r"(?:\W|^)({})(?:\W|$)".format("|".join(map(re.escape, words))))
    return lambda page: pattern.search(page.lower()) is not None


def cpu_seconds(judge: Callable[[str], bool], pages: Sequence[str]) -> tuple[float, list[bool]]:
    start = time.process_time()
    verdicts = [judge(page) for page in pages]
    return time.process_time() - start, verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--docs", required=True, help="JSON Lines ({'text': ...}) or text, a page a line"
    )
    parser.add_argument(
        "--list", default=None, help="a word list, one entry a line (default: made up)"
    )
    parser.add_argument("--limit", type=int, default=3000, help="pages read")
    parser.add_argument("--singles", type=int, default=400, help="made-up list: single words")
    parser.add_argument("--phrases", type=int, default=600, help="made-up list: phrases")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side, alternating")
    args = parser.parse_args()

    pages = read_pages(args.docs, args.limit)
    if args.list:
        with open(args.list, "rb") as f:
            words = list(parse_word_list(f.read(), args.list))
    else:
        words = made_up_list(pages, args.singles, args.phrases)
    matcher = WordMatcher(words, anywhere=False)
    sides = {
        "lmshards": lambda page: matcher.first(page) is not None,
        "c4_expression": c4_expression(words),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    verdicts: dict[str, list[bool]] = {}
    for _ in range(args.repeats):
        for name, judge in sides.items():
            seconds, verdicts[name] = cpu_seconds(judge, pages)
            times[name].append(seconds)
    if verdicts["lmshards"] != verdicts["c4_expression"]:
        differ = sum(a != b for a, b in zip(verdicts["lmshards"], verdicts["c4_expression"]))
        raise SystemExit(f"the two sides disagree on {differ} pages: a bug in the matcher")
    megabytes = sum(len(p.encode("utf-8")) for p in pages) / 1e6
    print(
        f"{len(pages)} pages, {megabytes:.1f} MB, {len(words)} entries, {sum(verdicts['lmshards'])} removed"
    )
    for name, runs in times.items():
        median = statistics.median(runs)
        print(f"  {name:14s} {median:7.2f} CPU s  {megabytes / median:7.1f} MB per CPU s")
    ratio = statistics.median(times["c4_expression"]) / statistics.median(times["lmshards"])
    print(f"  lmshards is {ratio:.1f}x faster than C4's expression")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
