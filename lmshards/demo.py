"""`lmshards demo`: the whole story on the bundled sample corpus, one step per subprocess.

tokenizer train -> preprocess -> train -> export -> fill-mask -> report.html. Each step runs as its own
`python -m lmshards ...` process, exactly as a user would type it, so Beam and TensorFlow never share a
process and every command line is printed for copying.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from schemas import fs
from schemas.cli import CommandParser, run_command, setup_logging
from schemas.errors import LmshardsError, OutputError

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_GLOB = str(REPO_ROOT / "data" / "sample" / "*" / "*.txt")
MARKER = ".lmshards_demo"
FILL_MASK_PROMPT = "The capital of France is <mask>."
COMMAND = "demo"


@dataclass(frozen=True)
class DemoConfig:
    output: Path
    steps: int
    vocab_size: int
    model_preset: str
    per_replica_batch: int
    seq_len: int


def build_parser() -> CommandParser:
    p = CommandParser(COMMAND, description=__doc__.splitlines()[0])
    p.add_argument("--output", default="demo_output",
                   help="directory for every artifact; a re-run replaces only a directory an earlier demo made")
    p.add_argument("--steps", type=int, default=300, help="training steps")
    p.add_argument("--vocab_size", type=int, default=8000, help="tokenizer vocabulary")
    p.add_argument("--model_preset", default="tiny", choices=("tiny", "small", "base"),
                   help="tiny fits the whole demo in minutes on a laptop CPU")
    p.add_argument("--per_replica_batch", type=int, default=32, help="sequences per step")
    p.add_argument("--seq_len", type=int, default=128, help="tokens per record")
    return p


def parse_args(argv: Sequence[str]) -> DemoConfig:
    p = build_parser()
    a = p.parse_args(list(argv))
    if a.steps < 1:
        p.error(f"--steps must be >= 1, got {a.steps}")
    return DemoConfig(Path(a.output).resolve(), a.steps, a.vocab_size, a.model_preset, a.per_replica_batch, a.seq_len)


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


def steps_for(cfg: DemoConfig) -> list[tuple[str, list[str]]]:
    """(title, lmshards argv) of every step, in order."""
    out = cfg.output
    return [
        ("Train a tokenizer", ["tokenizer", "train", "--input", SAMPLE_GLOB, "--model", "unigram",
                               "--vocab_size", str(cfg.vocab_size), "--special_tokens", "roberta",
                               "--output", str(out / "tokenizer")]),
        ("Preprocess into shards", ["preprocess", "--input", SAMPLE_GLOB, "--tokenizer", str(out / "tokenizer"),
                                    "--output", str(out / "shards"), "--seq_len", str(cfg.seq_len),
                                    "--validation_fraction", "0.02", "--num_shards", "8"]),
        ("Verify the shards", ["inspect", str(out / "shards"), "--verify"]),
        ("Train a masked LM", ["train", "--shards", str(out / "shards"), "--output", str(out / "run"),
                               "--tokenizer", str(out / "tokenizer"), "--model_preset", cfg.model_preset,
                               "--steps", str(cfg.steps), "--per_replica_batch", str(cfg.per_replica_batch),
                               "--eval_every", str(max(cfg.steps // 3, 1)),
                               "--checkpoint_every", str(max(cfg.steps // 3, 1))]),
        ("Export to Hugging Face", ["export", str(out / "run"), "--output", str(out / "hf_model")]),
        ("Fill the mask", ["fill-mask", str(out / "hf_model"), FILL_MASK_PROMPT]),
    ]


def run_step(title: str, argv: list[str], log_dir: Path) -> float:
    """Runs `python -m lmshards ARGV`, echoing its output; raises LmshardsError on failure."""
    print(f"\n=== {title}\n$ lmshards {' '.join(argv)}", flush=True)
    start = time.monotonic()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    log_path = log_dir / f"{argv[0]}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "lmshards", *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
        for line in proc.stdout:
            log.write(line)
            sys.stdout.write(line.decode("utf-8", "replace"))
        rc = proc.wait()
    if rc != 0:
        raise LmshardsError(f"step {title!r} failed with exit code {rc}; its full output is in {log_path}.")
    return time.monotonic() - start


def write_report(cfg: DemoConfig, timings: dict[str, float]) -> Path:
    from lmshards.report import read_metrics, render_report
    from schemas.manifest import read_manifest

    out = cfg.output
    manifest = read_manifest(str(out / "shards"))
    metrics = read_metrics(str(out / "run" / "metrics.jsonl"))
    facts = {
        "corpus": SAMPLE_GLOB,
        "records (train / validation)": " / ".join(str(s.records) for s in manifest.splits.values()),
        "tokens written": str(sum(s.totals.tokens_written for s in manifest.splits.values())),
        "model": f"{cfg.model_preset}, {cfg.steps} steps",
        **{f"time: {k}": f"{v:.1f} s" for k, v in timings.items()},
    }
    path = out / "report.html"
    path.write_text(render_report(title="lmshards demo", manifest=manifest, metrics=metrics, facts=facts),
                    encoding="utf-8")
    return path


def main(argv: Sequence[str]) -> int:
    cfg = parse_args(argv)
    setup_logging(packages=("lmshards",))
    return run_command(COMMAND, lambda: _run(cfg))


def _run(cfg: DemoConfig) -> int:
    prepare_output(cfg.output)
    log_dir = cfg.output / "logs"
    log_dir.mkdir()
    timings = {title: run_step(title, step_argv, log_dir) for title, step_argv in steps_for(cfg)}
    report = write_report(cfg, timings)
    out = cfg.output
    print("\n=== Artifacts")
    for label, path in (("tokenizer", out / "tokenizer"), ("shards + manifest", out / "shards"),
                        ("training run (checkpoints, TensorBoard, run_summary.json)", out / "run"),
                        ("Hugging Face model", out / "hf_model"), ("report", report), ("logs", out / "logs")):
        print(f"  {label:<58} {path}")
    print(f"  total {sum(timings.values()):.0f} s")
    return 0
