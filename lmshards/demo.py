"""`lmshards demo`: the whole story on the English part of the bundled sample corpus, one step per subprocess.

tokenizer train -> preprocess -> train -> export -> fill-mask, then the exported model is scored on masked
validation tokens beside the accuracy of always predicting the most frequent token, and everything lands in
report.html and demo_summary.json. Each step runs as its own `python -m lmshards ...` process, exactly as a
user would type it, so Beam and TensorFlow never share a process and every command line is printed for copying.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lmshards.report import (
    Reference,
    maskable,
    masking_description,
    most_frequent_token,
    read_run,
    render_report,
)
from lmshards.report import (
    write_report as write_page,
)
from plumbing import fs
from plumbing.cli import CommandParser, add_verbose_flag, run_command, setup_logging
from plumbing.errors import LmshardsError, OutputError
from plumbing.flag_types import whole
from plumbing.quiet import PROGRESS_ENVIRONMENT, hide_third_party_progress_bars
from plumbing.units import format_duration
from schemas.constants import (
    ATTENTION_MASK,
    FEATURE_NAMES,
    INPUT_IDS,
    MIN_SEQ_LEN,
    TRAIN_SPLIT,
    VALIDATION_SPLIT,
)
from schemas.layouts import RUN_SUMMARY_JSON
from schemas.manifest import Manifest, read_manifest
from schemas.records import decode_examples, read_records
from train.config import TRAIN_RANGES

REPO_ROOT = Path(__file__).resolve().parents[1]
# English only: one domain (Austen novels, a software manual, speeches) that a tiny model learns within minutes.
CORPUS_GLOB = str(REPO_ROOT / "data" / "sample" / "en" / "*.txt")
# A sentence in the style of Pride and Prejudice, one of the corpus's books, that fits in one record; a model that
# learned from its neighbours fills in a name (Darcy, Bennet, ...), one that did not fills in punctuation.
FILL_MASK_PROMPT = "Elizabeth smiled at Mr. <mask>."
MARKER = ".lmshards_demo"
SUMMARY_JSON = "demo_summary.json"
COMMAND = "demo"

# Byte-level BPE trains in seconds where Unigram takes minutes on this corpus.
TOKENIZER_MODEL = "bpe"
# The books are hard-wrapped: one document per line would shuffle line fragments, one per paragraph keeps them whole.
DOC_SEPARATOR = "blank_line"
VALIDATION_FRACTION = 0.02
NUM_SHARDS = 8
EVALUATIONS = 3  # periodic evaluations during training, the last one at the final step

# The demo's own evaluation: one fixed draw of positions, each replaced by the mask token, as fill-mask sees it.
EVAL_MASK_PROBABILITY = 0.15
EVAL_MASK_SEED = 0
EVAL_BATCH = 32
IGNORE_LABEL = -100
RATIO_TARGET = 2.0  # the model must beat always-the-most-frequent-token by this factor
TOP_K = 5
MIN_WORD_LENGTH = 2
WORD_MARKERS = "Ġ▁"  # byte-level BPE and SentencePiece word-start markers


@dataclass(frozen=True)
class DemoConfig:
    output: Path
    steps: int
    vocab_size: int
    model_preset: str
    per_replica_batch: int
    learning_rate: float
    mlm_probability: float
    seq_len: int
    verbose: bool = False


@dataclass(frozen=True)
class Step:
    title: str
    argv: list[str]  # after `lmshards`
    capture: bool = False  # keep stdout for the demo to read instead of echoing it


@dataclass(frozen=True)
class MaskedSet:
    """Validation records with some positions replaced by the mask id: int64 [records, seq_len] each."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    labels: np.ndarray  # the original id at each masked position, IGNORE_LABEL elsewhere

    @property
    def masked(self) -> np.ndarray:
        return self.labels != IGNORE_LABEL


@dataclass(frozen=True)
class Scores:
    """The exported model and the most-frequent-token baseline on the same masked validation tokens."""

    eval_loss: float  # mean cross-entropy, nats
    eval_accuracy: float
    baseline_accuracy: float
    baseline_token_id: int
    baseline_token: str
    masked_tokens: int
    validation_records: int

    @property
    def ratio(self) -> float:
        return (
            self.eval_accuracy / self.baseline_accuracy if self.baseline_accuracy else float("inf")
        )

    @property
    def target_met(self) -> bool:
        return self.ratio >= RATIO_TARGET


# The demo trains the tiny preset, which takes at most 512 tokens.
SEQ_LEN = whole(MIN_SEQ_LEN, 512)
VOCAB_SIZE = whole(1, 1 << 24)


def build_parser() -> CommandParser:
    p = CommandParser(COMMAND, description=__doc__.splitlines()[0])
    p.add_argument(
        "--output",
        default="demo_output",
        help="directory for every artifact; a re-run replaces only a directory an earlier demo made",
    )
    p.add_argument("--steps", type=TRAIN_RANGES["steps"], default=1500, help="training steps")
    p.add_argument("--vocab_size", type=VOCAB_SIZE, default=4000, help="tokenizer vocabulary")
    p.add_argument(
        "--model_preset",
        default="tiny",
        choices=("tiny", "small", "base"),
        help="tiny fits the whole demo in minutes on a laptop CPU",
    )
    p.add_argument(
        "--per_replica_batch",
        type=TRAIN_RANGES["per_replica_batch"],
        default=128,
        help="sequences per step",
    )
    p.add_argument(
        "--learning_rate",
        type=TRAIN_RANGES["learning_rate"],
        default=4e-3,
        help="peak learning rate (a tiny model takes a high one)",
    )
    p.add_argument(
        "--mlm_probability",
        type=TRAIN_RANGES["mlm_probability"],
        default=0.3,
        help="share of tokens the model learns to predict; more than BERT's 0.15 learns more per step",
    )
    p.add_argument(
        "--seq_len",
        type=SEQ_LEN,
        default=16,
        help="tokens per record; short records let a tiny model learn from its neighbours within minutes",
    )
    add_verbose_flag(p)
    return p


def parse_args(argv: Sequence[str]) -> DemoConfig:
    p = build_parser()
    a = p.parse_args(list(argv))
    return DemoConfig(
        output=Path(a.output).resolve(),
        steps=a.steps,
        vocab_size=a.vocab_size,
        model_preset=a.model_preset,
        per_replica_batch=a.per_replica_batch,
        learning_rate=a.learning_rate,
        mlm_probability=a.mlm_probability,
        seq_len=a.seq_len,
        verbose=a.verbose,
    )


def prepare_output(output: Path) -> None:
    """Creates the demo directory; re-runs wipe only a directory this demo made (it holds MARKER).

    Raises:
      OutputError: output is a file, or a non-empty directory without MARKER.
    """
    if fs.check_output_dir(str(output), overwrite=True):
        if not (output / MARKER).exists():
            raise OutputError(
                f"--output {str(output)!r} is not empty and was not made by `lmshards demo`; "
                "pass an empty or new directory."
            )
        shutil.rmtree(output)
    output.mkdir(parents=True, exist_ok=True)
    (output / MARKER).write_text("made by lmshards demo; safe to delete\n")


def steps_for(cfg: DemoConfig) -> list[Step]:
    """The subprocess steps from text to an exported model, in order."""
    out = cfg.output
    every = str(max(cfg.steps // EVALUATIONS, 1))
    return [
        Step(
            "Train a tokenizer",
            [
                "tokenizer",
                "train",
                "--input",
                CORPUS_GLOB,
                "--doc_separator",
                DOC_SEPARATOR,
                "--model",
                TOKENIZER_MODEL,
                "--vocab_size",
                str(cfg.vocab_size),
                "--special_tokens",
                "roberta",
                "--output",
                str(out / "tokenizer"),
            ],
        ),
        Step(
            "Preprocess into shards",
            [
                "preprocess",
                "--input",
                CORPUS_GLOB,
                "--doc_separator",
                DOC_SEPARATOR,
                "--tokenizer",
                str(out / "tokenizer"),
                "--output",
                str(out / "shards"),
                "--seq_len",
                str(cfg.seq_len),
                "--validation_fraction",
                str(VALIDATION_FRACTION),
                "--num_shards",
                str(NUM_SHARDS),
            ],
        ),
        Step("Verify the shards", ["inspect", str(out / "shards"), "--verify"]),
        Step(
            "Train a masked LM",
            [
                "train",
                "--shards",
                str(out / "shards"),
                "--output",
                str(out / "run"),
                "--tokenizer",
                str(out / "tokenizer"),
                "--model_preset",
                cfg.model_preset,
                "--steps",
                str(cfg.steps),
                "--per_replica_batch",
                str(cfg.per_replica_batch),
                "--learning_rate",
                str(cfg.learning_rate),
                "--mlm_probability",
                str(cfg.mlm_probability),
                "--eval_every",
                every,
                "--checkpoint_every",
                every,
            ],
        ),
        Step(
            "Export to Hugging Face",
            ["export", str(out / "run"), "--output", str(out / "hf_model")],
        ),
    ]


def fill_mask_step(out: Path) -> Step:
    """The prompt's top-TOP_K fillings, as JSON for the demo to check."""
    return Step(
        "Fill the mask",
        ["fill-mask", str(out / "hf_model"), FILL_MASK_PROMPT, "--top_k", str(TOP_K), "--json"],
        capture=True,
    )


def run_step(step: Step, log_dir: Path) -> tuple[float, str]:
    """Runs `python -m lmshards ARGV`: (seconds, its stdout if step.capture, else "").

    Output goes to log_dir and, unless captured, to the console as it comes.

    Raises:
      LmshardsError: the step exited non-zero.
    """
    print(f"\n=== {step.title}\n$ {shlex.join(['lmshards', *step.argv])}", flush=True)
    start = time.monotonic()
    command = [sys.executable, "-m", "lmshards", *step.argv]
    env = {**os.environ, **PROGRESS_ENVIRONMENT, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log_path = log_dir / f"{step.argv[0]}.log"
    captured = b""
    with open(log_path, "ab") as log:
        if (
            step.capture
        ):  # stdout is data for the demo to read; stderr (progress bars) only goes to the log
            done = subprocess.run(
                command, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=log
            )
            rc, captured = done.returncode, done.stdout
            log.write(captured)
        else:
            proc = subprocess.Popen(
                command, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            assert proc.stdout is not None, "stdout=PIPE"
            for line in proc.stdout:
                log.write(line)
                sys.stdout.write(line.decode("utf-8", "replace"))
            rc = proc.wait()
    if rc != 0:
        raise LmshardsError(
            f"step {step.title!r} failed with exit code {rc}; its full output is in {log_path}."
        )
    return time.monotonic() - start, captured.decode("utf-8")


# ---------------------------------------------------------------- scoring against the baseline


def read_split(manifest: Manifest, shards_dir: Path, split: str) -> dict[str, np.ndarray]:
    """{INPUT_IDS, ATTENTION_MASK: int64 [records, seq_len]} of a split, in manifest order (no TensorFlow)."""
    records: list[bytes] = []
    for path in manifest.shard_paths(str(shards_dir), split):
        with open(path, "rb") as f:
            records.extend(read_records(f))
    return decode_examples(records, FEATURE_NAMES)


def mask_records(
    records: dict[str, np.ndarray],
    *,
    special_ids: Sequence[int],
    mask_id: int,
    probability: float,
    seed: int,
) -> MaskedSet:
    """Each maskable token is masked with `probability`, from a fixed seed: the same set on every run."""
    ids, attention = records[INPUT_IDS], records[ATTENTION_MASK]
    rng = np.random.default_rng(seed)
    chosen = (rng.random(ids.shape) < probability) & maskable(ids, attention, special_ids)
    return MaskedSet(
        input_ids=np.where(chosen, mask_id, ids),
        attention_mask=attention,
        labels=np.where(chosen, ids, IGNORE_LABEL),
    )


def baseline_accuracy(masked: MaskedSet, token_id: int) -> float:
    """Accuracy of predicting token_id at every masked position."""
    return float(np.mean(masked.labels[masked.masked] == token_id))


def score_export(model_dir: Path, masked: MaskedSet) -> tuple[float, float]:
    """(mean cross-entropy in nats, accuracy) of an exported transformers model at the masked positions."""
    import torch
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(str(model_dir)).eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(masked.labels), EVAL_BATCH):
            rows = slice(start, start + EVAL_BATCH)
            logits = model(
                input_ids=torch.from_numpy(masked.input_ids[rows]),
                attention_mask=torch.from_numpy(masked.attention_mask[rows]),
            ).logits
            where = torch.from_numpy(masked.masked[rows])
            picked, labels = logits[where].float(), torch.from_numpy(masked.labels[rows])[where]
            loss_sum += float(torch.nn.functional.cross_entropy(picked, labels, reduction="sum"))
            correct += int((picked.argmax(-1) == labels).sum())
    count = int(masked.masked.sum())
    return loss_sum / count, correct / count


def score(out: Path) -> Scores:
    """The exported model and the most-frequent-train-token baseline on one seeded masking of the validation split."""
    from transformers import AutoTokenizer

    manifest = read_manifest(str(out / "shards"))
    tokenizer = manifest.tokenizer
    special = list(tokenizer.never_masked_ids)
    train = read_split(manifest, out / "shards", TRAIN_SPLIT)
    top = most_frequent_token(train[INPUT_IDS], train[ATTENTION_MASK], special)
    validation = read_split(manifest, out / "shards", VALIDATION_SPLIT)
    masked = mask_records(
        validation,
        special_ids=special,
        mask_id=tokenizer.special_token_ids["mask"],
        probability=EVAL_MASK_PROBABILITY,
        seed=EVAL_MASK_SEED,
    )
    if not masked.masked.any():
        raise LmshardsError(
            f"The validation split in {out / 'shards'} has no token to mask; use a larger corpus."
        )
    loss, accuracy = score_export(out / "hf_model", masked)
    top_text = str(AutoTokenizer.from_pretrained(str(out / "hf_model")).decode([top]))
    return Scores(
        eval_loss=loss,
        eval_accuracy=accuracy,
        baseline_accuracy=baseline_accuracy(masked, top),
        baseline_token_id=top,
        baseline_token=top_text,
        masked_tokens=int(masked.masked.sum()),
        validation_records=len(masked.labels),
    )


def is_real_word(token_str: str) -> bool:
    """Alphabetic and at least MIN_WORD_LENGTH long once whitespace and the word-start marker are stripped."""
    word = token_str.strip().lstrip(WORD_MARKERS)
    return word.isalpha() and len(word) >= MIN_WORD_LENGTH


# ---------------------------------------------------------------- summary and report


def trainer_eval(run_dir: Path) -> dict[str, float]:
    """The trainer's own last evaluation (loss, accuracy) from run_summary.json.

    Its masks differ from the demo's: --mlm_probability of the tokens, of which 10% stay unchanged and 10%
    become random tokens, so its accuracy counts copied tokens too and is higher.
    """
    summary = json.loads((run_dir / RUN_SUMMARY_JSON).read_text())
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


def main(argv: Sequence[str]) -> int:
    cfg = parse_args(argv)
    setup_logging(verbose=cfg.verbose, packages=("lmshards",))
    if not cfg.verbose:
        hide_third_party_progress_bars()  # the demo scores the exported model in this process
    return run_command(COMMAND, lambda: _run(cfg))


def _run(cfg: DemoConfig) -> int:
    prepare_output(cfg.output)
    out = cfg.output
    log_dir = out / "logs"
    log_dir.mkdir()
    timings = {step.title: run_step(step, log_dir)[0] for step in steps_for(cfg)}
    step = fill_mask_step(out)
    timings[step.title], fill_mask_json = run_step(step, log_dir)
    (predictions,) = json.loads(fill_mask_json)  # the prompt holds one mask
    top_k = [p["token_str"] for p in predictions]
    for p in predictions:
        print(
            f"  {p['score']:.4f}  {p['token_str']!r:<16}{'  real word' if is_real_word(p['token_str']) else ''}"
        )
    print(real_word_line(top_k))

    print("\n=== Score the model against always predicting the most frequent token", flush=True)
    start = time.monotonic()
    scores = score(out)
    timings["Score against the baseline"] = time.monotonic() - start

    summary = summary_dict(cfg, scores, top_k, timings, trainer_eval(out / "run"))
    fs.write_text_atomic(str(out / SUMMARY_JSON), json.dumps(summary, indent=2) + "\n")
    report = write_report(cfg, summary)
    print("\n=== Artifacts")
    for label, path in (
        ("tokenizer", out / "tokenizer"),
        ("shards + manifest", out / "shards"),
        ("training run (checkpoints, TensorBoard, run_summary.json)", out / "run"),
        ("Hugging Face model", out / "hf_model"),
        ("report", report),
        ("summary", out / SUMMARY_JSON),
        ("logs", out / "logs"),
    ):
        print(f"  {label:<58} {path}")
    print("\n=== Summary")
    print("\n".join(summary_lines(summary)))
    return 0
