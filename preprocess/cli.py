"""`lmshards preprocess`: flags -> PreprocessConfig -> run_pipeline -> a short summary."""

from __future__ import annotations

import difflib
import logging
import re
import sys
import time
from typing import Sequence

from apache_beam.options.pipeline_options import DebugOptions, PipelineOptions

from preprocess.options import PreprocessError, config_from_options, help_parser
from schemas.errors import LmshardsError
from schemas.manifest import Manifest


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(help_parser().format_help())
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("preprocess").setLevel(logging.INFO)
    worker_logs = logging.getLogger(WORKER_LOGGER)
    worker_logs.setLevel(logging.INFO)
    worker_logs.addFilter(_from_preprocess_or_error)
    try:
        check_flag_spelling(argv)
        config = config_from_options(PipelineOptions(argv))
        from preprocess.pipeline import run_pipeline  # Beam graph code, after the cheap checks

        started = time.monotonic()
        manifest = run_pipeline(config, argv)
    except LmshardsError as e:
        print(f"lmshards preprocess: error: {e}", file=sys.stderr)
        return 2
    if manifest is None:
        job_file = PipelineOptions(argv).view_as(DebugOptions).dataflow_job_file
        print("lmshards preprocess: dry run, nothing submitted or written"
              + (f"; Dataflow job written to {job_file}" if job_file else ""))
        return 0
    print(summary(manifest, config.output, time.monotonic() - started))
    return 0


# multi_processing workers' log lines (our progress lines among them) reach the launcher through this logger.
WORKER_LOGGER = "apache_beam.runners.portability.local_job_service"


_WORKER_MESSAGE = re.compile(r'message: "(.*?)" (?:instruction_id|transform_id|log_location):')


def _from_preprocess_or_error(record: logging.LogRecord) -> bool:
    """Keeps worker lines logged by our code (progress, bad-file warnings) and any error; drops Beam's chatter.

    Kept lines of ours are shortened to their message ("worker: read 1200 documents, ...").
    """
    text = record.getMessage()
    if "/preprocess/" in text:
        match = _WORKER_MESSAGE.search(text)
        if match:
            record.msg, record.args = f"worker: {match[1]}", ()
        return True
    return record.levelno >= logging.ERROR


def check_flag_spelling(argv: Sequence[str]) -> None:
    """Rejects a flag that no pipeline option declares but that looks like one of ours (e.g. --seq-len).

    Other unknown flags pass through: a runner may define its own.
    """
    known = set(PipelineOptions([]).get_all_options())  # every declared option's name, ours included
    ours = [opt for action in help_parser()._actions for opt in action.option_strings if opt.startswith("--")]
    for arg in argv:
        name = arg.split("=", 1)[0]
        if name.startswith("--") and name[2:] not in known:
            close = difflib.get_close_matches(name, ours, n=1)
            if close:
                raise PreprocessError(f"Unknown flag {name!r}; did you mean {close[0]!r}?")


def summary(manifest: Manifest, output: str, seconds: float) -> str:
    lines = [f"lmshards preprocess: wrote {output} in {seconds:.1f} s (seq_len {manifest.seq_len})"]
    for name, split in manifest.splits.items():
        t = split.totals
        lines.append(
            f"  {name:<10} {t.records:>10,} records in {len(split.shards)} shards | documents {t.documents:,} | "
            f"tokens in {t.tokens_in:,}, written {t.tokens_written:,}, dropped {t.tokens_dropped:,}, "
            f"padding {t.padding_tokens:,}"
        )
    return "\n".join(lines)
