"""`lmshards train`: command-line options -> TrainConfig -> checks without TensorFlow -> trainer.train.

Exit status: 0 trained (or already finished), 2 a user error, 75 preempted (SIGTERM/SIGINT; a checkpoint
is saved and rerunning the same command resumes), 1 the machine failed (full disk, lost permission).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from lmshards.plumbing.cli import (
    EXIT_OK,
    EXIT_PREEMPTED,
    CommandParser,
    add_verbose_flag,
    disk_errors,
    one_line_errors,
    setup_logging,
)
from lmshards.plumbing.known_names import name_hints
from lmshards.plumbing.lease import add_lease_flag, output_lease
from lmshards.plumbing.quiet import native_stderr_discarded, quiet_tensorflow
from lmshards.train.backend_names import backend_names, backends_help
from lmshards.train.backends.registry import select_keras_backend
from lmshards.train.commands.input_flags import add_input_flags
from lmshards.train.config import (
    DECAY_SHAPES,
    DEFAULT_DECAY_FRACTION,
    FINAL_EVALS,
    LR_SCHEDULES,
    OPTIMIZERS,
    PRESETS,
    TRAIN_RANGES,
    TrainConfig,
)
from lmshards.train.devices import (
    PLATFORM_CPU,
    PLATFORM_GPU,
    PLATFORM_TPU,
    PRECISIONS,
    STEPS_PER_EXECUTION,
    STRATEGIES,
    use_fast_cpu_kernels,
)
from lmshards.train.families import DEFAULT_FAMILY, family_names, get_family
from lmshards.train.inputs.shards_flag import parse_shards_flag, source_weights
from lmshards.train.loop.preemption import PreemptionFlag
from lmshards.train.loop.preflight import preflight
from lmshards.train.masking_recipes import check_recipe
from lmshards.train.run_dir import format_summary

log = logging.getLogger(__name__)

COMMAND = "train"
DEFAULTS = TrainConfig(shards=(), output="")
EXTEND_HELP = (
    "continue this run to a new --steps (or --epochs) from its current weights and optimizer state: the learning "
    "rate falls linearly from its current value to 0 over the added steps, with no new warmup. The schedule and "
    "its extensions are kept in run_config.json, so rerunning this command resumes it exactly. Without --extend, "
    "a rerun that changes --steps, --epochs, --learning_rate, --warmup_steps, --lr_schedule, --weight_decay, "
    "--clip_norm, --masking or --mlm_probability is refused"
)


INIT_FROM_HELP = (
    "start a new run from these weights instead of random ones (continued pretraining): a Hugging Face model "
    "directory (config.json and model.safetensors or pytorch_model.bin of a RoBERTa, BERT or ModernBERT model) or an "
    "lmshards run directory (its newest checkpoint that restores). The architecture comes from it; optimizer, "
    "step and schedule start fresh. Also BERT's second phase: a run at 128 tokens continued on a repacked "
    "512-token shard set"
)


def build_parser() -> CommandParser:
    p = CommandParser(
        COMMAND,
        renamed=name_hints(COMMAND),
        description="Train a masked LM on preprocess shards. Rerunning the same command with the same --output resumes "
        "it; a finished run prints its summary and exits 0. SIGTERM or SIGINT saves a checkpoint and exits 75 "
        "(rerun the same command to resume).",
    )
    d = DEFAULTS
    p.add_argument(
        "--shards",
        required=True,
        action="append",
        help="preprocess output directory (local or gs://) holding manifest.json, as PATH or PATH:WEIGHT "
        "(a weight is split off the last ':' only when a number follows), or path=PATH / "
        "weight=WEIGHT,path=PATH for a path with a ':' of its own; repeat to blend shard sets by weight "
        "(default: equal weights), e.g. --shards gs://a/shards:0.7 --shards gs://b/shards:0.3",
    )
    p.add_argument(
        "--output", required=True, help="run directory (local or gs://): checkpoints, logs, summary"
    )
    model = p.add_mutually_exclusive_group()
    # No argparse defaults: with --init_from the architecture comes from the source (parse_config fills them in).
    model.add_argument(
        "--model_preset", choices=PRESETS, help=f"model size (default: {d.model_preset})"
    )
    model.add_argument(
        "--model_config",
        help="JSON file with ModelConfig fields, or a transformers config.json (RoBERTa, BERT, ModernBERT), instead of a preset",
    )
    p.add_argument(
        "--model_family",
        choices=family_names(),
        help=f"keras-hub model family (default: {d.model_family})",
    )
    p.add_argument("--init_from", help=INIT_FROM_HELP)
    p.add_argument(
        "--tokenizer",
        help="the tokenizer the shards were made with: checked, and copied into the run",
    )
    length = p.add_mutually_exclusive_group(required=True)
    length.add_argument(
        "--steps",
        type=TRAIN_RANGES["steps"],
        help="total optimizer steps, fixed by the run's first command (see --extend)",
    )
    length.add_argument(
        "--epochs",
        type=TRAIN_RANGES["epochs"],
        help="total epochs over the train split; with several --shards an epoch is as many sequences as "
        "all sets' train splits hold together, drawn by weight (a set that runs out starts "
        "another pass, counted in run_summary.json)",
    )
    p.add_argument(
        "--learning_rate",
        type=TRAIN_RANGES["learning_rate"],
        default=d.learning_rate,
        help="peak learning rate",
    )
    p.add_argument(
        "--weight_decay",
        type=TRAIN_RANGES["weight_decay"],
        default=d.weight_decay,
        help="AdamW decay; fixed by the run's first command",
    )
    p.add_argument(
        "--warmup_steps",
        type=TRAIN_RANGES["warmup_steps"],
        help="linear warmup steps (default: 5%% of the total steps)",
    )
    p.add_argument(
        "--lr_schedule",
        "--schedule",
        choices=LR_SCHEDULES,
        default=d.lr_schedule,
        help="decay after warmup; wsd: warmup, stable at the peak rate, then decay over the last --decay_fraction "
        "of the steps",
    )
    p.add_argument(
        "--decay_fraction",
        type=TRAIN_RANGES["decay_fraction"],
        help=f"--lr_schedule wsd: the share of the steps that decay (default: {DEFAULT_DECAY_FRACTION})",
    )
    p.add_argument(
        "--decay_shape",
        choices=DECAY_SHAPES,
        help="--lr_schedule wsd: how the rate falls to 0 (default: linear)",
    )
    p.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        help="adamw (default), or stable_adamw: AdamW with update clipping per tensor and fully decoupled "
        "weight decay (ModernBERT's)",
    )
    p.add_argument(
        "--rope_theta_global",
        type=TRAIN_RANGES["rope_theta_global"],
        help="a rotary family's (modernbert) RoPE theta of its global layers, in place of the model's: the "
        "long-context phase",
    )
    p.add_argument(
        "--clip_norm",
        type=TRAIN_RANGES["clip_norm"],
        help="clip gradients to this global norm; fixed by the run's first command",
    )
    add_input_flags(p, d)
    p.set_defaults(mlm_probability=None)  # the family's rate unless given (parse_config)
    p.add_argument(
        "--backend",
        choices=backend_names(),
        default=d.backend,
        help=f"what trains the model: {backends_help()}",
    )
    p.add_argument(
        "--strategy", choices=STRATEGIES, default=d.strategy, help="tf.distribute strategy"
    )
    p.add_argument("--tpu", help="TPU name for TPUClusterResolver ('local' on a TPU VM)")
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=d.precision,
        help="Keras dtype policy; auto: mixed_bfloat16 on TPUs and GPUs with bfloat16, mixed_float16 with "
        "loss scaling on older GPUs, float32 on CPUs (`lmshards env` shows the choice)",
    )
    p.add_argument(
        "--steps_per_execution",
        type=TRAIN_RANGES["steps_per_execution"],
        default=d.steps_per_execution,
        help=f"training steps per host call; auto: {STEPS_PER_EXECUTION[PLATFORM_TPU]} on TPUs, "
        f"{STEPS_PER_EXECUTION[PLATFORM_GPU]} on GPUs, {STEPS_PER_EXECUTION[PLATFORM_CPU]} on CPUs. "
        "Logging, evaluation and checkpoints still happen at exactly their steps",
    )
    p.add_argument(
        "--checkpoint_every",
        type=TRAIN_RANGES["checkpoint_every"],
        default=d.checkpoint_every,
        help="steps between checkpoints",
    )
    p.add_argument("--keep", type=TRAIN_RANGES["keep"], default=d.keep, help="checkpoints kept")
    p.add_argument(
        "--eval_every",
        type=TRAIN_RANGES["eval_every"],
        default=d.eval_every,
        help="steps between evaluations",
    )
    p.add_argument(
        "--eval_batches",
        type=TRAIN_RANGES["eval_batches"],
        default=d.eval_batches,
        help="global batches each periodic evaluation reads: the same first ones, masked the same way every "
        "time, so evaluations of the same weights agree exactly",
    )
    p.add_argument(
        "--final_eval",
        choices=FINAL_EVALS,
        default=d.final_eval,
        help="at the end of training, one pass over the whole validation split (full) or none",
    )
    p.add_argument(
        "--log_every",
        type=TRAIN_RANGES["log_every"],
        default=d.log_every,
        help="steps per logging window",
    )
    p.add_argument("--extend", action="store_true", help=EXTEND_HELP)
    p.add_argument(
        "--restart",
        action="store_true",
        help="delete what an earlier run wrote in --output (checkpoints, metrics, summary) and train from step 0",
    )
    add_verbose_flag(p)
    add_lease_flag(p)
    return p


def parse_config(argv: Sequence[str]) -> TrainConfig:
    """The TrainConfig of a command line.

    Raises:
      LmshardsError: a number out of its range (TRAIN_RANGES), a bad --shards weight, or --mlm_probability out of
        the recipe's range.
    """
    args = build_parser().parse_args(list(argv))
    sources = [parse_shards_flag(text) for text in args.shards]
    config = TrainConfig(
        **{
            **vars(args),
            "shards": tuple(s.path for s in sources),
            "shard_weights": source_weights(sources),
            **model_defaults(args),
            # None: not given (0 is given, and refused by check_recipe below).
            "mlm_probability": get_family(args.model_family or DEFAULT_FAMILY).mlm_probability
            if args.mlm_probability is None
            else args.mlm_probability,
        }
    )
    check_recipe(config.masking, config.mlm_probability)
    return config


def model_defaults(args: argparse.Namespace) -> dict[str, str | None]:
    """--model_preset and --model_family as given, else their defaults; left None with --init_from, whose
    source fixes the architecture (a given one is checked against it)."""
    if args.init_from:
        return {}
    return {
        "model_preset": args.model_preset or DEFAULTS.model_preset,
        "model_family": args.model_family or DEFAULTS.model_family,
    }


def main(argv: Sequence[str]) -> int:
    """parse, plan (preflight), lease, build (the training stack), run (trainer.train), report."""
    # The flag first: a signal at any moment, start-up included, ends the command with exit 75 (a
    # second SIGINT stops at once: one line, exit 130).
    with PreemptionFlag.current() as preemption, one_line_errors(COMMAND) as failed:
        config = parse_config(argv)
        setup_logging(verbose=config.verbose, packages=["lmshards.train"])
        quiet_tensorflow(verbose=config.verbose)
        use_fast_cpu_kernels()
        # One writer per run directory: a second `train` on it (a restarted job whose old process still
        # runs) stops at the lease instead of resuming from a checkpoint the first one keeps writing.
        with (
            disk_errors(COMMAND, config.output) as failed_writing,
            output_lease(config.output, command=COMMAND, stale_after_s=config.lease_stale_s),
        ):
            checked = preflight(config)
            if preemption.raised:
                log.warning("stopped before training started; rerun the same command to start")
                return EXIT_PREEMPTED
            if checked.finished is not None:
                log.info(
                    "%s has finished; nothing to train (pass --extend with a larger --steps to train "
                    "it longer).",
                    config.output,
                )
                print(format_summary(checked.finished, config.output))
                return EXIT_OK
            # Keras reads its backend once, and importing TensorFlow (the host input pipeline) imports Keras.
            select_keras_backend(config.backend)
            with native_stderr_discarded(verbose=config.verbose):
                # the training stack loads only once every cheap check has passed
                from lmshards.train.loop.trainer import train
            summary = train(config, checked)
            if summary.get("preempted") is not None:
                return EXIT_PREEMPTED
            print(format_summary(summary, config.output))
            return EXIT_OK
        return failed_writing.code
    return failed.code
