"""The demo's results: demo_summary.json, the summary it prints last, and report.html (`lmshards report`'s page
of the run with the demo's own scores beside the trainer's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lmshards.command.demo_scoring import (
    EVAL_MASK_PROBABILITY,
    EVAL_MASK_SEED,
    RATIO_TARGET,
    Scores,
)
from lmshards.command.demo_steps import CORPUS_GLOB, FILL_MASK_PROMPT, TOKENIZER_MODEL, DemoConfig
from lmshards.command.report import Reference, masking_description, read_run, render_report
from lmshards.command.report import write_report as write_page
from lmshards.plumbing import bounded
from lmshards.plumbing.units import format_duration
from lmshards.schemas.layouts import DEMO_SUMMARY_JSON, RUN_SUMMARY_JSON
from lmshards.schemas.manifest import read_manifest

SUMMARY_JSON = DEMO_SUMMARY_JSON
MIN_WORD_LENGTH = 2
WORD_MARKERS = "Ġ▁"  # byte-level BPE and SentencePiece word-start markers


def is_real_word(token_str: str) -> bool:
    """Alphabetic and at least MIN_WORD_LENGTH long once whitespace and the word-start marker are stripped."""
    word = token_str.strip().lstrip(WORD_MARKERS)
    return word.isalpha() and len(word) >= MIN_WORD_LENGTH


def trainer_eval(run_dir: Path) -> dict[str, float]:
    """The trainer's own last evaluation (loss, accuracy) from run_summary.json.

    Its masks differ from the demo's: --mlm_probability of the tokens, of which 10% stay unchanged and 10%
    become random tokens, so its accuracy counts copied tokens too and is higher.
    """
    summary = bounded.read_json(str(run_dir / RUN_SUMMARY_JSON), what="run summary")
    return {"loss": summary["eval_loss"], "accuracy": summary["eval_accuracy"]}


def summary_dict(
    cfg: DemoConfig,
    scores: Scores,
    top_k: list[str],
    timings: dict[str, float],
    trainer: dict[str, float],
) -> dict[str, Any]:
    """What demo_summary.json holds: the scores, the fill-mask check, the settings and the time of every step."""
    return {
        "eval_loss": scores.eval_loss,
        "eval_accuracy": scores.eval_accuracy,
        "baseline_accuracy": scores.baseline_accuracy,
        "baseline_token": scores.baseline_token,
        "baseline_token_id": scores.baseline_token_id,
        "accuracy_ratio": scores.ratio,
        "ratio_target": RATIO_TARGET,
        "ratio_target_met": scores.target_met,
        "masked_tokens": scores.masked_tokens,
        "validation_records": scores.validation_records,
        "eval_mask": {"probability": EVAL_MASK_PROBABILITY, "seed": EVAL_MASK_SEED},
        "trainer_eval": trainer,
        "fill_mask": {
            "prompt": FILL_MASK_PROMPT,
            "top_k": top_k,
            "real_words": [t for t in top_k if is_real_word(t)],
        },
        "settings": {
            **{k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
            "corpus": CORPUS_GLOB,
            "tokenizer_model": TOKENIZER_MODEL,
        },
        "seconds": timings,
        "total_seconds": sum(timings.values()),
    }


def real_word_line(top_k: Sequence[str]) -> str:
    """Whether fill-mask's top candidates hold a real word, and which."""
    words = [t for t in top_k if is_real_word(t)]
    found = f"yes: {', '.join(map(repr, words))}" if words else "NO"
    return f"fill-mask top {len(top_k)} holds a real word: {found}"


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The final summary, one figure per line."""
    verdict = "met" if summary["ratio_target_met"] else "NOT met"
    return [
        f"  eval loss          {summary['eval_loss']:.3f} nats ({summary['masked_tokens']:,} masked validation tokens)",
        f"  eval accuracy      {summary['eval_accuracy']:.3f}",
        f"  baseline accuracy  {summary['baseline_accuracy']:.3f} (always {summary['baseline_token']!r}, "
        "the most frequent train token)",
        f"  ratio              {summary['accuracy_ratio']:.2f}x the baseline: target >= {summary['ratio_target']:g}x "
        f"{verdict}",
        f"  {real_word_line(summary['fill_mask']['top_k'])}",
        f"  total time         {summary['total_seconds']:.0f} s",
    ]


def write_report(cfg: DemoConfig, summary: dict[str, Any]) -> Path:
    """report.html: `lmshards report`'s page of the run, with the demo's own scores and what each was measured on."""
    out = cfg.output
    data = read_run(str(out / "run"))
    demo_masks = (
        f"demo's masks: {EVAL_MASK_PROBABILITY:.0%} of the validation tokens, seed {EVAL_MASK_SEED}, "
        f"every one replaced by the mask token; {summary['masked_tokens']:,} tokens"
    )
    trainer_masks = f"trainer's masks: {masking_description(data.run_config)}"
    facts = {
        "corpus": CORPUS_GLOB,
        "records (train / validation)": " / ".join(
            f"{s.records:,}" for s in read_manifest(str(out / "shards")).splits.values()
        ),
        "model": f"{cfg.model_preset}, {cfg.steps} steps of {cfg.per_replica_batch} x {cfg.seq_len} tokens, "
        f"peak learning rate {cfg.learning_rate:g}, {cfg.mlm_probability:.0%} of tokens predicted",
        "eval loss (demo)": f"{summary['eval_loss']:.3f} nats, exported model ({demo_masks})",
        "eval accuracy (demo)": f"{summary['eval_accuracy']:.3f}, exported model ({demo_masks})",
        "baseline accuracy": f"{summary['baseline_accuracy']:.3f}: always {summary['baseline_token']!r}, the "
        f"most frequent train token ({demo_masks})",
        "accuracy ratio": f"{summary['accuracy_ratio']:.2f}x the baseline, both on the demo's masks "
        f"(target >= {summary['ratio_target']:g}x: {'met' if summary['ratio_target_met'] else 'not met'})",
        "eval loss / accuracy (trainer)": f"{summary['trainer_eval']['loss']:.3f} nats / "
        f"{summary['trainer_eval']['accuracy']:.3f} ({trainer_masks}); higher than the demo's accuracy "
        "because a token left unchanged is easy to predict",
        "fill-mask": f"{summary['fill_mask']['prompt']} -> {', '.join(map(repr, summary['fill_mask']['top_k']))}",
        **{f"time: {k}": format_duration(v) for k, v in summary["seconds"].items()},
    }
    references = [
        Reference("exported model", summary["eval_accuracy"], "demo's masks"),
        Reference(
            f"always {summary['baseline_token']!r}", summary["baseline_accuracy"], "demo's masks"
        ),
    ]
    notes = [
        "Two accuracies, two masks: the curve is the trainer's evaluation "
        f"({trainer_masks}); the dashed lines are the demo's scoring ({demo_masks}).",
    ]
    page = render_report(
        data, title="lmshards demo", facts=facts, references=references, notes=notes
    )
    return Path(write_page(page, str(out / "report.html")))
