"""What `lmshards train` checks before TensorFlow is imported (lmshards.plumbing.quiet keeps its start-up quiet).

A wrong flag, a missing shard, a tokenizer that is not the shards' own, a damaged run directory or a
rerun that would change a run's schedule is reported in about a second, before TensorFlow loads
(seconds, hundreds of MB) and before it prints anything. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.outputs import check_writable
from lmshards.schemas.constants import TRAIN_SPLIT, VALIDATION_SPLIT
from lmshards.schemas.manifest import Manifest
from lmshards.schemas.tokenizer_info import TokenizerSource
from lmshards.train.config import (
    DEFAULT_PRESET,
    ModelConfig,
    TrainConfig,
    model_config_from_dict,
    preset_config,
)
from lmshards.train.export.init_source import (
    InitSource,
    check_model_options,
    check_source_fits_shards,
    inspect_init_source,
    run_has_checkpoints,
)
from lmshards.train.families import DEFAULT_FAMILY, check_packed_support, get_family
from lmshards.train.inputs import mixture
from lmshards.train.inputs.shard_set_tokenizer import run_tokenizer
from lmshards.train.network.config_files import read_model_config
from lmshards.train.run_dir import (
    RunDir,
    check_continuation,
    check_run_output,
    check_same_shard_sets,
    finished_summary,
)

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Preflight:
    """What the checks found, for the trainer to go on with."""

    mixture: mixture.Mixture
    tokenizer: (
        TokenizerSource | None
    )  # the run's tokenizer: --tokenizer, or the one a shard set carries
    model_config: ModelConfig
    previous_run: (
        dict[str, Any] | None
    )  # run_config.json of the run this command continues; None for a new run
    finished: (
        dict[str, Any] | None
    )  # run_summary.json when the run is finished and this command would only repeat it
    # --init_from's source when this command starts the run from it (a new run, or one without a checkpoint
    # yet); None otherwise: a run that has a checkpoint resumes from it and never reads its source again.
    init: InitSource | None = None


def preflight(config: TrainConfig) -> Preflight:
    """Checks the shard sets, the tokenizer, the model against the shards, the run directory and the output
    (lmshards.train.run_dir.check_run_output: only a run's own files, never a shard set's).

    With --restart (and after every check) deletes what an earlier run wrote in --output.
    Raises:
      LmshardsError: the first problem found, naming the file or option and the fix.
    """
    mix = mixture.open_mixture(config.shards, config.shard_weights)
    for shard_set in mix.sets:
        for split in (
            (TRAIN_SPLIT, VALIDATION_SPLIT) if shard_set.has_validation else (TRAIN_SPLIT,)
        ):
            mixture.check_shard_sizes(shard_set.manifest, shard_set.path, split)
    warn_without_validation(mix)
    tokenizer = run_tokenizer(config.tokenizer, mix)
    check_run_output(config.output, config.shards)
    run = RunDir(config.output)
    previous = None if config.restart else run.previous_config()
    init = None
    if config.init_from and (previous is None or not run_has_checkpoints(config.output)):
        init = inspect_init_source(config.init_from)
        check_model_options(init, config)
        check_source_fits_shards(init, mix.manifest, tokenizer)
    if init is not None:
        model_config = init.model_config
    elif config.init_from and previous is not None:
        # The run has a checkpoint: it trains its own model and does not read the source again.
        model_config = model_config_from_dict(previous["model"], source=run.config_path)
    else:
        model_config = resolve_model_config(config, mix.manifest)
    if config.rope_theta_global is not None:
        model_config = with_rope_theta_global(model_config, config.rope_theta_global)
    if mix.manifest.packed:
        check_packed_support(get_family(model_config.family), f"--shards {mix.sets[0].path!r}")
    finished = None
    if previous is not None:
        check_same_shard_sets(previous, {s.path: s.manifest for s in mix.sets})
        finished = finished_summary(
            run, check_continuation(previous, config, model_config, manifest=mix.manifest)
        )
    if finished is None:
        check_writable(config.output)
        if config.restart:
            deleted = run.clear()
            if deleted:
                log.warning(
                    "--restart: deleted %s from %s; training starts from step 0.",
                    ", ".join(deleted),
                    config.output,
                )
    return Preflight(mix, tokenizer, model_config, previous, finished, init)


def warn_without_validation(mix: mixture.Mixture) -> None:
    """Warns, naming the fix, for each shard set whose validation split is missing or empty:
    training goes on, but nothing says whether the model generalises (eval loss stays '-')."""
    for shard_set in mix.sets:
        if not shard_set.has_validation:
            log.warning(
                "%s has no validation records: this run reports no eval loss or accuracy for it. "
                "Re-run `lmshards preprocess` with a larger --validation_fraction (or more input) to "
                "evaluate.",
                shard_set.path,
            )


def with_rope_theta_global(model_config: ModelConfig, theta: float) -> ModelConfig:
    """The model with its global layers' RoPE theta set to `theta` (--rope_theta_global: a long-context phase).

    Raises:
      LmshardsError: the family has no rotary positions.
    """
    if model_config.family != "modernbert" and model_config.rope_theta_global is None:
        raise LmshardsError(
            f"--rope_theta_global {theta:g}: the {model_config.family} model has no rotary positions; drop the "
            "flag, or train --model_family modernbert."
        )
    return dataclasses.replace(model_config, rope_theta_global=theta)


def resolve_model_config(config: TrainConfig, manifest: Manifest) -> ModelConfig:
    """The model config from --model_config or the preset, checked against the manifest.

    Raises:
      LmshardsError: vocabulary size or sequence length do not fit the shards.
    """
    vocab = manifest.tokenizer.vocab_size
    if config.model_config:
        model_config = read_model_config(config.model_config)
        if model_config.vocabulary_size == 0:
            model_config = dataclasses.replace(model_config, vocabulary_size=vocab)
        elif model_config.vocabulary_size != vocab:
            raise LmshardsError(
                f"--model_config {config.model_config!r} has vocabulary_size {model_config.vocabulary_size} but the "
                f"shards' tokenizer has {vocab} tokens. Set vocabulary_size to {vocab} (or 0 to take it from the manifest)."
            )
    else:
        model_config = preset_config(
            config.model_preset or DEFAULT_PRESET,
            family=config.model_family or DEFAULT_FAMILY,
            vocabulary_size=vocab,
        )
    if manifest.seq_len > model_config.max_sequence_length:
        raise LmshardsError(
            f"The shards hold sequences of {manifest.seq_len} tokens but the {model_config.family} model takes at most "
            f"{model_config.max_sequence_length} (max_sequence_length). Raise "
            "max_sequence_length in --model_config, or re-run `lmshards preprocess` with a smaller --seq_len."
        )
    return model_config
