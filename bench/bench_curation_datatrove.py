"""Quality filters and PII against datatrove: the same documents, the same thresholds, per step.

For each step (gopher_quality, gopher_repetition, c4_quality, fineweb_quality, pii) both sides judge
every document (each step on all of them, not only on what an earlier step kept), with the published
defaults on both sides:
  (a) lmshards - the step's own build() under this Python, batches of 256 documents;
  (b) datatrove - reference_datatrove_filters.py under --datatrove_python: each filter's filter(doc),
      the PII formatter's format(text) with lmshards' placeholders.
It reports per step the share of documents given the same verdict (filters: keep or remove; PII: the
same output text), the disagreements grouped by class (which side removes, and for what reason), and
documents per CPU second on each side (one process each, run one after the other in one invocation).

With --cost it also times whole `lmshards preprocess` runs of the same documents (a JSON Lines file,
--seq_len 128) in child processes, a b b a: plain, and with `--languages en --quality_filters` the
four filters, and reports the CPU seconds of each and their ratio.

The documents are made from the benchmark corpus (its en/*.txt, see bench/README.md, or any folder of
.txt files): from each file, --per_source runs of consecutive lines at
evenly spaced places, 5 to 250 lines long (in turn), plus --web synthetic web pages: a few lines of
navigation, paragraphs of the corpus's prose, and, at fixed rates, a cookie notice, a copyright line,
e-mail and IPv4 addresses (public and private), "lorem ipsum", "javascript", a curly bracket and
repeated lines, drawn with a fixed seed. Deterministic: the same corpus gives the same documents.

datatrove's environment: `python3 -m venv /tmp/dt-venv && /tmp/dt-venv/bin/pip install datatrove==0.10.1
spacy` (spaCy is its English word tokenizer); never the product's environment.

Usage:
  python -m bench.bench_curation_datatrove --corpus /tmp/benchcorpus/en \
      --datatrove_python /tmp/dt-venv/bin/python --cost --json bench-curation-datatrove.json
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmshards.preprocess.curation.steps import (
    c4_quality,
    fineweb_quality,
    gopher_quality,
    gopher_repetition,
    pii,
)
from lmshards.preprocess.curation.steps.base import DocumentStep, Step

BENCH_DIR = Path(__file__).resolve().parent
REFERENCE = BENCH_DIR / "reference_datatrove_filters.py"
FILTERS = (gopher_quality.STEP, gopher_repetition.STEP, c4_quality.STEP, fineweb_quality.STEP)
RUN_LINES = (5, 15, 40, 100, 250)  # lines per corpus document, in turn
BATCH = 256
SEED = 20240601

NAVIGATION = ("Home", "About us", "Contact", "Login | Register", "Blog", "Search", "Menu", "Shop")
EXTRAS = (  # (rate, line): what web pages carry that documentation does not
    (0.3, "This website uses cookies to improve your experience. See our Privacy Policy."),
    (0.4, "Copyright © 2024 Example Media Ltd. All rights reserved."),
    (0.25, "Write to {email} for questions about your order."),
    (0.15, "Our mirror at {public_ip} and the office gateway at {private_ip} are up again."),
    (0.05, "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor."),
    (0.1, "Please enable JavaScript in your browser to see the comments below."),
    (0.05, "The function body is {{ return x; }} and nothing more."),
)


def corpus_documents(corpus: Path, per_source: int) -> list[str]:
    """per_source runs of consecutive lines from each .txt file of corpus (sorted), evenly spaced."""
    docs = []
    for path in sorted(corpus.glob("*.txt")):
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
        step = max(len(lines) // per_source, 1)
        for k, start in enumerate(range(0, len(lines), step)):
            if k == per_source:
                break
            text = "\n".join(lines[start : start + RUN_LINES[k % len(RUN_LINES)]]).strip()
            if text:
                docs.append(text)
    return docs


def web_pages(paragraphs: Sequence[str], count: int, seed: int) -> list[str]:
    """count synthetic web pages: navigation, corpus prose and the EXTRAS lines at their rates."""
    rng = random.Random(seed)
    pages = []
    for _ in range(count):
        values = {
            "email": f"{rng.choice(('jane.doe', 'info', 'k_smith'))}@{rng.choice(('mail.example.net', 'shop.co.uk'))}",
            "public_ip": f"{rng.randint(11, 99)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
            "private_ip": f"192.168.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
        }
        parts = rng.sample(NAVIGATION, rng.randint(0, 5))
        parts += rng.sample(list(paragraphs), rng.randint(1, 6))
        for rate, line in EXTRAS:
            if rng.random() < rate:
                parts.insert(rng.randrange(len(parts) + 1), line.format(**values))
        if rng.random() < 0.1:  # a block repeated, as templated pages do
            parts += parts[-2:]
        text = "\n".join(parts)
        pages.append(text)
    return pages


def prose_paragraphs(docs: Sequence[str]) -> list[str]:
    """Lines of 80 characters or more that end a sentence: the prose a web page is made of here."""
    return [
        line
        for doc in docs
        for line in doc.split("\n")
        if len(line) >= 80 and line.rstrip().endswith((".", "!", "?"))
    ]


def built(step: Step, options: dict[str, Any]) -> DocumentStep:
    if step.build is None:
        raise ValueError(f"{step.name} is not a document step")
    return step.build(options)


def default_options(step: Step) -> dict[str, Any]:
    return {flag.field: flag.default for flag in step.flags}


def run_lmshards(texts: Sequence[str]) -> dict[str, tuple[float, list[str]]]:
    """step -> (CPU seconds, verdicts: "" kept or the reason; PII: the text it wrote)."""
    steps = {step.name: built(step, default_options(step)) for step in FILTERS}
    steps["pii"] = built(pii.STEP, {"pii": "email,ip"})
    results = {}
    for name, step in steps.items():
        verdicts = []
        start = time.process_time()
        for i in range(0, len(texts), BATCH):
            for judgement in step.judge(texts[i : i + BATCH]):
                if name == "pii":
                    verdicts.append(judgement.text or "")
                else:
                    verdicts.append("" if judgement.text is not None else judgement.reason)
        results[name] = (time.process_time() - start, verdicts)
    return results


def run_datatrove(
    python: str, docs_path: Path, out_path: Path
) -> dict[str, tuple[float, list[str]]]:
    subprocess.run(
        [
            python,
            str(REFERENCE),
            str(docs_path),
            str(out_path),
            pii.EMAIL_PLACEHOLDER,
            pii.IP_PLACEHOLDER,
        ],
        check=True,
    )
    results = {}
    with open(out_path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            results[row["step"]] = (row["cpu_s"], row["verdicts"])
    return results


def preprocess_cost(
    docs_path: Path, *, lmshards: str, tokenizer: str, work: Path
) -> dict[str, Any]:
    """CPU seconds (children's user + system) of plain and filtered `lmshards preprocess` runs, a b b a."""
    curated = ["--languages", "en", "--quality_filters", ",".join(step.name for step in FILTERS)]
    runs: dict[str, list[float]] = {"plain": [], "language + quality filters": []}
    for name in ("plain", "language + quality filters", "language + quality filters", "plain"):
        shutil.rmtree(work / "shards", ignore_errors=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        argv = [lmshards, "preprocess", "--input", str(docs_path), "--tokenizer", tokenizer]
        argv += ["--output", str(work / "shards"), "--seq_len", "128"]
        subprocess.run(argv + (curated if name != "plain" else []), check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        runs[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return {"cpu_s": runs, "ratio": sum(runs["language + quality filters"]) / sum(runs["plain"])}


def disagreements(ours: Sequence[str], theirs: Sequence[str], *, pii_step: bool) -> Counter[str]:
    """Disagreement class -> documents: which side removes, and for which reason."""
    classes: Counter[str] = Counter()
    for a, b in zip(ours, theirs):
        if pii_step:
            if a != b:
                classes["different text"] += 1
        elif bool(a) != bool(b):
            classes[
                f"lmshards {a}, datatrove keeps" if a else f"lmshards keeps, datatrove {b}"
            ] += 1
    return classes


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, required=True, help="a folder of .txt files")
    p.add_argument(
        "--datatrove_python", required=True, help="the Python of datatrove's own environment"
    )
    p.add_argument("--per_source", type=int, default=300, help="documents from each corpus file")
    p.add_argument("--web", type=int, default=1000, help="synthetic web pages")
    p.add_argument("--json", type=Path, help="write the results here too")
    p.add_argument("--cost", action="store_true", help="also time whole preprocess runs, a b b a")
    p.add_argument(
        "--lmshards", default=".venv/bin/lmshards", help="with --cost: the product's command"
    )
    p.add_argument("--tokenizer", default="tests/data/golden/tokenizer.json", help="with --cost")
    p.add_argument(
        "--show", type=int, default=0, help="print this many documents of each disagreement"
    )
    args = p.parse_args(argv)

    docs = corpus_documents(args.corpus, args.per_source)
    docs += web_pages(prose_paragraphs(docs), args.web, SEED)
    total_mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    print(f"{len(docs)} documents, {total_mb:.1f} MB", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        docs_path = Path(tmp) / "docs.jsonl"
        docs_path.write_text(
            "".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8"
        )
        ours = run_lmshards(docs)
        theirs = run_datatrove(args.datatrove_python, docs_path, Path(tmp) / "datatrove.jsonl")
        cost = None
        if args.cost:
            cost = preprocess_cost(
                docs_path, lmshards=args.lmshards, tokenizer=args.tokenizer, work=Path(tmp)
            )

    rows = []
    print(
        "| step | agree | lmshards removes | datatrove removes | lmshards docs/CPU s | datatrove docs/CPU s | speed-up |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in ours:
        (our_s, a), (their_s, b) = ours[name], theirs[name]
        pii_step = name == "pii"
        classes = disagreements(a, b, pii_step=pii_step)
        agree = 1 - sum(classes.values()) / len(docs)
        removed = ("-", "-") if pii_step else (sum(map(bool, a)), sum(map(bool, b)))
        row = {
            "step": name,
            "documents": len(docs),
            "agreement": agree,
            "lmshards_removed": removed[0],
            "datatrove_removed": removed[1],
            "lmshards_cpu_s": our_s,
            "datatrove_cpu_s": their_s,
            "lmshards_docs_per_cpu_s": len(docs) / our_s,
            "datatrove_docs_per_cpu_s": len(docs) / their_s,
            "disagreements": dict(classes.most_common()),
        }
        rows.append(row)
        print(
            f"| {name} | {agree:.2%} | {removed[0]} | {removed[1]} | {row['lmshards_docs_per_cpu_s']:,.0f} "
            f"| {row['datatrove_docs_per_cpu_s']:,.0f} | {their_s / our_s:.1f}x |"
        )
        for cls, n in classes.most_common():
            print(f"    {n} {cls}", file=sys.stderr)
            shown = 0
            for i, (x, y) in enumerate(zip(a, b)):
                if shown < args.show and (x != y if pii_step else bool(x) != bool(y)):
                    label = (
                        f"lmshards {x}, datatrove keeps" if x else f"lmshards keeps, datatrove {y}"
                    )
                    if pii_step or label == cls:
                        print(f"--- doc {i}\n{docs[i][:600]}", file=sys.stderr)
                        shown += 1
    if cost:
        runs = cost["cpu_s"]
        print(
            f"preprocess CPU s, a b b a: plain {runs['plain']}, language + quality filters "
            f"{runs['language + quality filters']}: {cost['ratio']:.2f}x"
        )
    if args.json:
        report = {"documents": len(docs), "mb": total_mb, "steps": rows, "preprocess_cost": cost}
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
