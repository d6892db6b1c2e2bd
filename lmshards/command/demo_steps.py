"""The demo's steps: from the bundled corpus to an exported model, each one `python -m lmshards ...` process.

Each step runs exactly as a user would type it, so Beam and TensorFlow never share a process and every command
line is printed for copying.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lmshards.plumbing import fs
from lmshards.plumbing.errors import LmshardsError, OutputError
from lmshards.plumbing.outputs import check_replaceable, clear_owned_output, describe_directory
from lmshards.plumbing.quiet import PROGRESS_ENVIRONMENT
from lmshards.schemas.layouts import DEMO_MARKER, DEMO_OUTPUT, OUTPUT_KINDS

REPO_ROOT = Path(__file__).resolve().parents[2]
# English only: one domain (Austen novels, a software manual, speeches) that a tiny model learns within minutes.
CORPUS_GLOB = str(REPO_ROOT / "data" / "sample" / "en" / "*.txt")
# A sentence in the style of Pride and Prejudice, one of the corpus's books, that fits in one record; a model that
# learned from its neighbours fills in a name (Darcy, Bennet, ...), one that did not fills in punctuation.
FILL_MASK_PROMPT = "Elizabeth smiled at Mr. <mask>."
MARKER = DEMO_MARKER

# Byte-level BPE trains in seconds where Unigram takes minutes on this corpus.
TOKENIZER_MODEL = "bpe"
# The books are hard-wrapped: one document per line would shuffle line fragments, one per paragraph keeps them whole.
DOC_SEPARATOR = "blank_line"
VALIDATION_FRACTION = 0.02
NUM_SHARDS = 8
EVALUATIONS = 3  # periodic evaluations during training, the last one at the final step

TOP_K = 5  # fill-mask candidates checked for a real word


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


def prepare_output(output: Path) -> None:
    """Creates the demo directory; a rerun deletes what an earlier demo wrote there (it holds MARKER), and
    only that (DEMO_OUTPUT).

    Raises:
      OutputError: output is a file, a non-empty directory without MARKER, one holding files the demo did
        not write, or inside another lmshards output.
    """
    if fs.check_output_dir(str(output), overwrite=True) and not (output / MARKER).exists():
        held = describe_directory(str(output), kind=DEMO_OUTPUT, others=OUTPUT_KINDS)
        raise OutputError(
            f"--output {str(output)!r} is not empty and was not made by `lmshards demo` (it holds "
            f"{held}); pass an empty or new directory."
        )
    if check_replaceable(str(output), kind=DEMO_OUTPUT, overwrite=True, others=OUTPUT_KINDS):
        clear_owned_output(str(output), kind=DEMO_OUTPUT)
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
