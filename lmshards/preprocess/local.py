"""The default runner without Beam: a run with no Beam flag and a local --output is the one step of
lmshards.preprocess.in_process, called here directly under the same plan, lease and output rules.

Through Beam's FnApiRunner the same step ran as a pipeline of one element: importing Beam cost about a
second of CPU and ~200 MB of the run's peak memory, and its runner around the step 0.04 s. The shard,
manifest and audit bytes are the same either way (the step is the same code); a Beam flag (--runner,
--direct_num_workers, ...) or a gs:// output still runs the Beam pipeline (lmshards.preprocess.pipeline).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from lmshards.plumbing import fs
from lmshards.preprocess.in_process import run_in_process
from lmshards.preprocess.launch import finished_manifest, output_rules, writer_lease
from lmshards.preprocess.options import PreprocessConfig, resolved_tokenizer_threads
from lmshards.preprocess.plan import check_locations, in_process_job, plan_preprocess, shard_set
from lmshards.schemas.manifest import Manifest

COMMAND = "preprocess"


def runs_without_beam(config: PreprocessConfig, beam_args: Sequence[str]) -> bool:
    """Whether the run is the default runner's one step with nothing of Beam's asked for: no Beam flag
    (all of argv was ours) and a local output (a gs:// output is written by Beam's file sinks)."""
    return not beam_args and not fs.is_remote(config.output)


def run_local(config: PreprocessConfig) -> Manifest:
    """Runs the whole preprocess in this process without Beam; returns the manifest it wrote.

    Raises:
      LmshardsError: a bad input, tokenizer or output, found before any work starts; or, during the
        run, an input that turns out unreadable or gives no document.
      RunFailure: the output could not be written during the run (full disk, lost permission).
    """
    config = dataclasses.replace(
        config,
        tokenizer_threads=resolved_tokenizer_threads(config.tokenizer_threads, in_process=True),
    )
    check_locations(config)  # before the lease file is written into --output
    with writer_lease(COMMAND, config):
        plan = plan_preprocess(config)
        job = in_process_job(plan)
        started = time.monotonic()
        with output_rules(shard_set(plan)):
            run_in_process(job)
        return finished_manifest(config.output, started)
