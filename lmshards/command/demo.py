"""`lmshards demo`: the whole story on the English part of the bundled sample corpus, one step per subprocess.

tokenizer train -> preprocess -> train -> export -> fill-mask, then the exported model is scored on masked
validation tokens beside the accuracy of always predicting the most frequent token, and everything lands in
report.html and demo_summary.json. Each step runs as its own `python -m lmshards ...` process, exactly as a
user would type it, so Beam and TensorFlow never share a process and every command line is printed for copying.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from lmshards.command.demo_report import (
    SUMMARY_JSON,
    is_real_word,
    real_word_line,
    summary_dict,
    summary_lines,
    trainer_eval,
    write_report,
)
from lmshards.command.demo_scoring import score
from lmshards.command.demo_steps import (
    DemoConfig,
    fill_mask_step,
    prepare_output,
    run_step,
    steps_for,
)
from lmshards.plumbing import fs, stopping
from lmshards.plumbing.cli import CommandParser, add_verbose_flag, one_line_errors, setup_logging
from lmshards.plumbing.flag_types import whole
from lmshards.plumbing.quiet import hide_third_party_progress_bars
from lmshards.schemas.constants import MIN_SEQ_LEN
from lmshards.train.config import TRAIN_RANGES

COMMAND = "demo"


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


def main(argv: Sequence[str]) -> int:
    cfg = parse_args(argv)
    setup_logging(verbose=cfg.verbose, packages=("lmshards",))
    if not cfg.verbose:
        hide_third_party_progress_bars()  # the demo scores the exported model in this process
    with one_line_errors(COMMAND) as failed, stopping.stop_signals():
        return _run(cfg)
    return failed.code


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
