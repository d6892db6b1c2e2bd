"""Main-text extraction benchmark: resiliparse against trafilatura on the same HTML pages.

The pages: every `.html` file under --pages (default: the Python 3.11 documentation that Debian's
`python3.11-doc` package installs, about 500 Sphinx pages with navigation bars, sidebars and footers
around their text), read once and decoded as UTF-8. Nothing is downloaded at run time.

In one process, one core, each extractor over every page in turn (the same pages, the same order):
  resiliparse   - resiliparse.extract.html2text.extract_plain_text(main_content=True), lmshards' default;
  resiliparse_all - the same with main_content=False (all visible text: the upper bound of text kept);
  trafilatura   - trafilatura.extract(html) with its defaults (tables kept, comments kept);
  trafilatura_precision - trafilatura.extract(html, favor_precision=True).
For each: pages per CPU second (time.process_time, so per core), the characters of text kept, pages that
gave no text, and agreement with trafilatura's defaults: the word-multiset F1 of the two extracts of each
page, averaged over the pages (1.0: the same words, as often).

Environment (never the product's venv): `python3 -m venv /tmp/webbench && /tmp/webbench/bin/pip install
trafilatura==2.3.1 lxml_html_clean resiliparse==2.0.0` (lxml 6 moved the cleaner trafilatura's justext
imports into lxml_html_clean), and `apt-get install python3.11-doc` for the pages.

Usage (from the repository root):
  /tmp/webbench/bin/python -m bench.bench_extract --json bench-extract.json
  /tmp/webbench/bin/python -m bench.bench_extract --limit 50   # quick check
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

DEFAULT_PAGES = Path("/usr/share/doc/python3.11/html")
REFERENCE = "trafilatura"  # agreement is measured against this extractor's output


def extractors() -> dict[str, Callable[[str], str]]:
    """The extractors measured, by name; each takes a page's HTML and returns its text ("" for none)."""
    import trafilatura
    from resiliparse.extract.html2text import extract_plain_text

    return {
        "resiliparse": lambda html: extract_plain_text(html, main_content=True),
        "resiliparse_all": lambda html: extract_plain_text(html, main_content=False),
        "trafilatura": lambda html: trafilatura.extract(html) or "",
        "trafilatura_precision": lambda html: trafilatura.extract(html, favor_precision=True) or "",
    }


def word_f1(a: str, b: str) -> float:
    """The F1 of the word multisets of a and b (1.0 when both are empty)."""
    wa, wb = collections.Counter(a.split()), collections.Counter(b.split())
    if not wa and not wb:
        return 1.0
    common = sum((wa & wb).values())
    if not common:
        return 0.0
    precision, recall = common / sum(wa.values()), common / sum(wb.values())
    return 2 * precision * recall / (precision + recall)


def load_pages(root: Path, limit: int | None) -> list[tuple[str, str]]:
    """(relative path, HTML) of the .html files under root, sorted by path, at most `limit`."""
    paths = sorted(root.rglob("*.html"))[:limit]
    return [(str(p.relative_to(root)), p.read_text("utf-8", errors="replace")) for p in paths]


def measure(pages: list[tuple[str, str]]) -> dict[str, dict[str, float]]:
    """Per extractor: pages per CPU second, characters kept, empty pages and agreement with REFERENCE."""
    outputs: dict[str, list[str]] = {}
    results: dict[str, dict[str, float]] = {}
    for name, extract in extractors().items():
        start = time.process_time()
        outputs[name] = [extract(html) for _, html in pages]
        cpu_s = time.process_time() - start
        results[name] = {
            "pages": len(pages),
            "cpu_s": round(cpu_s, 3),
            "pages_per_cpu_s": round(len(pages) / cpu_s, 1),
            "chars_kept": sum(len(text) for text in outputs[name]),
            "empty_pages": sum(not text.strip() for text in outputs[name]),
        }
    for name, texts in outputs.items():
        f1 = [word_f1(t, r) for t, r in zip(texts, outputs[REFERENCE])]
        results[name]["word_f1_vs_" + REFERENCE] = round(sum(f1) / len(f1), 3)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=Path, default=DEFAULT_PAGES, help="a folder of .html pages")
    parser.add_argument("--limit", type=int, default=None, help="measure the first N pages only")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    pages = load_pages(args.pages, args.limit)
    if not pages:
        print(
            f"--pages {args.pages}: no .html files; apt-get install python3.11-doc, or pass a folder of pages."
        )
        return 2
    total_mb = sum(len(html.encode("utf-8")) for _, html in pages) / 1e6
    print(
        f"{len(pages)} pages, {total_mb:.1f} MB of HTML, from {args.pages}; {os.cpu_count()} cores, one used"
    )
    results = measure(pages)
    print(
        f"{'extractor':24} {'pages/CPU s':>12} {'chars kept':>12} {'empty':>6} {'word F1 vs ' + REFERENCE:>26}"
    )
    for name, r in results.items():
        print(
            f"{name:24} {r['pages_per_cpu_s']:>12,.1f} {r['chars_kept']:>12,} {r['empty_pages']:>6} "
            f"{r['word_f1_vs_' + REFERENCE]:>26.3f}"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"pages": str(args.pages), "results": results}, indent=2) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
